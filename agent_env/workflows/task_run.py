"""One run of a task: execute its DAG of steps as activities, apply the world's rules, record status, outputs,
scores, timings and the world's events.

Independent steps run concurrently. A step starts when everything it depends on has finished; its config's
${...} references are resolved here, deterministically, from earlier results. History carries only step inputs
and outcomes and the world's decisions, never the traffic of environments.

This module is the run's loop and the workflow's face (its query and updates). The state of the run's steps has
one owner, the DAG (dag.py: what is ready, what an end does to the rest, pure); the loop drives it with the steps
in flight (step_tasks.py: their activities, how each ends), the world driver (world_driver.py: clock, triggers,
pushes, pacing), the trainer's turns (trainer_turns.py: prompts a trainer plays) and how a history ends
(continuation.py: continue-as-new, conclusion, bounds). Each helper is handed the narrow parts it needs, never the
workflow. What it schedules is declared in contract.py. Steps are told apart by their traits (StepPlan), never by
name.
"""

from __future__ import annotations

import asyncio
import builtins
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from agent_env.spec.duration import format_duration
    from agent_env.spec.run import ABANDONED, RunInput, RunState, RunStatus, StepOutcome, StepPlan
    from agent_env.spec.templates import TemplateError, resolve
    from agent_env.spec.world_state import MAX_HIT_BYTES, MAX_ID_CHARS, HitAck, TriggerHit
    from agent_env.workflows import continuation, details, step_tasks, world_driver
    from agent_env.workflows.contract import PATCH_NAMED_ACTIVITIES
    from agent_env.workflows.dag import Dag
    from agent_env.workflows.scope import Scope, scope
    from agent_env.workflows.step_tasks import StepTasks
    from agent_env.workflows.trainer_turns import (
        AbandonReply,
        EndTurnReply,
        TrainerTurns,
        TurnReply,
        played_by_trainer,
    )
    from agent_env.workflows.world_awaits import Awaits
    from agent_env.workflows.world_driver import WorldDriver
    from agent_env.workflows.world_rules import World, WorldError

# What bad data raises in the workflow's own code (a number from a tool result meeting date arithmetic...).
# It fails the run with a message instead of failing the workflow task forever; nondeterminism (Temporal's own
# errors) still fails the workflow task, which is what that is for.
DATA_ERRORS = (ArithmeticError, ValueError, TypeError, LookupError, WorldError)


@workflow.defn(name="agentenv.TaskRun", sandboxed=False)
class TaskRun:
    @workflow.init
    def __init__(self, inp: RunInput) -> None:
        self.inp = inp
        # After a continue-as-new, the run goes on from the state it carried.
        self.state = inp.carried or RunState.start(inp, workflow.info().start_time)
        self.dag = Dag({s.id: s for s in inp.steps}, self.state)
        self.tasks = StepTasks(self.dag, self._succeeded)
        self.wake = asyncio.Event()  # an update arrived: the loop looks again
        self.updates = 0  # updates this run has taken (it continues as new before Temporal's limit)
        world = World(inp.world, self.state.world) if inp.world and self.state.world is not None else None
        self.world_driver = WorldDriver(
            inp.run_id, self.dag, world, self.tasks.busy, self.scope, lambda patch: continuation.changed(inp, patch)
        )
        self.awaits = Awaits(self.dag, self.world_driver, lambda patch: continuation.changed(inp, patch))
        self.trainer = TrainerTurns(inp.run_id, self.dag, self.wake, lambda patch: continuation.changed(inp, patch))

    # -- the workflow's face: updates come from outside (the gateway for agents' calls, trainers) --

    @workflow.query(name="state")
    def get_state(self) -> RunState:
        return self.state

    @workflow.update(name="trigger_hit")
    async def trigger_hit(self, hit: TriggerHit) -> HitAck:
        """A condition an agent's call made true (sent by the gateway)."""
        if continuation.changed(self.inp, continuation.PATCH_BOUNDS):
            self.updates += 1  # counted toward the run's update budget, so it continues as new in time
        try:
            ack = await self.world_driver.on_hit(hit)
        except DATA_ERRORS as e:
            self._bad_data(e, f"trigger hit {hit.trigger!r}")
            ack = HitAck(accepted=False, reason=self.state.error or "")
        self.wake.set()
        return ack

    @trigger_hit.validator
    def _hit_is_this_runs(self, hit: TriggerHit) -> None:
        """Anyone who can reach Temporal can send a hit: refuse one for a trigger this run does not declare, an
        instance that is not this run's, or one too big for history. (Validators do not run on replay.)"""
        world = self.world_driver.world
        if world is None:
            raise ValueError(f"run {self.inp.run_id} has no triggers: it takes no trigger hits")
        if len(hit.trigger) > MAX_ID_CHARS or hit.trigger.removesuffix("#unless") not in world.triggers:
            raise ValueError(f"run {self.inp.run_id} has no trigger {hit.trigger[:MAX_ID_CHARS]!r}")
        if len(hit.instance) > MAX_ID_CHARS or hit.instance not in world.state.instances.values():
            raise ValueError(
                f"environment instance {hit.instance[:MAX_ID_CHARS]!r} is not one of run {self.inp.run_id}'s"
            )
        size = len(hit.model_dump_json().encode())
        if size > MAX_HIT_BYTES:
            raise ValueError(
                f"a trigger hit of {size} bytes is over the limit of {MAX_HIT_BYTES}: "
                "send less in `match` (e.g. a shortened result)"
            )

    @workflow.update(name="next_turn")
    async def next_turn(self, agent: str | None = None) -> TurnReply:
        """The next turn waiting for the trainer (`agent`: only that agent's), once there is one; or
        {"closing": "ended"} when no more will come, {"closing": "continued"} to ask the next run."""
        self.updates += 1
        return await self.trainer.next_turn(agent)

    @next_turn.validator
    def _agent_is_a_name(self, agent: str | None = None) -> None:
        self.trainer.check_agent(agent)

    @workflow.update(name="end_turn")
    async def end_turn(self, turn_id: str, response: str) -> EndTurnReply:
        """The trainer's answer to a turn. Sent again (a retried call), it changes nothing."""
        self.updates += 1
        return self.trainer.end_turn(turn_id, response)

    @end_turn.validator
    def _turn_is_waiting(self, turn_id: str, response: str) -> None:
        self.trainer.check_answer(turn_id, response)

    @workflow.update(name="answer")
    async def answer(self, turn_id: str, response: str, agent: str | None = None) -> TurnReply:
        """`end_turn` then `next_turn` in one update, so a trainer's turn costs one workflow task, not two: the
        answer ("ended": as end_turn's), then the next turn as next_turn gives it."""
        self.updates += 1
        ended = self.trainer.end_turn(turn_id, response)
        return {**await self.trainer.next_turn(agent), "ended": ended}

    @answer.validator
    def _answer_is_awaited(self, turn_id: str, response: str, agent: str | None = None) -> None:
        self.trainer.check_answer(turn_id, response)
        self.trainer.check_agent(agent)

    @workflow.update(name="abandon")
    async def abandon(self, reason: str) -> AbandonReply:
        """The trainer gives the episode up: running steps are cancelled, the run ends as cancelled."""
        self.updates += 1
        return self.trainer.abandon(reason)

    @abandon.validator
    def _reason_is_short(self, reason: str) -> None:
        self.trainer.check_reason(reason)

    # -- the run --

    @workflow.run
    async def run(self, inp: RunInput) -> RunState:
        try:
            # The run's record was written by whoever started it (launch.start_run); it is rewritten at the end.
            world = self.world_driver.world
            if inp.carried is None and world is not None:
                world.start_clock(self.world_driver.now_real())
            try:
                await self._execute_within_timeout()
            except DATA_ERRORS as e:
                self._bad_data(e, "the run")
                await self._stop_quietly()
        except asyncio.CancelledError:
            await self.stop_running()
            self.dag.cancel_run()
            await self._conclude()
            raise
        await self._conclude()
        if self.state.status is RunStatus.ERROR:
            # Fail the workflow so the UI shows it red; the details carry the full run state.
            raise ApplicationError(self.state.error or "run failed", self.state, type="RunError", non_retryable=True)
        return self.state

    async def _conclude(self) -> None:
        await continuation.conclude(self.inp, self.dag, self.world_driver, self.trainer)

    def _bad_data(self, e: BaseException, where: str) -> None:
        if not self.dag.error:
            self.dag.fail_run(f"{where} failed on bad data: {type(e).__name__}: {str(e)[:1000]}")

    async def _stop_quietly(self) -> None:
        try:
            await self.stop_running()
        except DATA_ERRORS as e:  # settling what ran may meet the same bad data: the run is ending anyway
            workflow.logger.warning("stopping the run's steps: %s", e)

    async def _execute_within_timeout(self) -> None:
        if self.inp.timeout is None:
            return await self._execute()
        left = (self.state.started_at + self.inp.timeout - workflow.now()).total_seconds()
        execute = asyncio.create_task(self._execute())
        try:
            # A durable timer, named in the UI; issued before the run's first command, as asyncio.wait_for did.
            await workflow.wait_condition(
                execute.done,
                timeout=max(left, 0.001),
                timeout_summary=f"the run's time limit ({format_duration(self.inp.timeout)})",
            )
        except builtins.TimeoutError:  # (TimeoutError in this module is Temporal's)
            execute.cancel()
            await asyncio.gather(execute, return_exceptions=True)
            await self.stop_running()
            self.dag.time_out(f"the run timed out (its limit is {format_duration(self.inp.timeout)})")
            return
        except asyncio.CancelledError:  # the run is cancelled: so is what it was doing
            execute.cancel()
            await asyncio.gather(execute, return_exceptions=True)
            raise
        await execute  # its outcome, or the error it raised

    async def _execute(self) -> None:
        world = self.world_driver
        for plan in self.trainer.carried(self.tasks.running):
            self.tasks.start(plan.id, self.trainer.prompt(plan, resolve(plan.config, dict(self.scope()))))
        while True:
            if continuation.history_is_long(self.inp, self.updates):
                await continuation.drain_and_continue_as_new(
                    self.inp, self.dag, self.tasks, self.world_driver, self.trainer
                )
            if self.trainer.abandoned is not None:
                await self.stop_running()
                self.dag.cancel_run(f"{ABANDONED}{self.trainer.abandoned}")
                return
            self._start_ready_steps()
            await world.advance()
            self.awaits.settle()
            self._start_ready_steps()  # the world may have finished waits that others depend on
            if self.dag.error or world.ended:
                await self.stop_running()
                return
            if not self.tasks.busy() and not world.waiting and not self.awaits.holding and not world.can_go_on():
                return
            self.show()
            await self._wait()
            self.tasks.settle_done()
            await world.apply_step_hits()

    async def _wait(self) -> None:
        """Until a step finishes, an update arrives, or (paced) the clock may have reached an event."""
        waiters: list[asyncio.Future[Any]] = list(self.tasks.running.values())
        pacing = self.world_driver.pacing()
        if pacing is not None:
            waiters.append(pacing)
        if (timer := self.awaits.timer()) is not None:
            waiters.append(timer)
        self.wake.clear()
        wake = asyncio.create_task(self.wake.wait())
        waiters.append(wake)
        await workflow.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if not wake.done():
            wake.cancel()
        await self.world_driver.paced()

    def show(self) -> None:
        """The run right now as the Temporal UI's current details (held in memory: no workflow task, no event)."""
        driver = self.world_driver
        running = [*self.tasks.running, *sorted(driver.waiting), *self.awaits.held()]
        turns = [p.offer.id for p in self.state.trainer.values() if p.offer is not None]
        workflow.set_current_details(
            details.current_details(self.state, running, driver.world, driver.now_real(), turns)
        )

    # -- steps --

    def _start_ready_steps(self) -> None:
        for plan in self.dag.ready():
            try:
                config = resolve(plan.config, dict(self.scope()))
            except TemplateError as e:
                self.dag.fail(plan.id, f"config: {e}", workflow.now())
                continue
            self.dag.start(plan.id, workflow.now())
            if plan.in_workflow:
                world_driver.world_step(self.world_driver, plan, config, self.awaits)
            elif played_by_trainer(plan, config):
                self.tasks.start(plan.id, self.trainer.prompt(plan, config))
            else:
                self.tasks.start(plan.id, self._call(plan, config))

    def scope(self) -> Scope:
        """What ${...} references in configs and actions see."""
        return scope(self.inp, self.dag, self.world_driver.clock_scope())

    async def _call(self, plan: StepPlan, config: dict[str, Any]) -> StepOutcome:
        await self.world_driver.watches_pushed()
        named = continuation.changed(self.inp, PATCH_NAMED_ACTIVITIES)
        return await step_tasks.run_step(self.inp.run_id, self.inp.task_id, plan, config, named=named)

    def _succeeded(self, plan: StepPlan, outcome: StepOutcome) -> None:
        self.world_driver.step_succeeded(plan, outcome)

    async def stop_running(self) -> None:
        """Cancel steps still running and mark everything not started as skipped."""
        await self.tasks.stop()
        ended = self.world_driver.ended
        reason = f"the world ended: {ended}" if ended else None
        self.world_driver.cancel_waits(reason)
        self.awaits.cancel(reason)
        self.dag.skip_pending(reason)
