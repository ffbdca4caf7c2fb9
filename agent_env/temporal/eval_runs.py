"""Run an eval: a run of each task it names, each a task-run workflow like any other, at most `concurrency` at a
time, recorded as an eval run (`keys.EVAL_RUNS`: which eval, which version, which run is which task) before
the first starts, so the explorer lists it while it goes. Its outcome is the eval's table (`spec.evals`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from agent_env.config import Settings
from agent_env.planning.agent_override import with_agent
from agent_env.planning.runs import plan
from agent_env.spec.evals import EvalRun, EvalSpec, EvalTable, EvalTaskRun
from agent_env.spec.run import RunInput, RunState
from agent_env.spec.task import TaskSpec
from agent_env.spec.times import iso
from agent_env.stores import in_thread, keys, open_stores
from agent_env.temporal import launch

if TYPE_CHECKING:
    from temporalio.client import Client

DEFAULT_CONCURRENCY = 4
MAX_CONCURRENCY = 64


def plan_eval(
    settings: Settings, spec: EvalSpec, tasks: list[TaskSpec], k: int = 1, agent: tuple[str, int] | None = None
) -> tuple[EvalRun, list[RunInput]]:
    """The eval run's record and `k` planned runs per task (nothing is stored or started yet but the plans);
    `agent` (a registry agent's name and version) replaces the agent of every deploy_agent step."""
    if agent is not None:
        tasks = [with_agent(task, *agent) for task in tasks]
    pairs = [(ref, task) for ref, task in zip(spec.tasks, tasks, strict=True) for _ in range(k)]
    inputs = [plan(task, launch.new_run_id(task.id), settings) for _, task in pairs]
    record = EvalRun(
        eval_run_id=launch.new_run_id(f"eval-{spec.name}"),
        eval=spec.id,
        version=spec.version,
        source=spec.source,
        started_at=iso(datetime.now(UTC).replace(microsecond=0)),
        tasks=[
            EvalTaskRun(task=inp.task_id, version=inp.task_version, ref=str(ref), run_id=inp.run_id, attempt=n % k + 1)
            for n, ((ref, _), inp) in enumerate(zip(pairs, inputs, strict=True))
        ],
        k=k,
    )
    return record, inputs


async def run_eval(
    client: Client,
    settings: Settings,
    record: EvalRun,
    inputs: list[RunInput],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    on_done: Callable[[RunState | None, RunInput, BaseException | None], None] | None = None,
) -> EvalTable:
    """Record the eval run, start its runs (at most `concurrency` at a time) and wait for each; `on_done` hears of
    each as it ends (its state, or the error that kept it from starting or ending). The eval's table."""
    gate = asyncio.Semaphore(max(1, min(concurrency, MAX_CONCURRENCY)))
    stores = await in_thread(open_stores, settings)
    outcomes: dict[str, tuple[str, float | None]] = {}

    async def one(inp: RunInput) -> None:
        state: RunState | None = None
        error: BaseException | None = None
        async with gate:
            try:
                state = await launch.wait_result(await launch.start(client, settings, inp, stores=stores))
            except Exception as e:  # noqa: BLE001 - one run that cannot start or end is that task's error
                error = e
        outcomes[inp.run_id] = (state.status.value, state.score) if state else ("error", None)
        if on_done:
            on_done(state, inp, error)

    try:
        await stores.aio.documents.put(keys.EVAL_RUNS, record.eval_run_id, record.model_dump(mode="json"))
        await asyncio.gather(*(one(inp) for inp in inputs))
    finally:
        stores.close()
    return EvalTable.of(record, outcomes)
