"""The run's steps as a DAG, and the one owner of their state: which steps are ready, what a step's end does to the
rest (dependents start or are skipped) and to the run (a failing step fails it unless its policy says otherwise).

Plain deterministic code over `RunState` (no Temporal, no I/O: the workflow passes the times in and does what the
DAG decides). Steps are looked at in the task's order, so the same run makes the same decisions on replay.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, TypedDict

from agent_env.spec.run import RunState, RunStatus, StepOutcome, StepPlan, StepState, StepStatus
from agent_env.spec.task import FailurePolicy


class StepView(TypedDict):
    """What `${steps.ID...}` references see of a step."""

    outputs: dict[str, Any]
    status: str
    score: float | None
    passed: bool | None


class Dag:
    def __init__(self, plans: dict[str, StepPlan], state: RunState) -> None:
        self.plans = plans
        self.state = state

    @property
    def error(self) -> str | None:
        """Why the run fails (the first failing step's, the world's, bad data...), once something does."""
        return self.state.error

    def fail_run(self, message: str) -> None:
        self.state.error = message

    def time_out(self, message: str) -> None:
        """The run's time limit passed: it ends in error (what ran is settled and skipped by the caller)."""
        self.state.error = message
        self.state.status = RunStatus.ERROR

    def cancel_run(self, reason: str | None = None) -> None:
        """The run is cancelled (from outside, or abandoned by its trainer with `reason`): it ends as cancelled,
        whatever its steps scored."""
        self.state.status = RunStatus.CANCELLED
        if reason is not None:
            self.state.error = reason

    def step(self, step_id: str) -> StepState:
        return self.state.steps[step_id]

    # -- what starts --

    def ready(self) -> Iterator[StepPlan]:
        """The steps that may start now, in the task's order; the caller starts each one it is given (`start`) or
        fails it (`fail`). A step after one that blocks its dependents is skipped instead. Passes repeat while
        any step was decided (a step started in the workflow may finish at once) and the run has not failed."""
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
                blocker = next((d for d in deps if self.blocks_dependents(d.id)), None)
                if blocker is not None:
                    step.status = StepStatus.SKIPPED
                    step.error = f"skipped: '{blocker.id}' {blocker.status.value}"
                    continue
                yield self.plans[step_id]

    def blocks_dependents(self, step_id: str) -> bool:
        """A step that did not succeed holds back what depends on it, unless it failed with on_failure=continue."""
        status = self.state.steps[step_id].status
        if status is StepStatus.FAILED:
            return self.plans[step_id].on_failure is not FailurePolicy.CONTINUE
        return status in (StepStatus.SKIPPED, StepStatus.CANCELLED)

    # -- how a step ends --

    def start(self, step_id: str, at: datetime) -> None:
        step = self.state.steps[step_id]
        step.status = StepStatus.RUNNING
        step.started_at = at

    def succeed(self, step_id: str, at: datetime, outputs: dict[str, Any]) -> None:
        """A step the workflow ran itself (a world step, a clock's wake) succeeded on its one attempt."""
        step = self.state.steps[step_id]
        step.status, step.finished_at, step.outputs, step.attempts = StepStatus.SUCCEEDED, at, outputs, 1

    def completed(self, step_id: str, at: datetime, outcome: StepOutcome) -> None:
        """A step's activity (or a trainer's prompt) returned its outcome."""
        step = self.state.steps[step_id]
        step.status = StepStatus.SUCCEEDED
        step.finished_at = at
        step.attempts = outcome.attempt
        step.duration_ms = round(outcome.duration_ms, 3)
        step.outputs = outcome.outputs
        step.score = outcome.score

    def fail(self, step_id: str, message: str, at: datetime) -> None:
        """The step failed; with on_failure=fail (the default) so does the run, for the first such step."""
        step = self.state.steps[step_id]
        step.status, step.error, step.finished_at = StepStatus.FAILED, message, at
        if self.plans[step_id].on_failure is FailurePolicy.FAIL and not self.state.error:
            self.state.error = f"step '{step_id}' failed: {message}"

    def cancel(self, step_id: str, at: datetime, reason: str | None = None) -> None:
        step = self.state.steps[step_id]
        step.status, step.finished_at = StepStatus.CANCELLED, at
        if reason is not None:
            step.error = reason

    def skip_pending(self, reason: str | None) -> None:
        """The run stops: nothing that has not started will."""
        for step in self.state.steps.values():
            if step.status is StepStatus.PENDING:
                step.status = StepStatus.SKIPPED
                step.error = f"skipped: {reason}" if reason else "skipped: the run stopped"

    # -- what the rest of the run reads --

    def views(self) -> dict[str, StepView]:
        """Every step as `${steps...}` references see it."""
        return {
            sid: {
                "outputs": s.outputs,
                "status": s.status.value,
                "score": s.score.value if s.score else None,
                "passed": s.score.passed if s.score else None,
            }
            for sid, s in self.state.steps.items()
        }

    def ran(self) -> list[StepPlan]:
        """The steps that started (whatever their end), in the task's order."""
        skipped = (StepStatus.PENDING, StepStatus.SKIPPED)
        return [plan for sid, plan in self.plans.items() if self.state.steps[sid].status not in skipped]

    def deployed_agent(self, step_id: str, agent: str) -> Mapping[str, Any]:
        """The outputs of the step that deployed `agent` (for an instruction sent to it); ValueError saying why
        `step_id` is no such step."""
        step = self.state.steps.get(step_id)
        if step is None or not self.plans[step_id].deploys_agent:
            raise ValueError(f"`by` names {step_id!r}, which is not a deploy_agent step")
        if step.status is not StepStatus.SUCCEEDED:
            raise ValueError(f"step {step_id!r} has not deployed its agent (it is {step.status.value})")
        if step.outputs.get("name") != agent:
            raise ValueError(f"step {step_id!r} deployed {step.outputs.get('name')!r}, not agent {agent!r}")
        return step.outputs
