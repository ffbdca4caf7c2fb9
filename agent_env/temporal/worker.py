"""Workers: the task-run workflow and its activities on the orchestration task queue."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from agent_env.config import Settings

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.worker import Worker

    from agent_env.temporal.drain import Draining


def create_worker(
    client: Client, settings: Settings, *, identity: str | None = None, draining: Draining | None = None
) -> Worker:
    """`draining`: how long a shutdown lets running activities finish (`agent-env worker`'s is
    `[worker] drain_timeout`); without one, 5 s. Either way a shutdown hands back what is still running."""
    from temporalio.worker import Worker

    from agent_env.activities import RunActivities
    from agent_env.temporal import seals
    from agent_env.temporal.drain import Draining
    from agent_env.temporal.sealed_worker import SealedWorker
    from agent_env.workflows.task_run import TaskRun

    draining = draining or Draining(timedelta(seconds=5))
    activities = RunActivities(settings)
    return Worker(
        client,
        task_queue=settings.temporal.task_queue,
        workflows=[TaskRun],
        activities=[
            activities.run_step,
            activities.record_run,
            activities.world_action,
            activities.push_world,
            activities.pace,
            activities.prompt_marks,
            activities.agent_ask,
            activities.prompt_finish,
            activities.release_sandboxes,
        ],
        identity=identity,
        # After a worker dies, its cached workflows move to another worker this soon.
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=5),
        graceful_shutdown_timeout=draining.grace,
        # Runs, updates and activities are checked against the install's plan key before anything acts.
        interceptors=[draining, SealedWorker(seals.load(settings))],
    )


async def workers_polling(client: Client, settings: Settings) -> bool:
    """Whether a worker polled the task queue lately (Temporal lists its recent pollers). Unknown: True (the
    caller only warns when none does)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    try:
        answer = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=settings.temporal.namespace,
                task_queue=TaskQueue(name=settings.temporal.task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
    except Exception:  # noqa: BLE001 - unknown: no warning
        return True
    return bool(answer.pollers)
