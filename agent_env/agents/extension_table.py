"""The open protocol's agent extensions, in one table: each `urn:agentenv:*/v1` URI, the endpoint the protocol
serves it at, and each operation's HTTP method and path there. Our agent SDK serves them at these paths, a run's
calls fall back to them when a card names none (`extensions.operation`), and every other module names a URI through
the constants here.

A card may name another endpoint (`params.endpoint`) or another path per operation (`methods.NAME.endpoint`): the
card wins; this table is what the protocol says when it does not.
"""

from __future__ import annotations

from collections.abc import Mapping

MCP_CONFIG = "urn:agentenv:mcp-config/v1"
AGENT_CONFIG = "urn:agentenv:agent-config/v1"
SKILL_CONFIG = "urn:agentenv:skill-config/v1"
TRAJECTORY = "urn:agentenv:trajectory/v1"
SNAPSHOT = "urn:agentenv:snapshot/v1"
PEER_AGENTS = "urn:agentenv:peer-agents/v1"
TRIGGERS = "urn:agentenv:triggers/v1"
ATTRIBUTION_PROBE = "urn:agentenv:attribution-probe/v1"
INSTALL = "urn:agentenv:install/v1"  # a declaration: no endpoint
STAGING = "urn:agentenv:staging/v1"  # an object area below its endpoint (`staging`), no named operations
TOOLS = "urn:agentenv:tools/v1"
PROXY = "urn:agentenv:proxy/v1"

ENDPOINTS: Mapping[str, str] = {
    MCP_CONFIG: "/ext/mcp-config",
    AGENT_CONFIG: "/ext/agent-config",
    SKILL_CONFIG: "/ext/skill-config",
    TRAJECTORY: "/ext/trajectory",
    SNAPSHOT: "/ext/snapshot",
    PEER_AGENTS: "/ext/peer-agents",
    TRIGGERS: "/ext/triggers",
    ATTRIBUTION_PROBE: "/ext/attribution-probe",
    STAGING: "/ext/staging",
}

OPERATIONS: Mapping[tuple[str, str], tuple[str, str]] = {  # (uri, operation) -> (method, the protocol's path)
    (MCP_CONFIG, "add"): ("POST", "/ext/mcp-config"),
    (MCP_CONFIG, "list"): ("GET", "/ext/mcp-config"),
    (AGENT_CONFIG, "set"): ("POST", "/ext/agent-config"),
    (AGENT_CONFIG, "get"): ("GET", "/ext/agent-config"),
    (SKILL_CONFIG, "add"): ("POST", "/ext/skill-config"),
    (SKILL_CONFIG, "list"): ("GET", "/ext/skill-config"),
    (TRAJECTORY, "get"): ("POST", "/ext/trajectory"),
    (SNAPSHOT, "save"): ("POST", "/ext/snapshot"),
    (SNAPSHOT, "load"): ("PUT", "/ext/snapshot"),
    (SNAPSHOT, "enable-changelog"): ("POST", "/ext/snapshot/changelog"),  # the optional `changelog` feature
    (SNAPSHOT, "apply-changelog"): ("PUT", "/ext/snapshot/changelog"),
    (PEER_AGENTS, "set"): ("POST", "/ext/peer-agents"),
    (PEER_AGENTS, "list"): ("GET", "/ext/peer-agents"),
    (TRIGGERS, "register"): ("POST", "/ext/triggers"),
    (TRIGGERS, "decide"): ("POST", "/ext/triggers/decide"),
    (TRIGGERS, "state"): ("GET", "/ext/triggers"),
    (ATTRIBUTION_PROBE, "probe"): ("POST", "/ext/attribution-probe"),
}
