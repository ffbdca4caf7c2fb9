"""Background services this install manages (the Temporal dev server, the gateway, the background worker).

Each daemon has a folder with `<name>.json` (the pidfile: pid, address, ...), `<name>.log` and
`<name>.lock` (so two commands never start two copies). A pidfile whose process is gone, or is some
other program now, is stale and replaced; a running daemon its starter finds out of date (`replace`) is
told to stop and a new one takes its place. A daemon is up when its TCP port opens, or, for one without a
port, when its own `ready` check says so. Nothing here imports heavy libraries: `status` and `stop` stay
instant.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent_env.errors import ServerError

PRIVATE_UMASK = 0o077  # a daemon's own files (its database, log, keys) are this user's alone
# A daemon spawned is recorded in its pidfile before the starter's process may exit: starters run in daemon threads
# (`agent-env run` starts them while it plans), and one stopped between the spawn and the pidfile would leave a
# daemon nothing can find or stop. Exiting waits (briefly) for a spawn under way; none starts after.
_SPAWNING = threading.Lock()
atexit.register(lambda: _SPAWNING.acquire(timeout=5))


def _private(path: str, flags: int) -> int:
    """An `open` opener: files this module creates are 0600 whatever the caller's umask."""
    return os.open(path, flags, 0o600)


@dataclass
class DaemonInfo:
    pid: int
    ip: str
    port: int
    log: str
    started_at: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"


@dataclass(frozen=True)
class PortCheck:
    port: int
    what: str  # e.g. "its gRPC"
    setting: str  # config key under the daemon's section
    env: str  # environment variable that overrides it


class Daemon:
    def __init__(self, name: str, folder: Path, title: str) -> None:
        self.name, self.folder, self.title = name, folder, title
        self.pidfile = folder / f"{name}.json"
        self.log = folder / f"{name}.log"
        self.lock = folder / f"{name}.lock"

    # -- reading state --

    def read(self) -> DaemonInfo | None:
        try:
            data = json.loads(self.pidfile.read_text())
            return DaemonInfo(**data)
        except FileNotFoundError:
            return None
        except (ValueError, TypeError):
            return DaemonInfo(pid=-1, ip="", port=0, log="", started_at=0)  # corrupt: treated as stale

    @staticmethod
    def is_running(info: DaemonInfo, markers: list[str]) -> bool:
        """Alive, and still our program (pids get reused): its command line holds every marker."""
        if info.pid <= 0:
            return False
        try:
            cmdline = Path(f"/proc/{info.pid}/cmdline").read_bytes()
        except OSError:
            return False
        return bool(cmdline) and all(m.encode() in cmdline for m in markers)

    def status(self, markers: list[str]) -> tuple[DaemonInfo | None, bool]:
        """(info if running, whether a stale pidfile is lying around)."""
        info = self.read()
        if info is not None and self.is_running(info, markers):
            return info, False
        return None, info is not None

    def busy(self) -> bool:
        """Whether another process holds the lock now (is starting or stopping it)."""
        try:
            with open(self.lock, "rb") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(lock, fcntl.LOCK_UN)
        except BlockingIOError:
            return True
        except FileNotFoundError:
            return False
        return False

    @contextlib.contextmanager
    def locked(self):
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.lock, "w", opener=_private) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # -- starting and stopping --

    def start(
        self,
        command: list[str],
        *,
        ip: str,
        port: int,
        markers: list[str],
        ports: list[PortCheck],
        section: str,
        extra: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 20.0,
        on_notice: Callable[[str], None] = lambda msg: None,
        ready: Callable[[DaemonInfo], bool] | None = None,
        replace: Callable[[DaemonInfo], str | None] = lambda info: None,
        before_start: Callable[[], None] = lambda: None,
    ) -> tuple[DaemonInfo, bool]:
        """Start it, or reuse the running one. Returns (info, whether it was started now).
        `ready`: how a daemon without a TCP port (`port` 0) says it (that process) is up. `replace`: why a running one is out
        of date (None: it is not); it gets SIGTERM (to drain and exit in its own time) and a new one starts.
        `before_start`: called, under the lock, right before a new one starts (e.g. to write what it reads)."""
        with self.locked():
            info = self.read()
            if info is not None and self.is_running(info, markers) and (why := replace(info)):
                on_notice(f"the {self.title} (pid {info.pid}) is out of date ({why}): it drains and a new one starts")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(info.pid, signal.SIGTERM)
                self.pidfile.unlink(missing_ok=True)
                info = None
            if info is not None and self.is_running(info, markers):
                if (info.ip, info.port) != (ip, port):
                    raise ServerError(
                        f"the {self.title} already runs at {info.address}, but the configuration asks for {ip}:{port}",
                        f"stop it (`agent-env {self.name} stop`) so it restarts with the new settings",
                    )
                self._wait_up(info, None, ready, timeout)
                return info, False
            if info is not None:
                on_notice(
                    f"removed an unreadable {self.title} pidfile"
                    if info.pid <= 0
                    else f"removed a stale {self.title} pidfile (process {info.pid} is no longer running it)"
                )
                self.pidfile.unlink(missing_ok=True)
            for check in ports:
                check_port_free(ip, check, self.title, section)
            before_start()
            with _SPAWNING, open(self.log, "ab", opener=_private) as log:
                proc = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    close_fds=True,
                    env=env,
                    umask=PRIVATE_UMASK,
                )
                info = DaemonInfo(
                    pid=proc.pid, ip=ip, port=port, log=str(self.log), started_at=time.time(), extra=extra or {}
                )
                tmp = self.pidfile.with_suffix(".tmp")
                with open(tmp, "w", opener=_private) as f:
                    f.write(json.dumps(asdict(info)))
                os.replace(tmp, self.pidfile)
            try:
                self._wait_up(info, proc, ready, timeout)
            except ServerError:
                terminate(proc.pid, 2.0)
                self.pidfile.unlink(missing_ok=True)
                raise
            return info, True

    def _wait_up(
        self,
        info: DaemonInfo,
        proc: subprocess.Popen | None,
        ready: Callable[[DaemonInfo], bool] | None,
        timeout: float,
    ) -> None:
        if ready is None:
            wait_for_port(info.ip, info.port, proc, self.log, self.title, timeout)
        else:
            wait_until_ready(functools.partial(ready, info), proc, self.log, self.title, timeout)

    def stop(self, markers: list[str], timeout: float = 10.0) -> DaemonInfo | None:
        with self.locked():
            info = self.read()
            if info is None:
                return None
            stopped = info if self.is_running(info, markers) else None
            if stopped:
                terminate(info.pid, timeout)
            self.pidfile.unlink(missing_ok=True)
            return stopped


def port_in_use(ip: str, port: int) -> bool:
    """True if something listens there. Like a server's own bind, TIME_WAIT leftovers don't count."""
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
                    return f"pid {proc.name} ({(proc / 'comm').read_text().strip()})"
    return None


def check_port_free(ip: str, check: PortCheck, title: str, section: str) -> None:
    if not port_in_use(ip, check.port):
        return
    who = listener_of(check.port)
    hint = (
        f"; if it is a Temporal server you want to use, set TEMPORAL_ADDRESS={ip}:{check.port}"
        if section == "server"
        else ""
    )
    raise ServerError(
        f"cannot start the {title}: {check.what} port {ip}:{check.port} is already in use"
        + (f" by {who}" if who else " by another program"),
        f"stop that program, or pick a free port with `{check.setting}` under [{section}] in .agentenv/config.toml "
        f"(or {check.env}=...){hint}",
    )


def wait_for_port(ip: str, port: int, proc: subprocess.Popen | None, log: Path, title: str, timeout: float) -> None:
    def opened() -> bool:
        socket.create_connection((ip, port), timeout=0.5).close()
        return True

    wait_until_ready(opened, proc, log, title, timeout, what=f"open {ip}:{port}")


def wait_until_ready(
    ready: Callable[[], bool],
    proc: subprocess.Popen | None,
    log: Path,
    title: str,
    timeout: float,
    what: str = "get ready",
) -> None:
    """Until `ready()` (OSError counts as not yet), failing early, with its log, if `proc` exits."""

    from agent_env import waiting  # (asyncio: not for `agent-env run`'s fast path, which only reads pidfiles)

    def still_running() -> None:
        if proc is not None and proc.poll() is not None:
            raise ServerError(
                f"the {title} exited during start-up (exit code {proc.returncode}):\n" + tail(log),
                f"see the full log at {log}",
            )

    try:
        waiting.until_sync(
            lambda: True if ready() else None,
            what=f"the {title}",
            timeout=timeout,
            interval=0.02,
            retry_on=(OSError,),
            check=still_running,
        )
    except waiting.TimedOut:
        raise ServerError(
            f"the {title} did not {what} within {timeout:.0f}s",
            f"see its log at {log}, then stop it and try again",
        ) from None


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join("    " + line for line in path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "    (no log)"


def terminate(pid: int, timeout: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
            try:
                if not Path(f"/proc/{pid}/cmdline").read_bytes():
                    return  # gone, or a zombie
            except OSError:
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
