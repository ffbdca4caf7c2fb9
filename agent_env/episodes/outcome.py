"""What an ended episode gives a trainer: its reward and the rows it came from, or a typed error when the run
could not grade the policy.

    outcome = await episode.outcome()   # EpisodeResult, or raises EpisodeInfrastructureError
    outcome.total                       # the run's score, as `agent-env run` reports it (the reward)
    outcome.scores                      # every score the run recorded, by step id
    outcome.components                  # each grading check's row: step, name, score, passed, weight

An infrastructure failure is never a score: a run that ended in error (a step failed under the `fail` policy,
a worker, gateway or sandbox failure, a timeout, the trainer's turn not answered in time), a run cancelled from
outside, or a grading step that failed (its score would be missing, or counted as 0 by an aggregate) raises
`EpisodeInfrastructureError` naming the step and the cause, so a trainer drops or retries the rollout instead
of learning from it. A run its trainer abandoned (`episode.abandon`) has no reward: `total` is None.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_env.errors import AgentEnvError
from agent_env.spec.run import ABANDONED, RunState, RunStatus, StepStatus
from agent_env.step_types import FAMILIES

# The built-in step types that grade (the catalog's "grading" family): one that failed leaves the run without its
# honest grade.
GRADING_TYPES = frozenset(FAMILIES["grading"])


class EpisodeInfrastructureError(AgentEnvError):
    """The run could not grade the policy (a step errored, a worker, gateway or sandbox failed, a timeout, a
    cancellation from outside): drop or retry the rollout; never score it. `step` names the step that failed
    (None when the run as a whole did), `cause` says why, `status` is how the run ended."""

    def __init__(self, run_id: str, step: str | None, cause: str, status: str) -> None:
        where = f"step {step!r} of run {run_id}" if step else f"run {run_id}"
        super().__init__(
            f"{where} failed: {cause} (an infrastructure failure: the episode has no reward)",
            f"drop or retry the rollout; see why with `agent-env runs show {run_id}`",
        )
        self.run_id, self.step, self.cause, self.status = run_id, step, cause, status


class Component(BaseModel):
    """One row of a grading step's score: a check or criterion with its own score, whether it passed, and its
    weight in its step's score."""

    step: str = Field(description="the grading step the row belongs to")
    name: str = Field(description="the check's or criterion's name")
    score: float = Field(description="the row's own score: a graded row's (a judge's), else 1 passed, 0 failed")
    passed: bool
    weight: float
    detail: str = ""
    in_total: bool = Field(description="its step's score decides the total (not only shown)")


class EpisodeResult(BaseModel):
    """An ended episode's reward and where it came from."""

    run_id: str
    status: RunStatus = Field(description="passed, failed, or cancelled (abandoned by its trainer)")
    total: float | None = Field(
        description="the run's score as `agent-env run` reports it: the last aggregate_verifiers step's score, "
        "else the mean of every step's score (None: nothing scored, e.g. abandoned)"
    )
    passed: bool = Field(description="every deciding score reached its threshold (`agent-env run`'s PASSED)")
    scores: dict[str, float] = Field(description="every score the run recorded, by step id")
    components: list[Component] = Field(description="each grading check's row, steps in the task's order")


def infrastructure_failure(state: RunState) -> EpisodeInfrastructureError | None:
    """Why the ended run `state` cannot grade the policy, or None when its scores are the honest grade."""
    failed = [sid for sid, s in state.steps.items() if s.status is StepStatus.FAILED]
    if state.status is RunStatus.ERROR:
        first = next((sid for sid in failed if (state.error or "").startswith(f"step '{sid}' failed")), None)
        step = first or (failed[0] if failed else None)
        cause = state.error or (state.steps[step].error if step else None) or "the run ended in error"
        return EpisodeInfrastructureError(state.run_id, step, cause, state.status.value)
    if state.status is RunStatus.CANCELLED:
        if state.error and state.error.startswith(ABANDONED):
            return None
        return EpisodeInfrastructureError(state.run_id, None, state.error or "cancelled from outside", "cancelled")
    for sid in failed:
        grader = state.steps[sid]
        if grader.type in GRADING_TYPES:
            cause = f"the grading step failed: {grader.error or 'no reason recorded'}"
            return EpisodeInfrastructureError(state.run_id, sid, cause, state.status.value)
    return None


def outcome_of(state: RunState) -> EpisodeResult:
    """The ended run's result; EpisodeInfrastructureError when it could not grade the policy."""
    failure = infrastructure_failure(state)
    if failure is not None:
        raise failure
    deciding = state.scores()
    components = [
        Component(
            step=sid,
            name=c.name,
            score=c.score if c.score is not None else float(c.passed),
            passed=c.passed,
            weight=c.weight,
            detail=c.detail,
            in_total=sid in deciding,
        )
        for sid, s in state.steps.items()
        if s.score is not None
        for c in s.score.criteria
    ]
    return EpisodeResult(
        run_id=state.run_id,
        status=state.status,
        total=state.score,
        passed=state.status is RunStatus.PASSED,
        scores={sid: s.score.value for sid, s in state.steps.items() if s.score is not None},
        components=components,
    )
