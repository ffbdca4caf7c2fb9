"""Agents in sandboxes: an a2a agent's `sandbox` is built (or copied) and started by deploy_agent, reached
over A2A where its sandbox serves, and removed when the run ends. The local provider here; the Docker
tier runs the echo-agent bundle in a container (CI sets AGENT_ENV_REQUIRE_DOCKER=1: it fails, not skips,
without Docker)."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_docker import containers_of, docker_client  # noqa: F401 - the Docker tier's fixture

from agent_env.bundles import BUILTIN_ROOT
from agent_env.errors import BadInput
from agent_env.planning.tasks import load_task
from agent_env.providers import SandboxSpec, by_name
from agent_env.spec.agent import AgentRecord
from agent_env.spec.run import RunStatus
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch

ROOT = Path(__file__).parent.parent
ECHO_AGENT = BUILTIN_ROOT / "echo-agent"

SHOUT = """
import os

from agent_env.agents.sdk import Agent, serve


class Shout(Agent):
    name = "shout"

    async def answer(self, turn):
        if turn.mcp_url:  # a local sandbox reaches the gateway: it works with the environment's tools
            async with turn.tools() as tools:
                notes = await tools.call("list_notes", {})
            return f"{turn.prompt.upper()} ({notes['count']} notes)"
        return turn.prompt.upper()


{start}
serve(Shout(), os.environ["HOST"], int(os.environ["PORT"]))
"""


def write_agent_bundle(root: Path, steps: str, *, start: str = "") -> Path:
    """A bundle with agent `shout`: an SDK agent whose sandbox the local provider runs from ./app."""
    app = root / "agents" / "shout" / "app"
    app.mkdir(parents=True)
    (app / "Dockerfile").write_text("FROM agentenv/base:bookworm\n")  # a build context has one; local ignores it
    (app / "agent.py").write_text(SHOUT.replace("{start}", start))
    (root / "agents" / "shout" / "agent.toml").write_text(
        textwrap.dedent(f"""
        type = "a2a"
        [config.sandbox]
        build = "app"
        command = ["{sys.executable}", "agent.py"]
        provider = "local"
        """)
    )
    (root / "tasks").mkdir()
    (root / "tasks" / "t.toml").write_text(textwrap.dedent(steps))
    return root


PROMPTED = """
    id = "shout"
    [[steps]]
    id = "notes"
    type = "deploy_env"
    config = { env_id = "notes" }
    [[steps]]
    id = "agent"
    type = "deploy_agent"
    depends_on = ["notes"]
    config = { agent = "shout", env = "notes", role = "agent" }
    [[steps]]
    id = "ask"
    type = "prompt_agent"
    depends_on = ["agent"]
    config = { agent = "agent", prompt = "hello there", turn_deadline = "30s" }
    [[steps]]
    id = "answer"
    type = "check_response"
    depends_on = ["ask"]
    [steps.config]
    response = "${steps.ask.outputs.answer}"
    checks = [{ name = "shouted, with the notes it read", matches = "^HELLO THERE \\\\(\\\\d+ notes\\\\)$" }]
    """


async def run(client, settings, bundle: Path, timeout: float = 60):
    return await asyncio.wait_for(
        launch.wait_result(await launch.start_run(client, settings, load_task(bundle / "tasks" / "t.toml"))), timeout
    )


# -- records --


def test_an_a2a_agent_has_a_url_or_a_sandbox():
    record = AgentRecord.model_validate({"name": "a", "type": "a2a", "config": {"sandbox": {"image": "x:1"}}})
    box = record.typed_config().sandbox
    assert (box.path, box.port, box.provider) == ("/", 8000, None)
    for config, message in [
        ({}, "exactly one of `url`"),
        ({"url": "http://127.0.0.1:1", "sandbox": {"image": "x"}}, "exactly one of `url`"),
        ({"sandbox": {}}, "a sandbox needs `build`"),
        ({"sandbox": {"image": "x", "path": "mcp"}}, "should match pattern"),
    ]:
        with pytest.raises(ValueError, match=message):
            AgentRecord.model_validate({"name": "a", "type": "a2a", "config": config})


def test_only_sandboxed_agents_deploy_in_a_normal_activity(settings, tmp_path):
    bundle = write_agent_bundle(tmp_path / "b", PROMPTED)
    planned = {s.id: s for s in launch.plan(load_task(bundle / "tasks" / "t.toml"), "plan-1", settings).steps}
    assert not planned["agent"].local and planned["agent"].heartbeat_timeout is not None
    assert planned["agent"].config["build"].startswith("artifacts/sha256-")
    hosted = load_task(ROOT / "agent_env" / "bundles" / "refund" / "tasks" / "refund.toml")
    assert next(s for s in launch.plan(hosted, "plan-2", settings).steps if s.type == "deploy_agent").local

    inline = {
        "id": "t",
        "steps": [
            {
                "id": "a",
                "type": "deploy_agent",
                "config": {
                    "record": {"name": "a", "type": "a2a", "config": {"sandbox": {"build": "app", "command": ["x"]}}}
                },
            }
        ],
    }
    from agent_env.planning.tasks import parse_task

    with pytest.raises(BadInput, match="an inline record has none"):
        launch.plan(parse_task(inline, "inline"), "plan-3", settings)


# -- the local provider --


async def test_a_sandboxed_agent_is_prompted_with_its_tools_and_removed_at_the_end(client, settings, worker, tmp_path):
    state = await run(client, settings, write_agent_bundle(tmp_path / "b", PROMPTED))
    assert state.status is RunStatus.PASSED, state.error or state.steps["answer"]
    deployed = state.steps["agent"].outputs
    box = deployed["sandbox"]
    assert box["provider"] == "local" and box["id"] == f"{state.run_id}.agent.shout".lower()
    assert deployed["url"] == box["url"] + "/" and not deployed["hosted"]
    assert state.steps["ask"].outputs["tool_calls"] == 1
    local = by_name.load("local", settings)
    assert await local.list(state.run_id) == [], "the run's end removes the agent's sandbox"


async def test_an_agent_that_dies_at_start_fails_the_deploy_with_its_output(client, settings, worker, tmp_path):
    bundle = write_agent_bundle(
        tmp_path / "b",
        """
        id = "dies"
        [[steps]]
        id = "agent"
        type = "deploy_agent"
        config = { agent = "shout" }
        """,
        start='raise SystemExit("no model key for shout")',
    )
    started = time.monotonic()
    state = await run(client, settings, bundle)
    assert state.status is RunStatus.ERROR
    error = state.steps["agent"].error
    assert "agent 'shout' (a local sandbox" in error and "exited before serving A2A" in error, error
    assert "no model key for shout" in error, "its last output is in the error"
    assert time.monotonic() - started < 20, "a dead agent is noticed without waiting out the start timeout"
    assert await by_name.load("local", settings).list(state.run_id) == []


async def test_an_agent_whose_card_names_another_url_fails_the_deploy(client, settings, worker, tmp_path):
    bundle = write_agent_bundle(
        tmp_path / "b",
        """
        id = "elsewhere"
        [[steps]]
        id = "agent"
        type = "deploy_agent"
        config = { agent = "shout" }
        """,
        start=textwrap.dedent("""
            import agent_env.agents.sdk as sdk

            sdk.advertised_url = lambda host, port, public_url: "http://0.0.0.0:1/"  # nobody reaches it there
            """),
    )
    state = await run(client, settings, bundle)
    assert state.status is RunStatus.ERROR
    error = state.steps["agent"].error
    assert "but its card advertises http://0.0.0.0:1/" in error and "serve the card with the URL" in error, error
    assert await by_name.load("local", settings).list(state.run_id) == [], "a failed run removes it too"


async def test_an_sdk_agent_bound_to_all_interfaces_names_the_url_it_is_reached_at(client, settings, worker, tmp_path):
    bundle = write_agent_bundle(tmp_path / "b", PROMPTED, start='os.environ["HOST"] = "0.0.0.0"  # as in a container')
    state = await run(client, settings, bundle)
    assert state.status is RunStatus.PASSED, state.error
    assert state.steps["agent"].outputs["url"].startswith("http://127.0.0.1:")


async def test_a_step_overrides_the_agents_provider(client, settings, worker, tmp_path):
    bundle = write_agent_bundle(
        tmp_path / "b",
        """
        id = "override"
        [[steps]]
        id = "agent"
        type = "deploy_agent"
        config = { agent = "shout", provider = "offline" }
        """,
    )
    state = await run(client, settings, bundle)
    assert state.status is RunStatus.ERROR
    assert "agent 'shout': offline: the offline provider never answers" in state.steps["agent"].error


async def test_the_echo_agent_runs_locally_on_agent_envs_own_python(client, settings, worker, tmp_path, monkeypatch):
    """Without Docker, the built-in echo agent's `python3 agent.py` runs as a local process on the interpreter
    agent-env runs on, whatever `python3` the worker's PATH finds first (here one that is not agent-env's, as
    the machine's is when the venv is not activated)."""
    machine = tmp_path / "machine-bin"
    machine.mkdir()
    for name in ("python", "python3"):
        (machine / name).write_text('#!/bin/sh\necho "the machine\'s $0: no agent_env here" >&2\nexit 3\n')
        (machine / name).chmod(0o755)
    venv_bin = str(Path(sys.prefix) / "bin")
    rest = [p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin]
    monkeypatch.setenv("PATH", os.pathsep.join([str(machine), *rest]))
    spec = load_task(ECHO_AGENT / "tasks" / "echo-agent.toml")
    next(s for s in spec.steps if s.id == "echo").config["provider"] = "local"
    state = await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, spec)), 120)
    assert state.status is RunStatus.PASSED, state.error or state.steps["echo"].error
    assert state.steps["echo"].outputs["sandbox"]["provider"] == "local"
    assert state.steps["ask"].outputs["answer"] == "echo: hello from the run (1 notes)", "it used a tool"


async def test_a_local_sandbox_finds_agent_envs_python_first_on_its_path(settings, tmp_path, monkeypatch):
    """A command the sandbox runs through a shell finds agent-env's venv first on PATH, as if it were activated."""
    machine = tmp_path / "machine-bin"
    machine.mkdir()
    (machine / "python3").write_text("#!/bin/sh\nexit 3\n")
    (machine / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(machine), "/usr/bin", "/bin"]))
    spec = SandboxSpec(name="own-python", run_id="own-python", command=["python3", "-c", "import time; time.sleep(30)"])
    provider, box = await by_name.create("local", spec, settings)
    try:
        ran = await box.exec(["sh", "-c", "python3 -c 'import agent_env, sys; print(sys.executable)'"])
        direct = await box.exec(["python3", "-c", "import agent_env, sys; print(sys.executable)"])
    finally:
        await provider.remove(box.info.id)
    assert ran.exit_code == 0 and direct.exit_code == 0, ran.stderr + direct.stderr
    assert direct.stdout.strip() == sys.executable
    assert Path(ran.stdout.strip()).parent == Path(sys.prefix) / "bin"


# -- Docker --


@pytest.fixture(scope="module")
def echo_bundle(docker_client) -> Path:  # noqa: F811
    """The built-in echo-agent bundle, as it ships: its image gets agent-env from this install, no step first."""
    return ECHO_AGENT


async def test_the_echo_agent_runs_in_a_container_and_leaves_nothing(
    client,
    settings,
    worker,
    echo_bundle,
    docker_client,  # noqa: F811 (the fixture)
):
    assert not (echo_bundle / "agents/echo/image/agent-env-wheels").exists(), "the wheels are not the bundle's"
    spec = load_task(echo_bundle / "tasks" / "echo-agent.toml")
    state = await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, spec)), 300)
    assert state.status is RunStatus.PASSED, state.error
    box = state.steps["echo"].outputs["sandbox"]
    assert box["provider"] == "docker" and box["url"].startswith("http://127.0.0.1:")
    assert state.steps["ask"].outputs["answer"] == "echo: hello from the run (1 notes)", "it used a tool"
    assert containers_of(docker_client, state.run_id) == [], "the run's end removes the agent's container"


def test_the_builtin_bundle_is_runnable():
    assert resolve_target("echo-agent").id == "echo-agent"
