"""The world-rule steps under the framework's names and fields, in real runs: `sync_env_clock`, `register_env_triggers`,
`modify_env_tool_access` and `apply_server_config`, written as a framework user writes them (a bundle's
`tasks/NAME.json`, flat fields) and as our TOML; the framework's fields that mean nothing here are refused when the
task is loaded or planned, naming the field."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agent_env.errors import BadInput
from agent_env.planning.runs import plan
from agent_env.planning.tasks import load_task
from agent_env.spec.run import RunStatus, StepStatus
from agent_env.temporal import launch

# An app served by its own server (`run = "subprocess"`) declares set-errors/v1 on its card; mail, in the gateway's
# process, declares none.
SHOP = """
name = "shop"
data = []
[[apps]]
app = "notes"
name = "pad"
run = "subprocess"
[[apps]]
app = "mail"
[roles.writer]
tools = ["*"]
"""

AT_ONE = {
    "id": "at_one",
    "when": {"type": "time", "at": "+1h"},
    "actions": [{"type": "call_tool", "env": "desk", "tool": "write_note", "arguments": {"key": "one", "text": "hi"}}],
}

FRAMEWORK_TASK = [
    {"id": "desk", "type": "deploy_env", "env_id": "shop"},
    {
        "id": "start",
        "type": "sync_env_clock",
        "env_id": "shop",
        "virtual_time": "2026-07-01T00:00:00Z",
        "virtual_seconds_per_real_second": 0,
    },
    {"id": "rules", "type": "register_env_triggers", "env_id": "shop", "triggers": [AT_ONE]},
    {
        "id": "lock",
        "type": "modify_env_tool_access",
        "env_id": "shop",
        "action": "disable",
        "role": "writer",
        "tools": ["delete_note"],
    },
    {"id": "jump", "type": "sync_env_clock", "env_id": "shop", "virtual_time": "2026-07-01T02:00:00Z"},
    {
        "id": "faults",
        "type": "apply_server_config",
        "env_id": "shop",
        "directives": [
            {
                "service": "pad",
                "uri": "urn:agentenv:set-errors/v1",
                "args": {"tool_name": "list_notes", "error_rate": 1, "error_type": "unavailable"},
            }
        ],
    },
    {"id": "read", "type": "call_tool", "env": "desk", "tool": "read_note", "arguments": {"key": "one"}},
    {"id": "broken", "type": "call_tool", "env": "desk", "tool": "list_notes", "expect_error": True},
    {
        "id": "denied",
        "type": "call_tool",
        "env": "desk",
        "tool": "delete_note",
        "arguments": {"key": "one"},
        "expect_error": True,
    },
    {
        "id": "unlock",
        "type": "modify_env_tool_access",
        "env": "desk",
        "action": "enable",
        "role": "writer",
        "tools": ["delete_note"],
    },
    {"id": "deleted", "type": "call_tool", "env": "desk", "tool": "delete_note", "arguments": {"key": "one"}},
]


def bundle_with(root: Path, steps: list[dict], name: str = "t") -> Path:
    (root / "envs" / "shop").mkdir(parents=True, exist_ok=True)
    (root / "envs" / "shop" / "env.toml").write_text(SHOP)
    (root / "tasks").mkdir(exist_ok=True)
    path = root / "tasks" / f"{name}.json"
    path.write_text(json.dumps(steps))
    return path


async def run_task(client, settings, path: Path):
    task = load_task(path)
    return await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, task)), 120)


async def test_a_framework_task_drives_clock_triggers_tool_access_and_server_config(client, settings, worker, tmp_path):
    state = await run_task(client, settings, bundle_with(tmp_path / "b", FRAMEWORK_TASK))
    assert state.status is RunStatus.PASSED, (state.error, {k: s.error for k, s in state.steps.items() if s.error})
    assert state.steps["start"].outputs["now"] == "2026-07-01T00:00:00Z"
    assert state.steps["rules"].outputs["registered"] == ["at_one"], "the trigger written in the step is the task's"
    clock = [(e.virtual_time.strftime("%H:%M"), e.detail) for e in state.world.events if e.kind == "clock"]
    assert ("02:00", {"mode": "paced", "rate": 1.0, "by": "step jump"}) in clock, "virtual_time's pace: 1 by default"
    fired = [(e.trigger, e.virtual_time.strftime("%H:%M")) for e in state.world.events if e.kind == "fired"]
    assert fired == [("at_one", "01:00")], "jumping to 02:00 fired the trigger due at 01:00 on the way"
    assert state.steps["read"].outputs["result"]["updated_at"] == "2026-07-01T01:00:00Z"
    assert "delete_note" not in state.steps["lock"].outputs["tools"], "disable keeps the role's other tools"
    assert "write_note" in state.steps["lock"].outputs["tools"]
    assert "not available to role 'writer'" in state.steps["denied"].outputs["error"]
    applied = state.steps["faults"].outputs["applied"]
    assert [(a["service"], a["uri"]) for a in applied] == [("pad", "urn:agentenv:set-errors/v1")]
    assert "unavailable" in state.steps["broken"].outputs["error"], "the app fails the tool it was told to"
    assert "delete_note" in state.steps["unlock"].outputs["tools"]
    assert state.steps["deleted"].status is StepStatus.SUCCEEDED


async def test_a_directive_naming_an_extension_the_app_does_not_declare_fails_naming_it(
    client, settings, worker, tmp_path
):
    steps = [
        {"id": "desk", "type": "deploy_env", "env_id": "shop"},
        {
            "id": "skipped",
            "type": "apply_server_config",
            "env": "desk",
            "tolerate_unadvertised": True,
            "directives": [
                {
                    "service": "*",
                    "uri": "urn:agentenv:set-errors/v1",
                    "args": {"tool_name": "list_notes", "error_rate": 0},
                }
            ],
        },
        {
            "id": "undeclared",
            "type": "apply_server_config",
            "env_id": "shop",
            "directives": [{"service": "mail", "uri": "urn:agentenv:set-errors/v1", "args": {}}],
            "fail_task_on_error": False,
        },
        {
            "id": "no_app",
            "type": "apply_server_config",
            "env_id": "shop",
            "directives": [{"service": "ghost", "uri": "urn:agentenv:set-errors/v1", "args": {}}],
            "fail_task_on_error": False,
        },
        {
            "id": "refused",
            "type": "apply_server_config",
            "env_id": "shop",
            "directives": [
                {"service": "pad", "uri": "urn:agentenv:set-errors/v1", "args": {"tool_name": "x", "error_rate": 2}}
            ],
            "fail_task_on_error": False,
        },
    ]
    state = await run_task(client, settings, bundle_with(tmp_path / "b", steps))
    assert state.steps["skipped"].status is StepStatus.SUCCEEDED, state.steps["skipped"].error
    skipped = state.steps["skipped"].outputs
    assert [a["service"] for a in skipped["applied"]] == ["pad"] and skipped["applied"][0]["result"]
    assert skipped["skipped"] == [
        {"service": "mail", "uri": "urn:agentenv:set-errors/v1", "reason": "extension_not_advertised"}
    ], "every app (*): the one that does not declare it is skipped, and said so"
    undeclared = state.steps["undeclared"]
    assert undeclared.status is StepStatus.FAILED
    assert "app 'mail' does not declare urn:agentenv:set-errors/v1" in undeclared.error
    assert "no app 'ghost'" in state.steps["no_app"].error and "'pad'" in state.steps["no_app"].error
    assert "the app refused it" in state.steps["refused"].error and "error_rate" in state.steps["refused"].error


# -- refused when the task is loaded or planned, naming the field --


def _load_error(tmp_path: Path, step: dict) -> str:
    path = bundle_with(tmp_path / "b", [{"id": "desk", "type": "deploy_env", "env_id": "shop"}, step])
    with pytest.raises(BadInput) as e:
        load_task(path)
    return str(e.value)


@pytest.mark.parametrize(
    ("step", "named"),
    [
        ({"type": "register_env_triggers", "env_id": "shop", "watch_roles": ["writer"]}, "`watch_roles`"),
        ({"type": "register_env_triggers", "executor_agent_name": "ann"}, "`executor_agent_name`"),
        (
            {"type": "register_env_triggers", "triggers": ["x"], "await_fired": ["t"]},
            "`await_fired` names ['t'], which this step does not register",
        ),
        (
            {"type": "sync_env_clock", "virtual_time": "2026-01-01T00:00:00Z", "timeout_seconds": 30},
            "`timeout_seconds`",
        ),
        (
            {"type": "sync_env_clock", "virtual_time": "2026-01-01T00:00:00Z", "tolerate_missing_sync_time": False},
            "`tolerate_missing_sync_time: false`",
        ),
        ({"type": "sync_env_clock", "virtual_time": "2026-01-01T00:00:00Z", "time": "+1h"}, "not both"),
        ({"type": "modify_env_tool_access", "env": "desk", "env_id": "shop", "role": "writer"}, "exactly one of `env`"),
        (
            {"type": "modify_env_tool_access", "env": "desk", "role": "w", "action": "disable", "deny": ["x"]},
            "`deny` goes with no `action`",
        ),
        ({"type": "modify_env_tool_access", "env": "desk", "role": "w", "action": "toggle"}, "action"),
        ({"type": "apply_server_config", "env": "desk", "directives": []}, "directives"),
        (
            {"type": "apply_server_config", "env": "desk", "directives": [{"service": "a", "uri": "u", "bogus": 1}]},
            "bogus",
        ),
    ],
)
def test_framework_fields_that_mean_nothing_here_are_refused_naming_the_field(tmp_path, step, named):
    assert named in _load_error(tmp_path, {"id": "s", **step})


@pytest.mark.parametrize("old", ["set_role_tools", "set_clock", "register_triggers"])
def test_the_old_names_are_gone(tmp_path, old):
    assert f"unknown step type '{old}'" in _load_error(tmp_path, {"id": "s", "type": old})


def test_env_id_must_be_an_env_the_task_deploys(settings, tmp_path):
    for step_type, extra in (
        ("modify_env_tool_access", {"role": "writer", "action": "disable", "tools": ["x"]}),
        ("apply_server_config", {"directives": [{"service": "pad", "uri": "u"}]}),
        ("sync_env_clock", {"virtual_time": "2026-01-01T00:00:00Z"}),
        ("register_env_triggers", {}),
    ):
        steps = [
            {"id": "desk", "type": "deploy_env", "env_id": "shop"},
            {"id": "s", "type": step_type, "env_id": "nope", **extra},
        ]
        task = load_task(bundle_with(tmp_path / step_type, steps))
        with pytest.raises(BadInput, match="env_id 'nope' is deployed by no deploy_env step"):
            plan(task, "r-1", settings)


def test_the_framework_fields_plan_as_ours(settings, tmp_path):
    task = load_task(bundle_with(tmp_path / "b", FRAMEWORK_TASK))
    assert task.clock is not None and task.clock.mode == "frozen", "a JSON task's clock starts at its virtual_time"
    assert task.clock.start.isoformat() == "2026-07-01T00:00:00+00:00"
    assert [t.id for t in task.triggers] == ["at_one"] and task.step("rules").config["triggers"] == ["at_one"]
    steps = {s.id: s for s in plan(task, "r-1", settings).steps}
    assert steps["start"].config["mode"] == "frozen" and "virtual_time" not in steps["start"].config
    assert steps["jump"].config == {"env_id": "shop", "time": "2026-07-01T02:00:00Z", "mode": "paced", "rate": 1.0}
    assert steps["lock"].config["env"] == "desk" and "env_id" not in steps["lock"].config
    assert steps["faults"].config["env"] == "desk"
    assert steps["start"].verb == "sync_env_clock" and steps["rules"].verb == "register_env_triggers"
