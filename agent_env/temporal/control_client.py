"""`agent-env run` (and `env validate`, `a2a-agent validate`) through the background worker: the fast path's client
(the worker's end is `control`).

With the embedded server, the background worker already has what a run needs loaded and connected (Temporal's
client, the planner, the step types). So when it runs this install's code and settings (same fingerprint),
`agent-env run TARGET [--task T] [--json] [--detach]` sends it the options the CLI read (`RunOptions`) over its
control socket and prints what comes back: neither temporalio nor typer nor pydantic nor the planner is imported
here. Anything else (other options, a cluster, tracing on, no worker up, another fingerprint, a worker that answers
`fallback`) returns None before printing anything, and the command does it all itself (`cli/run_cmd.py`, which
also starts what is not running).

Even loading the settings (pydantic) costs more than the rest of a warm `run hello`, so a command that reached
the worker leaves a *launch record*: for exactly what its settings came from (the config file's path and
content, the environment's AGENT_ENV_/TEMPORAL_/OTEL_ variables, the Python environment), the worker's socket
and fingerprint. The next command with the same inputs goes straight there; the worker still checks the
fingerprint, and the record the code part of it (an edited checkout, an installed package: the record is
stale). Records live in the default state dir, only when it is the settings' own (and private).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_env.errors import ServerError
from agent_env.temporal import background

if TYPE_CHECKING:
    from agent_env.config import Settings

TERMINAL_ENV = ("TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "TTY_COMPACT", "TTY_INTERACTIVE", "COLUMNS", "LINES")
SETTINGS_ENV_PREFIXES = ("AGENT_ENV_", "TEMPORAL_", "OTEL_")  # what `load_settings` reads from the environment
SETTINGS_ENV = ("XDG_STATE_HOME", "HOME", "PYTHONPATH")


@dataclass(frozen=True)
class RunOptions:
    """`agent-env run`'s options, parsed: what the worker needs to run it as the command would (`control.RunRequest`
    validates them, within limits)."""

    target: str  # a name, or an absolute path (`run_via_worker` resolves a relative one: the worker runs elsewhere)
    task: str | None = None
    json_out: bool = False
    detach: bool = False


@dataclass(frozen=True)
class ValidateOptions:
    """`agent-env env validate TARGET [--json] [--read-only] [--bundle B]` and `agent-env a2a-agent validate URL
    [--json] [--timeout S]`, parsed (`control.ValidateRequest` validates them, within limits)."""

    kind: str  # "env" or "a2a-agent"
    target: str
    json_out: bool = False
    read_only: bool = False
    timeout_s: float = 60.0
    bundle: str | None = None  # absolute: the command's working directory when not given (the worker runs elsewhere)


def run_via_worker(options: RunOptions) -> int | None:
    """The exit code, or None when the full command must run (nothing printed then)."""
    target = os.path.expanduser(options.target)
    if os.path.exists(target) or target.endswith(".toml"):
        options = RunOptions(**(asdict(options) | {"target": os.path.abspath(target)}))
    return _via_worker("run", asdict(options))


def validate_via_worker(options: ValidateOptions) -> int | None:
    """`env validate` / `a2a-agent validate` through the worker, as `run_via_worker`."""
    bundle = os.path.abspath(os.path.expanduser(options.bundle)) if options.bundle else os.getcwd()
    return _via_worker("validate", asdict(options) | {"bundle": bundle})


def _via_worker(op: str, options: dict[str, object]) -> int | None:
    request = {
        "op": op,
        "options": options,
        "stdout": _stream(sys.stdout),
        "stderr": _stream(sys.stderr),
        "env": {k: os.environ[k] for k in TERMINAL_ENV if k in os.environ},
    }
    record_path = _launch_record_path()
    if record_path is not None and (record := _read_record(record_path)) is not None:
        code = _send(Path(record["socket"]), request | {"fingerprint": record["fingerprint"]}, None)
        if code is not None:
            return code
    return _via_settings(request, record_path)


def _via_settings(request: dict[str, Any], record_path: Path | None) -> int | None:
    from agent_env.config import load_settings  # (pydantic: only when no launch record names the worker)

    settings = load_settings()
    if not settings.embedded or settings.telemetry.traces:
        return None  # a cluster's workers are elsewhere; a traced run's root span is this process's
    mark = background.fingerprint(settings)
    sock = background.paths(settings).socket
    accepted: list[bool] = []
    code = _send(sock, request | {"fingerprint": mark}, settings, accepted)
    if accepted and record_path is not None and record_path.parent.parent == settings.state_dir:
        _write_record(record_path, {"socket": str(sock), "fingerprint": mark, "code": background.code_fingerprint()})
    return code


def _send(sock: Path, request: dict[str, Any], settings: Settings | None, accepted: list[bool] | None = None):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with background.unix_address(sock) as address:
            conn.connect(address)
        conn.sendall(json.dumps(request).encode() + b"\n")
        return _relay(conn, settings, accepted if accepted is not None else [])
    except OSError:
        return None  # no worker answers (yet): the command starts one
    finally:
        conn.close()


def _relay(conn: socket.socket, settings: Settings | None, accepted: list[bool]) -> int | None:
    run_id = None
    printed = False
    lines = conn.makefile("rb")
    try:
        for line in lines:
            message = json.loads(line)
            if "fallback" in message and not printed:
                return None
            accepted[:] = [True]
            if "out" in message:
                sys.stdout.write(message["out"])
                sys.stdout.flush()
                printed = True
            elif "err" in message:
                sys.stderr.write(message["err"])
                sys.stderr.flush()
                printed = True
            elif "run" in message:
                run_id = message["run"]
            elif "exit" in message:
                return int(message["exit"])
    except KeyboardInterrupt:
        if run_id is None:
            raise
        conn.close()  # the worker stops following; the run goes on
        from rich.console import Console

        from agent_env.config import load_settings
        from agent_env.temporal.run_view import interrupted_line  # (light: no Temporal SDK to load after Ctrl-C)

        out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
        out.print(interrupted_line(settings or load_settings(), run_id))
        return 130
    if not printed:
        return None
    raise ServerError(
        "the background worker went away while following the run" + (f" {run_id}" if run_id else ""),
        (f"the run goes on when a worker runs: `agent-env runs show {run_id}`; " if run_id else "")
        + "see `agent-env worker status` and its log",
    )


def _stream(stream) -> dict:
    try:
        tty = stream.isatty()
        return {"tty": tty, "width": os.get_terminal_size(stream.fileno()).columns if tty else None}
    except (OSError, ValueError, AttributeError):
        return {"tty": False, "width": None}


# -- launch records --


def _launch_record_path() -> Path | None:
    """Where the record for this command's settings inputs is (the default state dir's `launch/`)."""
    home = default_state_dir()
    config = config_file()
    try:
        content = config.read_bytes() if config else b""
    except OSError:
        return None
    digest = hashlib.sha256()
    for part in (
        sys.prefix,
        str(config or ""),
        hashlib.sha256(content).hexdigest(),
        *sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith(SETTINGS_ENV_PREFIXES) or k in SETTINGS_ENV),
    ):
        digest.update(part.encode() + b"\0")
    return home / "launch" / f"{digest.hexdigest()[:32]}.json"


def default_state_dir() -> Path:
    """`config.default_state_dir`, without importing pydantic (tests hold the two to the same answer)."""
    if home := os.environ.get("AGENT_ENV_HOME"):
        return Path(home).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(xdg) / "agentenv"


def config_file() -> Path | None:
    """`config.find_config_file`, without importing pydantic; None also for a missing AGENT_ENV_CONFIG (the full
    command says so)."""
    if explicit := os.environ.get("AGENT_ENV_CONFIG"):
        path = Path(explicit).expanduser()
        return path if path.is_file() else None
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        candidate = folder / ".agentenv" / "config.toml"
        if candidate.is_file():
            return candidate
    return None


def _private(path: Path) -> bool:
    """Ours and closed to others: what others could plant must not pick our socket."""
    try:
        info = path.stat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & 0o077


def _read_record(path: Path) -> dict[str, str] | None:
    if not (_private(path.parent.parent) and _private(path)):
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("code") != background.code_fingerprint():
        return None  # the code changed since: the full command replaces the worker
    return record


def _write_record(path: Path, record: dict[str, str]) -> None:
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "w", opener=lambda p, flags: os.open(p, flags, 0o600)) as f:
            f.write(json.dumps(record))
        os.replace(tmp, path)
    except OSError:
        pass  # a cache: the next command loads the settings instead
