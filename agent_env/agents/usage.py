"""Token usage summed per model, `{model: {"calls", "input_tokens", "output_tokens"}}`: what a step's model calls
cost. Plain JSON, so a step's outputs (and `runs show`) carry it without any per-call traffic in history."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Usage = dict[str, dict[str, int]]
FIELDS = ("calls", "input_tokens", "output_tokens")


def add(total: Usage, model: str, input_tokens: int, output_tokens: int, calls: int = 1) -> Usage:
    row = total.setdefault(model or "unknown", dict.fromkeys(FIELDS, 0))
    for name, value in zip(FIELDS, (calls, input_tokens, output_tokens), strict=True):
        row[name] = row.get(name, 0) + int(value or 0)
    return total


def summed(usages: Iterable[Any]) -> Usage:
    """The sum of several usages; anything that is not one (old records, clipped data) counts for nothing."""
    total: Usage = {}
    for usage in usages:
        if not isinstance(usage, dict):
            continue
        for model, row in usage.items():
            if isinstance(row, dict):
                add(
                    total,
                    str(model),
                    _int(row.get("input_tokens")),
                    _int(row.get("output_tokens")),
                    _int(row.get("calls")),
                )
    return total


def _int(value: Any) -> int:
    """A count; numbers that crossed A2A (protobuf Structs) come back as floats."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else 0
