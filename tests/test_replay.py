"""Upgrades do not break runs in flight: recorded histories of real runs replay against the current code.

A worker that picks up a run started by older code replays its history; if the workflow now issues other
commands, the run is stuck with a non-determinism error. tests/histories/ holds runs of the built-in bundles
recorded from committed code by scripts/record-histories; a failure here means the change needs
`workflow.patched(...)` (CONTRIBUTING.md, "Changing workflow code"), never a re-recording.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from agent_env.spec.run import RunInput, RunState
from agent_env.workflows.task_run import TaskRun

HISTORIES = Path(__file__).parent / "histories"
FILES = sorted(HISTORIES.glob("*.json"))
# What the recorder makes; a lost file would silently shrink the coverage.
EXPECTED = {"hello", "workplace", "refund", "episode", "continued.1", "continued.2", "workplace-named"}


def history(path: Path) -> WorkflowHistory:
    # The workflow never reads its workflow id: the file's name stands in for it.
    return WorkflowHistory.from_json(path.stem, path.read_text())


def replayer(worker, workflows=None) -> Replayer:
    """A replayer set up as the real worker is (agent_env/temporal/worker.py): its workflows, runners,
    interceptors, the client's (pydantic) data converter and its namespace (a run's seals name the namespace
    they were made for: under the Replayer's default one, a sealed run would fail its check on replay)."""
    config = worker.config()
    return Replayer(
        namespace=worker.client.namespace,
        workflows=workflows or config["workflows"],
        workflow_runner=config["workflow_runner"],
        unsandboxed_workflow_runner=config["unsandboxed_workflow_runner"],
        interceptors=config.get("interceptors") or [],
        workflow_failure_exception_types=config.get("workflow_failure_exception_types") or [],
        data_converter=worker.client.data_converter,
    )


def test_every_recorded_history_is_there():
    assert {p.stem for p in FILES} >= EXPECTED, "re-run scripts/record-histories for the missing ones"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
async def test_recorded_history_replays(worker, path):
    result = await replayer(worker).replay_workflow(history(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, (
        f"{path.name} no longer replays: the workflow code issues other commands for a run started by the "
        f"recorded code. Put the change behind workflow.patched(...) (see CONTRIBUTING.md).\n"
        f"{result.replay_failure!r}"
    )


# The guard itself: an incompatible change is caught, the same change behind a patch is not.


@workflow.defn(name="agentenv.TaskRun", sandboxed=False)
class TimerFirst(TaskRun):
    """A 'new version' that starts with a timer: a command the recorded runs never issued."""

    @workflow.run
    async def run(self, inp: RunInput) -> RunState:
        await asyncio.sleep(0.01)
        return await super().run(inp)


@workflow.defn(name="agentenv.TaskRun", sandboxed=False)
class PatchedTimerFirst(TaskRun):
    """The same change behind workflow.patched: old runs take the old path on replay."""

    @workflow.run
    async def run(self, inp: RunInput) -> RunState:
        if workflow.patched("timer-first"):
            await asyncio.sleep(0.01)
        return await super().run(inp)


async def test_an_incompatible_change_fails_replay(worker):
    result = await replayer(worker, [TimerFirst]).replay_workflow(
        history(HISTORIES / "hello.json"), raise_on_replay_failure=False
    )
    assert result.replay_failure is not None and "nondetermin" in str(result.replay_failure).lower()


async def test_the_same_change_behind_a_patch_replays(worker):
    patched = replayer(worker, [PatchedTimerFirst])
    for path in FILES:
        result = await patched.replay_workflow(history(path), raise_on_replay_failure=False)
        assert result.replay_failure is None, (path.name, result.replay_failure)


async def test_a_sealed_run_just_finished_replays(client, settings, worker):
    """A run started now carries seals that name its namespace: its history replays (as a restarted worker
    replays it) with the checks on, not only the recorded runs that predate this install's key."""
    from agent_env.planning.tasks import parse_task
    from agent_env.temporal import launch

    steps = [
        {"id": "a", "type": "sleep", "config": {"seconds": 0}},
        {"id": "b", "type": "sleep", "config": {"seconds": 0}, "depends_on": ["a"]},
    ]
    handle = await launch.start_run(client, settings, parse_task({"id": "fresh", "steps": steps}, "test task"))
    state = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert state.status == "passed"
    result = await replayer(worker).replay_workflow(await handle.fetch_history(), raise_on_replay_failure=False)
    assert result.replay_failure is None, repr(result.replay_failure)
