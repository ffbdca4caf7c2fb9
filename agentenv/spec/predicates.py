"""The comparison operators of checks and trigger predicates: one implementation, pure and import-light
(the workflow and the gateway's hot path both use it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentenv.spec import patterns

OPERATORS = ("equals", "not_equals", "contains", "not_contains", "matches", "one_of", "gt", "gte", "lt", "lte", "truthy")


def _contains(actual: Any, expected: Any) -> bool:
    if isinstance(actual, str):
        return str(expected) in actual
    return expected in actual


_TESTS: dict[str, Callable[[Any, Any], Any]] = {
    "equals": lambda a, e: a == e,
    "not_equals": lambda a, e: a != e,
    "contains": _contains,
    "not_contains": lambda a, e: not _contains(a, e),
    "matches": lambda a, e: patterns.search(e, a),  # RE2: linear in the text, whatever the pattern
    "one_of": lambda a, e: a in e,
    "gt": lambda a, e: a > e,
    "gte": lambda a, e: a >= e,
    "lt": lambda a, e: a < e,
    "lte": lambda a, e: a <= e,
    "truthy": lambda a, e: bool(a) is e,
}


def passes(op: str, actual: Any, expected: Any) -> bool:
    """Whether the test holds (no explanation): for hot paths."""
    try:
        return bool(_TESTS[op](actual, expected))
    except (TypeError, patterns.PatternError):
        return False


def test(op: str, actual: Any, expected: Any) -> tuple[bool, str]:
    """(passed, why not) — values that cannot be compared fail the test instead of raising."""
    try:
        passed = _TESTS[op](actual, expected)
    except (TypeError, patterns.PatternError) as e:
        return False, f"cannot compare: {e}"
    if passed:
        return True, ""
    return False, f"expected {op.replace('_', ' ')} {expected!r}, got {actual!r}"


def operators_given(model: Any) -> list[str]:
    """The operator fields a model has values for. Not `model_fields_set`: models that travel through
    JSON (into workflows, to the gateway) come back with every field set, to null."""
    return [op for op in OPERATORS if getattr(model, op, None) is not None]


def operator_of(model: Any) -> tuple[str, Any]:
    """The one operator given on a model with operator fields, and its expected value."""
    op = operators_given(model)[0]
    return op, getattr(model, op)


def walk(value: Any, path: str) -> Any:
    """Follow a dotted path into dicts and lists; KeyError if it leads nowhere."""
    current = value
    for part in path.split(".") if path else []:
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.lstrip("-").isdigit() and -len(current) <= int(part) < len(current):
            current = current[int(part)]
        else:
            raise KeyError(part)
    return current
