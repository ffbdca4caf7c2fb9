"""What `${...}` references in step configs and trigger actions see: the steps (as the DAG shows them), the run,
the task, and the clock when the run has one. Pure: built from the run's input, its DAG and the clock's reading."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from agent_env.spec.run import RunInput
from agent_env.workflows.dag import Dag, StepView


class RunView(TypedDict):
    id: str
    seed: object  # the run's pinned seed (0 when none was pinned)


class TaskView(TypedDict):
    id: str
    version: str


class ClockView(TypedDict):
    now: str  # the virtual time, ISO 8601
    start: str | None  # the clock's start


class Scope(TypedDict):
    steps: dict[str, StepView]
    run: RunView
    task: TaskView
    clock: NotRequired[ClockView]


def scope(inp: RunInput, dag: Dag, clock: ClockView | None) -> Scope:
    seen: Scope = {
        "steps": dag.views(),
        "run": {"id": inp.run_id, "seed": inp.pins.get("seed", 0)},
        "task": {"id": inp.task_id, "version": inp.task_version},
    }
    if clock is not None:
        seen["clock"] = clock
    return seen
