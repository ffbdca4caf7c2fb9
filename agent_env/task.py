"""Tasks and trainer episodes, under the names a trainer types:

    from agent_env.task import EpisodeSpec, Task
    spec = EpisodeSpec.from_task(Task.get("my-task"), turn_timeout=900)
    episode = await spec.start()
    while (turn := await episode.next_turn()) is not None:
        async with turn.tools() as tools:  # the agent's env tools, called as its role
            ...  # your model reads turn.system_prompt and turn.prompt, and acts with tools.list() and tools.call()
        await turn.end(response="Done.")
    outcome = await episode.outcome()  # the reward (outcome.total), its rows (outcome.components), by step

`Task.get` finds a task by id (agent_env.task_lookup); the episode API is agent_env.episodes. The CLI
never imports this module: it pulls in the episode client and task planning.
"""

from agent_env.episodes.client import Episode, EpisodeError, Episodes, Turn
from agent_env.episodes.group import EpisodeGroup
from agent_env.episodes.outcome import Component, EpisodeInfrastructureError, EpisodeResult
from agent_env.episodes.recording import RecorderServer, Trajectory
from agent_env.episodes.spec import EpisodeSpec
from agent_env.task_lookup import Task

__all__ = [
    "Component",
    "Episode",
    "EpisodeError",
    "EpisodeGroup",
    "EpisodeInfrastructureError",
    "EpisodeResult",
    "EpisodeSpec",
    "Turn",
    "Episodes",
    "RecorderServer",
    "Task",
    "Trajectory",
]
