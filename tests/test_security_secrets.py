"""Secrets stay where they belong: a sandbox's environment is what its spec declares (never the worker's
credentials), `secret:` references in a sandbox's env are resolved only when it starts, and no secret
value reaches Temporal history, the run record, the trajectory, logs or error messages.

Real components throughout: the session's Temporal dev server and in-process worker, the gateway, the
local provider's processes, the fake model server (its key is `secret:test-model`, see conftest)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import FAKE_MODEL_KEY

from agent_env.bundles import BUILTIN_ROOT
from agent_env.planning.tasks import load_task
from agent_env.providers import SandboxSpec, by_name
from agent_env.spec.agent import AgentRecord
from agent_env.spec.run import RunStatus
from agent_env.stores.secrets import MissingSecret
from agent_env.temporal import launch

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")

# An SDK agent that writes its whole environment to $DUMP (outside the state dir) before it serves.
PROBE = """
import json
import os

from agent_env.agents.sdk import Agent, serve

with open(os.environ["DUMP"], "w") as f:
    json.dump(dict(os.environ), f)
{start}


class Probe(Agent):
    name = "probe"

    async def answer(self, turn):
        return "ok"


serve(Probe(), os.environ["HOST"], int(os.environ["PORT"]))
"""


def canaries(monkeypatch) -> dict[str, str]:
    """Credentials the worker holds (the session's worker runs in this process, so it sees these)."""
    values = {
        var: f"canary-{var.lower()}-{os.urandom(6).hex()}"
        for var in ("AGENT_ENV_SECRET_CANARY", "TEMPORAL_API_KEY", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY")
    }
    for var, value in values.items():
        monkeypatch.setenv(var, value)
    return values


def write_probe(root: Path, dump: Path, env: dict[str, str], *, start: str = "") -> Path:
    """Agent `probe` in bundle `root`, run by the local provider with `env` declared."""
    folder = root / "agents" / "probe"
    folder.mkdir(parents=True)
    (folder / "agent.py").write_text(PROBE.replace("{start}", start))
    declared = {"DUMP": str(dump), **env}
    (folder / "agent.toml").write_text(
        textwrap.dedent(f"""
        type = "a2a"
        [config.sandbox]
        command = ["{sys.executable}", "{folder / "agent.py"}"]
        provider = "local"
        """)
        + "[config.sandbox.env]\n"
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in declared.items())
    )
    return root


def write_task(root: Path, steps: str) -> Path:
    (root / "tasks").mkdir(exist_ok=True)
    (root / "tasks" / "t.toml").write_text(textwrap.dedent(steps))
    return root / "tasks" / "t.toml"


DEPLOY_PROBE = """
    id = "probe"
    [[steps]]
    id = "probe"
    type = "deploy_agent"
    config = { agent = "probe" }
    """


async def run(client, settings, task: Path, timeout: float = 120):
    handle = await launch.start_run(client, settings, load_task(task))
    return await asyncio.wait_for(launch.wait_result(handle), timeout)


# -- what a sandbox's environment holds --


async def test_a_local_sandbox_gets_none_of_the_workers_credentials(client, settings, worker, tmp_path, monkeypatch):
    """Attack: an agent in a `local` sandbox dumps its environment to harvest the worker's credentials
    (AGENT_ENV_SECRET_*, TEMPORAL_API_KEY, cloud keys) and the model key it was never given."""
    planted = canaries(monkeypatch)
    dump = tmp_path / "env.json"
    task = write_task(write_probe(tmp_path / "b", dump, {"GREETING": "hello"}), DEPLOY_PROBE)
    state = await run(client, settings, task)
    assert state.status is RunStatus.PASSED, state.error or state.steps["probe"].error

    seen = json.loads(dump.read_text())
    text = json.dumps(seen)
    for var, value in planted.items():
        assert value not in text, f"the worker's {var} reached the sandbox"
    assert FAKE_MODEL_KEY not in text, "the model's key (AGENT_ENV_SECRET_TEST_MODEL) reached the sandbox"
    assert seen["GREETING"] == "hello" and seen["DUMP"] == str(dump), "what the spec declares is there"
    assert seen["HOST"] == "127.0.0.1" and seen["PORT"].isdigit()
    venv_first = os.pathsep.join([str(Path(sys.prefix) / "bin"), os.environ["PATH"]])
    assert seen["PATH"] in (os.environ["PATH"], venv_first), "programs are found as in the worker's shell"
    inherited = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PYTHONPATH"}
    where = {"HOST", "PORT", "MCP_HOST", "MCP_PORT"}  # (MCP_*: the same address, for the protocol's env SDK)
    extra = {k for k in seen if k not in inherited and not k.startswith("LC_")} - {"GREETING", "DUMP", *where}
    assert not extra, f"only the allowlist, the declared env and where to listen: also got {sorted(extra)}"
    assert seen["MCP_HOST"] == seen["HOST"] and seen["MCP_PORT"] == seen["PORT"]


async def test_a_command_run_in_a_local_sandbox_sees_its_env_not_the_workers(settings, tmp_path, monkeypatch):
    """Attack: code run in a sandbox with `exec` (a grader's check, a test command) reads the worker's
    environment instead of the sandbox's."""
    planted = canaries(monkeypatch)
    declared = f"declared-{os.urandom(4).hex()}"
    spec = SandboxSpec(
        name="exec-env", run_id="secrets-exec", command=["sleep", "30"], port=8000, env={"DECLARED": declared}
    )
    provider, box = await by_name.create("local", spec, settings)
    try:
        done = await box.exec(["env"])
    finally:
        await provider.remove(box.info.id)
    assert done.exit_code == 0
    assert not any(value in done.stdout for value in planted.values()), "exec saw the worker's credentials"
    assert f"DECLARED={declared}\n" in done.stdout and "HOST=127.0.0.1\n" in done.stdout
    assert declared not in repr(spec), "a spec's repr (in a log line, a traceback) shows no env values"


# -- secret references in a sandbox's env --


def test_sandbox_env_values_may_be_secret_references():
    """Attack on the spec: a malformed reference (`secret:` with a path, a bad variable name) slips
    through and resolves to something unexpected, or overrides where the sandbox serves."""

    def box(env):
        return (
            AgentRecord.model_validate(
                {"name": "a", "type": "a2a", "config": {"sandbox": {"command": ["x"], "env": env}}}
            )
            .typed_config()
            .sandbox
        )

    assert box({"API_KEY": "secret:openai"}).env == {"API_KEY": "secret:openai"}, "kept as a reference"
    for env, message in [
        ({"API_KEY": "secret:../secrets.json"}, "not a valid secret reference"),
        ({"BAD-NAME": "x"}, "not a variable name"),
        ({"PORT": "1"}, "set by the provider"),
    ]:
        with pytest.raises(ValueError, match=message):
            box(env)


def test_a_missing_sandbox_secret_fails_when_the_run_is_planned(settings, tmp_path, monkeypatch):
    """Attack on reliability: a run starts, deploys half its world and only then finds a key missing (or
    worse, starts the sandbox with the literal `secret:` string as its key)."""
    monkeypatch.delenv("AGENT_ENV_SECRET_NEVER_SET", raising=False)
    root = write_probe(tmp_path / "b", tmp_path / "env.json", {"API_KEY": "secret:never-set"})
    with pytest.raises(MissingSecret) as e:
        launch.plan(load_task(write_task(root, DEPLOY_PROBE)), "plan-missing", settings)
    assert "agent 'probe': env API_KEY references secret:never-set" in e.value.problem
    assert "agent-env secrets set never-set" in e.value.fix and "AGENT_ENV_SECRET_NEVER_SET" in e.value.fix


async def test_a_sandbox_that_prints_its_key_does_not_put_it_in_the_error(
    client, settings, worker, tmp_path, monkeypatch
):
    """Attack: a hostile agent prints the key it was given and dies at start, so that the deploy's error
    (which quotes its last output) carries the key into the run's history."""
    value = f"sk-printed-{os.urandom(6).hex()}"
    monkeypatch.setenv("AGENT_ENV_SECRET_PRINTED", value)
    root = write_probe(
        tmp_path / "b",
        tmp_path / "env.json",
        {"API_KEY": "secret:printed"},
        start='print("my key is", os.environ["API_KEY"], flush=True); raise SystemExit(1)',
    )
    state = await run(client, settings, write_task(root, DEPLOY_PROBE))
    assert state.status is RunStatus.ERROR
    error = state.steps["probe"].error
    assert "exited before serving A2A" in error and "my key is [secret]" in error, error
    assert value not in error and value not in state.model_dump_json()
    assert json.loads((tmp_path / "env.json").read_text())["API_KEY"] == value, "it did get the key"


# -- the history scan --


def refund_with_probe(root: Path, dump: Path) -> Path:
    """The refund cookbook (a model-driven agent and a judge: `secret:test-model`) plus agent `probe`,
    whose sandbox's API_KEY is `secret:sandbox-canary`."""
    shutil.copytree(BUILTIN_ROOT / "refund", root)
    write_probe(root, dump, {"API_KEY": "secret:sandbox-canary"})
    task = root / "tasks" / "refund.toml"
    task.write_text(
        task.read_text()
        + textwrap.dedent("""

        [[steps]]
        id = "probe"
        type = "deploy_agent"
        depends_on = ["desk"]
        config = { agent = "probe" }

        [[steps]]
        id = "ask-probe"
        type = "prompt_agent"
        depends_on = ["probe"]
        config = { agent = "probe", prompt = "are you there?", turn_deadline = "30s" }
        """)
    )
    return task


def cli(*args: str) -> str:
    """The CLI's output (the run record, the trajectory), read in another process as a user would."""
    done = subprocess.run([AGENT_ENV, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def temporal_history(settings, run_id: str) -> str:
    from agent_env.temporal_client.server import binary_path

    done = subprocess.run(
        [
            str(binary_path()),
            "workflow",
            "show",
            "--workflow-id",
            run_id,
            "--output",
            "json",
            "--address",
            settings.address,
            "--namespace",
            settings.temporal.namespace,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.dumps(decoded(json.loads(done.stdout)))


def decoded(node):
    """History JSON with every payload's base64 `data` (inputs, results, failures' details) decoded."""
    if isinstance(node, dict):
        if isinstance(node.get("data"), str) and "metadata" in node:
            node = {**node, "data": base64.b64decode(node["data"]).decode(errors="replace")}
        return {k: decoded(v) for k, v in node.items()}
    if isinstance(node, list):
        return [decoded(v) for v in node]
    return node


def files_holding(root: Path, values: list[str]) -> list[str]:
    """Every file under `root` (text or binary: stores, databases, logs) that contains one of `values`. In
    another process: closing a descriptor of a SQLite file drops this process's locks on it (the
    in-process worker's stores are open here), which would corrupt the database."""
    done = subprocess.run(
        ["grep", "-r", "-l", "-a", "-F", *[a for v in values for a in ("-e", v)], str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: nothing found
    return done.stdout.splitlines()


async def test_no_secret_value_reaches_history_records_trajectories_or_logs(
    client, settings, worker, tmp_path, monkeypatch, caplog
):
    """Attack (the history scan): anyone who can read the Temporal UI, the run store, a trajectory export
    or a log file harvests the model's API key and the keys given to sandboxes."""
    sandbox_key = f"sk-sandbox-{os.urandom(8).hex()}"
    monkeypatch.setenv("AGENT_ENV_SECRET_SANDBOX_CANARY", sandbox_key)
    secrets = [FAKE_MODEL_KEY, sandbox_key]
    caplog.set_level(logging.DEBUG)
    dump = tmp_path / "env.json"
    state = await run(client, settings, refund_with_probe(tmp_path / "refund", dump), timeout=240)
    assert state.status is RunStatus.PASSED and state.score == 1, state.error or state
    assert state.steps["ask-probe"].outputs["answer"] == "ok"
    seen = json.loads(dump.read_text())
    assert seen["API_KEY"] == sandbox_key, "inside the sandbox, the reference was resolved"

    history = temporal_history(settings, state.run_id)
    assert "secret:sandbox-canary" in history and "secret:test-model" in history, "history carries references"
    record, trajectory = cli("runs", "show", state.run_id, "--json"), cli("runs", "trajectory", state.run_id, "--jsonl")
    assert json.loads(record)["run_id"] == state.run_id and '"tool"' in trajectory
    logs = "\n".join(r.getMessage() for r in caplog.records)
    for where, text in [
        ("Temporal history", history),
        ("the run record", record),
        ("the trajectory", trajectory),
        ("the worker's log", logs),
    ]:
        for value in secrets:
            assert value not in text, f"a secret value is in {where}"
    home = Path(os.environ["AGENT_ENV_HOME"])
    assert (home / "gateway").exists() or any(home.rglob("*.log")), "the scan covers the gateway's files"
    assert files_holding(home, secrets) == [], "a secret value is in a file of the state dir"
