"""Baseline for bench/hello.py: the least a Temporal-based CLI can do for hello's DAG shape.

Connect, run a worker in-process, execute a workflow with two parallel activities, one dependent
activity and one local activity, print the result, exit.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker


@activity.defn
async def act(name: str) -> str:
    return name


@workflow.defn
class Bare:
    @workflow.run
    async def run(self) -> str:
        opts = {"start_to_close_timeout": timedelta(seconds=30)}
        a, b = await asyncio.gather(
            workflow.execute_activity(act, "a", **opts), workflow.execute_activity(act, "b", **opts)
        )
        c = await workflow.execute_activity(act, a + b, **opts)
        return await workflow.execute_local_activity(act, c, **opts)


async def main(address: str) -> None:
    client = await Client.connect(address)
    queue = f"bare-{uuid.uuid4().hex[:6]}"
    worker = Worker(client, task_queue=queue, workflows=[Bare], activities=[act])
    task = asyncio.create_task(worker.run())
    print(await client.execute_workflow(Bare.run, id=queue, task_queue=queue, request_eager_start=True))
    task.cancel()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
    sys.stdout.flush()
    os._exit(0)
