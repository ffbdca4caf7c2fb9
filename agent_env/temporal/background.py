"""The background worker: the embedded services' own worker, a daemon like the gateway.

A worker hosted by `agent-env run` executed every run on the shared task queue while it followed its own,
and printed the others' errors. So with the embedded Temporal server a worker runs beside it in the
background, one per namespace and task queue: started on demand (`agent-env run`, `agent-env worker start`,
a trainer's `Episodes.connect()`), stopped with the server (`agent-env server stop`: a worker without its
server is useless). Stopping it drains it.

It runs the code, the settings and the environment it was started with: the starter writes its settings next
to the pidfile and records a fingerprint of all that decides what the worker does (agent-env's version and
source, the installed packages and plugins, the settings, and the variables of `WORKER_ENV`: the `secret:`
values, where Docker and the clouds are, proxies, what local sandboxes inherit). A starter whose fingerprint
differs replaces it: the old one drains, a new one starts. So a worker never keeps a DOCKER_HOST (a cloud
account, a PATH) its user has since changed.

It answers on a Unix socket in its folder (mode 0600; `control.py` serves it): a starter knows it is up
when it answers with its pid. Nothing here imports temporalio: `status` and `stop` stay instant.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent_env import __version__
from agent_env.daemon import Daemon, DaemonInfo, terminate

if TYPE_CHECKING:
    from agent_env.config import Settings

MODULE = "agent_env.temporal.background"
START_TIMEOUT = 30.0
# `agent-env run` starts the worker beside the embedded server, not after it (their start-ups overlap): how long
# the worker waits for the server to appear while another process is starting it.
SERVER_GRACE = 30.0
SOCKET_MAX = 100  # AF_UNIX paths are at most 107 bytes: a longer one is reached through its folder's fd


@dataclass(frozen=True)
class WorkerPaths:
    daemon: Daemon
    socket: Path
    settings: Path  # the settings it runs with, written by its starter

    @property
    def markers(self) -> list[str]:
        return [MODULE, str(self.socket)]


def folder(settings: Settings) -> Path:
    return settings.state_dir / "worker"


def paths(settings: Settings) -> WorkerPaths:
    """One background worker per namespace and task queue (runs on another queue need a worker there)."""
    t = settings.temporal
    key = f"{t.namespace}.{t.task_queue}"
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", key)[:40]
    if slug != key:
        slug += "-" + hashlib.sha256(key.encode()).hexdigest()[:8]
    return _paths(folder(settings), f"worker-{slug}")


def _paths(root: Path, name: str) -> WorkerPaths:
    daemon = Daemon(name, root, "background worker")
    return WorkerPaths(daemon, root / f"{name}.sock", root / f"{name}.settings.json")


# What the worker reads from its environment beyond the settings (which hold AGENT_ENV_* and TEMPORAL_*): a
# variable whose name is here or starts with a prefix here is part of its fingerprint. Secrets given as
# variables; the Docker daemon and its TLS (the Docker SDK reads DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH,
# DOCKER_CONFIG); the clouds' SDKs (stores and sandbox providers); proxies and CA bundles (every HTTP client);
# and what a local sandbox inherits (agent_env.providers.local.INHERITED, LC_*: a test holds the two together).
WORKER_ENV_PREFIXES = ("AGENT_ENV_SECRET_", "DOCKER_", "AWS_", "GOOGLE_", "CLOUDSDK_", "MODAL_", "E2B_", "LC_")
WORKER_ENV = (
    *("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PYTHONPATH"),
    *("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy"),
    *("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"),
)


def fingerprint(settings: Settings) -> str:
    """What decides the code and configuration a worker runs; another one means it is out of date."""
    return _digest(code_fingerprint(), settings.model_dump_json())


def code_fingerprint() -> str:
    """All but the settings (the code and the environment): cheap, and importable without pydantic (`agent-env
    run`'s fast path checks its launch record against it)."""
    return _digest(
        __version__,
        sys.prefix,  # the environment (a venv), whichever of its interpreter's names started us
        str(_source_mtime(Path(__file__).parent.parent)),  # an edited checkout (editable installs)
        *(f"{p}={os.stat(p).st_mtime_ns}" for p in sys.path if p.endswith("-packages") and os.path.isdir(p)),
        *sorted(f"{k}={v}" for k, v in os.environ.items() if k in WORKER_ENV or k.startswith(WORKER_ENV_PREFIXES)),
    )


def _digest(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:32]


def _source_mtime(root: Path) -> int:
    """The newest .py file under `root` (a few ms: a stat per module)."""
    newest = 0
    for entry in os.scandir(root):
        if entry.is_dir(follow_symlinks=False):
            if entry.name != "__pycache__":
                newest = max(newest, _source_mtime(Path(entry.path)))
        elif entry.name.endswith(".py"):
            newest = max(newest, entry.stat().st_mtime_ns)
    return newest


@dataclass
class WorkerStatus:
    running: bool
    info: DaemonInfo | None
    stale_pidfile: bool
    current: bool  # running with this caller's fingerprint
    paths: WorkerPaths


def status(settings: Settings) -> WorkerStatus:
    p = paths(settings)
    info, stale = p.daemon.status(p.markers)
    current = info is not None and info.extra.get("fingerprint") == fingerprint(settings)
    return WorkerStatus(info is not None, info, stale, current, p)


def start(settings: Settings, *, on_notice=lambda msg: None) -> tuple[DaemonInfo, bool]:
    """Start the background worker, or reuse the running one if it is current. Returns (info, started now).
    The worker connects to the Temporal server, never starts it: start the server first, or at the same time (the
    worker waits `SERVER_GRACE` for it to appear)."""
    p = paths(settings)
    mark = fingerprint(settings)

    def out_of_date(info: DaemonInfo) -> str | None:
        if info.extra.get("fingerprint") == mark:
            return None
        return "agent-env, its plugins, the settings or the environment (DOCKER_HOST, PATH, ...) changed"

    def write_settings() -> None:
        tmp = p.settings.with_suffix(".tmp")
        with open(tmp, "w", opener=lambda path, flags: os.open(path, flags, 0o600)) as f:
            f.write(settings.model_dump_json())
        os.replace(tmp, p.settings)

    p.daemon.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return p.daemon.start(
        [sys.executable, "-m", MODULE, "--socket", str(p.socket), "--settings", str(p.settings), "--fingerprint", mark],
        ip="",
        port=0,
        markers=p.markers,
        ports=[],
        section="worker",
        extra={"fingerprint": mark, "queue": settings.temporal.task_queue, "socket": str(p.socket)},
        timeout=START_TIMEOUT,
        on_notice=on_notice,
        ready=lambda info: ping(p.socket) == info.pid,
        replace=out_of_date,
        before_start=write_settings,
    )


def ensure(settings: Settings, *, on_notice=lambda msg: None) -> DaemonInfo:
    """`start`, saying so when it started one."""
    info, started = start(settings, on_notice=on_notice)
    if started:
        on_notice(
            f"started a background worker (pid {info.pid}) on task queue '{settings.temporal.task_queue}'; it keeps "
            "running with the server (`agent-env worker status`, `agent-env worker stop`)"
        )
    return info


def ping(path: Path, timeout: float = 2.0) -> int | None:
    """The pid of the worker answering on `path` (OSError when none does)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s, unix_address(path) as address:
        s.settimeout(timeout)
        s.connect(address)
        s.sendall(b'{"op": "ping"}\n')
        line = s.makefile("rb").readline(4096)
    try:
        return int(json.loads(line)["pid"])
    except (ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def unix_address(path: Path) -> Iterator[str]:
    """`path` as an AF_UNIX address: itself, or when too long (a deep state dir) through /proc/self/fd and
    an fd of its folder, open while inside."""
    if len(str(path)) <= SOCKET_MAX:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def stop(settings: Settings) -> DaemonInfo | None:
    """Stop (drain) this settings' background worker, if it runs."""
    p = paths(settings)
    return p.daemon.stop(p.markers, timeout=settings.worker.drain_timeout + 5)


def stop_all(settings: Settings) -> list[DaemonInfo]:
    """Stop every background worker of this state dir (whatever their queue): the server is going away. Those
    replaced and still draining (no pidfile names them any more) are stopped too."""
    root = folder(settings)
    timeout = settings.worker.drain_timeout + 5
    stopped = []
    for pidfile in sorted(root.glob("worker-*.json")) if root.is_dir() else []:
        if pidfile.name.endswith(".settings.json"):
            continue
        p = _paths(root, pidfile.stem)
        if info := p.daemon.stop(p.markers, timeout=timeout):
            stopped.append(info)
    for pid in _processes(root):
        terminate(pid, timeout)
    return stopped


def _processes(root: Path) -> list[int]:
    """Live background workers of this state dir's folder `root`, by their command lines."""
    markers = [MODULE.encode(), str(root).encode() + b"/"]
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes()
                if all(m in cmdline for m in markers):
                    found.append(int(proc.name))
    return found


def main(argv: list[str] | None = None) -> int:
    """The daemon: a worker with the settings its starter wrote, answering on its socket until SIGTERM."""
    import argparse
    import asyncio

    from agent_env.config import Settings
    from agent_env.temporal.control import serve_control  # (temporalio, pydantic: the daemon's, not its starters')
    from agent_env.temporal.worker import run_worker

    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--settings", type=Path, required=True)
    parser.add_argument("--fingerprint", required=True)  # its starter's: `agent-env run` asks with its own
    args = parser.parse_args(argv)
    os.umask(0o077)
    settings = Settings.model_validate_json(args.settings.read_text())
    settings.worker.health_port = 0  # probes are for supervised workers (`agent-env worker --health-port`)
    worker = run_worker(
        settings,
        identity=f"background-{os.getpid()}@{socket.gethostname()}",
        start_server=False,
        server_grace=SERVER_GRACE,
        serving=lambda client: serve_control(args.socket, client, settings, args.fingerprint),
    )
    loop = asyncio.new_event_loop()  # left behind, not torn down: the process exits right after (`os._exit`)
    asyncio.set_event_loop(loop)
    return loop.run_until_complete(worker)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # temporalio can abort the interpreter at exit
