"""Every tool call of a run: who made it, as which role, with what, what came back, refused or not, at
which virtual and real time.

The source is what `agent-env runs trajectory` reads: each instance's trajectory, from the gateway while it
holds the instance, else the copy kept in the object store when the run ended (`keys.trajectory`). A run
without environments has its calls only in its prompts' transcripts (`keys.transcript`, their
`tool_calls`). A finished run's calls never change, so they are read once and kept (a few runs' worth); a
running run's are read on from where the last read ended (`after`), so a page of a 10,000-call run costs a
slice, not a re-read.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from pydantic import BaseModel, Field

from agent_env.explorer.runs import instances
from agent_env.gateway import trajectory
from agent_env.gateway_client import GatewayRefused, GatewayUnavailable
from agent_env.gateway_client.wire import JsonObject  # trajectory entries: the gateway records their shape
from agent_env.spec.run import RunState
from agent_env.spec.world_state import clip
from agent_env.stores import Stores, keys

if TYPE_CHECKING:
    from agent_env.gateway_client.env_servers import EnvServers

MAX_PAGE = 500  # calls per page, at most
FIELD_BYTES = 2048  # arguments, results and errors in a page; `GET .../calls/N` has the whole entry
KEPT_RUNS = 8  # finished runs whose calls stay in memory


class CallQuery(BaseModel):
    agent: str | None = None
    tool: str | None = None
    refused: bool | None = None
    offset: int = Field(0, ge=0)
    limit: int = Field(100, ge=1, le=MAX_PAGE)


@dataclass
class RunCalls:
    """A run's calls as read so far: per instance its entries (in `seq` order), and all of them merged in
    time order, each numbered (`n`). A dataclass, not a model: 10,000 entries are not validated again."""

    entries: dict[str, list[JsonObject]] = field(default_factory=dict)
    final: bool = False
    unavailable: list[str] = field(default_factory=list)  # instances neither the gateway nor the store had
    merged: list[JsonObject] = field(default_factory=list)


def _ordered(entries: list[JsonObject]) -> list[JsonObject]:
    merged = sorted(entries, key=lambda e: (e.get("real_time", ""), e.get("seq", 0)))
    for n, entry in enumerate(merged):
        entry["n"] = n
    return merged


class CallLog:
    """`gateway`: the client of whatever serves each instance (the install's gateway(s), an instance's own
    server), or None to read only what the stores kept."""

    def __init__(self, stores: Stores, gateway: Callable[[], EnvServers | None]) -> None:
        self.stores = stores
        self.gateway = gateway
        self._runs: OrderedDict[str, RunCalls] = OrderedDict()
        self._lock = asyncio.Lock()

    async def calls(self, state: RunState) -> RunCalls:
        async with self._lock:  # one reader per run at a time: concurrent pages share a read
            kept = self._runs.get(state.run_id)
            if kept is not None and kept.final:
                self._runs.move_to_end(state.run_id)
                return kept
            read = await self._read(state, kept or RunCalls())
            self._runs[state.run_id] = read
            self._runs.move_to_end(state.run_id)
            while len(self._runs) > KEPT_RUNS:
                self._runs.popitem(last=False)
            return read

    async def _read(self, state: RunState, known: RunCalls) -> RunCalls:
        finished = state.status.finished
        read = RunCalls(entries=dict(known.entries), final=finished)
        for instance in instances(state):
            kept_key = keys.trajectory(state.run_id, instance)
            if finished and await asyncio.to_thread(self.stores.objects.exists, kept_key):
                raw = await asyncio.to_thread(self.stores.objects.get, kept_key)
                read.entries[instance] = trajectory.decode_lines(raw)
                continue
            got = await self._from_gateway(instance, read.entries.get(instance, []))
            if got is None:
                read.unavailable.append(instance)
                read.final = False  # try again next time: the gateway may be back
            else:
                read.entries[instance] = got
        if not instances(state):
            read.entries["transcripts"] = await asyncio.to_thread(self._from_transcripts, state)
        read.merged = _ordered([e for found in read.entries.values() for e in found])
        if read.final and (client := self.gateway()) is not None:
            client.forget_run(state.run_id)  # read for good: the explorer keeps no route of a finished run
        return read

    async def _from_gateway(self, instance: str, known: list[JsonObject]) -> list[JsonObject] | None:
        client = self.gateway()
        if client is None:
            return None
        after = known[-1]["seq"] if known else 0
        try:
            return known + await client.trajectory(instance, after)
        except (GatewayRefused, GatewayUnavailable):
            return None

    def _from_transcripts(self, state: RunState) -> list[JsonObject]:
        found: list[JsonObject] = []
        for step in state.steps.values():
            key = step.outputs.get("transcript")
            if isinstance(key, str) and self.stores.objects.exists(key):
                doc = json.loads(self.stores.objects.get(key))
                found += [{**c, "step": step.id} for c in doc.get("tool_calls") or []]
        return found


class CallPage(TypedDict):
    """`GET /api/runs/{run}/calls`: a page of the matching calls, and what the whole run holds."""

    total: int
    offset: int
    limit: int
    agents: list[str]
    refused: int
    unavailable: list[str]
    calls: list[JsonObject]  # trajectory entries (the gateway's), clipped


def page(calls: RunCalls, q: CallQuery) -> CallPage:
    """A page of the calls matching the query, each clipped for the list (`n` finds the whole entry)."""
    chosen = calls.merged
    if q.agent is not None:
        chosen = [e for e in chosen if e.get("agent") == q.agent]
    if q.tool is not None:
        chosen = [e for e in chosen if e.get("tool") == q.tool]
    if q.refused is not None:
        chosen = [e for e in chosen if bool(e.get("refused")) is q.refused]
    return {
        "total": len(chosen),
        "offset": q.offset,
        "limit": q.limit,
        "agents": sorted({str(e.get("agent")) for e in calls.merged}),
        "refused": sum(1 for e in calls.merged if e.get("refused")),
        "unavailable": calls.unavailable,
        "calls": [listed(e) for e in chosen[q.offset : q.offset + q.limit]],
    }


def listed(entry: JsonObject) -> JsonObject:
    shown = {k: v for k, v in entry.items() if k not in ("arguments", "result", "error")}
    shown["refused"] = bool(entry.get("refused"))
    for name in ("arguments", "result", "error"):
        if name in entry:
            shown[name] = clip(entry[name], FIELD_BYTES)
    return shown
