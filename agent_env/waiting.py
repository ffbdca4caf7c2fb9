"""Waiting until something comes up (a port opens, a URL answers, a server accepts clients): one loop.

Every wait has a deadline, an interval between tries, a name for what it waits for, and an early way
out (`check`: raise when waiting cannot succeed any more, e.g. the process exited). Past the deadline
it raises `TimedOut`, naming what did not come up and the last error its probe saw; callers turn that
into their own message with the fix. The probe is always tried at least once, even with no time at all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class TimedOut(TimeoutError):
    """`what` did not come up within `timeout` seconds; `last` is the probe's last error (None: it answered,
    but not yet with a result)."""

    def __init__(self, what: str, timeout: float, last: BaseException | None) -> None:
        seen = f" (last error: {type(last).__name__}: {last})" if last is not None else ""
        super().__init__(f"{what} did not come up within {timeout:g}s{seen}")
        self.what, self.timeout, self.last = what, timeout, last


Errors = tuple[type[BaseException], ...]


async def until(
    probe: Callable[[], Awaitable[T | None]],
    *,
    what: str,
    timeout: float,
    interval: float,
    retry_on: Errors = (Exception,),
    give_up_on: Errors = (),
    check: Callable[[], Awaitable[None]] | None = None,
) -> T:
    """Call `probe` until it returns something other than None, and return that. A probe raising one of
    `retry_on` (and not of `give_up_on`) has not come up yet; after each miss `check` may raise to stop."""
    deadline = time.monotonic() + timeout
    while True:
        last: BaseException | None = None
        try:
            result = await probe()
            if result is not None:
                return result
        except give_up_on:
            raise
        except retry_on as e:
            last = e
        if check is not None:
            await check()
        if time.monotonic() > deadline:
            raise TimedOut(what, timeout, last)
        await asyncio.sleep(interval)


def until_sync(
    probe: Callable[[], T | None],
    *,
    what: str,
    timeout: float,
    interval: float,
    retry_on: Errors = (Exception,),
    give_up_on: Errors = (),
    check: Callable[[], None] | None = None,
) -> T:
    """`until` for code without an event loop (daemons started from the CLI)."""
    deadline = time.monotonic() + timeout
    while True:
        last: BaseException | None = None
        try:
            result = probe()
            if result is not None:
                return result
        except give_up_on:
            raise
        except retry_on as e:
            last = e
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise TimedOut(what, timeout, last)
        time.sleep(interval)
