"""A fake of `tensorlake.sandbox` (tensorlake 0.5): `AsyncSandbox` (create, connect, run, read_file, write_file,
update, terminate) and `AsyncSandboxClient` (for_cloud, list, get, delete), with the SDK's errors and models.

State lives in this process. A sandbox is a folder (tests/fakes/vm_folder.py): `run` is a local subprocess, the
file API maps absolute paths under the folder (a missing file answers 404, as the service does; writing makes
the folders on the way), and an exposed port is served on 127.0.0.1 at that port (plain http: no ingress).
Every call needs an API key and the same API URL the sandbox was created at. Sandboxes have names, no labels.

Not in the SDK, for tests: `sandboxes()` (every sandbox, each with the `create_kwargs` it was created with, and
the `api_key` it was created with) and `reset()`.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Generic, TypeVar

from vm_folder import Folder

T = TypeVar("T")
_sandboxes: dict[str, _Sandbox] = {}
_ids = itertools.count(1)


class SandboxException(Exception):
    pass


class SandboxError(SandboxException):
    pass


class SandboxConnectionError(SandboxError):
    pass


class SandboxNotFoundError(SandboxError):
    def __init__(self, sandbox_id: str) -> None:
        self.sandbox_id = sandbox_id
        super().__init__(f"Sandbox not found: {sandbox_id}")


class RemoteAPIError(SandboxError):
    def __init__(self, status_code: int, message: str) -> None:
        self.status_code = status_code
        super().__init__(f"API error (status {status_code}): {message}")


class SandboxStatus(str, Enum):  # noqa: UP042 - as in the SDK
    PENDING = "pending"
    RUNNING = "running"
    TERMINATED = "terminated"
    TIMEOUT = "timeout"


class CommandExitReason(str, Enum):  # noqa: UP042 - as in the SDK
    EXITED = "exited"
    TIMED_OUT = "timed_out"


class CommandResult:
    def __init__(self, exit_code: int, stdout: str, stderr: str, reason: CommandExitReason) -> None:
        self.exit_code, self.stdout, self.stderr, self.reason = exit_code, stdout, stderr, reason

    @property
    def timed_out(self) -> bool:
        return self.reason == CommandExitReason.TIMED_OUT


class Traced(Generic[T]):
    def __init__(self, trace_id: str, result: T) -> None:
        self.trace_id, self._result = trace_id, result

    @property
    def value(self) -> T:
        return self._result

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_result"), name)


class SandboxInfo:
    def __init__(self, sb: _Sandbox) -> None:
        self.sandbox_id = sb.id
        self.name = sb.name
        self.status = sb.status()
        self.created_at = sb.created_at
        self.exposed_ports = list(sb.exposed_ports)
        self.allow_unauthenticated_access = sb.public

    def url_for_port(self, port: int) -> str | None:
        return f"http://127.0.0.1:{port}" if port in self.exposed_ports else None


class _Sandbox:
    """The service's record of one sandbox."""

    def __init__(self, name: str | None, timeout_secs: int | None, create_kwargs: dict[str, Any], key: str) -> None:
        self.id = f"tl{next(_ids):018d}"
        self.name, self.create_kwargs, self.api_key = name, create_kwargs, key
        self.api_url = create_kwargs["api_url"]
        self.folder = Folder("fake-tensorlake-")
        self.created_at = datetime.now(UTC)
        self.deadline = time.monotonic() + timeout_secs if timeout_secs else None
        self.exposed_ports: list[int] = []
        self.public = False
        self.ended: SandboxStatus | None = None

    def status(self) -> SandboxStatus:
        if self.ended is None and self.deadline is not None and time.monotonic() > self.deadline:
            self.end(SandboxStatus.TIMEOUT)
        return self.ended or SandboxStatus.RUNNING

    def end(self, status: SandboxStatus) -> None:
        self.ended = status
        self.folder.destroy()


def _service(api_key: str | None, api_url: str) -> None:
    if not api_key:
        raise RemoteAPIError(401, "missing API key")
    if not api_url:
        raise SandboxError("api_url is required")


def _running(sandbox_id: str, api_url: str) -> _Sandbox:
    sb = _sandboxes.get(sandbox_id)
    if sb is None or sb.api_url != api_url:
        raise SandboxNotFoundError(sandbox_id)
    if sb.status() != SandboxStatus.RUNNING:
        raise RemoteAPIError(410, f'{{"sandbox_id": "{sandbox_id}", "status": "terminated"}}')
    return sb


class AsyncSandbox:
    def __init__(self, sb: _Sandbox) -> None:
        self._sb = sb

    @property
    def sandbox_id(self) -> str:
        return self._sb.id

    @classmethod
    async def create(
        cls,
        image: str | None = None,
        cpus: float | None = None,
        memory_mb: int | None = None,
        disk_mb: int | None = None,
        timeout_secs: int | None = None,
        entrypoint: list[str] | None = None,
        allow_internet_access: bool = True,
        allow_out: list[str] | None = None,
        deny_out: list[str] | None = None,
        name: str | None = None,
        api_key: str | None = None,
        api_url: str = "https://api.tensorlake.ai",
        wait: bool = True,
        **kwargs: Any,
    ) -> AsyncSandbox:
        _service(api_key, api_url)
        if not wait:
            raise NotImplementedError("the fake answers only wait=True")
        create_kwargs = dict(
            image=image,
            cpus=cpus,
            memory_mb=memory_mb,
            disk_mb=disk_mb,
            timeout_secs=timeout_secs,
            entrypoint=entrypoint,
            allow_internet_access=allow_internet_access,
            allow_out=allow_out,
            deny_out=deny_out,
            name=name,
            api_url=api_url,
            **kwargs,
        )
        sb = _Sandbox(name, timeout_secs, create_kwargs, api_key or "")
        _sandboxes[sb.id] = sb
        return cls(sb)

    @classmethod
    async def connect(
        cls, sandbox_id: str, *, api_key: str | None = None, api_url: str = "https://api.tensorlake.ai", **kwargs: Any
    ) -> AsyncSandbox:
        _service(api_key, api_url)
        return cls(_running(sandbox_id, api_url))

    async def run(
        self,
        command: str,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        working_dir: str | None = None,
        timeout: float | None = None,
        user: Any = None,
    ) -> Traced[CommandResult]:
        sb = _running(self._sb.id, self._sb.api_url)
        code, out, err, timed_out = await asyncio.to_thread(sb.folder.run, [command, *(args or [])], env, timeout)
        reason = CommandExitReason.TIMED_OUT if timed_out else CommandExitReason.EXITED
        return Traced("t", CommandResult(code, out.decode(errors="replace"), err.decode(errors="replace"), reason))

    async def read_file(self, path: str) -> Traced[bytes]:
        local = _running(self._sb.id, self._sb.api_url).folder.local(path)
        if not local.is_file():
            raise RemoteAPIError(404, f"file not found: {path}")
        return Traced("t", local.read_bytes())

    async def write_file(self, path: str, content: bytes) -> Traced[None]:
        local = _running(self._sb.id, self._sb.api_url).folder.local(path)
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(bytes(content))
        return Traced("t", None)

    async def update(
        self,
        name: str | None = None,
        *,
        allow_unauthenticated_access: bool | None = None,
        exposed_ports: list[int] | None = None,
        **kwargs: Any,
    ) -> Traced[SandboxInfo]:
        sb = _running(self._sb.id, self._sb.api_url)
        if exposed_ports is not None:
            sb.exposed_ports = list(exposed_ports)
        if allow_unauthenticated_access is not None:
            sb.public = allow_unauthenticated_access
        return Traced("t", SandboxInfo(sb))

    async def info(self) -> SandboxInfo:
        return SandboxInfo(self._sb)

    async def terminate(self) -> None:
        if self._sb.ended is not None or self._sb.id not in _sandboxes:
            raise SandboxNotFoundError(self._sb.id)
        self._sb.end(SandboxStatus.TERMINATED)


class AsyncSandboxClient:
    def __init__(self, api_url: str, api_key: str | None) -> None:
        _service(api_key, api_url)
        self._api_url = api_url

    @classmethod
    def for_cloud(
        cls, api_key: str | None = None, api_url: str = "https://api.tensorlake.ai", **kwargs: Any
    ) -> AsyncSandboxClient:
        return cls(api_url, api_key)

    async def __aenter__(self) -> AsyncSandboxClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        pass

    async def list(self) -> list[SandboxInfo]:
        return [SandboxInfo(sb) for sb in _sandboxes.values() if sb.api_url == self._api_url]

    async def get(self, sandbox_id: str) -> Traced[SandboxInfo]:
        sb = _sandboxes.get(sandbox_id)
        if sb is None or sb.api_url != self._api_url:
            raise SandboxNotFoundError(sandbox_id)
        return Traced("t", SandboxInfo(sb))

    async def delete(self, sandbox_id: str) -> Traced[None]:
        sb = _sandboxes.get(sandbox_id)
        if sb is None or sb.api_url != self._api_url or sb.status() != SandboxStatus.RUNNING:
            raise SandboxNotFoundError(sandbox_id)
        sb.end(SandboxStatus.TERMINATED)
        return Traced("t", None)


def sandboxes() -> list[_Sandbox]:
    return list(_sandboxes.values())


def reset() -> None:
    for sb in _sandboxes.values():
        if sb.ended is None:
            sb.end(SandboxStatus.TERMINATED)
    _sandboxes.clear()
