"""`--agent-artifact-id NAME[@VERSION]`: every deploy_agent step of a task deploys that registry agent version
instead of its own (the agent record carries the agent's image: its sandbox, build and command), applied before
the run is planned so the plan pins it like any registry agent (`agent` + `agent_version`)."""

from __future__ import annotations

from agent_env.spec.task import TaskSpec

DEPLOY_AGENT = "deploy_agent"
_REPLACED = ("agent", "agent_version", "record", "a2a_agent_id", "a2a_agent_version")


def with_agent(task: TaskSpec, name: str, version: int) -> TaskSpec:
    """The task with each deploy_agent step naming agent `name` at `version` (the task unchanged when none)."""
    if not any(s.type == DEPLOY_AGENT for s in task.steps):
        return task
    steps = [
        s.model_copy(
            update={
                "config": {
                    **{k: v for k, v in s.config.items() if k not in _REPLACED},
                    "agent": name,
                    "agent_version": version,
                }
            }
        )
        if s.type == DEPLOY_AGENT
        else s
        for s in task.steps
    ]
    return task.model_copy(update={"steps": steps})
