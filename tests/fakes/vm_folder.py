"""What the fakes of the VM SDKs (tests/fakes/tensorlake, tests/fakes/tenki) share: a VM is a temp folder that stands
for its filesystem, and its commands are local subprocesses, run with `_AGENTENV_ROOT` (agent_env.providers.api_vms)
set to the folder so that the provider's file scripts and its command's log land in it. Nothing is isolated."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path, PurePosixPath

ROOT_VAR = "_AGENTENV_ROOT"


class Folder:
    def __init__(self, prefix: str, env: dict[str, str] | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        (self.root / "tmp").mkdir()
        self.env = dict(env or {})

    def local(self, path: str) -> Path:
        remote = PurePosixPath(path)
        if not remote.is_absolute() or ".." in remote.parts:
            raise ValueError(f"the fake takes absolute paths without '..', not {path!r}")
        return self.root.joinpath(*remote.parts[1:])

    def run(
        self, argv: list[str], env: dict[str, str] | None, timeout: float | None, stdin: bytes | None = None
    ) -> tuple[int, bytes, bytes, bool]:
        """(exit code, stdout, stderr, timed out); the command and all it started are killed at its timeout."""
        environ = {**os.environ, "HOME": str(self.root), **self.env, **(env or {}), ROOT_VAR: str(self.root)}
        try:
            proc = subprocess.Popen(
                argv,
                cwd=self.root,
                env=environ,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            return 127, b"", f"{e}\n".encode(), False
        try:
            out, err = proc.communicate(stdin or b"", timeout=timeout or None)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return -9, out, err, True
        return proc.returncode, out, err, False

    def destroy(self) -> None:
        """Kill what its commands left running (they carry its root in their environment) and delete it."""
        marker = f"{ROOT_VAR}={self.root}".encode()
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if marker in environ.split(b"\0"):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)
