"""What the explorer's API tests (test_explorer.py) and its browser tests (test_explorer_browser.py) share: the two
real runs they look at, executed once a session, a way to serve the explorer on a real port, and signing in as
its page does."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Iterator

import pytest

from agent_env.explorer.auth import COOKIE, KEY_HEADER, Door
from agent_env.spec.run import RunState, RunStatus
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch

_runs: list[tuple[RunState, RunState]] = []  # both modules' fixtures share one pair per session


@pytest.fixture(scope="module")
async def finished_runs(client, settings, worker) -> tuple[RunState, RunState]:
    """A passed workplace run and a refund run that failed because its agent's calls were refused."""
    if not _runs:
        workplace = await launch.wait_result(await launch.start_run(client, settings, resolve_target("workplace")))
        spec = resolve_target("refund")
        {s.id: s for s in spec.steps}["agent"].config["role"] = "support"
        refund = await launch.wait_result(await launch.start_run(client, settings, spec))
        assert workplace.status is RunStatus.PASSED, workplace.error
        assert refund.status is RunStatus.FAILED, refund.error
        _runs.append((workplace, refund))
    return _runs[0]


@contextlib.contextmanager
def serving(app) -> Iterator[str]:
    """`app` served by uvicorn on a free port of 127.0.0.1, in a thread of its own; yields its base URL."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the explorer did not start"
        threading.Event().wait(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def handed_key(page: str) -> str:
    """The key a sign-in answer's page hands its tab (its script keeps it in sessionStorage)."""
    found = re.search(r'<meta name="agentenv-explorer-key" content="([^"]+)">', page)
    assert found, page
    return found.group(1)


async def sign_in(http, door: Door) -> str:
    """Open a fresh one-time link as the page would, and send its key from now on (`http`: an httpx client of
    the explorer); returns the key."""
    answer = await http.get(f"/login?code={door.new_code()}")
    assert answer.status_code == 200 and COOKIE in answer.headers["set-cookie"], answer.text
    key = handed_key(answer.text)
    http.headers[KEY_HEADER] = key
    return key
