"""The embedded gateway: a local daemon started on demand, like the embedded Temporal server."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_env.config import Settings
from agent_env.daemon import Daemon, DaemonInfo, PortCheck
from agent_env.gateway_client.configured import admin_token as admin_token
from agent_env.gateway_client.configured import base_url as base_url
from agent_env.gateway_client.env_servers import EnvServers
from agent_env.gateway_client.pool import GatewayPool
from agent_env.gateway_client.single import SingleGateway

if TYPE_CHECKING:
    from agent_env.gateway_client import GatewayClient
    from agent_env.stores import Stores


def _daemon(settings: Settings) -> tuple[Daemon, list[str]]:
    root = settings.state_dir / "gateway"
    return Daemon("gateway", root, "embedded gateway"), ["agent_env.gateway", str(root)]


@dataclass
class GatewayStatus:
    running: bool
    info: DaemonInfo | None
    stale_pidfile: bool


def status(settings: Settings) -> GatewayStatus:
    daemon, markers = _daemon(settings)
    info, stale = daemon.status(markers)
    return GatewayStatus(info is not None, info, stale)


def start(settings: Settings, *, on_notice: Callable[[str], None] = lambda msg: None) -> tuple[DaemonInfo, bool]:
    daemon, markers = _daemon(settings)
    g = settings.gateway
    command = [
        sys.executable,
        "-m",
        "agent_env.gateway",
        "--root",
        str(daemon.folder),
        "--host",
        g.ip,
        "--port",
        str(g.port),
        "--max-body-kib",
        str(g.max_body_kib),
    ]
    return daemon.start(
        command,
        ip=g.ip,
        port=g.port,
        markers=markers,
        section="gateway",
        ports=[PortCheck(g.port, "its", "port", "AGENT_ENV_GATEWAY_PORT")],
        env=_telemetry_env(settings),
        on_notice=on_notice,
    )


def ensure(settings: Settings, *, on_notice: Callable[[str], None] = lambda msg: None) -> DaemonInfo:
    """`start`, saying so when it started one."""
    if (running := status(settings).info) is not None:
        return running
    info, started = start(settings, on_notice=on_notice)
    if started:
        on_notice(
            f"started the embedded gateway at http://{info.address}; it keeps running in the background "
            "(stop it with `agent-env gateway stop`)"
        )
    return info


def _telemetry_env(settings: Settings) -> dict[str, str] | None:
    """The daemon reads its own settings; tracing set for this process (not only in the file) goes with it."""
    t = settings.telemetry
    if not t.traces:
        return None  # it inherits our environment as it is
    import os

    return {
        **os.environ,
        "AGENT_ENV_TRACES": "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": t.otlp_endpoint,
        "OTEL_SERVICE_NAME": t.service_name,
    }


def stop(settings: Settings) -> DaemonInfo | None:
    daemon, markers = _daemon(settings)
    return daemon.stop(markers)


def connect(
    settings: Settings, *, start_daemon: bool = True, on_notice: Callable[[str], None] = lambda msg: None
) -> GatewayClient:
    """A client of the configured gateway (or pool of gateways) with its admin token; starts the embedded
    gateway if none is configured."""
    if urls := settings.gateway.urls():
        token = admin_token(settings)
        if not settings.gateway.pool:
            return SingleGateway(urls[0], token)
        return GatewayPool([SingleGateway(url, token) for url in urls], settings)
    if start_daemon:
        info, started = start(settings, on_notice=on_notice)
        if started:
            on_notice(
                f"started the embedded gateway at http://{info.address}; it keeps running in the background "
                "(stop it with `agent-env gateway stop`)"
            )
    return SingleGateway(base_url(settings), admin_token(settings))


def routed(settings: Settings, stores: Stores, *, start_daemon: bool = True) -> EnvServers:
    """`connect`'s client behind the router every room uses (steps, episodes, the explorer): a request about an
    instance served on a server of its own (a topology other than `gateway`) goes there."""
    return EnvServers(connect(settings, start_daemon=start_daemon), settings, stores)
