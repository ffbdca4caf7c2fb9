"""The gateway's Prometheus metrics: what its agents did (tool calls, latency, refusals) and what it holds.

One `CollectorRegistry` per gateway, never the process-global one: tests and benches run many gateways in one
process, and each `/metrics` answer must be its own gateway's. Counting sits on the REST tool call's hot path,
so each (transport, outcome) child is resolved once and reused: a call costs one counter add and one
histogram observation. What the gateway holds (open instances, MCP sessions, hosted agents) is read when
Prometheus scrapes, not tracked as it changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

Outcome = Literal["ok", "error", "refused"]
RefusalReason = Literal["role", "rate_limit", "token", "storage"]
CONTENT_TYPE = CONTENT_TYPE_LATEST
# Tool calls take from tens of microseconds (a gateway tool) to minutes (a sandboxed app's slow tool).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class GatewayMetrics:
    """`instances`, `sessions`, `agents`: how many the gateway holds now (called at scrape time)."""

    def __init__(self, *, instances: Callable[[], int], sessions: Callable[[], int], agents: Callable[[], int]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._calls = Counter(
            "agentenv_gateway_tool_calls",
            "Tool calls by transport (rest, mcp, run) and outcome (ok, error, refused: its role or a limit)",
            ["transport", "outcome"],
            registry=self.registry,
        )
        self._latency = Histogram(
            "agentenv_gateway_tool_call_seconds",
            "Time the gateway took to answer a tool call (calls refused at a limit excluded)",
            ["transport"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._refusals = Counter(
            "agentenv_gateway_refusals",
            "Requests refused: role (a tool not the caller's), rate_limit (429: calls, sessions or requests "
            "over the agent's limit), token (401/403: a missing or wrong role token; 410: one of a run that ended), "
            "storage (507: an instance past its storage budget, or the disk below the gateway's free-space floor)",
            ["reason"],
            registry=self.registry,
        )
        for name, doc, read in (
            ("agentenv_gateway_instances", "Environment instances open on this gateway", instances),
            ("agentenv_gateway_mcp_sessions", "MCP sessions open", sessions),
            ("agentenv_gateway_hosted_agents", "Agents hosted on this gateway", agents),
        ):
            Gauge(name, doc, registry=self.registry).set_function(read)
        self._call_children: dict[tuple[str, str], Callable[[], None]] = {}
        self._latency_children: dict[str, Callable[[float], None]] = {}

    def called(self, transport: str, outcome: Outcome, seconds: float) -> None:
        """A tool call the gateway answered."""
        self.counted(transport, outcome)
        observe = self._latency_children.get(transport)
        if observe is None:
            observe = self._latency_children[transport] = self._latency.labels(transport).observe
        observe(seconds)

    def counted(self, transport: str, outcome: Outcome) -> None:
        """A tool call, without its latency (one refused before it ran)."""
        inc = self._call_children.get((transport, outcome))
        if inc is None:
            inc = self._call_children[(transport, outcome)] = self._calls.labels(transport, outcome).inc
        inc()

    def refused(self, reason: RefusalReason) -> None:
        self._refusals.labels(reason).inc()

    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format."""
        return generate_latest(self.registry)
