"""The embedded gateway: a local daemon started on demand, like the embedded Temporal server."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentenv.config import Settings
from agentenv.daemon import Daemon, DaemonInfo, PortCheck
from agentenv.errors import BadInput

if TYPE_CHECKING:
    from agentenv.gateway.client import GatewayClient


def _daemon(settings: Settings) -> tuple[Daemon, list[str]]:
    root = settings.state_dir / "gateway"
    return Daemon("gateway", root, "embedded gateway"), ["agentenv.gateway", str(root)]


@dataclass
class GatewayStatus:
    running: bool
    info: DaemonInfo | None
    stale_pidfile: bool


def status(settings: Settings) -> GatewayStatus:
    daemon, markers = _daemon(settings)
    info, stale = daemon.status(markers)
    return GatewayStatus(info is not None, info, stale)


def start(settings: Settings, *, on_notice=lambda msg: None) -> tuple[DaemonInfo, bool]:
    daemon, markers = _daemon(settings)
    g = settings.gateway
    command = [
        sys.executable,
        "-m",
        "agentenv.gateway",
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
        ports=[PortCheck(g.port, "its", "port", "AGENTENV_GATEWAY_PORT")],
        on_notice=on_notice,
    )


def stop(settings: Settings) -> DaemonInfo | None:
    daemon, markers = _daemon(settings)
    return daemon.stop(markers)


def base_url(settings: Settings) -> str:
    return (
        settings.gateway.url.rstrip("/")
        if settings.gateway.url
        else f"http://{settings.gateway.ip}:{settings.gateway.port}"
    )


def connect(settings: Settings, *, start_daemon: bool = True, on_notice=lambda msg: None) -> GatewayClient:
    """A client of the configured gateway with its admin token; starts the embedded one if needed."""
    from agentenv.gateway import tokens
    from agentenv.gateway.client import GatewayClient

    if settings.gateway.url:
        if not settings.gateway.admin_token:
            raise BadInput(
                f"a gateway url is configured ({settings.gateway.url}) but no admin token",
                "set AGENTENV_GATEWAY_TOKEN (or [gateway] admin_token) to that gateway's admin token",
            )
        return GatewayClient(settings.gateway.url, settings.gateway.admin_token)
    if start_daemon:
        info, started = start(settings, on_notice=on_notice)
        if started:
            on_notice(
                f"started the embedded gateway at http://{info.address}; it keeps running in the background "
                "(stop it with `agent-env gateway stop`)"
            )
    key = tokens.load_or_create_key(settings.state_dir / "gateway" / "key")
    return GatewayClient(base_url(settings), tokens.admin_token(key))
