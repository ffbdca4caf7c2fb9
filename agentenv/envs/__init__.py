"""Environments: the apps agents act in, and the SDK to build them.

from agentenv.envs import App, Ctx, ToolError, tool
"""

from agentenv.envs.app import App, ToolError, tool
from agentenv.envs.context import Ctx

__all__ = ["App", "Ctx", "ToolError", "tool"]
