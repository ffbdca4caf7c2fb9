"""Regular expressions written in specs (check and predicate `matches`, persona `says`, `stop_when`).

They are searched in text agents write, on the gateway's hot path and in workflows, so they run on RE2,
whose time is linear in the text: `(a+)+$` cannot stall anything. RE2 has no backreferences (`\\1`) and
no lookaround (`(?=...)`, `(?<!...)`); such patterns are refused when the spec loads, naming the field.
Without the `google-re2` package, Python's `re` runs them on at most MAX_FALLBACK_TEXT characters.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

try:
    import re2
except ImportError:  # pragma: no cover - google-re2 is a dependency; this keeps a broken install usable
    re2 = None

MAX_PATTERN = 2_000  # characters: a spec's pattern is a short rule, not data
MAX_FALLBACK_TEXT = 10_000  # Python's re backtracks: only this much text is searched without RE2
LINEAR = re2 is not None

_RE2_HINT = (
    "patterns run on RE2 (linear time), which has no backreferences (\\1, (?P=name)), lookahead or "
    "lookbehind ((?=...), (?!...), (?<=...), (?<!...)) and no \\Z (write \\z) — rewrite it without them"
)


class PatternError(ValueError):
    """A spec's pattern that cannot be used; the message names the field and the fix."""


@lru_cache(maxsize=1024)
def _compile(pattern: str, ignore_case: bool) -> Any:
    if re2 is None:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    options.case_sensitive = not ignore_case
    return re2.compile(pattern, options)


def compile_pattern(pattern: str, field: str = "pattern", *, ignore_case: bool = False) -> Any:
    """The compiled pattern (cached), or PatternError naming `field` and what to change."""
    if not isinstance(pattern, str):
        raise PatternError(f"{field} must be a string (a regular expression), got {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN:
        raise PatternError(f"{field} is {len(pattern)} characters long; patterns may have at most {MAX_PATTERN}")
    try:
        re.compile(pattern)
    except re.error as e:
        raise PatternError(f"{field} is not a valid regular expression: {e}") from None
    try:
        return _compile(pattern, ignore_case)
    except Exception as e:  # noqa: BLE001 - re2.error is not an re.error; its text says what it lacks
        detail = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
        raise PatternError(f"{field} {pattern!r} cannot be used ({detail}): {_RE2_HINT}") from None


def check_pattern(pattern: str | None, field: str) -> str | None:
    """For validators: the pattern unchanged if usable (None passes), else PatternError (a ValueError)."""
    if pattern is not None:
        compile_pattern(pattern, field)
    return pattern


def search(pattern: str, text: Any, *, ignore_case: bool = False) -> bool:
    """Whether `pattern` occurs in `text` (non-strings are searched as str(text)). Linear time with RE2."""
    value = text if isinstance(text, str) else str(text)
    try:
        compiled = _compile(pattern, ignore_case)  # the hot path: validated at load, cached here
    except Exception:  # noqa: BLE001 - not validated (a hand-built model): say why, as at load
        compiled = compile_pattern(pattern, ignore_case=ignore_case)
    if not LINEAR:
        value = value[:MAX_FALLBACK_TEXT]
    return compiled.search(value) is not None
