"""Eval runs as the explorer shows them: the list, newest first, each with its aggregate, and one eval run's table
(each task's status and score, the mean score and the pass rate: `spec.evals.EvalTable`).

An eval run is recorded (`keys.EVAL_RUNS`) before its first run starts; each row's status and score come from
that run's record (`keys.RUNS`), so the table fills in while the eval goes."""

from __future__ import annotations

from agent_env.errors import NotFound
from agent_env.spec.evals import EvalRun, EvalTable
from agent_env.stores import Stores, keys

MAX_LISTED = 100  # eval runs in the list, at most


def eval_table(stores: Stores, eval_run_id: str) -> EvalTable:
    record = stores.documents.get(keys.EVAL_RUNS, eval_run_id)
    if record is None:
        raise NotFound(f"there is no eval run {eval_run_id!r}", "pick one from the evals list")
    return _table(stores, EvalRun.model_validate(record))


def eval_list(stores: Stores) -> list[EvalTable]:
    records = stores.documents.query(keys.EVAL_RUNS, order_by="started_at", descending=True, limit=MAX_LISTED)
    return [_table(stores, EvalRun.model_validate(r)) for r in records]


def _table(stores: Stores, run: EvalRun) -> EvalTable:
    states: dict[str, tuple[str, float | None]] = {}
    for t in run.tasks:
        found = stores.documents.get(keys.RUNS, t.run_id)
        if found is not None:
            states[t.run_id] = (str(found.get("status", "running")), found.get("score"))
    return EvalTable.of(run, states)
