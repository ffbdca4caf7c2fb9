"""The embedded gateway: a local daemon started on demand, like the embedded Temporal server."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_env.config import Settings
from agent_env.daemon import Daemon, DaemonInfo, PortCheck
from agent_env.errors import BadInput
from agent_env.gateway import tokens
from agent_env.gateway_client.pool import GatewayPool
from agent_env.gateway_client.single import SingleGateway

if TYPE_CHECKING:
    from agent_env.gateway_client import GatewayClient


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


def base_url(settings: Settings) -> str:
    """The configured gateway's URL (a pool's first; a pool gateway's own `url`), else the embedded one's."""
    g = settings.gateway
    return (g.url or (g.pool[0] if g.pool else None) or f"http://{g.ip}:{g.port}").rstrip("/")


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


def admin_token(settings: Settings) -> str:
    """The admin token of the configured gateways: given (`[gateway] admin_token`), derived from the pool's
    shared key in the secret store (`[gateway] key_secret`), or the embedded gateway's own."""
    g = settings.gateway
    if g.admin_token:
        return g.admin_token
    if g.key_secret:
        return tokens.admin_token(tokens.shared_key(settings))
    if g.urls():
        raise BadInput(
            f"gateways are configured ({', '.join(g.urls())}) but no admin token",
            "set AGENT_ENV_GATEWAY_TOKEN (or [gateway] admin_token) to their admin token, or [gateway] key_secret "
            "to the secret holding a pool's shared key",
        )
    return tokens.admin_token(tokens.load_or_create_key(settings.state_dir / "gateway" / "key"))
