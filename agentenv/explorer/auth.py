"""Who gets in: only the person who started the explorer.

`agent-env up` prints a one-time link (`/login?code=...`). Opening it trades the code for a session
cookie (HttpOnly, SameSite=Strict) and the code is gone: it works once, and only for a few minutes, so a
link left in a terminal's scrollback or a shell history is worth nothing later. The gateway's admin
token stays inside the server process: it never appears in a URL, a page or a log.

Codes and sessions are kept as hashes, so a lookup reveals nothing by its timing.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

COOKIE = "agentenv_explorer"
CODE_TTL = 300.0  # seconds a one-time code is good for
SESSION_TTL = 12 * 3600.0  # seconds a session lasts (the explorer runs in the foreground; this bounds a lost cookie)
MAX_SESSIONS = 32  # the oldest is forgotten beyond this
MAX_CODES = 8


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


class Door:
    """One-time login codes and the sessions they open. `clock`: monotonic seconds (tests move it)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._codes: OrderedDict[str, float] = OrderedDict()  # hash -> expires at
        self._sessions: OrderedDict[str, float] = OrderedDict()  # hash -> expires at

    def new_code(self) -> str:
        """A fresh one-time code (older unused codes stay valid until they expire)."""
        code = secrets.token_urlsafe(24)
        self._codes[_digest(code)] = self._clock() + CODE_TTL
        while len(self._codes) > MAX_CODES:
            self._codes.popitem(last=False)
        return code

    def redeem(self, code: str | None) -> str | None:
        """A new session for a valid, unused, unexpired code (which is used up); None otherwise."""
        if not code:
            return None
        expires = self._codes.pop(_digest(code), None)
        if expires is None or expires < self._clock():
            return None
        session = secrets.token_urlsafe(32)
        self._sessions[_digest(session)] = self._clock() + SESSION_TTL
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return session

    def admits(self, session: str | None) -> bool:
        if not session:
            return False
        expires = self._sessions.get(_digest(session))
        return expires is not None and expires >= self._clock()

    def cookie_header(self, session: str) -> str:
        """The Set-Cookie value of a session: script cannot read it, other sites' pages never send it."""
        return f"{COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict; Max-Age={int(SESSION_TTL)}"
