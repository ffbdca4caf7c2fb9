"""Workers' side of seals (agent_env/temporal_client/seals.py says what a seal is; planners seal in sealing.py).

A worker checks a run's start before its workflow code runs, and fails the run at once, naming why, when the
seal does not hold; refuses an update whose seal does not hold (in the update's validator stage: nothing reaches
history); seals the activities and the continue-as-new of runs it checked; and checks each activity's seal
before it runs, so an activity no checked run scheduled (a standalone one, one scheduled by someone else's
worker polling this task queue) does nothing. The worker that runs an activity seals its result too, and the
run checks that seal: Temporal lets any client complete a running activity by its id, and a result is a step's
outputs and score.

Runs started before the install's key existed (`PlanKey.since`), by older code, replay and go on unsealed.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, NoReturn

from pydantic import TypeAdapter
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

from agent_env.temporal_client import seals
from agent_env.temporal_client.seals import ACTIVITY, RESULT, START, UPDATE, PlanKey
from agent_env.workflows import contract

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


def _result_subject(activity: seals.Subject, args: Sequence[Any]) -> seals.Subject:
    """What an activity's result is sealed for: that call of that activity in that workflow."""
    return seals.Subject(RESULT, activity.namespace, activity.workflow_id, activity.name, seals.digest(args).hex())


@dataclass
class _RunSeals:
    """What the run's start said, for what it schedules: whether its activities' results come sealed (runs
    started sealed; a run started before seals existed gets them bare, as its history has them), and whether
    they are checked (not for runs started before this install's key, whose seals may be of another key)."""

    results: bool = False
    check: bool = False


class _CheckedWorkflow(WorkflowInboundInterceptor):
    plan_key: PlanKey

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        self.run = _RunSeals()
        super().init(_SealingWorkflowOutbound(outbound, self.plan_key, self.run))

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        info = workflow.info()
        # A run this install started unsealed, before it sealed runs, has been taken up by an older worker
        # already: only its replay goes on. One that no worker has begun must be sealed.
        before_key = _exempt(self.plan_key, info.workflow_start_time)
        exempt = before_key and workflow.unsafe.is_replaying()
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
        self.run.results = seals.HEADER in info.headers  # (recorded in history: the same on every replay)
        self.run.check = self.run.results and not before_key
        return await super().execute_workflow(input)

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        subject = _here(UPDATE, input.update, input.id)
        why = seals.problem(self.plan_key, input.headers, subject, input.args, workflow.now())
        if why is not None:
            raise ValueError(f"update {input.update!r} to run {subject.workflow_id} refused: {why}")
        super().handle_update_validator(input)


class _SealingWorkflowOutbound(WorkflowOutboundInterceptor):
    """Seals what a checked run schedules: its activities (local ones run here, from this code: no seal) and
    its continuation; and checks the seals of its activities' results."""

    def __init__(self, next: WorkflowOutboundInterceptor, key: PlanKey, run: _RunSeals) -> None:
        super().__init__(next)
        self.plan_key = key
        self.run = run

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        subject = _here(ACTIVITY, input.activity, RESULT if self.run.results else "")
        input.headers = {**input.headers, seals.HEADER: seals.make(self.plan_key, subject, input.args, workflow.now())}
        if not self.run.results:
            return super().start_activity(input)
        # Its result comes as {"result", "seal"}: taken as JSON, checked, then made the type the caller asked for.
        returns, args = input.ret_type, list(input.args)
        input.ret_type = None
        handle = super().start_activity(input)
        check = self.plan_key if self.run.check else None
        return asyncio.create_task(_unsealed(handle, check, subject, args, returns))  # type: ignore[return-value]  # awaited like the handle; cancelling it cancels the activity

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        subject = _here(START, input.workflow or workflow.info().workflow_type)
        input.headers = {**input.headers, seals.HEADER: seals.make(self.plan_key, subject, input.args, workflow.now())}
        super().continue_as_new(input)


async def _unsealed(
    handle: Awaitable[Any], key: PlanKey | None, subject: seals.Subject, args: list[Any], returns: Any
) -> Any:
    """An activity's result, once its seal holds (`key`: None for a run whose seals are not checked). Temporal
    lets any client complete a running activity by its id: such a result has no seal, and fails the step."""
    answer = await handle
    try:
        if not isinstance(answer, dict) or answer.keys() != {"result", "seal"}:
            raise ValueError("it carries no seal")
        value = answer["result"] if returns is None else _adapter(returns).validate_python(answer["result"])
    except ValueError as e:  # (pydantic's ValidationError is one)
        why: str | None = str(e)[:300]
    else:
        why = None if key is None else seals.check(key, answer["seal"], _result_subject(subject, args), [value], None)
    if why is not None:
        raise ApplicationError(
            f"the result of activity {subject.name} was refused: {why}. Only this install's workers complete "
            "its activities (Temporal lets any client complete one by its id: `temporal activity complete`)",
            type=UNSEALED,
            non_retryable=True,
        )
    return value


@functools.cache
def _adapter(returns: Any) -> TypeAdapter[Any]:
    return TypeAdapter(returns)


class _CheckedActivity(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, key: PlanKey) -> None:
        super().__init__(next)
        self.plan_key = key

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if info.is_local or _exempt(self.plan_key, info.scheduled_time):
            return await super().execute_activity(input)
        if not info.workflow_id:
            self._refuse(info, "no run scheduled it")
        subject = seals.Subject(ACTIVITY, info.namespace, info.workflow_id, info.activity_type, RESULT)
        args = self._sent(info, input.args)
        why = seals.problem(self.plan_key, input.headers, subject, args, now=None)
        if why is not None:  # scheduled by a run started before seals, whose results stay bare
            bare = replace(subject, extra="")
            if seals.problem(self.plan_key, input.headers, bare, args, now=None) is not None:
                self._refuse(info, why)
            return await super().execute_activity(input)
        result = await super().execute_activity(input)
        sealed = seals.seal(self.plan_key, _result_subject(subject, args), [result], datetime.now(UTC))
        return {"result": result, "seal": sealed}

    @classmethod
    def _sent(cls, info: activity.Info, args: Sequence[Any]) -> list[Any]:
        """The arguments as the run sent them, which its seal is over. A named activity (a step's or a world
        action's: agent_env.activities.named) is a dynamic one, which gets them raw in one list: they are
        decoded as its family takes them."""
        if contract.named(info.activity_type) is None:
            return list(args)
        try:
            typed = contract.decode_named(info.activity_type, args[0], activity.payload_converter().from_payload)
        except Exception:  # the converter's errors: not what the run sent
            typed = None
        if typed is None:
            cls._refuse(info, "its arguments are not what its type takes")
        return typed

    @staticmethod
    def _refuse(info: activity.Info, why: str) -> NoReturn:
        raise ApplicationError(
            f"activity {info.activity_type} refused: {why}. Only runs this install's workers checked schedule "
            "activities they execute",
            type=UNSEALED,
            non_retryable=True,
        )
