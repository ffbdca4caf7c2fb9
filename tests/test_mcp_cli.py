"""`build_mcp_cli` (the framework's step): a command-line client of a deployed env's MCP tools, installed in a
bare sandbox, calls the env's real tools through the gateway as one of its agents, and that agent's role still
decides what it sees and may call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_framework_steps import run, write_task

from agent_env.errors import BadInput
from agent_env.planning.runs import plan
from agent_env.planning.tasks import load_task
from agent_env.providers import by_name
from agent_env.spec.run import RunStatus
from agent_env.stores import open_stores

DESK = """
name = "desk"
[[apps]]
app = "notes"
[roles.reader]
tools = ["list_notes", "read_note"]
[roles.writer]
tools = ["*"]
"""

ENV = {"id": "env", "type": "deploy_env", "env_id": "desk", "agents": {"ro": "reader", "rw": "writer"}}
BOX = {"id": "box", "type": "deploy_sandbox", "sandbox_name": "work", "sandbox_mode": "vm", "sandbox_type": "local"}
RW = {
    "id": "cli_rw",
    "type": "build_mcp_cli",
    "env_id": "desk",
    "command_name": "notes",
    "sandbox_name": "work",
    "agent": "rw",
}
RO = {**RW, "id": "cli_ro", "command_name": "notes-ro", "agent": "ro"}


def desk_bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "b"
    (bundle / "envs" / "desk").mkdir(parents=True)
    (bundle / "envs" / "desk" / "env.toml").write_text(DESK)
    return bundle


def shell(step_id: str, cli_step: str, args: str, **extra) -> dict:
    command = "${steps." + cli_step + ".outputs.installed.command} " + args
    return {"id": step_id, "type": "sandbox_exec", "sandbox": "box", "command": command, **extra}


async def test_the_cli_calls_the_envs_tools_as_its_agent_and_the_role_still_applies(client, settings, worker, tmp_path):
    bundle = desk_bundle(tmp_path)
    steps = [
        ENV,
        BOX,
        RW,
        RO,
        shell("write", "cli_rw", "write-note --key hi --text 'hello from the cli'"),
        shell("read", "cli_ro", "read_note --key hi"),
        shell("listed", "cli_ro", "list --json"),
        shell("denied", "cli_ro", "write-note --key x --text no", expect_exit=None),
        {"id": "artifact", "type": "build_mcp_cli", "env_id": "desk", "command_name": "desk"},
    ]
    state = await run(client, settings, write_task(bundle, steps))
    assert state.status is RunStatus.PASSED, state.error or {k: s.error for k, s in state.steps.items()}
    out = {k: s.outputs for k, s in state.steps.items()}
    assert json.loads(out["read"]["stdout"])["text"] == "hello from the cli", "the write reached the env's notes app"
    listed = sorted(t["name"] for t in json.loads(out["listed"]["stdout"]))
    assert [t for t in listed if t != "get_time"] == ["list_notes", "read_note"], "only what the role sees"
    assert out["denied"]["exit_code"] != 0 and "has no tool 'write_note'" in out["denied"]["stderr"]
    assert out["cli_ro"]["installed"] == {
        "sandbox_name": "work",
        "path": "/opt/cli/notes-ro/bin/notes-ro",
        "command": out["cli_ro"]["installed"]["command"],
        "agent": "ro",
        "role": "reader",
    }
    artifact = out["artifact"]["cli_artifact"]
    assert artifact["id"] == "desk-cli" and artifact["entrypoint"] == "bin/desk" and "installed" not in out["artifact"]
    script = open_stores(settings).objects.get(artifact["files"]["bin/desk"]).decode()
    assert script.startswith("#!/usr/bin/env python3") and "installed_cli('desk'" in script
    history = json.dumps(out)
    token_file = Path(out["cli_rw"]["installed"]["command"]).parent / ".env"
    assert not token_file.exists(), "the sandbox, and the token in it, went with the run"
    assert "token" not in json.dumps(out["cli_rw"]) and "Bearer" not in history
    assert await by_name.load("local", settings).list(state.run_id) == []


async def test_the_token_file_is_private_and_a_wrong_token_is_refused_by_the_gateway(
    client, settings, worker, tmp_path
):
    bundle = desk_bundle(tmp_path)
    settings_file = "$(dirname ${steps.cli_ro.outputs.installed.command})/.env"
    steps = [
        ENV,
        BOX,
        RO,
        {"id": "mode", "type": "sandbox_exec", "sandbox": "box", "command": f"stat -c %a {settings_file}"},
        {
            "id": "forged",
            "type": "sandbox_exec",
            "sandbox": "box",
            "command": f"sed -i 's/^token=.*/token=forged/' {settings_file}",
        },
        shell("after", "cli_ro", "list", expect_exit=None),
    ]
    state = await run(client, settings, write_task(bundle, steps))
    assert state.status is RunStatus.PASSED, state.error or {k: s.error for k, s in state.steps.items()}
    assert state.steps["mode"].outputs["stdout"].strip() == "600"
    after = state.steps["after"].outputs
    assert after["exit_code"] != 0 and "tool" not in after["stdout"], after


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ({**RW, "env_id": "mail"}, "env_id 'mail' is deployed by no deploy_env step"),
        ({**RW, "sandbox_name": "other"}, "sandbox_name 'other' is given by no deploy_sandbox step"),
        ({**RW, "command_name": "no spaces"}, "command_name"),
    ],
)
def test_a_wrong_config_is_named_when_the_run_is_planned(settings, tmp_path, step, expected):
    bundle = desk_bundle(tmp_path)
    with pytest.raises(BadInput) as e:
        plan(load_task(write_task(bundle, [ENV, BOX, step])), "r-1", settings)
    assert expected in str(e.value)


def test_steps_list_and_show_name_both_steps():
    from test_cli import cli

    listed = cli("steps", "list")
    assert listed.returncode == 0, listed.stderr
    assert "build_mcp_cli" in listed.stdout and "install_agent" in listed.stdout
    shown = cli("steps", "show", "build_mcp_cli")
    assert shown.returncode == 0 and "command_name" in shown.stdout and "cli_artifact_id" in shown.stdout
