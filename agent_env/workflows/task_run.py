"""One run of a task: execute its DAG of steps as activities, apply the world's rules, record status, outputs,
scores, timings and the world's events.

Independent steps run concurrently. A step starts when everything it depends on has finished; its config's
${...} references are resolved here, deterministically, from earlier results. History carries only step inputs
and outcomes and the world's decisions, never the traffic of environments.

This module is the DAG loop and the workflow's face (its query and updates). The run owns three helpers:
the world driver (world_driver.py: clock, triggers, pushes, pacing), the trainer's turns (trainer_turns.py:
prompts a trainer plays) and how a history ends (continuation.py: continue-as-new, conclusion, bounds).
What it schedules is declared in contract.py. Steps are told apart by their traits (StepPlan), never by name.
"""

from __future__ import annotations

import asyncio
import builtins
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from agent_env.spec.duration import format_duration
    from agent_env.spec.run import RunInput, RunState, RunStatus, StepCall, StepOutcome, StepPlan, StepStatus
    from agent_env.spec.task import FailurePolicy
    from agent_env.spec.templates import TemplateError, resolve
    from agent_env.spec.world_state import MAX_HIT_BYTES, MAX_ID_CHARS, HitAck, TriggerHit
    from agent_env.workflows import continuation, details
    from agent_env.workflows.contract import RUN_STEP
    from agent_env.workflows.trainer_turns import TrainerTurns, played_by_trainer
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
        self.plans: dict[str, StepPlan] = {s.id: s for s in inp.steps}
        # After a continue-as-new, the run goes on from the state it carried.
        self.state = inp.carried or RunState.start(inp, workflow.info().start_time)
        self.running: dict[str, asyncio.Task[StepOutcome]] = {}
        self.wake = asyncio.Event()  # an update arrived: the loop looks again
        self.updates = 0  # updates this run has taken (it continues as new before Temporal's limit)
        world = World(inp.world, self.state.world) if inp.world and self.state.world is not None else None
        self.world_driver = WorldDriver(self, world)
        self.trainer = TrainerTurns(self)

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
    async def next_turn(self, agent: str | None = None) -> dict[str, Any]:
        """The next turn waiting for the trainer (`agent`: only that agent's), once there is one; or
        {"closing": "ended"} when no more will come, {"closing": "continued"} to ask the next run."""
        self.updates += 1
        return await self.trainer.next_turn(agent)

    @next_turn.validator
    def _agent_is_a_name(self, agent: str | None = None) -> None:
        self.trainer.check_agent(agent)

    @workflow.update(name="end_turn")
    async def end_turn(self, turn_id: str, response: str) -> dict[str, Any]:
        """The trainer's answer to a turn. Sent again (a retried call), it changes nothing."""
        self.updates += 1
        return self.trainer.end_turn(turn_id, response)

    @end_turn.validator
    def _turn_is_waiting(self, turn_id: str, response: str) -> None:
        self.trainer.check_answer(turn_id, response)

    @workflow.update(name="answer")
    async def answer(self, turn_id: str, response: str, agent: str | None = None) -> dict[str, Any]:
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
    async def abandon(self, reason: str) -> dict[str, Any]:
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
            # The run's record was written by whoever started it (runner.start_run); it is rewritten at the end.
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
            self.state.status = RunStatus.CANCELLED
            await continuation.conclude(self)
            raise
        await continuation.conclude(self)
        if self.state.status is RunStatus.ERROR:
            # Fail the workflow so the UI shows it red; the details carry the full run state.
            raise ApplicationError(self.state.error or "run failed", self.state, type="RunError", non_retryable=True)
        return self.state

    def _bad_data(self, e: BaseException, where: str) -> None:
        if not self.state.error:
            self.state.error = f"{where} failed on bad data: {type(e).__name__}: {str(e)[:1000]}"

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
            self.state.error = f"the run timed out (its limit is {format_duration(self.inp.timeout)})"
            self.state.status = RunStatus.ERROR
            return
        except asyncio.CancelledError:  # the run is cancelled: so is what it was doing
            execute.cancel()
            await asyncio.gather(execute, return_exceptions=True)
            raise
        await execute  # its outcome, or the error it raised

    async def _execute(self) -> None:
        world = self.world_driver
        self.trainer.resume()
        while True:
            if continuation.history_is_long(self.inp, self.updates):
                await continuation.drain_and_continue_as_new(self)
            if self.trainer.abandoned is not None:
                await self.stop_running()
                self.state.status = RunStatus.CANCELLED
                self.state.error = f"abandoned by the trainer: {self.trainer.abandoned}"
                return
            self._start_ready_steps()
            await world.advance()
            self._start_ready_steps()  # the world may have finished waits that others depend on
            if self.state.error or world.ended:
                await self.stop_running()
                return
            if not self.running and not world.waiting and not world.can_go_on():
                return
            self.show()
            await self._wait()
            for step_id in [sid for sid, task in self.running.items() if task.done()]:
                self.settle(step_id, self.running.pop(step_id))
            await world.apply_step_hits()

    async def _wait(self) -> None:
        """Until a step finishes, an update arrives, or (paced) the clock may have reached an event."""
        waiters: list[asyncio.Future[Any]] = list(self.running.values())
        pacing = self.world_driver.pacing()
        if pacing is not None:
            waiters.append(pacing)
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
        running = [*self.running, *sorted(driver.waiting)]
        turns = [p.offer.id for p in self.state.trainer.values() if p.offer is not None]
        workflow.set_current_details(
            details.current_details(self.state, running, driver.world, driver.now_real(), turns)
        )

    # -- steps --

    def _start_ready_steps(self) -> None:
        progressed = True
        while progressed and not self.state.error:
            progressed = False
            for step_id, step in self.state.steps.items():
                if step.status is not StepStatus.PENDING:
                    continue
                deps = [self.state.steps[d] for d in step.depends_on]
                if not all(d.status.finished for d in deps):
                    continue
                progressed = True
                blocker = next((d for d in deps if self._blocks_dependents(d.id)), None)
                if blocker is not None:
                    step.status = StepStatus.SKIPPED
                    step.error = f"skipped: '{blocker.id}' {blocker.status.value}"
                    continue
                plan = self.plans[step_id]
                try:
                    config = resolve(plan.config, self.scope())
                except TemplateError as e:
                    self.fail(step_id, f"config: {e}")
                    continue
                step.status = StepStatus.RUNNING
                step.started_at = workflow.now()
                if plan.in_workflow:
                    self.world_driver.world_step(plan, config)
                elif played_by_trainer(plan, config):
                    self.running[step_id] = asyncio.create_task(self.trainer.prompt(plan, config))
                else:
                    self.running[step_id] = asyncio.create_task(self._call(plan, config))

    def _blocks_dependents(self, step_id: str) -> bool:
        status = self.state.steps[step_id].status
        if status is StepStatus.FAILED:
            return self.plans[step_id].on_failure is not FailurePolicy.CONTINUE
        return status in (StepStatus.SKIPPED, StepStatus.CANCELLED)

    def scope(self) -> dict[str, Any]:
        """What ${...} references in configs and actions see."""
        scope: dict[str, Any] = {
            "steps": {
                sid: {
                    "outputs": s.outputs,
                    "status": s.status.value,
                    "score": s.score.value if s.score else None,
                    "passed": s.score.passed if s.score else None,
                }
                for sid, s in self.state.steps.items()
            },
            "run": {"id": self.inp.run_id, "seed": self.inp.pins.get("seed", 0)},
            "task": {"id": self.inp.task_id, "version": self.inp.task_version},
        }
        clock = self.world_driver.clock_scope()
        if clock is not None:
            scope["clock"] = clock
        return scope

    async def _call(self, plan: StepPlan, config: dict[str, Any]) -> StepOutcome:
        await self.world_driver.watches_pushed()
        call = StepCall(
            run_id=self.inp.run_id,
            task_id=self.inp.task_id,
            step_id=plan.id,
            type=plan.type,
            config=config,
            heartbeat_timeout=plan.heartbeat_timeout,
        )
        retry = RetryPolicy(
            maximum_attempts=plan.retries + 1,
            initial_interval=timedelta(seconds=1),
            maximum_interval=timedelta(seconds=30),
        )
        outcome: StepOutcome
        if plan.local:
            outcome = await workflow.execute_local_activity(
                RUN_STEP.name,
                call,
                result_type=RUN_STEP.returns,
                start_to_close_timeout=plan.timeout,
                retry_policy=retry,
                activity_id=plan.id,
                summary=details.step_summary(plan.id, plan.type),
            )
            return outcome
        outcome = await workflow.execute_activity(
            RUN_STEP.name,
            call,
            result_type=RUN_STEP.returns,
            start_to_close_timeout=plan.timeout,
            heartbeat_timeout=plan.heartbeat_timeout,
            retry_policy=retry,
            activity_id=plan.id,
            summary=details.step_summary(plan.id, plan.type),
        )
        return outcome

    def settle(self, step_id: str, task: asyncio.Task[StepOutcome]) -> None:
        """Record how a step's task ended."""
        step = self.state.steps[step_id]
        try:
            outcome = task.result()
        except asyncio.CancelledError:
            step.status, step.finished_at = StepStatus.CANCELLED, workflow.now()
            return
        except FailureError as e:  # activities wrap the cause in ActivityError; local activities may not
            cause = e.cause if isinstance(e, ActivityError) else e
            if isinstance(cause, CancelledError):
                step.status, step.finished_at = StepStatus.CANCELLED, workflow.now()
            else:
                self.fail(step_id, _describe(cause, self.plans[step_id]))
            return
        step.status = StepStatus.SUCCEEDED
        step.finished_at = workflow.now()
        step.attempts = outcome.attempt
        step.duration_ms = round(outcome.duration_ms, 3)
        step.outputs = outcome.outputs
        step.score = outcome.score
        self.world_driver.step_hits += outcome.hits
        self.world_driver.instance_deployed(self.plans[step_id], outcome.outputs)

    def fail(self, step_id: str, message: str) -> None:
        step = self.state.steps[step_id]
        step.status, step.error, step.finished_at = StepStatus.FAILED, message, workflow.now()
        if self.plans[step_id].on_failure is FailurePolicy.FAIL and not self.state.error:
            self.state.error = f"step '{step_id}' failed: {message}"

    async def stop_running(self) -> None:
        """Cancel steps still running and mark everything not started as skipped."""
        for task in self.running.values():
            task.cancel()
        if self.running:
            await asyncio.gather(*self.running.values(), return_exceptions=True)
        for step_id in list(self.running):
            self.settle(step_id, self.running.pop(step_id))
        ended = self.world_driver.ended
        reason = f"the world ended: {ended}" if ended else None
        self.world_driver.cancel_waits(reason)
        for step in self.state.steps.values():
            if step.status is StepStatus.PENDING:
                step.status = StepStatus.SKIPPED
                step.error = f"skipped: {reason}" if reason else "skipped: the run stopped"


def _describe(cause: BaseException | None, plan: StepPlan) -> str:
    if isinstance(cause, TimeoutError):
        kind = cause.type.name.lower().replace("_", "-") if cause.type else "timeout"
        limit = format_duration(
            plan.heartbeat_timeout if "heartbeat" in kind and plan.heartbeat_timeout else plan.timeout
        )
        return f"timed out ({kind}, limit {limit})"
    if isinstance(cause, ApplicationError):
        return cause.message
    return str(cause)
