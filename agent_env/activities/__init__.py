"""Temporal activities, as the workflow's contract declares them (agent_env.workflows.contract), gathered from
their modules by job: run a step (`run_step`), record a run (`records`), world actions and pushes (`world`),
steps and world actions under types that name them (`named`), pacing (`pacing`), agents' turns (`turns`), release a run (`release`); what they share is in `shared`."""

from __future__ import annotations

from agent_env.activities.named import NamedActivities
from agent_env.activities.pacing import PacingActivities
from agent_env.activities.records import RecordActivities
from agent_env.activities.release import ReleaseActivities
from agent_env.activities.run_step import StepActivities
from agent_env.activities.turns import TurnActivities
from agent_env.activities.world import WorldActivities


class RunActivities(
    NamedActivities,
    StepActivities,
    RecordActivities,
    WorldActivities,
    PacingActivities,
    TurnActivities,
    ReleaseActivities,
):
    """Every activity of a worker, bound to its settings (one set of stores, one gateway client)."""


__all__ = ["RunActivities"]
