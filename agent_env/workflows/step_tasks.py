"""The steps in flight: each one an asyncio task of the workflow (its activity, or a prompt a trainer plays), and
how its end is read into the DAG (an outcome, a failure described with its limit, a cancellation).

Deterministic workflow code: tasks are kept, cancelled and settled in the order they started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from agent_env.spec.duration import format_duration
    from agent_env.spec.run import StepCall, StepOutcome, StepPlan
    from agent_env.workflows import details
    from agent_env.workflows.contract import RUN_STEP, step_activity
    from agent_env.workflows.dag import Dag


class StepTasks:
    """`succeeded` hears of each step that ends with an outcome (after the DAG recorded it)."""

    def __init__(self, dag: Dag, succeeded: Callable[[StepPlan, StepOutcome], None]) -> None:
        self.dag = dag
        self.succeeded = succeeded
        self.running: dict[str, asyncio.Task[StepOutcome]] = {}

    def busy(self) -> bool:
        return bool(self.running)

    def start(self, step_id: str, work: Coroutine[Any, Any, StepOutcome]) -> None:
        self.running[step_id] = asyncio.create_task(work)

    def settle_done(self) -> None:
        for step_id in [sid for sid, task in self.running.items() if task.done()]:
            self.settle(step_id)

    def settle(self, step_id: str) -> None:
        """Record how a step's task ended."""
        task = self.running.pop(step_id)
        try:
            outcome = task.result()
        except asyncio.CancelledError:
            self.dag.cancel(step_id, workflow.now())
            return
        except FailureError as e:  # activities wrap the cause in ActivityError; local activities may not
            cause = e.cause if isinstance(e, ActivityError) else e
            if isinstance(cause, CancelledError):
                self.dag.cancel(step_id, workflow.now())
            else:
                self.dag.fail(step_id, _describe(cause, self.dag.plans[step_id]), workflow.now())
            return
        self.dag.completed(step_id, workflow.now(), outcome)
        self.succeeded(self.dag.plans[step_id], outcome)

    async def stop(self) -> None:
        """Cancel every step still running, and record them."""
        for task in self.running.values():
            task.cancel()
        if self.running:
            await asyncio.gather(*self.running.values(), return_exceptions=True)
        for step_id in list(self.running):
            self.settle(step_id)

    async def drain(self, leave: Collection[str]) -> None:
        """Let running steps finish; those in `leave` (prompts a trainer plays: their progress is carried) are
        cancelled without a record."""
        for step_id in [sid for sid in self.running if sid in leave]:
            task = self.running.pop(step_id)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        while self.running:
            await workflow.wait(list(self.running.values()), return_when=asyncio.FIRST_COMPLETED)
            self.settle_done()


async def run_step(
    run_id: str, task_id: str, plan: StepPlan, config: dict[str, Any], *, named: bool = False
) -> StepOutcome:
    """The step's activity (a local one if its type asks), retried as its plan says. `named`: it runs under
    its step type's activity type (`agentenv.step.deploy_env`), the one the Temporal UI shows; otherwise under
    `agentenv.run_step`, as runs before the named-activities patch did."""
    name = step_activity(plan.type) if named else RUN_STEP.name
    call = StepCall(
        run_id=run_id,
        task_id=task_id,
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
            name,
            call,
            result_type=RUN_STEP.returns,
            start_to_close_timeout=plan.timeout,
            retry_policy=retry,
            activity_id=plan.id,
            summary=details.step_summary(plan.id, plan.type),
        )
        return outcome
    outcome = await workflow.execute_activity(
        name,
        call,
        result_type=RUN_STEP.returns,
        start_to_close_timeout=plan.timeout,
        heartbeat_timeout=plan.heartbeat_timeout,
        retry_policy=retry,
        activity_id=plan.id,
        summary=details.step_summary(plan.id, plan.type),
    )
    return outcome


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
