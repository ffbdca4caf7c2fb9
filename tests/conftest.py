"""Shared fixtures: one real Temporal dev server (embedded, on free ports) for the session.

The test step plugin in tests/plugins is put on sys.path (and PYTHONPATH, for subprocesses) so it is
found through the real `agent_env.steps` entry-point group.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path

import pytest

PLUGINS = Path(__file__).parent / "plugins"
sys.path.insert(0, str(PLUGINS))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))

# Ctrl-C is live in this session and in the commands it starts, as at a terminal: a suite started in the background
# (`nohup ... &` from a script) inherits SIGINT ignored, children keep it ignored across exec, and a Python started
# that way installs no KeyboardInterrupt handler, so a test interrupting `agent-env run` would wait forever.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Every test of this session uses its own state directory and server ports, never the user's.
_SESSION_HOME = Path(tempfile.mkdtemp(prefix="agentenv-tests-"))
os.environ["AGENT_ENV_HOME"] = str(_SESSION_HOME / "home")
for var in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "AGENT_ENV_CONFIG", "AGENT_ENV_TASK_QUEUE"):
    os.environ.pop(var, None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_naming(*parts: bytes) -> list[int]:
    """Pids of live processes whose command line holds every one of `parts` (from /proc, as `ps` would list them)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
                state = (proc / "stat").read_text().split(") ", 1)[1][0]
            except (OSError, IndexError):
                continue
            if state != "Z" and all(part in cmdline for part in parts):
                found.append(int(proc.name))
    return found


def plan_key_of(settings) -> dict[str, str]:
    """The environment that gives another install (a worker or gateway in its own state dir) the plan key of
    `settings`' install, as a shared secret, as a team shares one: what one plans, the other then executes."""
    from agent_env.temporal_client import seals

    return {
        "AGENT_ENV_PLAN_KEY_SECRET": "shared-plan-key",
        "AGENT_ENV_SECRET_SHARED_PLAN_KEY": seals.load(settings).secret.hex(),
    }


os.environ["AGENT_ENV_SERVER_PORT"] = str(free_port())
os.environ["AGENT_ENV_UI_PORT"] = str(free_port())
os.environ["AGENT_ENV_GATEWAY_PORT"] = str(free_port())
for var in ("AGENT_ENV_GATEWAY_URL", "AGENT_ENV_GATEWAY_TOKEN"):
    os.environ.pop(var, None)

# Model-driven agents and judges talk to a local fake OpenAI-compatible server (no network here), with
# an API key held as a secret reference, as a real endpoint would be configured.
FAKE_MODEL_PORT = free_port()
FAKE_MODEL_KEY = "sk-test-" + os.urandom(4).hex()
os.environ["AGENT_ENV_MODEL_BASE_URL"] = f"http://127.0.0.1:{FAKE_MODEL_PORT}/v1"
os.environ["AGENT_ENV_MODEL"] = "fake"
os.environ["AGENT_ENV_MODEL_API_KEY"] = "secret:test-model"
os.environ["AGENT_ENV_SECRET_TEST_MODEL"] = FAKE_MODEL_KEY
TEST_SCRIPTS = Path(__file__).parent / "fake_scripts.json"


@pytest.fixture(scope="session", autouse=True)
def fake_model():
    """The fake model server, in a thread, for the whole session (agents in the gateway call it too)."""
    import threading

    import uvicorn

    from agent_env.agents.fake_model import builtin_scripts, create_app, load_scripts

    scripts = {**builtin_scripts(), **load_scripts([TEST_SCRIPTS])}
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(scripts, api_key=FAKE_MODEL_KEY), host="127.0.0.1", port=FAKE_MODEL_PORT, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the fake model server did not start"
        threading.Event().wait(0.01)
    yield f"http://127.0.0.1:{FAKE_MODEL_PORT}/v1"
    server.should_exit = True
    thread.join(5)


@pytest.fixture(scope="session")
def settings():
    from agent_env.config import load_settings

    return load_settings(Path(tempfile.gettempdir()))


@pytest.fixture(scope="session")
def server(settings):
    from agent_env.gateway import embedded as gateway
    from agent_env.temporal import background
    from agent_env.temporal_client import server as embedded

    info = embedded.start(settings)
    yield info
    background.stop_all(settings)  # its background workers first, as `agent-env server stop` does
    embedded.stop(settings)
    gateway.stop(settings)  # started on demand by the first environment step


@pytest.fixture(scope="session")
async def client(settings, server):
    from agent_env.temporal_client.client import connect

    return await connect(settings)


@pytest.fixture(scope="session")
async def worker(client, settings):
    """An in-process worker for the whole session."""
    from agent_env.temporal.worker import create_worker

    w = create_worker(client, settings)
    task = asyncio.create_task(w.run())
    yield w
    task.cancel()


@pytest.fixture
def run_task(client, settings, worker):
    """Run a task (a dict as it would be written in TOML) to completion and return its final state."""
    from agent_env.planning.tasks import parse_task
    from agent_env.temporal import launch

    async def run(task: dict, timeout: float = 60):
        spec = parse_task(task, "test task")
        handle = await launch.start_run(client, settings, spec)
        return await asyncio.wait_for(launch.wait_result(handle), timeout)

    return run


# The unit tier (`./scripts/test -m unit`, well under 30 s): tests that start no Temporal server, daemon,
# worker, subprocess or container. Derived from the fixtures a test uses and the modules that run real
# processes throughout, so no test is labelled by hand.
_SERVICE_FIXTURES = {"server", "client", "worker", "run_task", "docker_client", "provider"}
_PROCESS_MODULES = {
    "test_cli",
    "test_cli_agents",
    "test_durability",
    "test_server",
    "test_docker",
    "test_smol_vm",  # (boots microVMs)
    "test_gateway_lifecycle",
    "test_security_state",
    "test_security_envservers",
    "test_sandboxes",
    "test_providers_cloud",
    "test_fuzz",
    "test_env_serve",
    "test_lint",  # ruff and mypy run as subprocesses
}


def pytest_collection_modifyitems(config, items):
    _deselect_live_tests_without_credentials(config, items)
    for item in items:
        module = item.module.__name__ if item.module else ""
        if (
            not (_SERVICE_FIXTURES & set(item.fixturenames))
            and module not in _PROCESS_MODULES
            and not item.get_closest_marker("durability")
            and not item.get_closest_marker("slow")
            and not item.get_closest_marker("processes")
        ):
            item.add_marker(pytest.mark.unit)


def _deselect_live_tests_without_credentials(config, items):
    """Tests against a real cloud (`@pytest.mark.live("VAR", ...)`) run where its credentials are set; elsewhere
    they are deselected, not skipped, and the run says which and why (no cloud is reachable from CI here)."""
    missing: dict[str, list[str]] = {}
    for item in items:
        marker = item.get_closest_marker("live")
        if marker is not None and not all(os.environ.get(var) for var in marker.args):
            missing.setdefault(" and ".join(marker.args), []).append(item)
    if not missing:
        return
    gone = [item for found in missing.values() for item in found]
    config.hook.pytest_deselected(items=gone)
    items[:] = [item for item in items if item not in gone]
    for needs, found in missing.items():
        sys.stderr.write(f"\n{len(found)} live cloud test(s) deselected: they need {needs} set\n")


# temporalio can abort the interpreter at exit (exit 134) after a fully successful session.
# Leave with pytest's own verdict before interpreter teardown can turn green into red.
_session = None


def pytest_sessionfinish(session, exitstatus):
    global _session
    _session = session


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    # The session's state dir (a Temporal server's database, daemons' logs: up to ~300 MB) goes with a green
    # session; a red one keeps it for its logs and says where.
    if _session is not None and _session.exitstatus == 0:
        import shutil

        shutil.rmtree(_SESSION_HOME, ignore_errors=True)
    elif _SESSION_HOME.exists():
        sys.stderr.write(f"\nthis session's state dir (its daemons' logs) is kept: {_SESSION_HOME}\n")
    if _session is not None and "temporalio" in sys.modules:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(_session.exitstatus))
