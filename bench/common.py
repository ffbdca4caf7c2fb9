"""Shared helpers for the benchmarks: isolated state, timing subprocesses with their peak memory."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
AGENT_ENV = str(BIN / "agent-env")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def isolated_env() -> dict[str, str]:
    """A fresh state directory and free ports: nothing of the user's is touched or reused."""
    home = tempfile.mkdtemp(prefix="agentenv-bench-")
    env = {**os.environ, "AGENTENV_HOME": home,
           "AGENTENV_SERVER_PORT": str(free_port()), "AGENTENV_UI_PORT": str(free_port())}
    for var in ("TEMPORAL_ADDRESS", "AGENTENV_CONFIG"):
        env.pop(var, None)
    return env


def timed(cmd: list[str], env: dict | None = None, check: bool = True) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one subprocess."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if check and code != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {code}: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def summarize(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))],
        "min": ordered[0],
    }


def row(label: str, value: str, note: str = "") -> None:
    print(f"  {label:<46} {value:>14}   {note}")
