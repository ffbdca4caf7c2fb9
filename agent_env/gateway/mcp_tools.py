"""Tools the gateway itself serves in every instance (beside the apps' tools)."""

from __future__ import annotations

from functools import cache

from agent_env.envs.app import ToolOptions, ToolSpec, build_tool_spec
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.roles import GET_TIME

__all__ = ["GET_TIME", "get_time_spec"]


class _GatewayTools:
    def get_time(self, zone: str | None = None) -> JsonObject:
        """The current time in this world (the same for every app and agent).

        Args:
            zone: an optional IANA time zone, e.g. "America/New_York", to also get the local time
        """
        raise NotImplementedError  # answered by the gateway from the instance's clock


@cache  # the same for every instance: built once
def get_time_spec() -> ToolSpec:
    return build_tool_spec("gateway", _GatewayTools.get_time, ToolOptions(None, read_only=True, hidden=False))
