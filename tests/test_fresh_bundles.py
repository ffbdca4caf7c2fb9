"""Every bundle `agent-env run` lists runs from a fresh clone, as the README says to run it: its venv made by the
README's first command and not activated (`.venv/bin/agent-env run NAME`, the machine's `python3` on PATH), with a
Docker daemon and without one. Those that need a model refuse before they start, naming how to configure one.

One clone and venv for the session (tests/fresh_clone.py); each variant runs in a state dir of its own.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import fresh_clone
import pytest
from conftest import free_port
from test_docker import docker_client  # noqa: F401 - the Docker tier's fixture (skips naming scripts/docker-setup)

pytestmark = pytest.mark.slow  # a fresh venv's install takes a minute or more

RUN_WITHOUT_A_MODEL = {"hello", "support-desk", "workplace", "echo-mcp", "echo-agent"}
NEED_A_MODEL = {"blender", "escalation", "invoice-queue", "refund"}
SANDBOXED = {"echo-mcp", "echo-agent"}  # their env app or agent runs in a sandbox: a container, or a local process
NO_DOCKER = "unix:///nonexistent/docker.sock"


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Iterator[fresh_clone.FreshClone]:
    folder = tmp_path_factory.mktemp("fresh")
    yield fresh_clone.make(folder / "agent-env")
    shutil.rmtree(folder, ignore_errors=True)  # its venv is a few hundred MB


def user_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's shell with a state dir and ports of this test's own (so it never meets the session's services)."""
    return fresh_clone.shell_env(
        AGENT_ENV_HOME=str(home),
        AGENT_ENV_SERVER_PORT=str(free_port()),
        AGENT_ENV_UI_PORT=str(free_port()),
        AGENT_ENV_GATEWAY_PORT=str(free_port()),
        AGENT_ENV_TASK_QUEUE=f"fresh-{uuid.uuid4().hex[:8]}",
        **extra,
    )


def listed(clone: fresh_clone.FreshClone, env: dict[str, str]) -> set[str]:
    done = clone.run("run", env=env)
    assert done.returncode == 0 and "What can run" in done.stdout, done.stdout + done.stderr
    return {line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")}


def providers(record: dict) -> set[str]:
    """The sandbox providers the run's steps started sandboxes on."""
    found = set()
    for step in record["steps"].values():
        outputs = step.get("outputs") or {}
        found |= {box["provider"] for box in outputs.get("sandboxes", [])}
        if isinstance(outputs.get("sandbox"), dict):
            found.add(outputs["sandbox"]["provider"])
    return found


@contextlib.contextmanager
def services_stopped_after(clone: fresh_clone.FreshClone, env: dict[str, str]) -> Iterator[None]:
    """The server, gateway and background worker the commands start in the state dir of `env`, stopped at the end."""
    try:
        yield
    finally:
        clone.run("server", "stop", env=env)
        clone.run("gateway", "stop", env=env)


def run_every_bundle(clone: fresh_clone.FreshClone, env: dict[str, str], provider: str) -> None:
    names = listed(clone, env)
    assert names == RUN_WITHOUT_A_MODEL | NEED_A_MODEL, "a new bundle: say here whether it needs a model"
    for name in sorted(RUN_WITHOUT_A_MODEL):
        done = clone.run("run", name, "--json", env=env, timeout=600)
        assert done.returncode == 0, f"agent-env run {name}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        record = json.loads(done.stdout)
        assert record["status"] == "passed", f"{name}: {record['error']}"
        assert providers(record) == ({provider} if name in SANDBOXED else set()), name
        assert "Traceback" not in done.stderr, done.stderr


def test_every_bundle_runs_from_a_fresh_clone_without_docker(clone, tmp_path):
    env = user_env(tmp_path / "home", DOCKER_HOST=NO_DOCKER)
    with services_stopped_after(clone, env):
        run_every_bundle(clone, env, "local")
        for name in sorted(NEED_A_MODEL):  # no model is configured in a fresh clone: refused before it starts
            done = clone.run("run", name, env=env)
            assert done.returncode == 2, f"agent-env run {name}:\n{done.stdout}\n{done.stderr}"
            assert "no model endpoint is configured" in done.stderr and "agent-env models fake" in done.stderr, name


def test_every_bundle_runs_from_a_fresh_clone_with_docker(clone, tmp_path, docker_client):  # noqa: F811
    env = user_env(tmp_path / "home")
    with services_stopped_after(clone, env):
        run_every_bundle(clone, env, "docker")
