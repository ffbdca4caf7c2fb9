"""An app's own server process (`run = "subprocess"`): `agent-env env serve` on a local port, holding the
token it must require, and dying with the gateway however the gateway ends (on Linux: the parent-death signal)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from agent_env.envs.server_token import SERVER_TOKEN_ENV

PR_SET_PDEATHSIG = 1
AppProcess = subprocess.Popen[bytes]  # an app's server, its output to a log file


def start_server(target: str, port: int, folder: Path, token: str) -> AppProcess:
    """Start the app's server; its output goes to `folder/server.log`, its token in its environment (a command
    line is public in `ps`)."""
    with open(folder / "server.log", "ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agent_env",
                "env",
                "serve",
                target,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--state",
                str(folder / "state"),
            ],
            env={**os.environ, SERVER_TOKEN_ENV: token},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            preexec_fn=_dies_with_parent(),
        )
    return proc


def _dies_with_parent() -> Callable[[], None] | None:
    """A preexec_fn making the child get SIGKILL when the gateway dies (even by SIGKILL), on Linux; None
    elsewhere. It runs after start_new_session's setsid(), which does not clear the setting."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork: nothing to import in the child
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the gateway died before prctl: no signal would ever come
            os._exit(1)

    return preexec
