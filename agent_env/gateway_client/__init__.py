"""The gateway's clients: what every room that talks to the gateway imports, never the gateway's server.

`api`: the protocol they meet (`GatewayClient`) and their errors; `single`: one gateway's client; `pool`:
several gateways seen as one; `placement`: where a pool put each instance, and rebuilding it elsewhere;
`wire`: the gateway's answers, shared with its routes.
"""

from agent_env.gateway_client.api import GatewayClient, GatewayRefused, GatewayUnavailable

__all__ = ["GatewayClient", "GatewayRefused", "GatewayUnavailable"]
