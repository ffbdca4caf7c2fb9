"""The world while a run lives: clock state, trigger status, scheduled events, the event log, and the
messages between the run and the gateway. Pure models: the workflow and the gateway both use them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent_env.spec.world import PersonaSpec, TriggerSpec


class ClockState(BaseModel):
    """now(real) = min(horizon, virtual_anchor + (min(real, lease_until) - real_anchor) * rate).

    The clock never passes `horizon` (the next event that has not fired) and stops at `lease_until`
    (the run was last seen alive until then), so a dead worker costs no virtual time.
    """

    mode: Literal["frozen", "paced", "event_driven"]
    virtual_anchor: datetime
    real_anchor: datetime
    rate: float = 0.0
    running: bool = True  # a paced clock starts with the task's first world step: setup takes no world time
    horizon: datetime | None = None
    lease_until: datetime | None = None
    zone: str | None = None

    def now(self, real: datetime) -> datetime:
        if self.rate == 0 or not self.running:
            value = self.virtual_anchor
        else:
            until = min(real, self.lease_until) if self.lease_until else real
            value = self.virtual_anchor + max(until - self.real_anchor, timedelta(0)) * self.rate
        return min(value, self.horizon) if self.horizon is not None else value


class TriggerStatus(BaseModel):
    id: str
    registered: bool = False
    fires: int = 0
    done: bool = False  # cancelled, exhausted, or past `until`
    next_at: datetime | None = None  # time triggers: when it fires next


class Scheduled(BaseModel):
    """Something due at a virtual time: a time trigger's firing, a delayed action, or a waiting step."""

    at: datetime
    seq: int
    kind: Literal["trigger", "action", "wake"]
    trigger: str | None = None
    firing: int | None = None  # the event seq of the firing a delayed action belongs to
    action: int | None = None
    match: dict[str, Any] | None = None
    step: str | None = None


class WorldEvent(BaseModel):
    """One line of the world's log: a firing, an action's outcome, a clock change, a registration."""

    seq: int
    virtual_time: datetime
    kind: Literal["fired", "action", "clock", "registered", "cancelled", "ended", "ignored"]
    trigger: str | None = None
    firing: int | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class WorldSpec(BaseModel):
    """What a run declares about its world (from the task), carried in the workflow's input."""

    seed: int = 0
    clock: dict[str, Any] | None = None  # a ClockSpec, as JSON
    triggers: list[TriggerSpec] = Field(default_factory=list)
    personas: dict[str, PersonaSpec] = Field(default_factory=dict)


class Awaiting(BaseModel):
    """A register_env_triggers step holding until its `triggers` have each fired, or `deadline` (real time)."""

    triggers: list[str]
    deadline: datetime
    registered: list[str] = Field(default_factory=list)  # the step's outputs once it ends


class WorldState(BaseModel):
    clock: ClockState | None = None
    triggers: dict[str, TriggerStatus] = Field(default_factory=dict)
    queue: list[Scheduled] = Field(default_factory=list)
    events: list[WorldEvent] = Field(default_factory=list)
    instances: dict[str, str] = Field(default_factory=dict, description="deploy step id -> instance id")
    next_seq: int = 1
    awaiting: dict[str, Awaiting] = Field(default_factory=dict, description="step id -> what it waits to fire")
    ended: str | None = None
    dropped: dict[str, int] = Field(
        default_factory=dict,
        description="events dropped from the log, by kind (the log keeps the latest; it is bounded)",
    )

    def count(self, kind: str) -> int:
        """Events of `kind` in the run so far, dropped ones included."""
        return self.dropped.get(kind, 0) + sum(1 for e in self.events if e.kind == kind)

    def trim_events(self, keep: int) -> int:
        """Keep the latest `keep` events, counting the others by kind. Returns how many were dropped."""
        drop = len(self.events) - keep
        if drop <= 0:
            return 0
        for event in self.events[:drop]:
            self.dropped[event.kind] = self.dropped.get(event.kind, 0) + 1
        del self.events[:drop]
        return drop


MAX_HIT_BYTES = 64 * 1024  # a hit's JSON, `match` included: what an agent's call may add to a run's history
MAX_ID_CHARS = 256  # a trigger or instance id in a hit
MAX_FIELD_BYTES = 4096  # a field of a match (arguments, result...) or of an action's outcome, in history


def json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode())


def clip(value: Any, limit: int = MAX_FIELD_BYTES) -> Any:
    """`value` if its JSON fits in `limit` bytes; else a copy that does, for history: long strings and lists
    cut short (saying how long they were), keeping the shape so `${match.arguments.key}` still resolves.
    Agents' calls carry whatever they like; Temporal refuses payloads over 2 MB."""
    size = json_size(value)
    if size <= limit:
        return value
    clipped = _shrink(value, limit)
    if json_size(clipped) <= limit:
        return clipped
    text = json.dumps(value, ensure_ascii=False, default=str)
    return {"clipped": True, "bytes": size, "preview": _cut(text, limit // 2)}


def clip_fields(value: dict[str, Any], limit: int = MAX_FIELD_BYTES) -> dict[str, Any]:
    """Each field of a dict (a match, an action's outcome) clipped on its own."""
    return {k: clip(v, limit) for k, v in value.items()}


def _shrink(value: Any, budget: int) -> Any:
    budget = max(budget, 64)
    if isinstance(value, str):
        size = len(value.encode())
        return value if size <= budget else f"{_cut(value, budget - 48)}... [clipped: {size} bytes]"
    if isinstance(value, list):
        share = budget // max(min(len(value), 16), 1)
        out = [_shrink(item, share) for item in value[:16]]
        return out + ([f"... [clipped: {len(value) - 16} more items]"] if len(value) > 16 else [])
    if isinstance(value, dict):
        keys = list(value)[:32]
        share = budget // max(len(keys), 1)
        kept = {k[:64]: _shrink(value[k], share) for k in keys}
        if len(value) > 32:
            kept["..."] = f"[clipped: {len(value) - 32} more keys]"
        return kept
    return value


def _cut(text: str, limit: int) -> str:
    return text.encode()[: max(limit, 0)].decode(errors="ignore")


class TriggerHit(BaseModel):
    """A condition the gateway saw come true. `match` is the call (agent, role, tool, arguments, result or
    error) or the state value that matched. Bounds are checked by the run's update validator (MAX_*), not
    here: a model that refused them would also refuse, on replay, hits already in a history."""

    trigger: str
    instance: str
    virtual_time: datetime
    match: dict[str, Any] = Field(default_factory=dict)


class HitAck(BaseModel):
    accepted: bool
    reason: str = ""
    firing: int | None = None


class Watch(BaseModel):
    """A condition the gateway watches for the run, on one instance."""

    trigger: str
    kind: Literal["tool_call", "state"]
    spec: dict[str, Any]  # a ToolCallWhen / CallMatch / StateWhen as JSON (persona conditions arrive compiled)
    barrier_s: float | None = None


class WorldPush(BaseModel):
    """What the run tells an instance's gateway: its clock and the conditions to watch."""

    run_id: str
    clock: ClockState | None = None
    watches: list[Watch] = Field(default_factory=list)
