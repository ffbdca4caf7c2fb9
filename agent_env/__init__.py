"""agent_env: reinforcement-learning environments for AI agents, run durably on Temporal.

Kept import-light on purpose: the CLI imports this package on every invocation.
"""

__version__ = "0.1.0"

_LAZY = {
    "Task": "agent_env.task_lookup:Task",
    "EpisodeSpec": "agent_env.episodes:EpisodeSpec",
    "Episodes": "agent_env.episodes:Episodes",
    "EpisodeResult": "agent_env.episodes:EpisodeResult",
    "EpisodeInfrastructureError": "agent_env.episodes:EpisodeInfrastructureError",
}


def __getattr__(name: str):
    """`from agent_env import Task, EpisodeSpec` without importing them for every CLI command."""
    if name not in _LAZY:
        raise AttributeError(f"module 'agent_env' has no attribute {name!r}")
    import importlib

    module, _, attr = _LAZY[name].partition(":")
    return getattr(importlib.import_module(module), attr)
