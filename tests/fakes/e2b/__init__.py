"""A fake of the part of the E2B SDK (e2b 2.x, `AsyncSandbox`) that agent-env's e2b provider uses.

State lives in this process. A sandbox is a temp folder: commands run there as local `bash -c` subprocesses
(a background server on the sandbox's port is reachable on localhost at that port, as in the SDK's debug
mode, which is why `connection_config.debug` is true), and files map absolute sandbox paths under the
folder. Signatures, return types and errors follow the SDK: `create`/`connect`/`kill`/`list` need an API
key, a non-zero exit raises `CommandExitException`, a command past its `timeout` raises `TimeoutException`,
and a background command whose `timeout` is not 0 is killed when it runs out, as E2B does. Where it
cannot: nothing is isolated and templates are only recorded.

Not in the SDK, for tests: `sandboxes()` (every sandbox created, each with the `create_kwargs` it was
created with and its `background` commands) and `reset()`.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import IO, Any


class SandboxException(Exception):
    status_code: int | None = None


class TimeoutException(SandboxException):
    pass


class NotFoundException(SandboxException):
    pass


class FileNotFoundException(NotFoundException):
    pass


class SandboxNotFoundException(NotFoundException):
    pass


class SandboxNotRunningException(TimeoutException):
    pass


class AuthenticationException(Exception):
    pass


@dataclass
class CommandResult:
    stderr: str
    stdout: str
    exit_code: int
    error: str | None


@dataclass
class CommandExitException(SandboxException, CommandResult):
    def __str__(self) -> str:
        return f"Command exited with code {self.exit_code} and error:\n{self.stderr}"


class SandboxState(str, Enum):  # noqa: UP042 - as in the SDK
    PAUSED = "paused"
    RUNNING = "running"


@dataclass
class SandboxQuery:
    metadata: dict[str, str] | None = None
    state: list[SandboxState] | None = None
    started_after: datetime | None = None
    template: str | None = None


@dataclass
class SandboxInfo:
    sandbox_id: str
    sandbox_domain: str | None
    template_id: str
    name: str | None
    metadata: dict[str, str]
    started_at: datetime
    end_at: datetime
    state: SandboxState
    cpu_count: int
    memory_mb: int
    envd_version: str
    allow_internet_access: bool | None = None


@dataclass
class WriteInfo:
    name: str
    path: str
    type: str | None = "file"


@dataclass
class ConnectionConfig:
    debug: bool = True  # like the SDK's debug mode: sandboxes are on localhost, over plain http


class class_method_variant:  # noqa: N801 - the SDK's name
    """As in the SDK: `sandbox.kill()` on an instance, `AsyncSandbox.kill(sandbox_id)` on the class."""

    def __init__(self, class_method_name: str) -> None:
        self.class_method_name = class_method_name

    def __call__(self, method: Any) -> Any:
        self.method = method
        return self

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        @functools.wraps(self.method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if obj is not None:
                return self.method(obj, *args, **kwargs)
            return getattr(objtype, self.class_method_name)(*args, **kwargs)

        return wrapper


_sandboxes: dict[str, AsyncSandbox] = {}
_ids = itertools.count(1)


def _require_api_key(opts: dict[str, Any]) -> None:
    if not (opts.get("api_key") or os.environ.get("E2B_API_KEY")):
        raise AuthenticationException(
            "API key is required, please visit the Team tab at https://e2b.dev/dashboard "
            "to get your API key. You can either set the environment variable "
            '`E2B_API_KEY` or you can pass it directly to the method like api_key="e2b_..."'
        )


class AsyncCommandHandle:
    def __init__(self, proc: subprocess.Popen) -> None:
        self._proc = proc

    @property
    def pid(self) -> int:
        return self._proc.pid

    async def wait(self) -> CommandResult:
        code = await asyncio.to_thread(self._proc.wait)
        if code:
            raise CommandExitException(stderr="", stdout="", exit_code=code, error=None)
        return CommandResult(stderr="", stdout="", exit_code=0, error=None)

    async def kill(self) -> bool:
        return self._kill()

    def _kill(self) -> bool:
        if self._proc.poll() is not None:
            return False
        os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()
        return True


class Commands:
    def __init__(self, sb: AsyncSandbox) -> None:
        self._sb = sb

    async def run(
        self,
        cmd: str,
        background: bool | None = None,
        envs: dict[str, str] | None = None,
        user: str | None = None,
        cwd: str | None = None,
        on_stdout: Any = None,
        on_stderr: Any = None,
        stdin: bool | None = None,
        timeout: float | None = 60,
        request_timeout: float | None = None,
        *,
        retain_output: bool = True,
    ) -> Any:
        sb = self._sb
        sb._check_running()
        kwargs = dict(cwd=sb._local(cwd or "/home/user"), env={**sb._environ(), **(envs or {})})
        if background:
            proc = subprocess.Popen(
                ["bash", "-c", cmd],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                **kwargs,
            )
            handle = AsyncCommandHandle(proc)
            sb.background.append({"cmd": cmd, "timeout": timeout, "handle": handle})
            if timeout:  # E2B ends the command's stream at its timeout, and the command with it
                timer = threading.Timer(timeout, handle._kill)
                timer.daemon = True
                timer.start()
            return handle
        try:
            done = await asyncio.to_thread(
                subprocess.run, ["bash", "-c", cmd], capture_output=True, text=True, timeout=timeout or None, **kwargs
            )
        except subprocess.TimeoutExpired:
            raise TimeoutException(
                "context deadline exceeded: This error is likely due to exceeding 'timeout' "
                "— the total time a long running request (like command execution) can be "
                "active."
            ) from None
        if done.returncode:
            raise CommandExitException(
                stderr=done.stderr,
                stdout=done.stdout,
                exit_code=done.returncode,
                error=f"exit status {done.returncode}",
            )
        return CommandResult(stderr=done.stderr, stdout=done.stdout, exit_code=0, error=None)


class Filesystem:
    def __init__(self, sb: AsyncSandbox) -> None:
        self._sb = sb

    async def write(
        self,
        path: str,
        data: str | bytes | IO,
        user: str | None = None,
        request_timeout: float | None = None,
        **kwargs: Any,
    ) -> WriteInfo:
        self._sb._check_running()
        if hasattr(data, "read"):
            data = data.read()
        local = self._sb._local(path)
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(data.encode() if isinstance(data, str) else bytes(data))
        return WriteInfo(name=local.name, path=path)

    async def read(
        self,
        path: str,
        format: str = "text",
        user: str | None = None,
        request_timeout: float | None = None,
        **kwargs: Any,
    ) -> str | bytearray:
        self._sb._check_running()
        local = self._sb._local(path)
        if not local.is_file():
            raise FileNotFoundException(f"{path}: no such file or directory")
        if format == "bytes":
            return bytearray(local.read_bytes())
        if format == "text":
            return local.read_text()
        raise ValueError(f"the fake does not support format={format!r}")


class AsyncSandboxPaginator:
    def __init__(
        self,
        query: SandboxQuery | None = None,
        limit: int | None = None,
        next_token: str | None = None,
        order: str | None = None,
    ) -> None:
        self.query, self.limit = query, limit
        self._next_token, self._has_next = next_token, True

    @property
    def has_next(self) -> bool:
        return self._has_next

    @property
    def next_token(self) -> str | None:
        return self._next_token

    async def next_items(self, **opts: Any) -> list[SandboxInfo]:
        if not self._has_next:
            raise Exception("No more items to fetch")
        query = self.query or SandboxQuery()
        found = [
            sb._info()
            for sb in _sandboxes.values()
            if sb._alive() and all(sb.metadata.get(k) == v for k, v in (query.metadata or {}).items())
        ]
        start = int(self._next_token or 0)
        end = start + self.limit if self.limit else len(found)
        self._next_token = str(end) if end < len(found) else None
        self._has_next = self._next_token is not None
        return found[start:end]


class AsyncSandbox:
    default_template = "base"

    def __init__(
        self, template: str, metadata: dict[str, str], envs: dict[str, str], timeout: int, create_kwargs: dict[str, Any]
    ) -> None:
        self._id = f"i{next(_ids):019d}"
        self.template, self.metadata, self.envs = template, dict(metadata), dict(envs)
        self.create_kwargs = create_kwargs
        self.background: list[dict[str, Any]] = []
        self.connection_config = ConnectionConfig()
        self.root = Path(tempfile.mkdtemp(prefix="fake-e2b-"))
        self._local("/home/user").mkdir(parents=True)
        self._started = datetime.now(UTC)
        self._deadline = time.monotonic() + timeout
        self._end_at = self._started + timedelta(seconds=timeout)
        self._killed = False
        self._files, self._commands = Filesystem(self), Commands(self)

    @property
    def sandbox_id(self) -> str:
        return self._id

    @property
    def files(self) -> Filesystem:
        return self._files

    @property
    def commands(self) -> Commands:
        return self._commands

    def get_host(self, port: int) -> str:
        return f"localhost:{port}"  # the SDK's answer in debug mode

    @classmethod
    async def create(
        cls,
        template: str | None = None,
        timeout: int | None = None,
        metadata: dict[str, str] | None = None,
        envs: dict[str, str] | None = None,
        secure: bool | None = None,
        allow_internet_access: bool | None = None,
        mcp: Any = None,
        network: Any = None,
        lifecycle: Any = None,
        **opts: Any,
    ) -> AsyncSandbox:
        _require_api_key(opts)
        for key, value in (metadata or {}).items():
            if not (isinstance(key, str) and isinstance(value, str)):
                raise SandboxException(f"metadata must map strings to strings, not {key!r}: {value!r}")
        kwargs = dict(
            template=template,
            timeout=timeout,
            metadata=metadata,
            envs=envs,
            allow_internet_access=allow_internet_access,
            network=network,
        )
        sb = cls(template or cls.default_template, metadata or {}, envs or {}, timeout or 300, kwargs)
        _sandboxes[sb.sandbox_id] = sb
        return sb

    @class_method_variant("_cls_connect_sandbox")
    async def connect(self, timeout: int | None = None, **opts: Any) -> AsyncSandbox:
        return await AsyncSandbox._cls_connect_sandbox(self.sandbox_id, timeout, **opts)

    @classmethod
    async def _cls_connect_sandbox(cls, sandbox_id: str, timeout: int | None = None, **opts: Any) -> AsyncSandbox:
        _require_api_key(opts)
        sb = _sandboxes.get(sandbox_id)
        if sb is None or not sb._alive():
            raise SandboxNotFoundException(f"Paused sandbox {sandbox_id} not found")
        return sb

    @class_method_variant("_cls_kill")
    async def kill(self, **opts: Any) -> bool:
        return await AsyncSandbox._cls_kill(self.sandbox_id, **opts)

    @classmethod
    async def _cls_kill(cls, sandbox_id: str, **opts: Any) -> bool:
        _require_api_key(opts)
        sb = _sandboxes.get(sandbox_id)
        if sb is None or not sb._alive():
            return False
        sb._kill()
        return True

    @classmethod
    def list(
        cls,
        query: SandboxQuery | None = None,
        limit: int | None = None,
        next_token: str | None = None,
        order: str | None = None,
        **opts: Any,
    ) -> AsyncSandboxPaginator:
        _require_api_key(opts)
        return AsyncSandboxPaginator(query=query, limit=limit, next_token=next_token, order=order)

    async def is_running(self, request_timeout: float | None = None) -> bool:
        return self._alive()

    def _info(self) -> SandboxInfo:
        return SandboxInfo(
            sandbox_id=self.sandbox_id,
            sandbox_domain=None,
            template_id=self.template,
            name=None,
            metadata=dict(self.metadata),
            started_at=self._started,
            end_at=self._end_at,
            state=SandboxState.RUNNING,
            cpu_count=2,
            memory_mb=512,
            envd_version="0.2.0",
            allow_internet_access=self.create_kwargs["allow_internet_access"],
        )

    def _alive(self) -> bool:
        if not self._killed and time.monotonic() > self._deadline:  # E2B kills a sandbox at its timeout
            self._kill()
        return not self._killed

    def _check_running(self) -> None:
        if not self._alive():
            raise SandboxNotRunningException(
                f"sandbox {self.sandbox_id} was not found: The sandbox was killed or reached its timeout."
            )

    def _environ(self) -> dict[str, str]:
        return {**os.environ, "HOME": str(self.root / "home" / "user"), **self.envs}

    def _local(self, path: str) -> Path:
        remote = PurePosixPath("/home/user", path)  # relative paths are relative to the user's home, as in E2B
        if ".." in remote.parts:
            raise ValueError(f"the fake does not resolve '..' in {path!r}")
        return self.root.joinpath(*remote.parts[1:])

    def _kill(self) -> None:
        self._killed = True
        for run in self.background:
            run["handle"]._kill()
        shutil.rmtree(self.root, ignore_errors=True)


def sandboxes() -> list[AsyncSandbox]:
    return list(_sandboxes.values())


def reset() -> None:
    for sb in _sandboxes.values():
        if not sb._killed:
            sb._kill()
    _sandboxes.clear()
