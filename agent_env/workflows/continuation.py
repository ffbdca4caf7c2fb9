"""How a run leaves its history: it continues as new (carrying its state) before the history or the update budget
runs out, or it concludes (status, search attributes, memo, release, the record). Either way the state enters
history (continue-as-new input, the run's result), so it is bounded first.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NotRequired, TypedDict

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeUpdate
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from agent_env.spec.run import RunInput, RunState, StepPlan
    from agent_env.spec.times import iso
    from agent_env.spec.world_state import MAX_FIELD_BYTES, clip, json_size
    from agent_env.temporal_client import attributes
    from agent_env.workflows import details
    from agent_env.workflows.contract import PATCH_NAMED_ACTIVITIES, QUICK_RETRY, RECORD_RUN, RELEASE_SANDBOXES
    from agent_env.workflows.dag import Dag
    from agent_env.workflows.step_tasks import StepTasks
    from agent_env.workflows.trainer_turns import TrainerTurns
    from agent_env.workflows.world_driver import WorldDriver

UPDATES_PER_RUN = 1500  # continue-as-new before this many updates (Temporal takes at most 2,000 per run)
# The state goes into history (continue-as-new input, the run's result): bounded far below Temporal's 2 MB.
MAX_STATE_BYTES = 1024 * 1024
MAX_CARRIED_EVENTS = 1000  # world events carried across continue-as-new (the rest are counted by kind)
# Patches (workflow.patched) keep histories recorded before these changes replaying.
PATCH_BOUNDS = "poison-bounds"  # bounded state, events, hit updates counted
PATCH_RELEASE_ALL = "release-all-at-end"  # a run's end releases its instances and hosted agents, not only sandboxes
# The behaviour (RunInput.behaviour) from which runs take a patched change without asking their history; the
# patches not named here came with behaviour 1.
SINCE = {PATCH_NAMED_ACTIVITIES: 2}
QUICK_RELEASE_SINCE = 1  # runs planned from this behaviour release what holds no sandbox as they are recorded


class ResultMemo(TypedDict):
    """The run's result in its memo (`temporal workflow describe` shows it without a query)."""

    status: str
    score: float | None
    steps: dict[str, str]  # step id -> its status
    virtual_time: NotRequired[str]  # with a clock: where it stopped, and how many world events there were
    events: NotRequired[int]


def changed(inp: RunInput, patch: str) -> bool:
    """Whether this run takes the change `patch` names: runs planned with the behaviour that brought it or a
    later one always do (no marker in history); runs started before ask their history (workflow.patched)."""
    return inp.behaviour >= SINCE.get(patch, 1) or workflow.patched(patch)


def history_is_long(inp: RunInput, updates: int) -> bool:
    info = workflow.info()
    return (
        info.is_continue_as_new_suggested()
        or info.get_current_history_length() >= inp.continue_as_new_at
        or updates >= UPDATES_PER_RUN
    )


async def drain_and_continue_as_new(
    inp: RunInput, dag: Dag, tasks: StepTasks, world: WorldDriver, trainer: TrainerTurns
) -> None:
    """Let running steps finish (no new ones start), then continue in a fresh history. Prompts played by a
    trainer are not waited for: their progress is carried and they go on in the next run."""
    state = dag.state
    await tasks.drain(leave=state.trainer)
    await world.apply_step_hits()
    if dag.error:
        return  # the run is ending anyway
    world.stop_pacing()
    trainer.close("continued")  # trainers waiting for a turn ask the next run
    await workflow.wait_condition(workflow.all_handlers_finished)
    if changed(inp, PATCH_BOUNDS):
        bound_state(state, MAX_CARRIED_EVENTS)
    workflow.continue_as_new(inp.model_copy(update={"carried": state}))


async def conclude(inp: RunInput, dag: Dag, driver: WorldDriver, trainer: TrainerTurns) -> None:
    """The run is over: decide its status and score, make it findable, release what it holds, record it."""
    state, world = dag.state, driver.world
    driver.stop_pacing()
    trainer.close("ended")
    await workflow.wait_condition(workflow.all_handlers_finished)  # hits being applied finish first
    state.finished_at = workflow.now()
    state.conclude()
    if inp.search_attributes:
        updates: list[SearchAttributeUpdate[Any]] = [attributes.STATUS.value_set(state.status.value)]
        if state.score is not None:
            updates.append(attributes.SCORE.value_set(state.score))
        workflow.upsert_search_attributes(updates)
    result: ResultMemo = {
        "status": state.status.value,
        "score": state.score,
        "steps": {sid: s.status.value for sid, s in state.steps.items()},
    }
    if world is not None and world.state.clock is not None:
        result["virtual_time"] = iso(world.now(driver.now_real()))
        result["events"] = len(world.state.events) + sum(world.state.dropped.values())
    workflow.upsert_memo({"result": result})
    # Runs planned today release what holds no sandbox in the same local activity that records them (one
    # hop less at every run's end); sandboxes are removed by a regular activity, with heartbeats.
    ran = dag.ran()
    quick = inp.behaviour >= QUICK_RELEASE_SINCE and not any(plan.sandboxes for plan in ran)
    release = _release_all(inp.run_id, ran) if quick else None
    if not quick:
        await _release(inp, ran)
    if changed(inp, PATCH_BOUNDS):
        bound_state(state)
    workflow.set_current_details(details.finished_details(state))
    try:
        await workflow.execute_local_activity(
            RECORD_RUN.name,
            args=[state, release],  # always both: the SDK drops the type hints when the count differs
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=QUICK_RETRY,
            summary=f"record the run ({state.status.value})" + (" and release what it holds" if release else ""),
        )
    except ActivityError as e:
        if release is None:
            raise
        # Recorded on its first attempt; what it holds on the gateway is the reaper's now (its run is over).
        workflow.logger.warning("releasing the run's instances failed: %s", e.cause or e)


def _release_all(run_id: str, ran: list[StepPlan]) -> list[str] | None:
    """What the record activity releases: the run's id when it used the gateway (instances, hosted agents)."""
    return [run_id] if any(plan.deploys_env or plan.deploys_agent for plan in ran) else None


async def _release(inp: RunInput, ran: list[StepPlan]) -> None:
    """Sandboxes never outlive their run; if this fails the reaper removes them (their run is over)."""
    started = [plan for plan in ran if plan.sandboxes]
    # Whatever else the run holds on the gateway (instances, hosted agents) is released too.
    used_gateway = any(plan.deploys_env or plan.deploys_agent for plan in ran)
    if not started and not (used_gateway and changed(inp, PATCH_RELEASE_ALL)):
        return
    # Env instances are retired on the gateway too; agents' sandboxes are only removed (with all the run's).
    instances = [f"{inp.run_id}.{plan.id}" for plan in started if plan.deploys_env]
    try:
        await workflow.execute_activity(
            RELEASE_SANDBOXES.name,
            args=[inp.run_id, instances, bool(started)],
            result_type=RELEASE_SANDBOXES.returns,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=timedelta(seconds=20),
            retry_policy=RetryPolicy(maximum_attempts=5),
            summary="release what the run holds (instances, hosted agents, sandboxes)",
        )
    except ActivityError as e:
        workflow.logger.warning("releasing sandboxes failed (the reaper will remove them): %s", e.cause or e)


def bound_state(state: RunState, keep_events: int | None = None) -> None:
    """Before the state enters history (continue-as-new, the result): the event log keeps its latest
    `keep_events`, and past MAX_STATE_BYTES the largest parts are clipped, and the state says so."""
    world = state.world
    if world is not None and keep_events is not None:
        world.trim_events(keep_events)
    size = json_size(state.model_dump(mode="json"))
    if size <= MAX_STATE_BYTES:
        return
    parts = sorted(_clippable(state), key=lambda p: -p[0])
    for part_size, what, get, put in parts:
        if size <= MAX_STATE_BYTES:
            break
        clipped = clip(get(), MAX_FIELD_BYTES)
        put(clipped)
        size -= part_size - json_size(clipped)
        state.clipped.append(
            f"{what}: {part_size} bytes clipped to a preview (the run's state is bounded at {MAX_STATE_BYTES} bytes)"
        )
    if size > MAX_STATE_BYTES and world is not None:
        dropped = world.trim_events(min(len(world.events), 100))
        state.clipped.append(f"{dropped} more world events dropped from the log (counted in `dropped`)")


def _clippable(state: RunState) -> list[tuple[int, str, Any, Any]]:
    """The state's parts that can be clipped: (size, name, get, put)."""
    parts: list[tuple[int, str, Any, Any]] = []
    for sid, step in state.steps.items():
        for key in list(step.outputs):
            parts.append(
                (
                    json_size(step.outputs[key]),
                    f"steps.{sid}.outputs.{key}",
                    lambda o=step.outputs, k=key: o[k],
                    lambda v, o=step.outputs, k=key: o.__setitem__(k, v),
                )
            )
    if state.world is not None:
        for event in state.world.events:
            parts.append(
                (
                    json_size(event.detail),
                    f"world event {event.seq}",
                    lambda e=event: e.detail,
                    lambda v, e=event: setattr(e, "detail", v),
                )
            )
    for sid, progress in state.trainer.items():
        for i, entry in enumerate(progress.transcript[:-1]):  # the last one is being answered
            parts.append(
                (
                    json_size(entry),
                    f"steps.{sid} transcript entry {i}",
                    lambda t=progress.transcript, i=i: t[i]["text"],
                    lambda v, t=progress.transcript, i=i: t[i].__setitem__("text", str(v)),
                )
            )
    return parts
