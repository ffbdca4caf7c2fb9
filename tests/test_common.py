"""The one home of each shared idea: operators and text tests, path walking, waiting, times, store keys."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from agent_env.gateway.watch import Watcher
from agent_env.spec.agent import ReplyRule
from agent_env.spec.predicates import OPERATORS, Operators, TextTest
from agent_env.spec.world import Predicate, Says, StateWhen
from agent_env.spec.world_state import WorldSpec, WorldState
from agent_env.steps.builtin.agents import StopWhen
from agent_env.steps.builtin.check import Check
from agent_env.workflows.world_rules import World

REAL = datetime(2030, 1, 1, tzinfo=UTC)

# -- operators and text tests --


@pytest.mark.parametrize("model", [Check, Predicate, StateWhen])
def test_every_model_that_tests_a_value_accepts_every_operator(model):
    assert issubclass(model, Operators)
    assert set(OPERATORS) <= set(model.model_fields)


def _watcher(where):
    spec = WorldSpec.model_validate(
        {
            "seed": 0,
            "clock": {"start": "2026-03-02T09:00:00-05:00"},
            "triggers": [
                {
                    "id": "t",
                    "when": {"type": "tool_call", "env": "desk", "tool": "send_email", "where": where},
                    "actions": [{"type": "end_run"}],
                }
            ],
        }
    )
    world = World(spec, WorldState())
    world.start_clock(REAL)
    world.register(["*"], REAL)
    return Watcher(world.watches("desk"))


def _call(**arguments):
    return {"agent": "a", "role": "r", "tool": "send_email", "arguments": arguments, "result": {}}


def test_a_trigger_predicate_may_use_not_contains():
    watcher = _watcher([{"path": "arguments.body", "not_contains": "refund"}])
    assert len(watcher.calls(_call(body="hello"))) == 1
    assert watcher.calls(_call(body="your refund")) == []


def test_a_trigger_predicate_may_use_truthy():
    watcher = _watcher([{"path": "arguments.urgent", "truthy": True}])
    assert len(watcher.calls(_call(urgent="yes"))) == 1
    assert watcher.calls(_call(urgent="")) == []
    assert Predicate(path="arguments.urgent", truthy=False).operator == ("truthy", False)


def test_a_state_condition_may_use_truthy_and_not_contains():
    when = StateWhen(type="state", env="e", tool="t", truthy=True)
    assert when.operator == ("truthy", True)
    assert StateWhen(type="state", env="e", tool="t", not_contains="x").operator == ("not_contains", "x")


@pytest.mark.parametrize(
    "build, what",
    [
        (lambda: Check(name="c", value=1), "check 'c'"),
        (lambda: Predicate(path="arguments.x", equals=1, contains=2), "predicate on 'arguments.x'"),
        (lambda: StateWhen(type="state", env="e", tool="t"), "state condition on t"),
    ],
)
def test_exactly_one_operator_is_required_and_the_choices_are_named(build, what):
    with pytest.raises(ValidationError) as caught:
        build()
    assert f"{what} needs exactly one operator" in str(caught.value)
    assert "not_contains" in str(caught.value) and "truthy" in str(caught.value)


def test_a_check_evaluates_on_a_value_read_elsewhere():
    check = Check(name="c", not_contains="x")
    assert check.evaluate_on("abc").passed
    assert not check.evaluate_on("xyz").passed
    assert check.evaluate().passed is False  # no value: None cannot contain anything


def test_text_tests_ignore_case_and_name_their_field():
    assert StopWhen(contains="DONE").hit("we are done")
    assert StopWhen(matches="^ok").hit("OK then")
    assert not StopWhen(contains="x").hit("y")
    assert ReplyRule(say="hi").hit("anything") is False, "a reply without rules never answers"
    assert ReplyRule(contains="a", matches="b", say="hi").hit("B")
    for model, field in [(StopWhen, "stop_when"), (Says, "says")]:
        assert issubclass(model, TextTest)
        with pytest.raises(ValidationError, match=f"`{field}` needs exactly one of `contains` or `matches`"):
            model()
        with pytest.raises(ValidationError, match=f"{field}.matches is not a valid regular expression"):
            model(matches="(")


# -- which tools an environment exposes --


class _Tool:
    def __init__(self, name, hidden=False):
        self.name, self.hidden = name, hidden


def test_an_environment_exposes_get_time_and_each_apps_tools_under_its_prefix():
    from agent_env.spec.roles import tool_entries

    entries = tool_entries(
        [("mail", "", [_Tool("send"), _Tool("purge", hidden=True)]), ("bank", "b_", [_Tool("send")])]
    )
    assert list(entries) == ["get_time", "send", "purge", "b_send"]
    assert entries["b_send"].qualified == "bank.send" and entries["purge"].hidden
    assert entries["get_time"].qualified == "gateway.get_time"


def test_a_tool_clash_names_both_tools_and_the_fix():
    from agent_env.spec.roles import ToolClash, tool_entries

    with pytest.raises(ToolClash, match=r"bank.send and mail.send are both exposed as 'send'; give one app a `prefix`"):
        tool_entries([("mail", "", [_Tool("send")]), ("bank", "", [_Tool("send")])])


def test_a_role_always_sees_get_time_and_globs_skip_hidden_tools():
    from agent_env.gateway.spec import RoleSpec
    from agent_env.spec.roles import RoleError, role_tools, tool_entries

    entries = list(tool_entries([("mail", "", [_Tool("send"), _Tool("purge", hidden=True), _Tool("read")])]).values())
    assert role_tools("r", RoleSpec(tools=["mail.*"], deny=["read"]), entries) == {"get_time", "send"}
    assert role_tools("r", RoleSpec(tools=["purge"]), entries) == {"get_time", "purge"}
    with pytest.raises(RoleError, match="'sned' matches no tool"):
        role_tools("r", RoleSpec(tools=["sned"]), entries)


# -- dotted paths --


def test_a_path_walks_dicts_and_lists_and_the_empty_path_is_the_whole_value():
    from agent_env.spec.paths import walk

    value = {"charges": [{"id": "c1"}, {"id": "c2"}]}
    assert walk(value, "charges.0.id") == "c1"
    assert walk(value, "charges.-1.id") == "c2"
    assert walk(value, "") is value


def test_a_path_that_leads_nowhere_says_where_it_stopped():
    from agent_env.spec.paths import PathError, walk

    with pytest.raises(PathError) as caught:
        walk({"a": {"b": 1}}, "a.c.d")
    assert caught.value.args[0] == "c" and caught.value.walked == ["a"] and caught.value.at == {"b": 1}
    assert isinstance(caught.value, KeyError)
    for path in ("a.2", "a.x", "a.-3"):
        with pytest.raises(PathError):
            walk({"a": [1, 2]}, path)


def test_templates_checks_and_trigger_predicates_walk_alike():
    from agent_env.spec.templates import TemplateError, lookup

    scope = {"steps": {"s": {"outputs": {"items": [1, 2, 3]}}}}
    assert lookup(scope, "steps.s.outputs.items.-1") == 3
    with pytest.raises(TemplateError, match=r"steps.s has no 'output' \(it has: outputs\)"):
        lookup(scope, "steps.s.output")
    with pytest.raises(TemplateError, match=r"cannot look up 'x' in steps.s.outputs.items \(list\)"):
        lookup(scope, "steps.s.outputs.items.x")
    watcher = _watcher([{"path": "arguments.to.-1", "equals": "b@x"}])
    assert len(watcher.calls(_call(to=["a@x", "b@x"]))) == 1
    assert watcher.calls(_call(to=[])) == []


# -- waiting until something comes up --


def test_waiting_returns_the_probes_first_result_and_retries_what_it_is_told_to():
    from agent_env import waiting

    tries = iter([OSError("refused"), None, "up"])

    def probe():
        value = next(tries)
        if isinstance(value, Exception):
            raise value
        return value

    assert waiting.until_sync(probe, what="x", timeout=5, interval=0, retry_on=(OSError,)) == "up"


def test_waiting_times_out_naming_what_and_the_last_error_and_tries_at_least_once():
    from agent_env import waiting

    calls = []

    def probe():
        calls.append(1)
        raise OSError("connection refused")

    with pytest.raises(waiting.TimedOut) as caught:
        waiting.until_sync(probe, what="the gateway", timeout=0, interval=0)
    assert calls == [1]
    assert str(caught.value) == "the gateway did not come up within 0s (last error: OSError: connection refused)"
    assert isinstance(caught.value.last, OSError) and isinstance(caught.value, TimeoutError)


async def test_waiting_gives_up_early_when_told_or_when_the_check_raises():
    from agent_env import waiting

    async def refused():
        raise PermissionError("no")

    with pytest.raises(PermissionError):
        await waiting.until(refused, what="x", timeout=5, interval=0, give_up_on=(PermissionError,))

    async def not_yet():
        return None

    async def exited():
        raise RuntimeError("the process exited")

    with pytest.raises(RuntimeError, match="exited"):
        await waiting.until(not_yet, what="x", timeout=5, interval=0, check=exited)
    with pytest.raises(waiting.TimedOut, match=r"^x did not come up within 0.05s$"):
        await waiting.until(not_yet, what="x", timeout=0.05, interval=0.01)


# -- the stores' key layout --


def test_the_key_layout_is_named_in_one_place():
    from agent_env.stores import keys

    assert keys.snapshot("r1", "before") == "runs/r1/snapshots/before.tar"
    assert keys.trajectory("r1", "r1.desk") == "runs/r1/trajectories/r1.desk.jsonl"
    assert keys.transcript("r1", "ask") == "runs/r1/transcripts/ask.json"
    assert keys.message("r1", "ask", "agent", 2) == "runs/r1/transcripts/ask/agent-2.txt"
    assert keys.message("r1", "ask", "agent", 2).startswith(keys.transcripts("r1"))
    assert keys.artifact("r1", "desk", "data.json") == "runs/r1/artifacts/desk/data.json"
    assert keys.artifact("r1", "manifest.json") == "runs/r1/artifacts/manifest.json"
    assert keys.RUNS == "runs"


def test_content_keys_are_stable_and_name_their_hash(tmp_path):
    import hashlib

    from agent_env.stores import keys
    from agent_env.stores.local import FileObjectStore

    key = keys.content(b"abc", "tar")
    assert key == f"artifacts/sha256-{hashlib.sha256(b'abc').hexdigest()}.tar" == keys.content(b"abc", "tar")
    assert keys.content_digest(key) == hashlib.sha256(b"abc").hexdigest()
    store = FileObjectStore(tmp_path)
    for k in (key, keys.snapshot("r", "s"), keys.message("r", "s", "user", 0), keys.artifact("r", "e", "d.json")):
        store.put(k, b"x")  # every key the layout names is one the store accepts
        assert store.get(k) == b"x"


# -- times --


def test_times_write_utc_with_a_z_and_other_zones_with_their_offset():
    from datetime import timedelta, timezone

    from agent_env.spec.times import iso, iso_or_none, utc_now_iso

    assert iso(datetime(2026, 3, 2, 14, 0, tzinfo=UTC)) == "2026-03-02T14:00:00Z"
    assert iso(datetime(2026, 3, 2, 9, 0, tzinfo=timezone(timedelta(hours=-5)))) == "2026-03-02T09:00:00-05:00"
    assert iso_or_none(None) is None
    assert utc_now_iso().endswith("Z")
