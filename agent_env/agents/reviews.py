"""Reviews: a person judges a run's output through the people's inbox, the one human agents' turns wait in.

A review is a turn of the inbox with `kind = "review"`: `agent-env agents pending` lists it beside human agents'
turns, `agent-env agents answer ID TEXT [--score S] [--abort]` (or `POST /admin/human/{id}`) decides it. The
gateway keeps it in its store, so it outlives the worker that waits for it: opening it again (the `review` step
retried on another worker) gives back the same review with its first deadline, and its decision if one was made.
Past its deadline the gateway marks it expired, and an answer comes too late.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_env.spec.times import iso, utc_now_iso
from agent_env.stores.base import Document, DocumentStore

REVIEW = "review"  # a review's `kind` (and its `agent`, the name `agents answer review ...` takes)
MAX_REVIEW_S = 7 * 24 * 3600  # the longest deadline a review may have
MAX_WAIT_S = 60.0  # the longest one request waits for a turn to be decided
MAX_LABEL_CHARS = 500
MAX_COMMENT_CHARS = 4000  # of a reviewer's answer, in the step's outputs (run history)


class ReviewRequest(BaseModel):
    """What the `review` step opens: what the person sees, and how long they have."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}/review$", description="RUN.STEP/review")
    run_id: str = Field(max_length=200)
    step: str = Field(max_length=200)
    label: str | None = Field(None, max_length=MAX_LABEL_CHARS, description="what to look at, in a line")
    upstream: Document = Field(default_factory=dict, description="the outputs under review, by step")
    timeout_s: float = Field(gt=0, le=MAX_REVIEW_S, description="from its opening to its deadline")


class HumanAnswer(BaseModel):
    """A person's answer to a turn: its text; for a review also the verdict and an optional score."""

    answer: str
    verdict: Literal["continue", "abort"] | None = Field(None, description="reviews only; default continue")
    score: float | None = Field(None, ge=0, le=1, description="reviews only: the reviewer's score, 0..1")
    by: str | None = Field(None, max_length=200, description="who answers (recorded as `decided_by`)")


def open_review(store: DocumentStore, collection: str, request: ReviewRequest) -> Document:
    """The review `request` names, opened now unless it is open already (then as it stands: deadline kept)."""
    doc = store.get(collection, request.id)
    if doc is not None:
        return current(store, collection, doc)
    now = datetime.now(UTC)
    doc = {
        "id": request.id,
        "kind": REVIEW,
        "agent": REVIEW,
        "agent_id": request.id.removesuffix("/review"),
        "run_id": request.run_id,
        "step": request.step,
        "label": request.label,
        "prompt": request.label or f"review step {request.step!r} of run {request.run_id}",
        "upstream": request.upstream,
        "asked_at": iso(now),
        "deadline": iso(now + timedelta(seconds=request.timeout_s)),
        "answer": None,
        "answered_at": None,
        "state": "waiting",
    }
    if not store.create(collection, request.id, doc):  # opened at the same moment by another attempt: that one
        return current(store, collection, store.get(collection, request.id) or doc)
    return doc


def current(store: DocumentStore, collection: str, doc: Document) -> Document:
    """`doc` as it stands now: a waiting review past its deadline is expired (and stored so)."""
    if doc.get("kind") == REVIEW and doc["state"] == "waiting" and past(doc):
        doc = {**doc, "state": "expired"}
        store.put(collection, doc["id"], doc)
    return doc


def past(doc: Document) -> bool:
    return datetime.now(UTC) >= datetime.fromisoformat(doc["deadline"])


def decided(doc: Document, body: HumanAnswer) -> Document:
    """`doc` (waiting) answered with `body`. ValueError: a verdict or a score for a turn that is not a review."""
    if doc.get("kind") != REVIEW:
        if body.verdict is not None or body.score is not None:
            raise ValueError(
                f"turn {doc['id']!r} is an agent's turn: a verdict and a score are for reviews — answer it with text"
            )
        return {**doc, "answer": body.answer, "answered_at": utc_now_iso(), "state": "answered"}
    return {
        **doc,
        "answer": body.answer,
        "answered_at": utc_now_iso(),
        "state": "answered",
        "verdict": body.verdict or "continue",
        "score": body.score,
        "decided_by": body.by,
    }


def expire_run(store: DocumentStore, collection: str, run_id: str) -> list[str]:
    """The run is over: its reviews still waiting are expired (nobody waits for them any more)."""
    ended = []
    for doc in store.query(collection, where={"run_id": run_id}):
        if doc["state"] == "waiting":
            store.put(collection, doc["id"], {**doc, "state": "expired"})
            ended.append(doc["id"])
    return ended
