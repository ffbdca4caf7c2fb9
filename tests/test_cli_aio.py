"""The CLI's event-loop runner: after a command's coroutine, Ctrl-C still interrupts what the CLI does next."""

import os
import signal
import time

import pytest

from agent_env.cli import aio


async def _answer() -> int:
    return 42


def test_ctrl_c_interrupts_blocking_code_after_a_coroutine_ran():
    """`agent-env run` may run a coroutine, then follow a run over the background worker's socket, blocking outside
    any loop: the loop's Ctrl-C handler (which only cancels its task) must be gone by then, or Ctrl-C does nothing."""
    assert aio.run(_answer()) == 42
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # (interrupted at once; the sleep only stands for the blocking read)
