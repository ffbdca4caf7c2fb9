"""Triggers written in the AgentEnv Framework's own format (urn:agentenv:triggers/v1) in a `register_env_triggers`
step of a framework task (`tasks/NAME.json`), run on our world: read into our triggers when the task is loaded
(agent_env.spec.framework_triggers), applied by the run's workflow like any other. `await_fired` holds the step until
its triggers fired. What cannot be mapped is refused when the task is loaded, naming the trigger's index and field."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from datetime import datetime
from pathlib import Path

import pytest

from agent_env.errors import BadInput
from agent_env.planning.runs import plan
from agent_env.planning.tasks import load_task
from agent_env.spec.run import RunStatus, StepStatus
from agent_env.temporal import launch

SHOP = """
name = "shop"
data = []
[[apps]]
app = "notes"
[roles.writer]
tools = ["*"]
[roles.reader]
tools = ["read_note", "list_notes", "delete_note"]
"""

START = "2026-07-01T00:00:00Z"

# A tool-call trigger firing a tool action (its args read the provoking call), a state trigger, a time trigger whose
# permission action changes a role's tools, and a time trigger `after` it; the step waits for the first time trigger.
WORLD = [
    {"id": "desk", "type": "deploy_env", "env_id": "shop", "agents": {"wren": "writer", "rhea": "reader"}},
    {"id": "start", "type": "sync_env_clock", "env_id": "shop", "virtual_time": START,
     "virtual_seconds_per_real_second": 3600},
    {
        "id": "rules",
        "type": "register_env_triggers",
        "env_id": "shop",
        "watch_roles": ["writer"],
        "triggers": [
            {
                "id": "mirror",
                "when": {"type": "action", "tool": "write_note",
                         "where": {"key": {"regex": "^draft"}, "result.key": {"exists": True}}},
                "actions": [{"type": "tool", "tool": "write_note",
                             "args": {"key": "copy", "text": "${args.text} (from ${args.key}, ${HOME})"}}],
            },
            {
                "id": "seen",
                "when": {"type": "state", "check": {"tool": "read_note", "args": {"key": "copy"}, "extract": "text",
                                                    "predicate": {"regex": "^hello"}}},
                "actions": [{"type": "tool", "tool": "write_note", "args": {"key": "seen", "text": "yes"}}],
            },
            {
                "id": "lock",
                "when": {"type": "time", "at": "PT1H"},
                "actions": [{"type": "permission", "action": "disable", "role": "reader", "tools": ["delete_note"]}],
            },
            {
                "id": "stamp",
                "when": {"type": "time", "after": "lock", "offset": "PT30M"},
                "actions": [{"type": "tool", "tool": "write_note", "args": {"key": "late", "text": "after the lock"}}],
            },
        ],
        "await_fired": ["lock"],
        "await_timeout_seconds": 60,
    },
    {"id": "draft", "type": "call_tool", "env": "desk", "agent": "wren", "tool": "write_note",
     "arguments": {"key": "draft-1", "text": "hello"}},
    {"id": "copy", "type": "call_tool", "env": "desk", "tool": "read_note", "arguments": {"key": "copy"}},
    {"id": "denied", "type": "call_tool", "env": "desk", "agent": "rhea", "tool": "delete_note",
     "arguments": {"key": "copy"}, "expect_error": True},
]  # fmt: skip


def bundle_with(root: Path, steps: list[dict], name: str = "t") -> Path:
    (root / "envs" / "shop").mkdir(parents=True, exist_ok=True)
    (root / "envs" / "shop" / "env.toml").write_text(SHOP)
    (root / "tasks").mkdir(exist_ok=True)
    path = root / "tasks" / f"{name}.json"
    path.write_text(json.dumps(steps))
    return path


async def run_task(client, settings, path: Path):
    task = load_task(path)
    return await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, task)), 180)


def errors(state) -> dict:
    return {k: s.error for k, s in state.steps.items() if s.error}


async def test_framework_triggers_fire_tool_state_time_and_permission_actions(client, settings, worker, tmp_path):
    state = await run_task(client, settings, bundle_with(tmp_path / "b", WORLD))
    assert state.status is RunStatus.PASSED, (state.error, errors(state))
    rules = state.steps["rules"]
    assert rules.outputs == {"registered": ["mirror", "seen", "lock", "stamp"], "fired": {"lock": 1}}
    fired = [(e.trigger, e.virtual_time.strftime("%H:%M")) for e in state.world.events if e.kind == "fired"]
    assert ("lock", "01:00") in fired and ("stamp", "01:30") in fired, fired
    assert fired.index(("lock", "01:00")) < [t for t, _ in fired].index("mirror"), "the step held until lock fired"
    assert state.steps["copy"].outputs["result"]["text"] == "hello (from draft-1, ${HOME})", (
        "the action's args read the provoking call; other ${...} stay text"
    )
    assert [t for t, _ in fired].count("mirror") == 1 and "seen" in [t for t, _ in fired]
    assert "not available to role 'reader'" in state.steps["denied"].outputs["error"], "the permission action"
    actions = {e.trigger: e.detail for e in state.world.events if e.kind == "action"}
    assert "delete_note" not in actions["lock"]["tools"]
    assert actions["stamp"]["tool"] == "write_note" and "error" not in actions["stamp"], actions["stamp"]


async def test_await_fired_fails_the_step_when_its_trigger_never_fires(client, settings, worker, tmp_path):
    steps = [
        {"id": "desk", "type": "deploy_env", "env_id": "shop"},
        {
            "id": "rules",
            "type": "register_env_triggers",
            "env_id": "shop",
            "triggers": [
                {"id": "never", "when": {"type": "action", "tool": "list_notes"},
                 "actions": [{"type": "tool", "tool": "write_note", "args": {"key": "k", "text": "t"}}]}
            ],
            "await_fired": ["never"],
            "await_timeout_seconds": 1,
            "fail_task_on_error": False,
        },
        {"id": "after", "type": "call_tool", "env": "desk", "tool": "list_notes", "depends_on": ["rules"]},
    ]  # fmt: skip
    state = await run_task(client, settings, bundle_with(tmp_path / "b", steps))
    rules = state.steps["rules"]
    assert rules.status is StepStatus.FAILED
    assert "['never'] did not fire within await_timeout_seconds" in (rules.error or "")
    assert state.steps["after"].status is StepStatus.SUCCEEDED, "fail_task_on_error: false lets the task go on"
    assert [e.trigger for e in state.world.events if e.kind == "fired"] == ["never"], "still registered: it fires"


async def test_await_fired_fails_at_once_when_its_trigger_is_cancelled(client, settings, worker, tmp_path):
    steps = [
        {"id": "desk", "type": "deploy_env", "env_id": "shop"},
        {"id": "start", "type": "sync_env_clock", "env_id": "shop", "virtual_time": START},
        {
            "id": "rules",
            "type": "register_env_triggers",
            "env_id": "shop",
            "triggers": [
                {"id": "deadline",
                 "when": {"type": "time", "at": "PT1H", "unless": {"tool": "write_note", "where": {"key": {"equals": "done"}}}},
                 "actions": [{"type": "tool", "tool": "write_note", "args": {"key": "late", "text": "t"}}]}
            ],
            "await_fired": ["deadline"],
            "await_timeout_seconds": 600,
            "depends_on": ["start"],
        },
        {"id": "done", "type": "call_tool", "env": "desk", "tool": "write_note",
         "arguments": {"key": "done", "text": "in time"}, "depends_on": ["start"]},
    ]  # fmt: skip
    state = await run_task(client, settings, bundle_with(tmp_path / "b", steps))
    rules = state.steps["rules"]
    assert rules.status is StepStatus.FAILED, "the clock is frozen and the deadline was answered: it cannot fire"
    assert "['deadline'] can no longer fire" in (rules.error or "")
    assert not [e for e in state.world.events if e.kind == "fired"]


PERSONA = [
    {"id": "desk", "type": "deploy_env", "env_id": "support-desk", "agents": {"sam": "support", "dana": "customer"}},
    {"id": "dana", "type": "deploy_agent", "env": "desk", "as": "dana",
     "record": {"name": "dana-persona", "type": "persona", "role": "customer",
                "config": {"llm": True, "brief": "Dana, charged twice.", "model": {"model": "fake"}}}},
    {
        "id": "rules",
        "type": "register_env_triggers",
        "env_id": "support-desk",
        "watch_roles": ["support"],
        "executor_agent_name": "dana",
        "executor_timeout_seconds": 60,
        "triggers": [
            {
                "id": "dana_answers",
                "when": {"type": "action", "tool": "send_email", "where": {"args.to[0]": {"equals": "dana@example.com"}}},
                "actions": [{"type": "nl", "instruction": "Support asked you which order it is. Answer them by email."}],
            }
        ],
    },
    {"id": "ask", "type": "call_tool", "env": "desk", "agent": "sam", "tool": "send_email",
     "arguments": {"sender": "support@acme.example", "to": ["dana@example.com"], "subject": "Your charge",
                   "body": "Which order was charged twice?"}},
    {"id": "inbox", "type": "call_tool", "env": "desk", "role": "support", "tool": "list_messages",
     "arguments": {"mailbox": "support@acme.example"}},
]  # fmt: skip


async def test_an_nl_action_is_carried_out_by_the_executor_agent(client, settings, worker, tmp_path):
    path = tmp_path / "b" / "tasks" / "persona.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(PERSONA))
    state = await run_task(client, settings, path)
    assert state.status is RunStatus.PASSED, (state.error, errors(state))
    actions = [e.detail for e in state.world.events if e.kind == "action"]
    assert len(actions) == 1 and actions[0]["type"] == "instruct", actions
    assert actions[0]["agent"] == "dana" and actions[0]["tool_calls"] == 1 and "fallback" not in actions[0]
    subjects = [
        m["subject"] for m in state.steps["inbox"].outputs["result"]["messages"] if m["from"] == "dana@example.com"
    ]
    assert "Re: your order" in subjects, "the persona agent playing the executor answered with its tools"


# -- read when the task is loaded --


def test_the_framework_format_reads_into_our_triggers(tmp_path):
    task = load_task(bundle_with(tmp_path / "b", WORLD))
    ours = {t.id: t.model_dump(mode="json", exclude_defaults=True) for t in task.triggers}
    assert ours["mirror"]["when"] == {
        "type": "tool_call",
        "env": "desk",
        "tool": "write_note",
        "roles": ["writer"],
        "where": [{"path": "arguments.key", "matches": "^draft"}, {"path": "result.key", "truthy": True}],
    }, "watch_roles became the roles it watches; `where` keys became paths"
    assert ours["mirror"]["actions"][0]["arguments"]["text"] == (
        "${match.arguments.text} (from ${match.arguments.key}, $${HOME})"
    )
    assert ours["seen"]["when"] == {
        "type": "state", "env": "desk", "tool": "read_note", "arguments": {"key": "copy"}, "path": "text",
        "matches": "^hello",
    }  # fmt: skip
    assert ours["lock"]["when"] == {"type": "time", "at": "+3600s"}
    assert ours["lock"]["actions"] == [
        {"type": "set_tools", "env": "desk", "role": "reader", "disable": ["delete_note"]}
    ]
    assert ours["stamp"]["when"] == {"type": "time", "after": "lock", "delay": 1800.0}
    rules = task.step("rules").config
    assert rules == {"env_id": "shop", "triggers": ["mirror", "seen", "lock", "stamp"], "await_fired": ["lock"],
                     "await_timeout_seconds": 60}, "the step keeps what is its own"  # fmt: skip
    persona = tmp_path / "p" / "tasks" / "persona.json"
    persona.parent.mkdir(parents=True)
    persona.write_text(json.dumps(PERSONA))
    nl = load_task(persona).triggers[0].model_dump(mode="json", exclude_defaults=True)["actions"][0]
    assert nl == {
        "type": "instruct", "env": "desk", "agent": "dana", "by": "dana", "timeout": 60.0,
        "instruction": "Support asked you which order it is. Answer them by email.",
    }  # fmt: skip


def test_every_without_at_starts_one_interval_in_and_an_iso_until_is_from_the_start(tmp_path):
    trigger = {"id": "tick", "when": {"type": "time", "every": "PT10M", "until": "PT1H"},
               "actions": [{"type": "tool", "tool": "list_notes", "delay": "PT1M", "as": "reader"}]}  # fmt: skip
    steps = [
        WORLD[0],
        WORLD[1],
        {"id": "rules", "type": "register_env_triggers", "env_id": "shop", "triggers": [trigger]},
    ]
    ours = load_task(bundle_with(tmp_path / "b", steps)).triggers[0].model_dump(mode="json", exclude_defaults=True)
    assert ours["when"] == {"type": "time", "at": "+600s", "every": 600.0, "until": "+3600s"}
    assert ours["actions"] == [
        {"type": "call_tool", "env": "desk", "tool": "list_notes", "role": "reader", "delay": 60.0}
    ]


def _refusal(tmp_path: Path, trigger: dict | None = None, **step: object) -> str:
    rules = {"id": "rules", "type": "register_env_triggers", "env_id": "shop", **step}
    if trigger is not None:
        rules["triggers"] = [MIRROR, trigger]
    path = bundle_with(tmp_path / "b", [WORLD[0], WORLD[1], rules])
    with pytest.raises(BadInput) as e:
        load_task(path)
    return str(e.value)


MIRROR = WORLD[2]["triggers"][0]  # type: ignore[index]
TOOL = {"type": "tool", "tool": "list_notes"}


@pytest.mark.parametrize(
    ("trigger", "named"),
    [
        ({"id": "w", "when": {"type": "website", "app": "shop"}, "actions": [TOOL]}, "triggers[1].when.type"),
        ({"id": "v", "when": {"type": "time", "at": "PT1H"}, "actions": [{**TOOL, "verify": {}}]},
         "triggers[1].actions[0].verify"),
        ({"id": "f", "when": {"type": "time", "every": "PT1H"}, "actions": [TOOL]}, "never ends"),
        ({"id": "e", "when": {"type": "time", "every": {"dist": "exp", "mean": "PT1H"}, "count": 2}, "actions": [TOOL]},
         "triggers[1].when.seed"),
        ({"id": "g", "when": {"type": "time", "every": {"dist": "gauss", "mean": "PT1H"}, "seed": 1, "count": 2},
          "actions": [TOOL]}, "triggers[1].when.every.dist"),
        ({"id": "h", "when": {"type": "time", "every": {"dist": "exp", "mean": "PT1H"}, "seed": 1}, "actions": [TOOL]},
         "never ends"),
        ({"id": "d", "when": {"type": "time", "at": "PT1H"},
          "actions": [{**TOOL, "delay": {"dist": "exp", "mean": "-PT1M", "seed": 1}}]},
         "triggers[1].actions[0].delay.mean"),
        ({"id": "k", "when": {"type": "time", "at": "PT1H", "seed": 1}, "actions": [TOOL]}, "triggers[1].when.seed"),
        ({"id": "u", "when": {"type": "action", "tool": "read_note", "bogus": 1}, "actions": [TOOL]},
         "triggers[1].when.bogus"),
        ({"id": "n", "when": {"type": "action", "tool": "read_note"}, "actions": [{"type": "nl", "instruction": "x"}]},
         "triggers[1].actions[0].executor"),
        ({"id": "x", "when": {"type": "action", "tool": "read_note"},
          "actions": [{"type": "nl", "instruction": "x", "executor": "ghost"}]}, "'ghost' is no agent"),
        ({"id": "p", "when": {"type": "time", "at": "PT1H"},
          "actions": [{"type": "permission", "action": "toggle", "role": "reader", "tools": "*"}]},
         "triggers[1].actions[0].action"),
        ({"id": "r", "when": {"type": "time", "at": "PT1H", "roles": ["writer"]}, "actions": [TOOL]},
         "triggers[1].when"),
    ],
)  # fmt: skip
def test_what_cannot_be_mapped_is_refused_naming_the_trigger_and_field(tmp_path, trigger, named):
    error = _refusal(tmp_path, trigger)
    assert "steps[2] (id 'rules')" in error and named in error, error


def test_step_fields_are_refused_naming_them(tmp_path):
    assert "env_id" in _refusal(tmp_path, MIRROR, env_id="nowhere")
    assert "`executor_hours`" in _refusal(tmp_path, MIRROR, executor_hours={"dana": {"start": "09:00"}})
    assert "`watch_roles` is not taken here" in _refusal(tmp_path, None, triggers=["*"], watch_roles=["writer"])
    assert "`await_fired` names ['nope']" in _refusal(tmp_path, MIRROR, await_fired=["nope"])
    assert "await_timeout_seconds" in _refusal(tmp_path, MIRROR, await_fired=["mirror"], await_timeout_seconds=0)


def test_a_permission_on_every_tool_is_a_pattern(settings, tmp_path):
    trigger = {"id": "all", "when": {"type": "time", "at": "PT1H"},
               "actions": [{"type": "permission", "action": "enable", "role": "reader", "tools": "*"}]}  # fmt: skip
    steps = [
        WORLD[0],
        WORLD[1],
        {"id": "rules", "type": "register_env_triggers", "env_id": "shop", "triggers": [trigger]},
    ]
    task = load_task(bundle_with(tmp_path / "b", steps))
    assert task.triggers[0].model_dump(exclude_defaults=True)["actions"][0]["enable"] == ["*"]
    plan(task, "r-1", settings)  # the world's checks take it as a pattern, not a tool named '*'
    trigger["actions"][0]["tools"] = ["no_such_tool"]
    with pytest.raises(BadInput, match="no tool 'no_such_tool'"):
        plan(load_task(bundle_with(tmp_path / "c", steps)), "r-2", settings)


# -- optional placeholders and random waits, run --

# An action trigger whose tool action reads an optional `${args.mood?}` the provoking call does not give (left out
# as a whole value: write_note takes no `mood`, so sent it would fail; empty inside text), and a Poisson-like time
# trigger: three exponential intervals and an exponential delay on its action, each drawn from its seed. The
# clock stands at the start while they are registered, then is event driven, so every wait lands on its drawn time.
RANDOM = [
    {"id": "desk", "type": "deploy_env", "env_id": "shop"},
    {"id": "start", "type": "sync_env_clock", "env_id": "shop", "virtual_time": START,
     "virtual_seconds_per_real_second": 0},
    {"id": "go", "type": "sync_env_clock", "env_id": "shop", "mode": "event_driven", "depends_on": ["rules"]},
    {
        "id": "rules",
        "type": "register_env_triggers",
        "env_id": "shop",
        "depends_on": ["start"],
        "triggers": [
            {"id": "echo", "when": {"type": "action", "tool": "write_note", "where": {"key": {"equals": "draft"}}},
             "actions": [{"type": "tool", "tool": "write_note",
                          "args": {"key": "echo", "text": "${args.text}[${args.mood?}]", "mood": "${args.mood?}"}}]},
            {"id": "arrivals", "when": {"type": "time", "every": {"dist": "exp", "mean": "PT10M"}, "seed": 7, "count": 3},
             "actions": [{"type": "tool", "tool": "write_note", "args": {"key": "arrival", "text": "t"},
                          "delay": {"dist": "exp", "mean": "PT5M", "seed": 3}}]},
        ],
    },
    {"id": "draft", "type": "call_tool", "env": "desk", "tool": "write_note",
     "arguments": {"key": "draft", "text": "hello"}, "depends_on": ["rules"]},
    {"id": "echo", "type": "call_tool", "env": "desk", "tool": "read_note", "arguments": {"key": "echo"},
     "depends_on": ["draft"]},
]  # fmt: skip


def exp_draw(mean_s: float, key: str) -> float:
    """What agent_env.workflows.world_rules draws for `key`: -mean * ln(1 - u), u from the key's SHA-256."""
    u = int(hashlib.sha256(key.encode()).hexdigest()[:13], 16) / 16**13
    return -mean_s * math.log1p(-u)


async def test_optional_placeholders_and_seeded_exponential_waits_run(client, settings, worker, tmp_path):
    state = await run_task(client, settings, bundle_with(tmp_path / "b", RANDOM))
    assert state.status is RunStatus.PASSED, (state.error, errors(state))
    assert state.steps["echo"].outputs["result"]["text"] == "hello[]", "the optional placeholder found nothing"
    actions = [(e.trigger, e.detail) for e in state.world.events if e.kind == "action"]
    echo = next(d for t, d in actions if t == "echo")
    assert "error" not in echo, ("the missing `mood` was left out, not sent", echo)

    start = datetime.fromisoformat(START.replace("Z", "+00:00"))
    fired = [e.virtual_time - start for e in state.world.events if e.kind == "fired" and e.trigger == "arrivals"]
    marks, at = [], 0.0
    for n in range(3):  # the first one interval from the clock's start, then one after each firing
        at += exp_draw(600, f"exp/7/arrivals/{n}")
        marks.append(at)
    assert [round(f.total_seconds(), 3) for f in fired] == [round(m, 3) for m in marks], (fired, marks)
    gaps = [b - a for a, b in zip([0.0, *marks], marks, strict=False)]
    assert len({round(g) for g in gaps}) == 3, ("the intervals are drawn, not fixed", gaps)
    ran = [e.virtual_time - start for e in state.world.events if e.kind == "action" and e.trigger == "arrivals"]
    delays = [exp_draw(300, f"exp/3/arrivals/action0/{n}") for n in (1, 2, 3)]
    assert sorted(round(r.total_seconds(), 3) for r in ran) == sorted(
        round(m + d, 3) for m, d in zip(marks, delays, strict=True)
    ), "each firing's action waited its own drawn delay"


# A state condition over two reads: the first binds the key a pointer note names, the second reads that note.
CHAIN = [
    {"id": "desk", "type": "deploy_env", "env_id": "shop"},
    {
        "id": "rules",
        "type": "register_env_triggers",
        "env_id": "shop",
        "triggers": [
            {"id": "chain", "when": {"type": "state", "check": {"steps": [
                {"tool": "read_note", "args": {"key": "pointer"}, "extract": "text", "bind": "target",
                 "predicate": {"regex": "^task-"}},
                {"tool": "read_note", "args": {"key": "${target}"}, "extract": "text", "predicate": {"equals": "done"}},
            ]}}, "actions": [{"type": "tool", "tool": "write_note", "args": {"key": "flag", "text": "yes"}}]},
        ],
    },
    {"id": "other", "type": "call_tool", "env": "desk", "tool": "write_note",
     "arguments": {"key": "other", "text": "done"}, "depends_on": ["rules"]},
    {"id": "aim_wrong", "type": "call_tool", "env": "desk", "tool": "write_note",
     "arguments": {"key": "pointer", "text": "other"}, "depends_on": ["other"]},
    {"id": "task", "type": "call_tool", "env": "desk", "tool": "write_note",
     "arguments": {"key": "task-7", "text": "done"}, "depends_on": ["aim_wrong"]},
    {"id": "aim", "type": "call_tool", "env": "desk", "tool": "write_note",
     "arguments": {"key": "pointer", "text": "task-7"}, "depends_on": ["task"]},
    {"id": "flag", "type": "call_tool", "env": "desk", "tool": "read_note", "arguments": {"key": "flag"},
     "depends_on": ["aim"]},
]  # fmt: skip


async def test_a_multi_step_check_binds_a_value_a_later_read_uses(client, settings, worker, tmp_path):
    ours = load_task(bundle_with(tmp_path / "a", CHAIN)).triggers[0].model_dump(mode="json", exclude_defaults=True)
    assert ours["when"] == {
        "type": "state", "env": "desk", "tool": "read_note", "arguments": {"key": "${target}"}, "path": "text",
        "equals": "done",
        "before": [{"tool": "read_note", "arguments": {"key": "pointer"}, "path": "text", "bind": "target",
                    "matches": "^task-"}],
    }  # fmt: skip
    state = await run_task(client, settings, bundle_with(tmp_path / "b", CHAIN))
    assert state.status is RunStatus.PASSED, (state.error, errors(state))
    fired = [e for e in state.world.events if e.kind == "fired"]
    assert [e.trigger for e in fired] == ["chain"], "not while the pointer was missing or failed its own test"
    match = fired[0].detail["match"]
    assert match["value"] == "done" and match["after"]["arguments"] == {"key": "pointer", "text": "task-7"}, match
    assert state.steps["flag"].outputs["result"]["text"] == "yes"


def test_a_check_read_may_use_only_what_an_earlier_read_bound(tmp_path):
    def check(*steps: dict) -> dict:
        return {"id": "c", "when": {"type": "state", "check": {"steps": list(steps)}}, "actions": [TOOL]}

    read = {"tool": "read_note", "args": {"key": "a"}, "predicate": {"exists": True}}
    for trigger, named in [
        (check({**read, "bind": "v"}, {**read, "args": {"key": "${w}"}}), "triggers[1].when.check.steps[1].args.key"),
        (check({**read, "args": {"key": "${args.key}"}}), "no provoking call"),
        (check(read, {**read, "bind": "v"}), "triggers[1].when.check.steps[1].bind"),
        (check({**read, "bind": "not a name"}, read), "triggers[1].when.check.steps[0].bind"),
        (check(*[read] * 10), "1 to 9 reads"),
    ]:
        error = _refusal(tmp_path, trigger)
        assert named in error, error
