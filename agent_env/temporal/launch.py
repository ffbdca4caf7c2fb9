"""Launch runs and read them back: record and start a planned run's workflow (`start`, `start_run`, `replan`),
its live state, its result, its stored record. What the CLI, the trainer's episodes and Python callers use;
following a run on a terminal is `follow`."""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC
from typing import TYPE_CHECKING, Any, TypeVar

from agent_env import telemetry
from agent_env.config import Settings
from agent_env.errors import BadInput, NotFound
from agent_env.planning.runs import plan  # (also `launch.plan`, for callers that plan without starting)
from agent_env.planning.runs import replan as replan_record
from agent_env.spec.run import RunInput, RunState
from agent_env.spec.task import TaskSpec
from agent_env.stores import in_thread, keys, open_stores
from agent_env.temporal_client.client import ensure_search_attributes
from agent_env.workflows import details

T = TypeVar("T")

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle, WorkflowUpdateHandle

    from agent_env.stores import Stores

WORKFLOW = "agentenv.TaskRun"
QUERY_STATE = "state"


def new_run_id(task_id: str) -> str:
    return f"{task_id}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


async def start_run(client: Client, settings: Settings, task: TaskSpec, *, run_id: str | None = None) -> WorkflowHandle:
    """Plan `task` and start it."""
    planned = await in_thread(plan, task, run_id or new_run_id(task.id), settings)  # (it stores the plan's document)
    return await start(client, settings, planned)


def replan(settings: Settings, run_id: str) -> RunInput:
    """A new run of exactly the plan an earlier run (by id or unique prefix) pinned: `agent-env runs rerun`."""
    record = find_run(settings, run_id)
    stores = open_stores(settings)
    try:
        return replan_record(stores, record, new_run_id(record["task_id"]))
    finally:
        stores.close()


async def start(client: Client, settings: Settings, inp: RunInput, *, stores: Stores | None = None) -> WorkflowHandle:
    """Record a planned run and start its workflow. `stores`: open ones to use (a caller starting many runs
    keeps them open); by default they are opened for this call."""

    async def launch(options: dict[str, Any]) -> WorkflowHandle:
        return await client.start_workflow(WORKFLOW, inp, request_eager_start=True, result_type=RunState, **options)

    return await _record_and_start(client, settings, inp, stores, launch)


async def start_with_update(
    client: Client, settings: Settings, inp: RunInput, update: str, args: list[Any], *, stores: Stores | None = None
) -> tuple[WorkflowHandle, WorkflowUpdateHandle[dict]]:
    """`start`, with the run's first update sent in the same request and its outcome awaited (one round trip
    instead of two: e.g. a trainer's first `next_turn`)."""
    from temporalio.client import WithStartWorkflowOperation, WorkflowUpdateStage
    from temporalio.common import WorkflowIDConflictPolicy

    async def launch(options: dict[str, Any]) -> tuple[WorkflowHandle, WorkflowUpdateHandle[dict]]:
        operation: WithStartWorkflowOperation[Any, RunState] = WithStartWorkflowOperation(
            WORKFLOW, inp, id_conflict_policy=WorkflowIDConflictPolicy.FAIL, result_type=RunState, **options
        )
        sent = await client.start_update_with_start_workflow(
            update,
            args=args,
            start_workflow_operation=operation,
            wait_for_stage=WorkflowUpdateStage.COMPLETED,
            result_type=dict,
        )
        return await operation.workflow_handle(), sent

    return await _record_and_start(client, settings, inp, stores, launch)


async def _record_and_start(
    client: Client,
    settings: Settings,
    inp: RunInput,
    stores: Stores | None,
    launch: Callable[[dict[str, Any]], Awaitable[T]],
) -> T:
    from datetime import datetime

    from temporalio.common import SearchAttributePair, TypedSearchAttributes

    from agent_env.temporal_client import attributes  # (temporalio's search attribute keys)

    run_id = inp.run_id
    inp.search_attributes = use_attributes = await ensure_search_attributes(client, settings.temporal.namespace)
    search = (
        TypedSearchAttributes(
            [
                SearchAttributePair(attributes.TASK_ID, inp.task_id),
                SearchAttributePair(attributes.TASK_VERSION, inp.task_version),
                SearchAttributePair(attributes.STATUS, "running"),
            ]
        )
        if use_attributes
        else None
    )
    options = {
        "id": run_id,
        "task_queue": settings.temporal.task_queue,
        "search_attributes": search,
        "memo": {"task": {"id": inp.task_id, "version": inp.task_version, "description": inp.description[:500]}},
        "static_summary": details.static_summary(inp),
        "static_details": details.static_details(inp),
    }
    # Recorded before the workflow starts (never after: a fast run could already have recorded its
    # end), so a run is listed at once even if no worker has picked it up yet.
    opened = stores is None
    stores = await in_thread(open_stores, settings) if stores is None else stores
    await stores.aio.documents.put(keys.RUNS, run_id, RunState.start(inp, datetime.now(UTC)).model_dump(mode="json"))
    try:
        # The run's span: the workflow and its activities continue it (Temporal headers), wherever they run.
        with telemetry.span(f"run {inp.task_id}", run_id=run_id, task_version=inp.task_version):
            return await launch(options)
    except BaseException:
        await stores.aio.documents.delete(keys.RUNS, run_id)
        raise
    finally:
        if opened:
            stores.close()


async def query_state(handle: WorkflowHandle, timeout: float = 5.0) -> RunState:
    from datetime import timedelta

    return await handle.query(QUERY_STATE, result_type=RunState, rpc_timeout=timedelta(seconds=timeout))


async def wait_result(handle: WorkflowHandle) -> RunState:
    """The run's final state, whether it passed, failed, errored or was cancelled."""
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import ApplicationError, CancelledError

    try:
        return await handle.result()
    except WorkflowFailureError as e:
        cause = e.cause
        if isinstance(cause, ApplicationError) and cause.type == "RunError" and cause.details:
            return RunState.model_validate(cause.details[0])
        if isinstance(cause, CancelledError):
            return await query_state(handle)
        raise


def find_run(settings: Settings, run_id: str) -> dict:
    """A run's stored record by id or unique id prefix."""
    stores = open_stores(settings)
    try:
        exact = stores.documents.get(keys.RUNS, run_id)
        if exact:
            return exact
        matches = stores.documents.query(keys.RUNS, key_prefix=run_id, limit=5) if run_id else []
    finally:
        stores.close()
    if len(matches) == 1:
        return matches[0]
    if matches:
        ids = ", ".join(m["run_id"] for m in matches)
        raise BadInput(f"'{run_id}' matches several runs: {ids}", "give more of the run id")
    raise NotFound(f"there is no run '{run_id}'", "list runs with `agent-env runs list`")
