"""Durations written the way people write them: 30, "30s", "500ms", "5m", "1h30m", "2d"."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
# Longer than any run or wait could mean; far below what timedelta/datetime overflow on (no OverflowError).
MAX_DURATION = timedelta(days=36_500)
MAX_SECONDS = MAX_DURATION.total_seconds()


def checked_seconds(value: Any, what: str = "a duration") -> float:
    """`value` as a number of seconds in 0..MAX_DURATION, or a ValueError naming `what` and the value.
    For numbers that come from data (step outputs, tool results) before they meet date arithmetic."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{what} must be a number of seconds, not {_shown(value)}")
    try:
        seconds = float(value)
    except (ValueError, OverflowError):
        raise ValueError(f"{what} must be a number of seconds, not {_shown(value)}") from None
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_SECONDS:
        raise ValueError(f"{what} must be from 0 to {MAX_SECONDS:g} seconds (100 years), not {_shown(value)}")
    return seconds


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_duration(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a duration must be a number of seconds or a string like '30s', '5m', '1h30m'")
    if isinstance(value, (int, float)):
        return timedelta(seconds=checked_seconds(value))
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        if text.startswith("P"):  # ISO 8601, as pydantic itself serialises timedelta
            return text
        if not text or _PART.sub("", text):
            raise ValueError(f"'{value}' is not a duration — write e.g. '30s', '500ms', '5m', '1h30m' or '2d'")
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
        if not seconds <= MAX_SECONDS:  # (also catches inf and nan)
            raise ValueError(f"'{value}' is longer than the limit of 36500d (100 years) — write a shorter duration")
        return timedelta(seconds=seconds)
    return value


def format_duration(td: timedelta) -> str:
    seconds = td.total_seconds()
    if seconds < 1 and seconds != 0:
        return f"{round(seconds * 1000)}ms"
    out, rest = "", seconds
    for unit in ("d", "h", "m"):
        n, rest = divmod(rest, _UNITS[unit])
        if n:
            out += f"{int(n)}{unit}"
    if rest or not out:
        out += f"{rest:g}s"
    return out


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(lambda td: td.total_seconds(), return_type=float, when_used="json"),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0, "description": "seconds"},
                {"type": "string", "pattern": r"^(\d+(\.\d+)?(ms|s|m|h|d))+$", "examples": ["30s", "5m", "1h30m"]},
            ]
        }
    ),
]
