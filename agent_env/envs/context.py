"""What a tool call knows about its caller: role, run, agent, instance, and the virtual now.

The gateway stamps these into the MCP request's `_meta`; apps read them from `ctx`, never from the
host clock or from client-sent headers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent_env.spec.times import iso

# `agentenv.io/role` and `agentenv.io/session` are the open agent-env protocol's own keys, so servers
# written for it see the caller's role behind our gateway; the others are ours.
META_ROLE = "agentenv.io/role"
META_SESSION = "agentenv.io/session"
META_NOW = "agentenv.io/now"
META_RUN = "agentenv.io/run"
META_AGENT = "agentenv.io/agent"
META_INSTANCE = "agentenv.io/instance"
META_IDEMPOTENCY_KEY = "agentenv.io/idempotency-key"


@dataclass(frozen=True)
class Ctx:
    role: str | None = None
    run_id: str | None = None
    agent: str | None = None
    instance: str | None = None
    virtual_now: datetime | None = None
    idempotency_key: str | None = None
    # who makes the call, as the gateway knows it (role, tool, trigger action): what the app's changelog records
    # for the rows the call writes (changelog.py). The gateway's own; never sent to an app over the network.
    actor: Mapping[str, object] | None = None

    def now(self) -> datetime:
        """The world's time for this call (timezone-aware UTC)."""
        if self.virtual_now is None:
            raise RuntimeError("this call carries no virtual time: it did not come through a clock-stamping server")
        return self.virtual_now

    def now_iso(self) -> str:
        return iso(self.now())

    def to_meta(self) -> dict[str, Any]:
        meta = {
            META_ROLE: self.role,
            META_RUN: self.run_id,
            META_AGENT: self.agent,
            META_INSTANCE: self.instance,
            META_NOW: self.virtual_now.isoformat() if self.virtual_now else None,
            META_IDEMPOTENCY_KEY: self.idempotency_key,
        }
        return {k: v for k, v in meta.items() if v is not None}

    @classmethod
    def from_meta(cls, meta: dict[str, Any] | None, *, default_now: datetime | None = None) -> Ctx:
        meta = meta or {}
        now = meta.get(META_NOW)
        parsed = datetime.fromisoformat(now.replace("Z", "+00:00")) if isinstance(now, str) else default_now
        if parsed is not None:  # always UTC, so ISO strings written by apps sort in time order
            parsed = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)

        def text(key: str) -> str | None:
            value = meta.get(key)
            return value if isinstance(value, str) else None

        return cls(
            role=text(META_ROLE),
            run_id=text(META_RUN),
            agent=text(META_AGENT),
            instance=text(META_INSTANCE),
            virtual_now=parsed,
            idempotency_key=text(META_IDEMPOTENCY_KEY),
        )
