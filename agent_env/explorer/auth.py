"""Who gets in: only the person who started the explorer, and only through its own page.

`agent-env up` prints a one-time link (`/login?code=...`). Opening it trades the code for a session: it
works once, and only for a few minutes, so a link left in a terminal's scrollback or a shell history is
worth nothing later. A session is two secrets, and every API request needs both:

- a cookie (HttpOnly, SameSite=Strict): script cannot read it and other sites' pages never send it. But a
  browser scopes cookies by host, not port, so it also goes to every other server on 127.0.0.1, an agent's
  included; on its own it opens nothing.
- a key (`KEY_HEADER`), handed over once, in the sign-in answer's page, which keeps it in the tab's
  `sessionStorage`. Storage is scoped by origin (port included): no other port's page can read it, and
  no cross-origin request can carry a custom header without the preflight the explorer never grants.

A session ends after `IDLE_TTL` without a request, and `SESSION_TTL` after sign-in whatever happens: a new
one-time link is one Enter away in the terminal. The gateway's admin token stays inside the server
process: it never appears in a URL, a page or a log.

Codes, sessions and keys are kept as hashes, so a lookup reveals nothing by its timing; keys are compared
in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "agentenv_explorer"
KEY_HEADER = "x-agentenv-explorer-key"
CODE_TTL = 300.0  # seconds a one-time code is good for
IDLE_TTL = 30 * 60.0  # seconds a session lasts without a request (a visible page asks every few seconds)
SESSION_TTL = 8 * 3600.0  # seconds a session lasts at most (a working day; this bounds a stolen cookie and key)
MAX_SESSIONS = 32  # the oldest is forgotten beyond this
MAX_CODES = 8


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True)
class Pass:
    """What a redeemed code gives: the session (the cookie's value) and its key (the page's header)."""

    session: str
    key: str


@dataclass
class _Session:
    key: bytes  # the key's hash
    opened: float
    seen: float  # the last request it admitted


class Door:
    """One-time login codes and the sessions they open. `clock`: monotonic seconds (tests move it)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._codes: OrderedDict[bytes, float] = OrderedDict()  # hash -> expires at
        self._sessions: OrderedDict[bytes, _Session] = OrderedDict()  # the session's hash -> it

    def new_code(self) -> str:
        """A fresh one-time code (older unused codes stay valid until they expire)."""
        code = secrets.token_urlsafe(24)
        self._codes[_digest(code)] = self._clock() + CODE_TTL
        while len(self._codes) > MAX_CODES:
            self._codes.popitem(last=False)
        return code

    def redeem(self, code: str | None) -> Pass | None:
        """A new session for a valid, unused, unexpired code (which is used up); None otherwise."""
        if not code:
            return None
        expires = self._codes.pop(_digest(code), None)
        now = self._clock()
        if expires is None or expires < now:
            return None
        for digest in [d for d, s in self._sessions.items() if not self._alive(s, now)]:
            del self._sessions[digest]
        granted = Pass(session=secrets.token_urlsafe(32), key=secrets.token_urlsafe(32))
        self._sessions[_digest(granted.session)] = _Session(key=_digest(granted.key), opened=now, seen=now)
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return granted

    def has_session(self, session: str | None) -> bool:
        """Whether the cookie names a live session (enough to be shown the page, which holds no data)."""
        found = self._sessions.get(_digest(session)) if session else None
        return found is not None and self._alive(found, self._clock())

    def admits(self, session: str | None, key: str | None) -> bool:
        """Whether a request with this cookie and this key may read the API (which keeps the session alive)."""
        if not session:
            return False
        digest = _digest(session)
        found = self._sessions.get(digest)
        if found is None:
            return False
        now = self._clock()
        if not self._alive(found, now):
            del self._sessions[digest]
            return False
        # the key's hash against the stored hash, in constant time (no key at all: an empty one, never equal)
        if not hmac.compare_digest(_digest(key or ""), found.key) or not key:
            return False
        found.seen = now
        return True

    def cookie_header(self, session: str) -> str:
        """The Set-Cookie value of a session: script cannot read it, other sites' pages never send it."""
        return f"{COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict; Max-Age={int(SESSION_TTL)}"

    @staticmethod
    def _alive(session: _Session, now: float) -> bool:
        return now - session.seen <= IDLE_TTL and now - session.opened <= SESSION_TTL
