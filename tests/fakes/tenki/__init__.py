"""A fake of the part of the Tenki SDK (tenki 1.4, `tenki.AsyncClient` and its `AsyncSandbox` sessions) that
agent-env's tenki provider uses.

State lives in this process. A session is a folder (tests/fakes/vm_folder.py): `exec` runs a local subprocess
(with the session's `env`, and its `input` as standard input), and an exposed port is served on 127.0.0.1 at that
port (plain http: no preview proxy). As in the SDK, a session handle talks through the client that made it: once
that client is closed, its calls fail. Every client needs an API key.

Not in the SDK, for tests: `sandboxes()` (every session, each with the `create_kwargs` it was created with and
the `api_key` of its client) and `reset()`.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from vm_folder import Folder

_sessions: dict[str, _Session] = {}
_ids = itertools.count(1)


class SandboxError(Exception):
    pass


class MissingAuthTokenError(SandboxError):
    pass


class SessionNotFoundError(SandboxError):
    pass


class SessionTerminatedError(SandboxError):
    pass


@dataclass(frozen=True)
class SandboxInfo:
    id: str
    name: str = ""
    state: str = "UNSPECIFIED"
    timeout_at: datetime | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExposedPort:
    port: int
    url: str


@dataclass
class CommandResult:
    argv: list[str]
    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    signal: str | None = None
    reason: str | None = None
    timed_out: bool = False

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode(errors="replace")


class _Session:
    def __init__(self, name: str, max_duration: float | None, create_kwargs: dict[str, Any], key: str) -> None:
        self.id = f"ses-{next(_ids):012d}"
        self.name, self.create_kwargs, self.api_key = name, create_kwargs, key
        self.metadata = dict(create_kwargs.get("metadata") or {})
        self.tags = tuple(create_kwargs.get("tags") or ())
        self.folder = Folder("fake-tenki-", create_kwargs.get("env"))
        self.timeout_at = datetime.now(UTC) + timedelta(seconds=max_duration) if max_duration else None
        self.deadline = time.monotonic() + max_duration if max_duration else None
        self.ports: dict[int, ExposedPort] = {}
        self.ended = False

    def state(self) -> str:
        if not self.ended and self.deadline is not None and time.monotonic() > self.deadline:
            self.end()
        return "TERMINATED" if self.ended else "RUNNING"

    def end(self) -> None:
        self.ended = True
        self.folder.destroy()

    def info(self) -> SandboxInfo:
        return SandboxInfo(self.id, self.name, self.state(), self.timeout_at, dict(self.metadata), self.tags)


class AsyncSandbox:
    def __init__(self, client: AsyncClient, session: _Session) -> None:
        self._client, self._session = client, session

    @property
    def id(self) -> str:
        return self._session.id

    @property
    def info(self) -> SandboxInfo:
        return self._session.info()

    @property
    def state(self) -> str:
        return self._session.state()

    def _live(self) -> _Session:
        self._client._check()
        if self._session.state() != "RUNNING":
            raise SessionTerminatedError(f"session {self.id} is terminated")
        return self._session

    async def exec(
        self,
        *argv: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        input: bytes | str | None = None,
        check: bool = False,
        privileged: bool = False,
    ) -> CommandResult:
        session = self._live()
        stdin = input.encode() if isinstance(input, str) else input
        code, out, err, timed_out = await asyncio.to_thread(session.folder.run, list(argv), env, timeout, stdin)
        return CommandResult(list(argv), code, out, err, timed_out=timed_out)

    async def expose_port(self, port: int, *, ttl: Any = None, slug: str | None = None) -> ExposedPort:
        session = self._live()
        session.ports[port] = ExposedPort(port, f"http://127.0.0.1:{port}")  # the real one is https (or no scheme)
        return session.ports[port]

    async def list_exposed_ports(self) -> list[ExposedPort]:
        return list(self._live().ports.values())

    async def close(self) -> None:
        self._client._check()
        if self._session.ended:
            raise SessionTerminatedError(f"session {self.id} is terminated")
        self._session.end()

    terminate = close

    async def close_if_open(self) -> None:
        if self.state not in {"TERMINATING", "TERMINATED"}:
            await self.close()


class AsyncClient:
    def __init__(self, *, api_key: str | None = None, base_url: str | None = None, **kwargs: Any) -> None:
        if not api_key:
            raise MissingAuthTokenError("an API key is required")
        self.api_key, self.base_url = api_key, base_url
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise SandboxError("the client is closed")

    async def close(self) -> None:
        self._closed = True

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def create(
        self,
        *,
        name: str | None = None,
        wait: bool = True,
        allow_inbound: bool = True,
        allow_outbound: bool = True,
        allow_domains: list[str] | None = None,
        allow_cidrs: list[str] | None = None,
        max_duration: float | None = None,
        cpu_cores: int | None = None,
        memory_mb: int | None = None,
        disk_size_gb: int | None = None,
        metadata: dict[str, str] | None = None,
        tags: list[str] | None = None,
        env: dict[str, str] | None = None,
        snapshot_id: str | None = None,
        image: str | None = None,
        **kwargs: Any,
    ) -> AsyncSandbox:
        self._check()
        if name is not None and len(name) > 63:
            raise SandboxError(f"name {name!r} is longer than 63 characters")
        if memory_mb is not None and memory_mb % 2:
            raise SandboxError("memory_mb must be even")
        if image and snapshot_id:
            raise SandboxError("image and snapshot_id are exclusive")
        create_kwargs = dict(
            name=name,
            allow_outbound=allow_outbound,
            allow_domains=allow_domains,
            allow_cidrs=allow_cidrs,
            max_duration=max_duration,
            cpu_cores=cpu_cores,
            memory_mb=memory_mb,
            disk_size_gb=disk_size_gb,
            metadata=metadata,
            tags=tags,
            env=env,
            snapshot_id=snapshot_id,
            image=image,
            base_url=self.base_url,
        )
        session = _Session(name or "", max_duration, create_kwargs, self.api_key)
        _sessions[session.id] = session
        return AsyncSandbox(self, session)

    async def get(self, sandbox_id: str) -> AsyncSandbox:
        self._check()
        if sandbox_id not in _sessions:
            raise SessionNotFoundError(f"session {sandbox_id} not found")
        return AsyncSandbox(self, _sessions[sandbox_id])

    async def list(
        self, *, tags: list[str] | None = None, include_terminated: bool = False, **kw: Any
    ) -> list[AsyncSandbox]:
        self._check()
        return [
            AsyncSandbox(self, s)
            for s in _sessions.values()
            if set(tags or ()) <= set(s.tags) and (include_terminated or s.state() == "RUNNING")
        ]


def sandboxes() -> list[_Session]:
    return list(_sessions.values())


def reset() -> None:
    for s in _sessions.values():
        if not s.ended:
            s.end()
    _sessions.clear()
