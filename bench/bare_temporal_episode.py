"""Baseline for bench/episodes.py: the least one Temporal workflow per episode costs on this machine.

The episode's shape with nothing in it: a workflow started with an update that waits for the turn after three
local activities (ours: deploy the env, deploy the agent, mark the trajectories), one answer update, three more
local activities (ours: keep the transcript, grade, record), the result. The activities return at once; no
gateway, no tool calls, no stores. Worker and trainer share this process (ours are two), so this is a floor.

Beside it, the same episode as two updates of one long-lived workflow (`BareLane`: a trainer's lane playing
episodes one after another, no workflow started or closed per episode): what episodes that are not each a
workflow would cost, the design the floor points to.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateStage
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Worker

STEPS = dict(start_to_close_timeout=timedelta(seconds=30))


@activity.defn
async def step(name: str) -> str:
    return name


@workflow.defn(sandboxed=False)
class BareEpisode:
    def __init__(self) -> None:
        self.offered = False
        self.answered = False

    @workflow.run
    async def run(self) -> str:
        for name in ("deploy_env", "deploy_agent", "marks"):
            await workflow.execute_local_activity(step, name, **STEPS)
        self.offered = True
        await workflow.wait_condition(lambda: self.answered)
        for name in ("finish", "grade", "record"):
            await workflow.execute_local_activity(step, name, **STEPS)
        return "passed"

    @workflow.update
    async def next_turn(self) -> str:
        await workflow.wait_condition(lambda: self.offered)
        return "turn"

    @workflow.update
    def answer(self, response: str) -> str:
        self.answered = True
        return "taken"


@workflow.defn(sandboxed=False)
class BareLane:
    """Episodes as updates: `start` runs the opening steps and gives the turn, `answer` the closing ones."""

    def __init__(self) -> None:
        self.closed = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.closed)

    @workflow.update
    async def start(self) -> str:
        for name in ("deploy_env", "deploy_agent", "marks"):
            await workflow.execute_local_activity(step, name, **STEPS)
        return "turn"

    @workflow.update
    async def answer(self, response: str) -> str:
        for name in ("finish", "grade", "record"):
            await workflow.execute_local_activity(step, name, **STEPS)
        return "passed"

    @workflow.signal
    def close(self) -> None:
        self.closed = True


class Floor:
    """A worker for BareEpisode in this process, on its own task queue of `client`'s server."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def __aenter__(self) -> Floor:
        self.queue = f"bare-episode-{uuid.uuid4().hex[:6]}"
        self.worker = Worker(self.client, task_queue=self.queue, workflows=[BareEpisode, BareLane], activities=[step])
        await self.worker.__aenter__()
        self.lane = await self.client.start_workflow(BareLane.run, id=f"{self.queue}-lane", task_queue=self.queue)
        for _ in range(5):
            await self.episode()  # warm up
            await self.lane_episode()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.lane.signal(BareLane.close)
        await self.lane.result()
        await self.worker.__aexit__(*exc)

    async def lane_episode(self) -> float:
        """One episode as two updates of the lane (s). (A real lane would continue as new now and then.)"""
        t = time.perf_counter()
        await self.lane.execute_update(BareLane.start)
        await self.lane.execute_update(BareLane.answer, "done")
        return time.perf_counter() - t

    async def episode(self) -> float:
        """One episode's latency (s)."""
        t = time.perf_counter()
        start = WithStartWorkflowOperation(
            BareEpisode.run,
            id=f"{self.queue}-{uuid.uuid4().hex[:8]}",
            task_queue=self.queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        )
        first = await self.client.start_update_with_start_workflow(
            BareEpisode.next_turn, start_workflow_operation=start, wait_for_stage=WorkflowUpdateStage.COMPLETED
        )
        await first.result()
        handle = await start.workflow_handle()
        await handle.execute_update(BareEpisode.answer, "done")
        await handle.result()
        return time.perf_counter() - t
