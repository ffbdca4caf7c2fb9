"""The comparison operators of checks and trigger predicates, and the text tests of what agents say: one
implementation and one declaration of their fields, so every model that tests a value accepts the same
operators (the workflow and the gateway's hot path both use it; it imports only pydantic).

Models take an operator as a field (`equals = 3`, `matches = "^ORD-"`): `Operators` declares those fields,
`TextTest` the `contains` / `matches` pair of rules over what someone said.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal, get_args

from pydantic import BaseModel, Field, model_validator

from agent_env.spec import patterns
from agent_env.spec.patterns import check_pattern

Operator = Literal[
    "equals", "not_equals", "contains", "not_contains", "matches", "one_of", "gt", "gte", "lt", "lte", "truthy"
]
OPERATORS: tuple[Operator, ...] = get_args(Operator)


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


class Operators(BaseModel):
    """The operator fields, for models that test one value (checks, trigger predicates, state conditions).
    Each model says in its own validator what it is, via `require_one_operator`."""

    equals: Any = None
    not_equals: Any = None
    contains: Any = Field(None, description="substring, list item or dict key")
    not_contains: Any = Field(None, description="the value does not contain this")
    matches: str | None = Field(None, description="a regular expression searched in the value's text")
    one_of: list[Any] | None = None
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None
    truthy: bool | None = Field(None, description="true: the value is truthy; false: it is falsy")

    @property
    def operator(self) -> tuple[str, Any]:
        """The operator given and its expected value (valid models have exactly one)."""
        return operator_of(self)

    def require_one_operator(self, what: str, pattern_field: str) -> None:
        """For validators: ValueError unless exactly one operator is given, and its pattern (if any) is usable.
        `what` names the model in the message ("check 'refund'"), `pattern_field` names its `matches`."""
        given = operators_given(self)
        if len(given) != 1:
            raise ValueError(
                f"{what} needs exactly one operator, got {len(given)}"
                f"{' (' + ', '.join(given) + ')' if given else ''} — choose one of: {', '.join(OPERATORS)}"
            )
        check_pattern(self.matches, pattern_field)


class TextTest(BaseModel):
    """A rule over what someone said: `contains` (a substring) or `matches` (a pattern); `hit` ignores case.
    Subclasses name themselves (`field`, for messages) and say whether exactly one rule is required."""

    field: ClassVar[str] = "text"
    exactly_one: ClassVar[bool] = True

    contains: str | None = None
    matches: str | None = None

    @model_validator(mode="after")
    def _rules(self) -> TextTest:
        if self.exactly_one and (self.contains is None) == (self.matches is None):
            raise ValueError(f"`{self.field}` needs exactly one of `contains` or `matches`")
        check_pattern(self.matches, f"{self.field}.matches")
        return self

    def hit(self, text: str) -> bool:
        """Whether the text contains, or matches, what is given — ignoring case. Neither given: no hit."""
        if self.contains is not None and self.contains.lower() in text.lower():
            return True
        return self.matches is not None and patterns.search(self.matches, text, ignore_case=True)
