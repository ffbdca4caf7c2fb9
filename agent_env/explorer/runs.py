"""Runs as the explorer shows them: the list (filtered, paged) and one run's steps, scores and world clock.

Records come from the document store (`keys.RUNS`), as `agent-env runs list` reads them; a run still going
is read live from its workflow by the server (see `server.live_state`), as `runs show` does.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict

from pydantic import BaseModel, Field, field_validator

from agent_env.explorer.artifacts import Artifact
from agent_env.spec.run import RunState, RunStatus, StepState
from agent_env.spec.world_state import clip
from agent_env.stores import Stores, keys

MAX_PAGE = 200  # runs per page, at most
SCAN_LIMIT = 2000  # records read to fill one filtered page, at most (the rest comes with `next`)
OUTPUT_BYTES = 16 * 1024  # a step's outputs, in the run's view (the record holds them whole)


class RunFilter(BaseModel):
    task: str | None = None
    status: RunStatus | None = None
    min_score: float | None = Field(None, ge=0, le=1)
    max_score: float | None = Field(None, ge=0, le=1)
    since: datetime | None = None  # started at or after
    until: datetime | None = None  # started before
    limit: int = Field(50, ge=1, le=MAX_PAGE)
    cursor: str | None = None

    @field_validator("since", "until")
    @classmethod
    def _utc_unless_said(cls, value: datetime | None) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value

    def keeps(self, record: dict[str, Any]) -> bool:
        score = record.get("score")
        if self.min_score is not None and (score is None or score < self.min_score):
            return False
        if self.max_score is not None and (score is None or score > self.max_score):
            return False
        started = datetime.fromisoformat(record["started_at"])
        return not (self.until is not None and started >= self.until)

    def past_window(self, record: dict[str, Any]) -> bool:
        """Records come newest first: one started before `since` ends the listing."""
        return self.since is not None and datetime.fromisoformat(record["started_at"]) < self.since


class RunRow(TypedDict):
    """A run in the list."""

    run_id: str
    task_id: str | None
    task_version: str | None
    description: str
    status: str | None
    score: float | None
    started_at: str | None
    finished_at: str | None
    took_s: float | None
    error: str | None
    episode: bool


class RunList(TypedDict):
    runs: list[RunRow]
    next: str | None  # the cursor of the next page


class StepView(TypedDict):
    """A step on the run's page: where it sits in the DAG, how it went, what it gave."""

    id: str
    type: str
    depends_on: list[str]
    depth: int
    status: str
    attempts: int
    started_at: str | None
    finished_at: str | None
    took_ms: float | None
    duration_ms: float | None
    outputs: Any
    score: Any
    error: str | None
    transcript: str | None


class RunView(RunRow):
    """One run whole (`GET /api/runs/{run}`); `artifacts` is added by the server."""

    live: bool
    temporal_url: str | None
    steps: list[StepView]
    scores: dict[str, Any]
    world: Any
    instances: list[str]
    pins: Any
    clipped: Any
    trainer: dict[str, Any]
    artifacts: NotRequired[list[Artifact]]


def run_row(record: dict[str, Any]) -> RunRow:
    """A run in the list: what `agent-env runs list` prints, and whether a trainer played in it."""
    started, finished = record.get("started_at"), record.get("finished_at")
    took = (
        (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()
        if started and finished
        else None
    )
    return {
        "run_id": record["run_id"],
        "task_id": record.get("task_id"),
        "task_version": record.get("task_version"),
        "description": record.get("description", ""),
        "status": record.get("status"),
        "score": record.get("score"),
        "started_at": started,
        "finished_at": finished,
        "took_s": took,
        "error": record.get("error"),
        "episode": bool(record.get("trainer")),
    }


def list_runs(stores: Stores, f: RunFilter) -> RunList:
    """Newest first. Equality filters go to the store; score and time filter the pages it returns, so a
    page may hold fewer than `limit` rows while `next` still says there is more."""
    where = {k: v for k, v in (("task_id", f.task), ("status", f.status.value if f.status else None)) if v}
    rows: list[RunRow] = []
    cursor, scanned = f.cursor, 0
    while True:
        page = stores.documents.page(
            keys.RUNS, where=where, order_by="started_at", descending=True, limit=f.limit, after=cursor
        )
        scanned += len(page.items)
        for record in page.items:
            if f.past_window(record):
                return {"runs": rows, "next": None}
            if f.keeps(record):
                rows.append(run_row(record))
        cursor = page.next
        if cursor is None or len(rows) >= f.limit or scanned >= SCAN_LIMIT:
            return {"runs": rows, "next": cursor}


def depths(steps: dict[str, StepState]) -> dict[str, int]:
    """Each step's layer in the DAG: 0 without dependencies, else one past its deepest dependency."""
    found: dict[str, int] = {}

    def depth(sid: str, seen: frozenset[str] = frozenset()) -> int:
        if sid not in found:
            deps = [d for d in steps[sid].depends_on if d in steps and d not in seen]
            found[sid] = 1 + max((depth(d, seen | {sid}) for d in deps), default=-1)
        return found[sid]

    for sid in steps:
        depth(sid)
    return found


def step_view(step: StepState, depth: int) -> StepView:
    took = (step.finished_at - step.started_at).total_seconds() * 1000 if step.started_at and step.finished_at else None
    outputs = (
        step.outputs if len(json.dumps(step.outputs, default=str)) <= OUTPUT_BYTES else clip(step.outputs, OUTPUT_BYTES)
    )
    return {
        "id": step.id,
        "type": step.type,
        "depends_on": step.depends_on,
        "depth": depth,
        "status": step.status.value,
        "attempts": step.attempts,
        "started_at": step.started_at.isoformat() if step.started_at else None,
        "finished_at": step.finished_at.isoformat() if step.finished_at else None,
        "took_ms": took,
        "duration_ms": step.duration_ms,
        "outputs": outputs,
        "score": None if step.score is None else {**step.score.model_dump(mode="json"), "passed": step.score.passed},
        "error": step.error,
        "transcript": step.outputs.get("transcript") if isinstance(step.outputs.get("transcript"), str) else None,
    }


def run_view(state: RunState, *, live: bool, temporal_url: str | None, real_now: datetime) -> RunView:
    """One run: its summary, its steps as a layered DAG, the scores that decide it, its world's clock."""
    layer = depths(state.steps)
    world = None
    if state.world is not None:
        clock = state.world.clock
        world = {
            "clock": None
            if clock is None
            else {
                "mode": clock.mode,
                "zone": clock.zone,
                "rate": clock.rate,
                "now": clock.now(real_now).isoformat(),
                "horizon": clock.horizon.isoformat() if clock.horizon else None,
            },
            "events": len(state.world.events),
            "dropped": state.world.dropped,
            "triggers": [t.model_dump(mode="json") for t in state.world.triggers.values()],
            "ended": state.world.ended,
        }
    return {
        **run_row(state.model_dump(mode="json")),
        "live": live,
        "temporal_url": temporal_url,
        "steps": [step_view(s, layer[s.id]) for s in state.steps.values()],
        "scores": {sid: s.model_dump(mode="json") for sid, s in state.scores().items()},
        "world": world,
        "instances": instances(state),
        "pins": state.pins,
        "clipped": state.clipped,
        "trainer": {sid: {"turn": p.turn, "waiting": p.offer is not None} for sid, p in state.trainer.items()},
    }


def instances(state: RunState) -> list[str]:
    """The environment instances the run deployed (their trajectories hold its tool calls)."""
    found = [s.outputs["instance"] for s in state.steps.values() if isinstance(s.outputs.get("instance"), str)]
    return list(dict.fromkeys(found))


def episodes(stores: Stores, limit: int) -> list[RunRow]:
    """Recent runs in which a trainer played (recorded when they end)."""
    records = stores.documents.query(keys.RUNS, order_by="started_at", descending=True, limit=SCAN_LIMIT)
    return [run_row(r) for r in records if r.get("trainer")][:limit]
