"""Trainer episodes: play a task's agents from your own loop; rewards are the task's scores."""

from agent_env.episodes.client import Episode, EpisodeError, Episodes, Turn
from agent_env.episodes.group import EpisodeGroup
from agent_env.episodes.outcome import Component, EpisodeInfrastructureError, EpisodeResult
from agent_env.episodes.spec import EpisodeSpec

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
]
