"""A topology from a plugin (`agent_env.env_providers`): an env's own server on "compute of its own", here a
process group this plugin starts and tracks itself (outside every sandbox provider), as a plugin for a GPU VM
would start the server there. It keeps a pidfile per instance under the install's state directory, so any worker
of this machine can stop what another started."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from agent_env.providers.topologies import EnvironmentProvider, EnvServer, Started


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SpareHost(EnvironmentProvider):
    type = "spare_host"
    description = "a process group on this machine that the plugin starts itself (a stand-in for a VM)"

    def _folder(self, server: EnvServer) -> Path:
        return Path(server.settings.state_dir) / "spare-host" / server.instance

    async def start(self, server: EnvServer, stores) -> Started | None:
        folder = self._folder(server)
        pidfile = folder / "pid"
        if pidfile.exists():  # a retry: the server it started still serves
            pid, port = pidfile.read_text().split()
            return Started(url=f"http://127.0.0.1:{port}", handle=pid)
        folder.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "HOME": os.environ.get("HOME", ""),
            "HOST": "127.0.0.1",
            "PORT": str(port),
            **server.env,
        }
        command = [sys.executable, *server.command[1:]] if server.command[0] == "python" else server.command
        process = subprocess.Popen(
            command,
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=(folder / "log").open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        pidfile.write_text(f"{process.pid} {port}")
        return Started(url=f"http://127.0.0.1:{port}", handle=str(process.pid))

    async def stop(self, server: EnvServer, handle: str, stores) -> None:
        pidfile = self._folder(server) / "pid"
        if not pidfile.exists() or pidfile.read_text().split()[0] != handle:
            return  # not one this plugin started here (or stopped already)
        try:
            os.killpg(int(handle), signal.SIGTERM)
            await asyncio.to_thread(_reap, int(handle))
        except ProcessLookupError:
            pass
        pidfile.unlink()


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)  # started by this process: wait for it (no zombie left)
    except ChildProcessError:
        pass  # started by another worker: it reaps it
