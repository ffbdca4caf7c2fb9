"""One run of a task: execute its DAG of steps as activities, record status, outputs, scores, timings.

Independent steps run concurrently. A step starts when everything it depends on has finished; its
config's ${...} references are resolved here, deterministically, from earlier results. History
carries only step inputs and outcomes (decisions), never the traffic of the environments.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from agentenv.spec.duration import format_duration
    from agentenv.spec.run import RunInput, RunState, RunStatus, StepCall, StepOutcome, StepPlan, StepStatus
    from agentenv.spec.task import FailurePolicy
    from agentenv.spec.templates import TemplateError, resolve
    from agentenv.workflows import attributes

RUN_STEP = "agentenv.run_step"
RECORD_RUN = "agentenv.record_run"
RECORD_RETRY = RetryPolicy(maximum_attempts=10, maximum_interval=timedelta(seconds=10))


@workflow.defn(name="agentenv.TaskRun")
class TaskRun:
    @workflow.init
    def __init__(self, inp: RunInput) -> None:
        self.inp = inp
        self.plans: dict[str, StepPlan] = {s.id: s for s in inp.steps}
        # After a continue-as-new, the run goes on from the state it carried.
        self.state = inp.carried or RunState.start(inp, workflow.info().start_time)
        self.running: dict[str, asyncio.Task[StepOutcome]] = {}

    @workflow.query(name="state")
    def get_state(self) -> RunState:
        return self.state

    @workflow.run
    async def run(self, inp: RunInput) -> RunState:
        try:
            if inp.carried is None:
                await self._record()
            await self._execute()
        except asyncio.CancelledError:
            await self._stop_running()
            self.state.status = RunStatus.CANCELLED
            await self._conclude()
            raise
        await self._conclude()
        if self.state.status is RunStatus.ERROR:
            # Fail the workflow so the UI shows it red; the details carry the full run state.
            raise ApplicationError(self.state.error or "run failed", self.state, type="RunError", non_retryable=True)
        return self.state

    async def _execute(self) -> None:
        while True:
            if self._history_is_long():
                await self._drain_and_continue_as_new()
            self._start_ready_steps()
            if not self.running:
                return
            await workflow.wait(list(self.running.values()), return_when=asyncio.FIRST_COMPLETED)
            for step_id in [sid for sid, task in self.running.items() if task.done()]:
                self._settle(step_id, self.running.pop(step_id))
            if self.state.error:
                await self._stop_running()
                return

    def _history_is_long(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() >= self.inp.continue_as_new_at

    async def _drain_and_continue_as_new(self) -> None:
        """Let running steps finish (no new ones start), then continue in a fresh history."""
        while self.running:
            await workflow.wait(list(self.running.values()), return_when=asyncio.FIRST_COMPLETED)
            for step_id in [sid for sid, task in self.running.items() if task.done()]:
                self._settle(step_id, self.running.pop(step_id))
        if self.state.error:
            return  # the run is ending anyway
        workflow.continue_as_new(self.inp.model_copy(update={"carried": self.state}))

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
                    config = resolve(plan.config, self._scope())
                except TemplateError as e:
                    self._fail(step_id, f"config: {e}")
                    continue
                step.status = StepStatus.RUNNING
                step.started_at = workflow.now()
                self.running[step_id] = asyncio.create_task(self._call(plan, config))

    def _blocks_dependents(self, step_id: str) -> bool:
        status = self.state.steps[step_id].status
        if status is StepStatus.FAILED:
            return self.plans[step_id].on_failure is not FailurePolicy.CONTINUE
        return status in (StepStatus.SKIPPED, StepStatus.CANCELLED)

    def _scope(self) -> dict[str, Any]:
        return {
            "steps": {
                sid: {"outputs": s.outputs, "status": s.status.value, "score": s.score.value if s.score else None}
                for sid, s in self.state.steps.items()
            },
            "run": {"id": self.inp.run_id},
            "task": {"id": self.inp.task_id, "version": self.inp.task_version},
        }

    async def _call(self, plan: StepPlan, config: dict[str, Any]) -> StepOutcome:
        call = StepCall(
            run_id=self.inp.run_id, task_id=self.inp.task_id, step_id=plan.id, type=plan.type,
            config=config, heartbeat_timeout=plan.heartbeat_timeout,
        )
        retry = RetryPolicy(
            maximum_attempts=plan.retries + 1,
            initial_interval=timedelta(seconds=1),
            maximum_interval=timedelta(seconds=30),
        )
        if plan.local:
            return await workflow.execute_local_activity(
                RUN_STEP, call, result_type=StepOutcome, start_to_close_timeout=plan.timeout,
                retry_policy=retry, activity_id=plan.id, summary=f"{plan.id} ({plan.type})",
            )
        return await workflow.execute_activity(
            RUN_STEP, call, result_type=StepOutcome, start_to_close_timeout=plan.timeout,
            heartbeat_timeout=plan.heartbeat_timeout, retry_policy=retry,
            activity_id=plan.id, summary=f"{plan.id} ({plan.type})",
        )

    def _settle(self, step_id: str, task: asyncio.Task[StepOutcome]) -> None:
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
                self._fail(step_id, _describe(cause, self.plans[step_id]))
            return
        step.status = StepStatus.SUCCEEDED
        step.finished_at = workflow.now()
        step.attempts = outcome.attempt
        step.duration_ms = round(outcome.duration_ms, 3)
        step.outputs = outcome.outputs
        step.score = outcome.score

    def _fail(self, step_id: str, message: str) -> None:
        step = self.state.steps[step_id]
        step.status, step.error, step.finished_at = StepStatus.FAILED, message, workflow.now()
        if self.plans[step_id].on_failure is FailurePolicy.FAIL and not self.state.error:
            self.state.error = f"step '{step_id}' failed: {message}"

    async def _stop_running(self) -> None:
        """Cancel steps still running and mark everything not started as skipped."""
        for task in self.running.values():
            task.cancel()
        if self.running:
            await asyncio.gather(*self.running.values(), return_exceptions=True)
        for step_id in list(self.running):
            self._settle(step_id, self.running.pop(step_id))
        for step in self.state.steps.values():
            if step.status is StepStatus.PENDING:
                step.status = StepStatus.SKIPPED
                step.error = "skipped: the run stopped"

    async def _conclude(self) -> None:
        self.state.finished_at = workflow.now()
        self.state.conclude()
        if self.inp.search_attributes:
            updates = [attributes.STATUS.value_set(self.state.status.value)]
            if self.state.score is not None:
                updates.append(attributes.SCORE.value_set(self.state.score))
            workflow.upsert_search_attributes(updates)
        workflow.upsert_memo({"result": {
            "status": self.state.status.value,
            "score": self.state.score,
            "steps": {sid: s.status.value for sid, s in self.state.steps.items()},
        }})
        await self._record()

    async def _record(self) -> None:
        await workflow.execute_local_activity(
            RECORD_RUN, self.state, start_to_close_timeout=timedelta(seconds=30), retry_policy=RECORD_RETRY
        )


def _describe(cause: BaseException | None, plan: StepPlan) -> str:
    if isinstance(cause, TimeoutError):
        kind = cause.type.name.lower().replace("_", "-") if cause.type else "timeout"
        limit = format_duration(plan.heartbeat_timeout if "heartbeat" in kind and plan.heartbeat_timeout else plan.timeout)
        return f"timed out ({kind}, limit {limit})"
    if isinstance(cause, ApplicationError):
        return cause.message
    return str(cause)
