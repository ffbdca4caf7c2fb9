"""Run a command's coroutine without tearing its event loop down afterwards.

`asyncio.run` cancels and awaits every leftover task at the end, which for an in-process Temporal
worker means a shutdown of a second or more after the work is done. The CLI exits right after its
command (see `agent_env.cli.main`), so the loop is simply left behind. Ctrl-C cancels the command's
own task, which decides what to say and return; one that lets it through ends the CLI as interrupted.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    main = loop.create_task(coro)
    loop.add_signal_handler(signal.SIGINT, main.cancel)
    try:
        return loop.run_until_complete(main)
    except asyncio.CancelledError:  # Ctrl-C reached a command that does not handle it: the CLI says so, exits 130
        raise KeyboardInterrupt from None
    finally:
        # The loop is left behind, its Ctrl-C handler must not be: code after it (following a run over the
        # background worker's socket) blocks outside any loop, where only KeyboardInterrupt can stop it.
        loop.remove_signal_handler(signal.SIGINT)
