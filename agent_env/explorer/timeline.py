"""The world's timeline in virtual time, from the run's world log (`RunState.world.events`).

The log is what the workflow recorded: clock changes, trigger firings (with their match), each action's
outcome (what a call returned, what a persona said when instructed), registrations and cancellations. The
explorer names each entry's kind for the page: `clock`, `trigger` (a firing), `action`, `persona` (an
action played by a persona: an instruction, or a call made as one), `rules` (triggers registered or
cancelled), `ended`, `ignored`. The log is bounded across continue-as-new: what was dropped is counted.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from pydantic import BaseModel, Field

from agent_env.spec.world_state import WorldEvent

MAX_PAGE = 500
Kind = Literal["clock", "trigger", "action", "persona", "rules", "ended", "ignored"]


class WorldQuery(BaseModel):
    kind: Kind | None = None
    offset: int = Field(0, ge=0)
    limit: int = Field(100, ge=1, le=MAX_PAGE)


def kind_of(event: WorldEvent, personas: frozenset[str]) -> str:
    if event.kind == "fired":
        return "trigger"
    if event.kind in ("registered", "cancelled"):
        return "rules"
    if event.kind == "action" and (event.detail.get("type") == "instruct" or event.detail.get("agent") in personas):
        return "persona"
    return event.kind


def summary(event: WorldEvent, kind: str) -> str:
    """One line saying what happened, as `runs show` words it."""
    d = event.detail
    if kind == "trigger":
        match = d.get("match") or {}
        who = f" ({match.get('agent')} called {match['tool']})" if "tool" in match else ""
        return f"{event.trigger} fired{who}"
    if kind in ("action", "persona"):
        target = d.get("tool") or d.get("role") or d.get("type")
        outcome = f"error: {d['error']}" if "error" in d else "ok"
        return f"{d.get('type')} {target}" + (f" as {d['agent']}" if d.get("agent") else "") + f": {outcome}"
    if kind == "clock":
        return f"clock {d.get('mode')}" + (f" ×{d['rate']:g}" if d.get("mode") == "paced" else "")
    if kind == "rules":
        return f"{event.kind} {', '.join(d.get('triggers', []))}"
    return f"{event.kind} {d.get('reason', '')}".strip()


class Entry(TypedDict):
    """An event of the world's log as the page shows it."""

    seq: int
    virtual_time: str
    kind: str
    logged_as: str
    trigger: str | None
    firing: Any
    summary: str
    detail: Any


class Timeline(TypedDict):
    """`GET /api/runs/{run}/world`: a page of the log; `dropped` (what the run let go) is added by the server."""

    total: int
    offset: int
    limit: int
    events: list[Entry]
    dropped: NotRequired[Any]


def timeline(
    events: list[WorldEvent], personas: frozenset[str], *, kind: str | None, offset: int, limit: int
) -> Timeline:
    """A page of the log in order, each entry with its virtual time, kind, one-line summary and detail."""
    entries = [(e, kind_of(e, personas)) for e in events]
    if kind:
        entries = [(e, k) for e, k in entries if k == kind]
    page = entries[offset : offset + limit]
    return {
        "total": len(entries),
        "offset": offset,
        "limit": limit,
        "events": [
            {
                "seq": e.seq,
                "virtual_time": e.virtual_time.isoformat(),
                "kind": k,
                "logged_as": e.kind,
                "trigger": e.trigger,
                "firing": e.firing,
                "summary": summary(e, k),
                "detail": e.detail,
            }
            for e, k in page
        ],
    }


def personas_of(plan: dict[str, Any] | None) -> frozenset[str]:
    """The personas a run's plan declares (its world), by the agent names they act as."""
    world = (plan or {}).get("world") or {}
    names = set()
    for name, persona in (world.get("personas") or {}).items():
        names.add(name)
        if isinstance(persona, dict) and persona.get("agent"):
            names.add(persona["agent"])
    return frozenset(names)
