"""Shared helpers for the benchmarks: isolated state, timing subprocesses with their peak memory."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
AGENT_ENV = str(BIN / "agent-env")


_MADE: list[Path] = []  # temporary directories this benchmark process made, removed when it ends


def temp_dir(prefix: str = "agentenv-bench-") -> Path:
    """A new temporary directory, removed when the benchmark ends (a full run makes ~1 GB of state)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    _MADE.append(path)
    return path


def remove_temp_dirs() -> None:
    """Remove what temp_dir made (the daemons that used it are stopped by then)."""
    while _MADE:
        shutil.rmtree(_MADE.pop(), ignore_errors=True)


def _keep_on_failure(kind, value, tb) -> None:
    """A benchmark that fails keeps its state directories: their logs say why (the error names them)."""
    _MADE.clear()
    sys.__excepthook__(kind, value, tb)


sys.excepthook = _keep_on_failure
atexit.register(remove_temp_dirs)


def exit_now(code: int = 0) -> None:
    """Leave at once, without the interpreter's teardown (temporalio can abort there), tidying up first."""
    sys.stdout.flush()
    remove_temp_dirs()
    os._exit(code)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def isolated_env() -> dict[str, str]:
    """A fresh state directory and free ports: nothing of the user's is touched or reused."""
    env = {
        **os.environ,
        "AGENT_ENV_HOME": str(temp_dir()),
        "AGENT_ENV_SERVER_PORT": str(free_port()),
        "AGENT_ENV_UI_PORT": str(free_port()),
        "AGENT_ENV_GATEWAY_PORT": str(free_port()),
    }
    for var in ("TEMPORAL_ADDRESS", "AGENT_ENV_CONFIG", "AGENT_ENV_GATEWAY_URL", "AGENT_ENV_GATEWAY_TOKEN"):
        env.pop(var, None)
    return env


TIME = "/usr/bin/time"


def timed(cmd: list[str], env: dict | None = None, check: bool = True) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one subprocess.

    Peak memory comes from /usr/bin/time (a small parent): a child forked from this big Python
    process would count this process's pages before its exec.
    """
    measure = os.path.exists(TIME)
    argv = [TIME, "-f", "%M", *cmd] if measure else cmd
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
    peak_kib = int(done.stderr.strip().splitlines()[-1]) if measure else 0
    return wall, peak_kib / 1024


def summarize(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))],
        "min": ordered[0],
    }


def row(label: str, value: str, note: str = "") -> None:
    print(f"  {label:<46} {value:>14}   {note}")
