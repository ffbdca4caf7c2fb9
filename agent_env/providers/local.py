"""`local`: a sandbox is a process group in its own work folder under the state dir.

Zero-config and fast, but NOT isolated: the process runs as you, sees your files and your network.
Use it for trusted apps and development; use `docker` (or a cloud provider) for anything else.

Its environment is what its spec declares, $HOST and $PORT, and a few variables from the worker's own
environment that programs need to run as they would in your shell (`INHERITED`) -- never the rest of it,
which holds the worker's credentials (AGENT_ENV_SECRET_*, the gateway's token, TEMPORAL_API_KEY, cloud keys).
Its Python is agent-env's: a command naming `python3` (or `python`) runs the interpreter agent-env runs on, and
PATH has agent-env's venv first, so a sandboxed agent or app imports agent_env as it would in its image.

A sandbox's port is a free host port handed to the process as $PORT (and $HOST=127.0.0.1, and as MCP_PORT and
MCP_HOST, which the protocol's env SDK reads); a build context is copied into the work folder, and its Dockerfile
read for what a process can take from it (`local_build`: its pip installs into a virtualenv, ENV, CMD). Each sandbox's `sandbox.json` records its pid and the process's start time, so a reused pid
is never mistaken for ours, and the environment the provider gave it, sealed (Fernet, under this state
dir's `sandboxes/local.key`, 0600): a command `exec`'d in the sandbox gets exactly that environment, even
while the sandbox's process is still starting (its /proc/PID/environ reads empty then) or after it changed
its own, and the record holds none of its secrets in the clear. Each `exec`'d command runs in a process group of
its own; one that leaves processes running (an agent `install_agent` started) is recorded in `groups.jsonl`, and
stopping the sandbox stops those groups with its own process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

from agent_env.errors import BadInput, NotFound
from agent_env.ports import free_port, port_taken
from agent_env.providers import local_build
from agent_env.providers.base import (
    Capabilities,
    ExecResult,
    Sandbox,
    SandboxFailed,
    SandboxInfo,
    SandboxProvider,
    SandboxSpec,
    install_id,
)
from agent_env.stores.local import create_private_once

# What a local sandbox takes from the worker's environment; each is a location or a locale, not a credential.
INHERITED = (
    "PATH",  # its `command` is found as in your shell
    "HOME",  # many programs fail without it (this provider does not hide your files anyway: use docker)
    "LANG",
    "LANGUAGE",  # with LC_*: the text encoding and messages its programs use
    "TZ",  # the host's local time, as in a container's default
    "TMPDIR",  # temporary files go where this machine keeps them (not a small /tmp)
    "PYTHONPATH",  # a Python command finds the modules the worker's Python finds by path (plugins)
)


# A command naming Python by these names runs agent-env's own interpreter (see `own_python`).
PYTHONS = ("python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}")


def own_python(command: list[str], python: str | None = None) -> list[str]:
    """`command` with a bare `python`/`python3` as the interpreter agent-env runs on: a local sandbox's Python
    imports agent_env (its SDKs) and what is installed beside it, as a container's does from its image, whether
    or not the shell that started the worker had the venv activated. `python`: the sandbox's own instead (the
    virtualenv its build context's Dockerfile installs into: `local_build`)."""
    python = python or sys.executable
    if command and command[0] in PYTHONS and python:
        return [python, *command[1:]]
    return command


def _venv_first(path: str | None, python: str | None = None) -> str | None:
    """PATH with the bin folder of agent-env's venv (or `python`'s) first (as activating it does): a command the
    sandbox runs itself (`sh -c "python3 ..."`) finds the same Python. Unchanged outside a venv."""
    if python is None and sys.prefix == sys.base_prefix:
        return path
    own = str(Path(python).parent if python else Path(sys.prefix) / "bin")
    entries = path.split(os.pathsep) if path else []
    return path if entries[:1] == [own] else os.pathsep.join([own, *entries])


def sandbox_env(declared: dict[str, str], port: int | None, python: str | None = None) -> dict[str, str]:
    """A sandbox's whole environment: `INHERITED` and LC_* from the worker's (PATH with agent-env's venv, or the
    sandbox's `python`'s, first), what its spec declares, and where it serves: HOST and PORT, and MCP_HOST and
    MCP_PORT, where the protocol's env SDK (agentenv_protocol) serves."""
    env = {k: v for k, v in os.environ.items() if k in INHERITED or k.startswith("LC_")}
    if path := _venv_first(env.get("PATH"), python):
        env["PATH"] = path
    env.update(declared)
    env["HOST"] = "127.0.0.1"
    if port:
        env["PORT"] = env["MCP_PORT"] = str(port)
        env["MCP_HOST"] = "127.0.0.1"
    return env


KEY_FILE = "local.key"  # beside the sandboxes' folder (never inside: a sandbox may have any name)


def _sealing(sandboxes: Path):
    """What seals the environments in the records of the local sandboxes under `sandboxes` (their folder):
    a Fernet key kept beside it, made on first use (mode 0600; the first of concurrent makers wins)."""
    from cryptography.fernet import Fernet

    path = sandboxes.parent / KEY_FILE
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        create_private_once(path, Fernet.generate_key())
        key = path.read_bytes()
    try:
        return Fernet(key)
    except ValueError:
        raise SandboxFailed(
            f"the key of the local sandboxes' records, {path}, is damaged",
            "stop the local sandboxes (`agent-env sandboxes list`, then remove them) and delete the file: a new "
            "one is made",
        ) from None


def _unsealed(sandboxes: Path, sealed: str) -> dict[str, str]:
    from cryptography.fernet import InvalidToken

    try:
        return json.loads(_sealing(sandboxes).decrypt(sealed.encode()))
    except InvalidToken:
        raise SandboxFailed(
            f"the environment in a local sandbox's record under {sandboxes} was sealed with another key than "
            f"{sandboxes.parent / KEY_FILE}",
            "remove the sandbox and start it again",
        ) from None


def _environ(pid: int) -> dict[str, str] | None:
    """The environment a running sandbox process was started with (None once it is gone): only for sandboxes
    whose record keeps none (started by an earlier version, long since running)."""
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    return dict(item.split("=", 1) for item in data.decode(errors="replace").split("\0") if "=" in item)


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); None once it
    has exited (a zombie counts as exited)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


class LocalSandbox(Sandbox):
    def __init__(
        self, info: SandboxInfo, folder: Path, env: dict[str, str] | None = None, python: str | None = None
    ) -> None:
        super().__init__(info)
        self.folder = folder
        self.work = folder / "work"
        self._declared = env  # the environment it was started with (read from its record when first needed)
        self.python = python if env is not None else (_read(folder) or {}).get("python")

    def _path(self, path: str) -> Path:
        target = (self.work / path.lstrip("/")).resolve()
        if not target.is_relative_to(self.work.resolve()):
            raise BadInput(f"path {path!r} escapes the sandbox's folder", "use a path inside the sandbox")
        return target

    def inside(self, path: str) -> str:
        return str(self._path(path))

    def _env(self) -> dict[str, str]:
        """A command run in the sandbox sees the sandbox's environment, as `docker exec` does; never the
        worker's: the one the provider started it with, as its record keeps it (sealed)."""
        if self._declared is None:
            meta = _read(self.folder) or {}
            if "env" in meta:
                self._declared = _unsealed(self.folder.parent, meta["env"])
            else:  # a record of an earlier version: its process's, else the basics
                env = _environ(meta["pid"]) if meta and _alive(meta) else None
                if env is None:
                    port = (self.info.url or "").rsplit(":", 1)[-1]
                    env = sandbox_env({}, int(port) if port.isdigit() else None)
                return env
        return self._declared

    async def exec(self, command: list[str], *, timeout: float = 60) -> ExecResult:
        proc = await asyncio.create_subprocess_exec(
            *own_python(command, self.python),
            cwd=self.work,
            env=self._env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: what it leaves running is stopped with the sandbox
        )
        started = _start_time(proc.pid)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise
        if _group_alive(proc.pid):  # it started something that runs on (an agent it installed): recorded
            await asyncio.to_thread(_record_group, self.folder, proc.pid, started)
        return ExecResult(
            exit_code=proc.returncode or 0, stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace")
        )

    async def put_file(self, path: str, data: bytes) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    async def get_file(self, path: str) -> bytes:
        return self._path(path).read_bytes()

    async def stop(self) -> None:
        await asyncio.to_thread(_stop_folder, self.folder)

    async def logs(self, lines: int = 20) -> str:
        text = await asyncio.to_thread((self.folder / "sandbox.log").read_text, errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def _read(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "sandbox.json").read_text())
    except (OSError, ValueError):
        return None


def _alive(meta: dict) -> bool:
    pid = meta.get("pid")
    return bool(pid) and _start_time(cast(int, pid)) == meta.get("started")


GROUPS_FILE = "groups.jsonl"  # process groups exec'd commands left running: stopped with the sandbox


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _record_group(folder: Path, pgid: int, started: str | None) -> None:
    with open(folder / GROUPS_FILE, "a") as f:
        f.write(json.dumps({"pgid": pgid, "started": started}) + "\n")


def _left_groups(folder: Path) -> list[int]:
    """The recorded groups still running. A group's id is its first process's pid, which is not reused while the
    group lives; a process now holding that pid with another start time leads a group that is not ours."""
    try:
        lines = (folder / GROUPS_FILE).read_text().splitlines()
    except OSError:
        return []
    groups = []
    for line in lines:
        try:
            entry = json.loads(line)
            pgid, started = int(entry["pgid"]), entry.get("started")
        except (ValueError, KeyError, TypeError):
            continue
        now = _start_time(pgid)
        if (now is None or now == started) and _group_alive(pgid):
            groups.append(pgid)
    return groups


def _stop_folder(folder: Path, grace: float = 3.0) -> bool:
    meta = _read(folder)
    existed = folder.exists()
    main = meta["pid"] if meta and _alive(meta) else None
    left = _left_groups(folder)  # what commands exec'd in it left running (an agent install_agent started)
    for pgid in [*left, *([main] if main else [])]:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)

    def running() -> list[int]:
        if main is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(main, os.WNOHANG)  # reap it if it is our child
        alive = [g for g in left if _group_alive(g)]
        return alive + ([main] if main is not None and meta and _alive(meta) else [])

    deadline = time.monotonic() + grace
    while running() and time.monotonic() < deadline:
        time.sleep(0.02)
    for pgid in running():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    shutil.rmtree(folder, ignore_errors=True)
    return existed


class LocalProvider(SandboxProvider):
    name = "local"
    capabilities = Capabilities(isolated=False, build=False, network=["open", "host"], resources=False)

    def __init__(self, settings) -> None:
        self.root = Path(settings.state_dir) / "sandboxes" / "local"
        self.install = install_id(settings)

    async def check(self) -> None:
        return None

    def _info(self, folder: Path, meta: dict) -> SandboxInfo:
        return SandboxInfo.from_labels(
            self.name, folder.name, meta["labels"], url=meta.get("url"), status="running" if _alive(meta) else "exited"
        )

    async def create(self, spec: SandboxSpec) -> Sandbox:
        folder = self.root / spec.name
        meta = _read(folder)
        if meta and self._info(folder, meta).install != self.install and _alive(meta):
            raise SandboxFailed(
                f"a sandbox named {spec.name!r} of another agent-env install runs in {folder}",
                "leave it to that install, or give this install a state dir of its own",
            )
        if meta and _alive(meta):  # a retried step finds the sandbox it started
            return LocalSandbox(self._info(folder, meta), folder)
        if folder.exists():
            await asyncio.to_thread(_stop_folder, folder)
        built = local_build.read_dockerfile(Path(spec.build)) if spec.build else local_build.LocalBuild()
        if not (spec.command or built.command):
            raise BadInput(
                f"sandbox {spec.name!r} has no `command`: the local provider runs processes, not images"
                + (" (its Dockerfile has no CMD)" if spec.build else ""),
                "give the app a `command` (run with $PORT set), or use the docker provider",
            )
        if spec.host_port is not None and port_taken(spec.host_port):
            raise SandboxFailed(
                f"port 127.0.0.1:{spec.host_port} is already in use",
                "free that port, or leave `host_port` unset to get a free one",
            )
        port = spec.host_port or (free_port() if spec.port else None)
        python = None
        if built.installs and spec.build:  # (made once per content: the next sandbox of it starts at once)
            venvs = self.root.parent / "local-venvs"
            python = str(await asyncio.to_thread(local_build.virtualenv, venvs, Path(spec.build), built.installs))
        command = own_python(spec.command or built.command or [], python)
        env = sandbox_env({**built.env, **spec.env}, port, python)
        sealed = _sealing(self.root).encrypt(json.dumps(env).encode()).decode()  # a broken key fails before anything
        work = folder / "work"
        work.mkdir(parents=True)
        if spec.build:
            shutil.copytree(spec.build, work, dirs_exist_ok=True)
        with open(folder / "sandbox.log", "ab") as log:
            for passed in built.passed_over:
                log.write(f"local provider: passed over the Dockerfile's {passed}\n".encode())
            log.flush()
            try:
                proc = subprocess.Popen(
                    command,
                    cwd=work,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            except OSError as e:
                shutil.rmtree(folder, ignore_errors=True)
                raise SandboxFailed(
                    f"sandbox {spec.name!r} could not start {command[0]!r}: {e}", "check the app's `command`"
                ) from None
        meta = {
            "pid": proc.pid,
            "started": _start_time(proc.pid),
            "labels": spec.labels(self.install),
            "url": f"http://127.0.0.1:{port}" if port else None,
            "command": command,
            "env": sealed,
            **({"python": python} if python else {}),
        }
        tmp = folder / "sandbox.json.tmp"
        tmp.write_text(json.dumps(meta))
        tmp.replace(folder / "sandbox.json")
        return LocalSandbox(self._info(folder, meta), folder, env, python)

    async def list(self, run_id: str | None = None) -> list[SandboxInfo]:
        out = []
        for folder in sorted(self.root.glob("*")) if self.root.is_dir() else []:
            meta = _read(folder)
            if meta is None:
                continue
            info = self._info(folder, meta)
            if info.install == self.install and (run_id is None or info.run_id == run_id):
                out.append(info)
        return out

    def _folder(self, sandbox_id: str) -> Path:
        folder = self.root / sandbox_id
        if not folder.is_relative_to(self.root) or "/" in sandbox_id or sandbox_id in ("", ".", ".."):
            raise BadInput(f"{sandbox_id!r} is not a local sandbox id", "use an id from `agent-env sandboxes list`")
        return folder

    async def remove(self, sandbox_id: str) -> bool:
        return await asyncio.to_thread(_stop_folder, self._folder(sandbox_id))

    async def attach(self, sandbox_id: str) -> Sandbox:
        folder = self._folder(sandbox_id)
        meta = _read(folder)
        if meta is None or self._info(folder, meta).install != self.install:
            raise NotFound(f"no local sandbox {sandbox_id!r} of this install", "it was removed: deploy it again")
        return LocalSandbox(self._info(folder, meta), folder)

    def sandbox(self, info: SandboxInfo) -> LocalSandbox:
        return LocalSandbox(info, self.root / info.id)
