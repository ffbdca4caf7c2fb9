"""cli agents: a command-line coding agent run in a sandbox, one process per turn, behind agent-env's A2A bridge
(agent_env.agents.cli_agent). A command of the user's on the local provider here; the real CLIs from npm (Codex,
Claude Code) solve the refund cookbook in tests/test_coding_agents_real.py."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent_env.agents import cli_agent
from agent_env.agents.cli_agent import run_bounded
from agent_env.planning.tasks import load_task
from agent_env.spec.agent import CLI_BRIDGE, CLI_IMAGE, AgentRecord
from agent_env.spec.run import RunStatus
from agent_env.steps.builtin.agents import expanded
from agent_env.stores import open_stores
from agent_env.temporal import launch

# A CLI of the user's: reads the prompt on stdin, calls an environment tool with the token it was given, counts
# its turns in its home (kept per conversation), and proves it got the model's key without printing it.
TOOL = """
import asyncio, hashlib, os, sys
from pathlib import Path

from agent_env.agents.sdk import Turn

prompt = sys.stdin.read()
assert prompt == os.environ["AGENT_ENV_PROMPT"]
counter = Path(os.environ["HOME"]) / "turns"
turns = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(turns))


async def notes():
    turn = Turn(prompt, mcp_url=os.environ["AGENT_ENV_MCP_URL"], token=os.environ["AGENT_ENV_MCP_TOKEN"])
    async with turn.tools() as tools:
        return (await tools.call("list_notes", {}))["count"]


key = hashlib.sha256(os.environ["AGENT_ENV_MODEL_API_KEY"].encode()).hexdigest()[:12]
print(f"{prompt.upper()} turn={turns} notes={asyncio.run(notes())} key={key} model={os.environ['AGENT_ENV_MODEL']}")
"""


def write_bundle(root: Path) -> Path:
    (root / "agents" / "mine").mkdir(parents=True)
    (root / "agents" / "mine" / "tool.py").write_text(TOOL)
    (root / "agents" / "mine" / "agent.toml").write_text(
        textwrap.dedent(f"""
        type = "cli"
        [config]
        command = ["{sys.executable}", "{root / "agents" / "mine" / "tool.py"}"]
        model = {{ model = "my-model" }}
        turn_timeout = "1m"
        [config.sandbox]
        command = ["{sys.executable}", "-m", "agent_env.agents.cli_agent"]
        provider = "local"
        """)
    )
    (root / "tasks").mkdir()
    (root / "tasks" / "t.toml").write_text(
        textwrap.dedent("""
        id = "mine"
        [[steps]]
        id = "notes"
        type = "deploy_env"
        config = { env_id = "notes" }
        [[steps]]
        id = "agent"
        type = "deploy_agent"
        depends_on = ["notes"]
        config = { agent = "mine", env = "notes", role = "agent" }
        [[steps]]
        id = "user"
        type = "deploy_agent"
        config = { record = { name = "user", type = "scripted", config = { turns = [[{ say = "and again" }]] } } }
        [[steps]]
        id = "ask"
        type = "prompt_agent"
        depends_on = ["agent", "user"]
        config = { agent = "agent", prompt = "hello there", turn_deadline = "60s", conversation = { partner = "user", max_turns = 2 } }
        """)
    )
    return root


# -- records --


def test_a_cli_agent_is_a_preset_or_a_command_and_runs_the_bridge():
    record = AgentRecord.model_validate({"name": "c", "type": "cli", "config": {"preset": "codex"}})
    box = record.sandbox()
    assert (box.image, box.command, box.network, box.provider) == (CLI_IMAGE, CLI_BRIDGE, "host", "docker,local")
    assert record.needs_model()
    own = AgentRecord.model_validate(
        {"name": "c", "type": "cli", "config": {"preset": "claude_code", "sandbox": {"image": "mine:1"}}}
    )
    assert own.sandbox().command == CLI_BRIDGE, "whatever the image's CMD, the bridge serves A2A"
    for config, message in [
        ({}, "exactly one of `preset`"),
        ({"preset": "codex", "command": ["x"]}, "exactly one of `preset`"),
        ({"preset": "aider"}, "claude_code"),
        ({"command": []}, "at least 1"),
    ]:
        with pytest.raises(ValueError, match=message):
            AgentRecord.model_validate({"name": "c", "type": "cli", "config": config})


# -- the bridge's process handling --


async def test_a_turn_that_outlives_its_time_is_killed_with_its_children(tmp_path):
    pid_file = tmp_path / "child"
    script = f"import subprocess, sys, time; p = subprocess.Popen(['sleep', '60']); open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    started = time.monotonic()
    code, _, _ = await run_bounded(
        [sys.executable, "-c", script], env=dict(os.environ), cwd=tmp_path, stdin=None, timeout=2
    )
    assert code is None and time.monotonic() - started < 10
    child = int(pid_file.read_text())
    await asyncio.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


async def test_what_a_cli_prints_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(cli_agent, "MAX_OUTPUT", 1000)
    script = "import sys; sys.stdout.write('x' * 5_000_000); sys.stderr.write('e' * 10); print(sys.stdin.read())"
    code, out, err = await run_bounded(
        [sys.executable, "-c", script], env=dict(os.environ), cwd=tmp_path, stdin="in", timeout=30
    )
    assert (code, len(out), err) == (0, 1000, "e" * 10), "it ran to its end, its output cut, never blocked"


async def test_a_missing_cli_fails_the_turn_naming_it(tmp_path):
    code, _, err = await run_bounded(["/nonexistent/codex"], env={}, cwd=tmp_path, stdin=None, timeout=5)
    assert code == 127 and "cannot start '/nonexistent/codex'" in err


# -- a run --


async def test_a_command_of_yours_works_with_its_tools_turn_after_turn(client, settings, worker, tmp_path):
    bundle = write_bundle(tmp_path / "b")
    handle = await launch.start_run(client, settings, load_task(bundle / "tasks" / "t.toml"))
    state = await asyncio.wait_for(launch.wait_result(handle), 90)
    assert state.status is RunStatus.PASSED, state.error
    key = hashlib.sha256(os.environ["AGENT_ENV_SECRET_TEST_MODEL"].encode()).hexdigest()[:12]
    transcript = json.loads(open_stores(settings).objects.get(state.steps["ask"].outputs["transcript"]))
    said = [m["text"] for m in expanded(open_stores(settings), transcript["messages"]) if m["side"] == "agent"]
    assert len(said) == 2 and said[0].startswith("HELLO THERE turn=1 notes="), said
    assert f"key={key} model=my-model" in said[0], "its model's key reached it (from the secret store)"
    assert said[1].startswith("AND AGAIN turn=2"), "its home is kept for the conversation"
    assert state.steps["agent"].outputs["sandbox"]["provider"] == "local"
    history = await client.get_workflow_handle(state.run_id).fetch_history()
    assert os.environ["AGENT_ENV_SECRET_TEST_MODEL"] not in history.to_json(), "the key never enters history"


SETTINGS_TOOL = """
import json, os, sys
sys.stdin.read()
print(json.dumps({name: os.environ.get(name) for name in ("MY_FLAG", "RECORD_ONLY", "AGENT_ENV_SETTINGS")}))
"""


async def test_the_steps_env_vars_and_the_prompts_settings_reach_a_command(client, settings, worker, tmp_path):
    """deploy_agent's env_vars reach the CLI (the record's own sandbox env stays the bridge's); prompt_agent's
    settings reach it as JSON."""
    root = tmp_path / "b"
    (root / "agents" / "mine").mkdir(parents=True)
    (root / "agents" / "mine" / "tool.py").write_text(SETTINGS_TOOL)
    (root / "agents" / "mine" / "agent.toml").write_text(
        textwrap.dedent(f"""
        type = "cli"
        [config]
        command = ["{sys.executable}", "{root / "agents" / "mine" / "tool.py"}"]
        model = {{ model = "my-model" }}
        [config.sandbox]
        command = ["{sys.executable}", "-m", "agent_env.agents.cli_agent"]
        provider = "local"
        env = {{ RECORD_ONLY = "the bridge's" }}
        """)
    )
    (root / "tasks").mkdir()
    (root / "tasks" / "t.toml").write_text(
        textwrap.dedent("""
        id = "mine"
        [[steps]]
        id = "agent"
        type = "deploy_agent"
        config = { agent = "mine", env_vars = { MY_FLAG = "on" } }
        [[steps]]
        id = "ask"
        type = "prompt_agent"
        depends_on = ["agent"]
        config = { agent = "agent", prompt = "go", effort = "high", max_turns = 7, turn_deadline = "60s" }
        """)
    )
    handle = await launch.start_run(client, settings, load_task(root / "tasks" / "t.toml"))
    state = await asyncio.wait_for(launch.wait_result(handle), 90)
    assert state.status is RunStatus.PASSED, state.error
    seen = json.loads(state.steps["ask"].outputs["answer"])
    assert seen["MY_FLAG"] == "on" and seen["RECORD_ONLY"] is None, seen
    assert json.loads(seen["AGENT_ENV_SETTINGS"]) == {"effort": "high", "max_turns": 7}
    assert "settings_not_applied" not in state.steps["ask"].outputs
