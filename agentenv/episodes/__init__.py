"""Trainer episodes: play a task's agents from your own loop; rewards are the task's scores."""

from agentenv.episodes.client import Episode, EpisodeError, Episodes, EpisodeTurn
from agentenv.episodes.group import EpisodeGroup
from agentenv.episodes.spec import EpisodeSpec

__all__ = ["Episode", "EpisodeError", "EpisodeGroup", "EpisodeSpec", "EpisodeTurn", "Episodes"]
