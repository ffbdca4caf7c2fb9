"""Cold, `agent-env run` waits longest for the embedded server and the background worker (the worker's imports
alone take ~0.65 s of CPU), so they start first: `begin` starts both before the run is even planned, and
`follow.prepare` waits for them. Nothing here imports temporalio or the run's specs. The gateway starts later,
once the plan says a step deploys an environment: started beside these, it took CPU the worker needed (2 cores:
cold `run hello` 2.0-2.35 s instead of 1.8-1.9 s).

The start-ups run in daemon threads: a command that stops early (a task that does not validate) does not wait
for them, and what they started keeps running for the next commands, as it would after the run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_env.temporal import background
from agent_env.temporal_client import server

if TYPE_CHECKING:
    from agent_env.config import Settings

BUILTIN_BUNDLES = Path(__file__).parent.parent / "bundles"  # (agent_env.bundles itself takes ~0.2 s to import)


@dataclass(frozen=True)
class BringUp:
    """The embedded server's and the background worker's start-ups under way (None: not this install's to
    start, a configured cluster)."""

    server: Future[Any] | None = None
    worker: Future[Any] | None = None


def begin(settings: Settings, install: Settings, note: Callable[[str], None]) -> BringUp:
    """Start the embedded server and the background worker (`install`: the settings it runs with); the worker
    waits for the server while it is being started."""
    if not settings.embedded:
        return BringUp()
    return BringUp(aside(server.ensure, settings, on_notice=note), aside(background.ensure, install, on_notice=note))


def names_a_local_task(target: str) -> bool:
    """Whether `target` is a file or folder here or a built-in bundle's name (a few stats): the start-ups begin
    early for these only, so a mistyped name starts nothing."""
    return Path(target).expanduser().exists() or (BUILTIN_BUNDLES / target / "tasks").is_dir()


def aside(fn: Callable[..., object], *args: Any, **kwargs: Any) -> Future[Any]:
    """`fn(*args, **kwargs)` in a daemon thread: unlike an executor's, nothing waits for it at exit."""
    done: Future[Any] = Future()

    def work() -> None:
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as e:  # handed to whoever waits for it
            done.set_exception(e)

    threading.Thread(target=work, daemon=True, name=f"start-{getattr(fn, '__name__', 'up')}").start()
    return done
