from __future__ import annotations

import pytest

from agent_env.spec.duration import format_duration, parse_duration
from agent_env.spec.templates import TemplateError, referenced_steps, resolve

SCOPE = {"steps": {"a": {"outputs": {"n": 2, "items": ["x", "y"], "who": {"name": "Ada"}}}}, "run": {"id": "r1"}}


def test_whole_reference_keeps_its_type():
    assert resolve("${steps.a.outputs.n}", SCOPE) == 2
    assert resolve({"v": ["${steps.a.outputs.items}"]}, SCOPE) == {"v": [["x", "y"]]}


def test_references_inside_text_are_rendered():
    assert resolve("run ${run.id}: ${steps.a.outputs.who.name} has ${steps.a.outputs.n}", SCOPE) == "run r1: Ada has 2"
    assert resolve("${steps.a.outputs.items.1}", SCOPE) == "y"


def test_escape_writes_a_literal():
    assert resolve("cost $${steps.a}", SCOPE) == "cost ${steps.a}"


def test_missing_path_names_what_exists():
    with pytest.raises(TemplateError) as e:
        resolve("${steps.a.outputs.count}", SCOPE)
    assert "has no 'count'" in str(e.value) and "items, n, who" in str(e.value)


def test_an_optional_reference_that_finds_nothing_is_left_out():
    scope = {"match": {"arguments": {"a": 1, "n": None, "t": "x"}}, "steps": {"s": {"outputs": {"k": [1]}}}}
    value = {
        "found": "${match.arguments.a?}",
        "missing": "${match.arguments.b?}",
        "null": "${match.arguments.n?}",
        "text": "<${match.arguments.t?}|${match.arguments.b?}|${match.arguments.a.deeper?}>",
        "list": ["${match.arguments.b?}", "${steps.s.outputs.k?}"],
    }
    assert resolve(value, scope) == {"found": 1, "text": "<x||>", "list": [[1]]}
    with pytest.raises(TemplateError, match="has no 'b'"):
        resolve({"required": "${match.arguments.b}"}, scope)
    assert referenced_steps("${steps.s.outputs.k?} ${steps.t?}") == {"s", "t"}


def test_referenced_steps():
    assert referenced_steps({"x": ["${steps.a.outputs.n} ${steps.b.score}"], "y": "${run.id}"}) == {"a", "b"}


@pytest.mark.parametrize(
    "text,seconds", [("500ms", 0.5), ("30s", 30), ("5m", 300), ("1h30m", 5400), ("2d", 172800), (7, 7)]
)
def test_durations(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


def test_duration_round_trip_format():
    assert format_duration(parse_duration("1h30m")) == "1h30m"
    assert format_duration(parse_duration("250ms")) == "250ms"


@pytest.mark.parametrize("bad", ["soon", "5 minutes", "-3s", -1, True, "1x"])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)
