"""Who is calling the gateway (an agent of an instance, or the run as a role), what one caller may hold at once,
and the gateway's refusals (`GatewayError`: an HTTP status and a message naming the fix)."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_env.gateway.env_instance import EnvInstance


class GatewayError(Exception):
    """A refusal with an HTTP status: the message says what is wrong and what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Caller:
    """An agent of an instance; `as_role` is for the run's own setup calls, made as a role."""

    __slots__ = ("instance", "agent", "as_role")

    def __init__(self, instance: EnvInstance, agent: str, as_role: str | None = None) -> None:
        self.instance, self.agent, self.as_role = instance, agent, as_role

    @property
    def role(self) -> str:
        return self.as_role or self.instance.role_of(self.agent)

    @property
    def key(self) -> tuple[str, str]:
        """Whose limits a request counts against: one agent of one instance (one role token)."""
        return self.instance.spec.id, self.agent


CallerKey = tuple[str, str]


class CallerLimits:
    """What one caller may hold at once, so that no agent can use up what all agents share
    (docs/architecture.md §5): tool calls in flight, MCP sessions open, MCP requests open (streams included).
    Beyond a limit the caller is refused with 429; other callers never notice. `on_refusal(via)` hears of each
    429 (`via`: the transport of a refused tool call, else None)."""

    def __init__(self, calls: int, sessions: int, requests: int) -> None:
        self.calls, self.sessions, self.requests = calls, sessions, requests
        self.on_refusal: Callable[[str | None], None] = lambda via: None
        self._calls: Counter[CallerKey] = Counter()
        self._requests: Counter[CallerKey] = Counter()
        self._opening: Counter[CallerKey] = Counter()  # session-opening requests not answered yet
        self._sessions: dict[CallerKey, set[str]] = {}

    @staticmethod
    def _who(key: CallerKey) -> str:
        return f"agent {key[1]!r} of instance {key[0]!r}"

    @contextlib.contextmanager
    def _hold(
        self, counts: Counter[CallerKey], key: CallerKey, limit: int, refusal: str, via: str | None = None
    ) -> Iterator[None]:
        if counts[key] >= limit:
            self.on_refusal(via)
            raise GatewayError(429, refusal)
        counts[key] += 1
        try:
            yield
        finally:
            counts[key] -= 1
            if not counts[key]:
                del counts[key]

    def calling(self, key: CallerKey, via: str) -> contextlib.AbstractContextManager[None]:
        return self._hold(
            self._calls,
            key,
            self.calls,
            f"{self._who(key)} already has {self.calls} tool calls in flight (the most one agent "
            "may have); wait for one to finish, then call again",
            via,
        )

    def requesting(self, key: CallerKey) -> contextlib.AbstractContextManager[None]:
        return self._hold(
            self._requests,
            key,
            self.requests,
            f"{self._who(key)} already has {self.requests} MCP requests open (the most one agent "
            "may have); close streams you no longer read, then retry",
        )

    def open_sessions(self, key: CallerKey, alive: Callable[[str], bool]) -> int:
        ids = {sid for sid in self._sessions.get(key, ()) if alive(sid)}  # ended sessions drop out here
        if ids:
            self._sessions[key] = ids
        else:
            self._sessions.pop(key, None)
        return len(ids) + self._opening[key]

    def forget(self, instance_id: str) -> set[str]:
        """Drop the instance's agents from the session table; returns the ids of their sessions."""
        ids: set[str] = set()
        for key in [k for k in self._sessions if k[0] == instance_id]:
            ids |= self._sessions.pop(key)
        return ids

    @contextlib.contextmanager
    def opening(self, key: CallerKey, alive: Callable[[str], bool]) -> Iterator[Callable[[str], None]]:
        """Admit a request that opens an MCP session; it calls the yielded function with the new session's id."""
        if self.open_sessions(key, alive) >= self.sessions:
            self.on_refusal(None)
            raise GatewayError(
                429,
                f"{self._who(key)} already has {self.sessions} MCP sessions open (the most one "
                "agent may have); end sessions you no longer use (HTTP DELETE with their "
                "mcp-session-id) or reuse one",
            )
        with self._hold(self._opening, key, self.sessions, "too many MCP sessions opening at once"):
            yield lambda sid: self._sessions.setdefault(key, set()).add(sid)
