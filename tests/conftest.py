"""Shared fixtures: one real Temporal dev server (embedded, on free ports) for the session.

The test step plugin in tests/plugins is put on sys.path (and PYTHONPATH, for subprocesses) so it is
found through the real `agentenv.steps` entry-point group.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile
from pathlib import Path

import pytest

PLUGINS = Path(__file__).parent / "plugins"
sys.path.insert(0, str(PLUGINS))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))

# Every test of this session uses its own state directory and server ports, never the user's.
_SESSION_HOME = Path(tempfile.mkdtemp(prefix="agentenv-tests-"))
os.environ["AGENTENV_HOME"] = str(_SESSION_HOME / "home")
for var in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "AGENTENV_CONFIG", "AGENTENV_TASK_QUEUE"):
    os.environ.pop(var, None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


os.environ["AGENTENV_SERVER_PORT"] = str(free_port())
os.environ["AGENTENV_UI_PORT"] = str(free_port())
os.environ["AGENTENV_GATEWAY_PORT"] = str(free_port())
for var in ("AGENTENV_GATEWAY_URL", "AGENTENV_GATEWAY_TOKEN"):
    os.environ.pop(var, None)


@pytest.fixture(scope="session")
def settings():
    from agentenv.config import load_settings

    return load_settings(Path(tempfile.gettempdir()))


@pytest.fixture(scope="session")
def server(settings):
    from agentenv.gateway import daemon as gateway
    from agentenv.temporal import server as embedded

    info = embedded.start(settings)
    yield info
    embedded.stop(settings)
    gateway.stop(settings)  # started on demand by the first environment step


@pytest.fixture(scope="session")
async def client(settings, server):
    from agentenv.temporal.client import connect

    return await connect(settings)


@pytest.fixture(scope="session")
async def worker(client, settings):
    """An in-process worker for the whole session."""
    from agentenv.temporal.worker import create_worker

    w = create_worker(client, settings)
    task = asyncio.create_task(w.run())
    yield w
    task.cancel()


@pytest.fixture
def run_task(client, settings, worker):
    """Run a task (a dict as it would be written in TOML) to completion and return its final state."""
    from agentenv import runner
    from agentenv.spec.loader import parse_task

    async def run(task: dict, timeout: float = 60):
        spec = parse_task(task, "test task")
        handle = await runner.start_run(client, settings, spec)
        return await asyncio.wait_for(runner.wait_result(handle), timeout)

    return run


# temporalio can abort the interpreter at exit (exit 134) after a fully successful session.
# Leave with pytest's own verdict before interpreter teardown can turn green into red.
_session = None


def pytest_sessionfinish(session, exitstatus):
    global _session
    _session = session


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if _session is not None and "temporalio" in sys.modules:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(_session.exitstatus))
