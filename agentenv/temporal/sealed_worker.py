"""Workers' side of seals (agentenv/temporal/seals.py says what a seal is; planners seal in sealing.py).

A worker checks a run's start before its workflow code runs, and fails the run at once, naming why, when the
seal does not hold; refuses an update whose seal does not hold (in the update's validator stage: nothing reaches
history); seals the activities and the continue-as-new of runs it checked; and checks each activity's seal
before it runs, so an activity no checked run scheduled (a standalone one, one scheduled by someone else's
worker polling this task queue) does nothing.

Runs started before the install's key existed (`PlanKey.since`), by older code, replay and go on unsealed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NoReturn

from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ContinueAsNewInput,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    HandleUpdateInput,
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from agentenv.temporal import seals
from agentenv.temporal.seals import ACTIVITY, START, UPDATE, PlanKey

UNSEALED = "UnsealedPlan"  # the ApplicationError type a refused run or activity fails with


class SealedWorker(Interceptor):
    """A worker's side: check runs, updates and activities; seal what checked runs schedule."""

    def __init__(self, key: PlanKey) -> None:
        self.key = key

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        key = self.key

        class Checked(_CheckedWorkflow):
            plan_key = key

        return Checked

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _CheckedActivity(next, self.key)


def _exempt(key: PlanKey, started: datetime) -> bool:
    """Started before this install sealed runs: by older code, which a worker replays and lets go on."""
    return key.since is not None and started < key.since


def _here(what: str, name: str, extra: str = "") -> seals.Subject:
    """A seal's subject in the running workflow."""
    info = workflow.info()
    return seals.Subject(what, info.namespace, info.workflow_id, name, extra)


class _CheckedWorkflow(WorkflowInboundInterceptor):
    plan_key: PlanKey

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_SealingWorkflowOutbound(outbound, self.plan_key))

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        info = workflow.info()
        # A run this install started unsealed, before it sealed runs, has been taken up by an older worker
        # already: only its replay goes on. One that no worker has begun must be sealed.
        exempt = _exempt(self.plan_key, info.workflow_start_time) and workflow.unsafe.is_replaying()
        subject = _here(START, info.workflow_type)
        why = (
            None
            if exempt
            else seals.problem(self.plan_key, info.headers, subject, input.args, info.workflow_start_time)
        )
        if why is not None:
            raise ApplicationError(
                f"run {info.workflow_id} was refused before any step ran: {why}. Only this install's planners "
                "(agent-env run, runs rerun, the episode API) start runs its workers execute; if you did, "
                "check that planners and workers share one plan key ([temporal] plan_key_secret)",
                type=UNSEALED,
                non_retryable=True,
            )
        return await super().execute_workflow(input)

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        subject = _here(UPDATE, input.update, input.id)
        why = seals.problem(self.plan_key, input.headers, subject, input.args, workflow.now())
        if why is not None:
            raise ValueError(f"update {input.update!r} to run {subject.workflow_id} refused: {why}")
        super().handle_update_validator(input)


class _SealingWorkflowOutbound(WorkflowOutboundInterceptor):
    """Seals what a checked run schedules: its activities (local ones run here, from this code: no seal) and
    its continuation."""

    def __init__(self, next: WorkflowOutboundInterceptor, key: PlanKey) -> None:
        super().__init__(next)
        self.plan_key = key

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        seal = seals.make(self.plan_key, _here(ACTIVITY, input.activity), input.args, workflow.now())
        input.headers = {**input.headers, seals.HEADER: seal}
        return super().start_activity(input)

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        subject = _here(START, input.workflow or workflow.info().workflow_type)
        input.headers = {**input.headers, seals.HEADER: seals.make(self.plan_key, subject, input.args, workflow.now())}
        super().continue_as_new(input)


class _CheckedActivity(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, key: PlanKey) -> None:
        super().__init__(next)
        self.plan_key = key

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if not info.is_local and not _exempt(self.plan_key, info.scheduled_time):
            why = (
                "no run scheduled it"
                if not info.workflow_id
                else seals.problem(
                    self.plan_key,
                    input.headers,
                    seals.Subject(ACTIVITY, info.namespace, info.workflow_id, info.activity_type),
                    input.args,
                    now=None,
                )
            )
            if why is not None:
                raise ApplicationError(
                    f"activity {info.activity_type} refused: {why}. Only runs this install's workers checked "
                    "schedule activities they execute",
                    type=UNSEALED,
                    non_retryable=True,
                )
        return await super().execute_activity(input)
