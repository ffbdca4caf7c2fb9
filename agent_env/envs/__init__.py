"""Environments: the apps agents act in, and the SDK to build them.

from agent_env.envs import App, Ctx, ToolError, tool
"""

from agent_env.envs.app import App, ToolError, tool
from agent_env.envs.context import Ctx

__all__ = ["App", "Ctx", "ToolError", "tool"]
