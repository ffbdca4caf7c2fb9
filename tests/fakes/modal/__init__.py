"""A fake of the part of the Modal SDK (modal 1.6, its blocking API) that agent-env's modal provider uses.

State lives in this process. A sandbox is a temp folder: its command runs there as a local subprocess, so a
server on the sandbox's port is reachable on 127.0.0.1 at that port; `exec` runs local subprocesses; the
`filesystem` API maps absolute sandbox paths under the folder. Signatures, return types and errors follow
the SDK. Where it cannot: nothing is isolated and images are only recorded, tunnel URLs are plain http
(no TLS), and `exec` runs its command to completion before returning. The V2 backend's calls
(`Sandbox._experimental_create`, `_experimental_from_name`, `_experimental_list`, which the modal_vm provider
uses) keep the SDK's split: V1's `from_name` and `list` do not find V2 sandboxes.

Not in the SDK, for tests: `sandboxes()` (every sandbox created, each with the `create_kwargs` it was
created with) and `reset()`.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from . import exception
from .exception import (
    AlreadyExistsError,
    InvalidError,
    NotFoundError,
    SandboxFilesystemNotFoundError,
)

__all__ = ["App", "ContainerProcess", "Image", "Sandbox", "Tunnel", "exception", "reset", "sandboxes"]

_apps: dict[str, App] = {}
_sandboxes: dict[str, Sandbox] = {}
_images: dict[str, Image] = {}
_ids = itertools.count(1)
TERMINATED = 137  # the fake's exit code for a terminated or timed-out sandbox


class App:
    def __init__(self, name: str) -> None:
        self.name = name
        self.app_id = f"ap-{next(_ids):022d}"

    @staticmethod
    def lookup(
        name: str, *, client: Any = None, environment_name: str | None = None, create_if_missing: bool = False
    ) -> App:
        if name not in _apps:
            if not create_if_missing:
                raise NotFoundError(f"Lookup failed for App '{name}'")
            _apps[name] = App(name)
        return _apps[name]


class Image:
    def __init__(self, kind: str, **args: Any) -> None:
        self.kind, self.args = kind, args
        self.object_id = f"im-{next(_ids):022d}"
        _images[self.object_id] = self

    @staticmethod
    def from_id(image_id: str, client: Any = None) -> Image:
        if image_id not in _images:
            raise NotFoundError(f"Image {image_id} not found")
        return _images[image_id]

    @staticmethod
    def from_registry(
        tag: str,
        secret: Any = None,
        *,
        setup_dockerfile_commands: list[str] = [],  # noqa: B006
        force_build: bool = False,
        add_python: str | None = None,
        **kwargs: Any,
    ) -> Image:
        return Image("registry", tag=tag)

    @staticmethod
    def from_dockerfile(
        path: str | Path,
        *,
        force_build: bool = False,
        context_dir: Path | str | None = None,
        build_args: dict[str, str] = {},  # noqa: B006
        **kwargs: Any,
    ) -> Image:
        return Image("dockerfile", path=Path(path), context_dir=context_dir)

    def apt_install(self, *packages: str | list[str], force_build: bool = False, **kwargs: Any) -> Image:
        return Image("apt", base=self, packages=list(packages))


@dataclass
class Tunnel:
    host: str
    port: int
    unencrypted_host: str = ""
    unencrypted_port: int | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"  # the real one is https://; the fake has no TLS


class _StreamReader:
    def __init__(self, data: str) -> None:
        self._data = data

    def read(self) -> str:
        return self._data


class ContainerProcess:
    def __init__(self, stdout: str, stderr: str, returncode: int) -> None:
        self._stdout, self._stderr = _StreamReader(stdout), _StreamReader(stderr)
        self._exit, self._returncode = returncode, None

    @property
    def stdout(self) -> _StreamReader:
        return self._stdout

    @property
    def stderr(self) -> _StreamReader:
        return self._stderr

    @property
    def returncode(self) -> int:
        if self._returncode is None:
            raise InvalidError("You must call wait() before accessing the returncode.")
        return self._returncode

    def poll(self) -> int | None:
        return self.wait()

    def wait(self) -> int:
        self._returncode = self._exit  # -1 after a timeout, as in the SDK
        return self._returncode


class _SandboxFilesystem:
    def __init__(self, sb: Sandbox) -> None:
        self._sb = sb

    def write_bytes(self, data: bytes | bytearray | memoryview, remote_path: str) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("data must be bytes-like")
        local = self._sb._local(remote_path)
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(bytes(data))

    def read_bytes(self, remote_path: str) -> bytes:
        local = self._sb._local(remote_path)
        if not local.is_file():
            raise SandboxFilesystemNotFoundError(f"{remote_path}: no such file")
        return local.read_bytes()


class Sandbox:
    def __init__(
        self,
        app: App,
        name: str | None,
        tags: dict[str, str],
        args: Sequence[str],
        env: dict[str, str],
        timeout: int | None,
        ports: Sequence[int],
        create_kwargs: dict[str, Any],
        v2: bool = False,
    ) -> None:
        self.object_id = f"sb-{next(_ids):022d}"
        self.v2 = v2  # made by _experimental_create: only the _experimental_ lookups find it, as in the SDK
        self._app, self._name, self._tags, self._env, self._ports = app, name, dict(tags), env, list(ports)
        self.create_kwargs = create_kwargs
        self.root = Path(tempfile.mkdtemp(prefix="fake-modal-"))
        image = create_kwargs.get("image")
        if image is not None and image.kind == "snapshot":  # starts from a saved filesystem
            shutil.copytree(image.args["folder"], self.root, dirs_exist_ok=True)
        self._deadline = time.monotonic() + timeout if timeout else None
        self._returncode: int | None = None
        self._proc: subprocess.Popen | None = None
        if args:
            try:
                self._proc = subprocess.Popen(
                    list(args),
                    cwd=self.root,
                    env=self._environ(),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError:
                self._returncode = 127

    @staticmethod
    def create(
        *args: str,
        app: App | None = None,
        name: str | None = None,
        tags: dict[str, str] | None = None,
        image: Image | None = None,
        env: dict[str, str | None] | None = None,
        secrets: Any = None,
        timeout: int | None = 300,
        idle_timeout: int | None = None,
        workdir: str | None = None,
        cpu: float | tuple[float, float] | None = None,
        memory: int | tuple[int, int] | None = None,
        block_network: bool = False,
        outbound_cidr_allowlist: Sequence[str] | None = None,
        encrypted_ports: Sequence[int] = [],
        unencrypted_ports: Sequence[int] = [],  # noqa: B006
        client: Any = None,
        experimental_options: dict[str, Any] | None = None,
        _v2: bool = False,
    ) -> Sandbox:
        if app is None:
            raise InvalidError("App is required when creating a Sandbox outside a Modal container")
        if name is not None and not (len(name) <= 64 and re.match(r"^[a-zA-Z0-9\-_.]+$", name)):
            raise InvalidError(f"Invalid Sandbox name: '{name}'.")
        for key in env or {}:
            if not re.match(r"^[A-Za-z0-9_]+$", key):
                raise InvalidError(f"Secret key name {key!r} is invalid for environment variables.")
        if block_network and outbound_cidr_allowlist is not None:
            raise InvalidError("`outbound_cidr_allowlist` cannot be used when `block_network` is enabled")
        if name is not None and any(sb._name == name and sb.v2 == _v2 for sb in _running(app.app_id)):
            raise AlreadyExistsError(f"Sandbox with name '{name}' already exists")
        kwargs = dict(
            app=app,
            name=name,
            tags=tags,
            image=image,
            env=env,
            secrets=secrets,
            timeout=timeout,
            workdir=workdir,
            cpu=cpu,
            memory=memory,
            block_network=block_network,
            outbound_cidr_allowlist=outbound_cidr_allowlist,
            encrypted_ports=list(encrypted_ports),
            unencrypted_ports=list(unencrypted_ports),
            experimental_options=experimental_options,
        )
        sb = Sandbox(
            app,
            name,
            tags or {},
            args,
            {k: v for k, v in (env or {}).items() if v is not None},
            timeout,
            [*encrypted_ports, *unencrypted_ports],
            kwargs,
            v2=_v2,
        )
        _sandboxes[sb.object_id] = sb
        return sb

    @staticmethod
    def _experimental_create(
        *args: str,
        app: App | None = None,
        name: str | None = None,
        tags: dict[str, str] | None = None,
        image: Image | None = None,
        env: dict[str, str | None] | None = None,
        timeout: int = 300,
        cpu: float | tuple[float, float] | None = None,
        memory: int | tuple[int, int] | None = None,
        block_network: bool = False,
        outbound_cidr_allowlist: Sequence[str] | None = None,
        encrypted_ports: Sequence[int] = [],
        unencrypted_ports: Sequence[int] = [],  # noqa: B006
        experimental_options: dict[str, Any] | None = None,
        client: Any = None,
        **kwargs: Any,
    ) -> Sandbox:
        """The V2 backend's create (which alone takes `experimental_options={"vm_runtime": True}`)."""
        return Sandbox.create(
            *args,
            app=app,
            name=name,
            tags=tags,
            image=image,
            env=env,
            timeout=timeout,
            cpu=cpu,
            memory=memory,
            block_network=block_network,
            outbound_cidr_allowlist=outbound_cidr_allowlist,
            encrypted_ports=encrypted_ports,
            unencrypted_ports=unencrypted_ports,
            experimental_options=experimental_options,
            _v2=True,
        )

    @staticmethod
    def _experimental_from_name(
        app_name: str,
        name: str,
        *,
        environment_name: str | None = None,
        include_terminated: bool = False,
        client: Any = None,
    ) -> Sandbox:
        app = _apps.get(app_name)
        for sb in _running(app.app_id) if app else []:
            if sb._name == name and sb.v2:
                return sb
        raise NotFoundError(f"Sandbox '{name}' not found in App '{app_name}'")

    @staticmethod
    def _experimental_list(
        *, app_id: str | None = None, tags: dict[str, str] | None = None, client: Any = None
    ) -> Iterator[Sandbox]:
        """Both backends' sandboxes, as in the SDK."""
        for sb in _running(app_id):
            if all(sb._tags.get(k) == v for k, v in (tags or {}).items()):
                yield sb

    def snapshot_filesystem(self, timeout: int = 55) -> Image:
        """Like Modal's: the sandbox's filesystem as a new image (here: a copy of its folder)."""
        folder = Path(tempfile.mkdtemp(prefix="fake-modal-image-"))
        shutil.copytree(self.root, folder, dirs_exist_ok=True)
        return Image("snapshot", folder=folder)

    @staticmethod
    def from_name(
        app_name: str,
        name: str,
        *,
        environment_name: str | None = None,
        include_terminated: bool = False,
        client: Any = None,
    ) -> Sandbox:
        app = _apps.get(app_name)
        for sb in _running(app.app_id) if app else []:
            if sb._name == name and not sb.v2:
                return sb
        raise NotFoundError(f"Sandbox '{name}' not found in App '{app_name}'")

    @staticmethod
    def from_id(sandbox_id: str, client: Any = None) -> Sandbox:
        if sandbox_id not in _sandboxes:
            raise NotFoundError(f"Sandbox {sandbox_id} not found")
        return _sandboxes[sandbox_id]

    @staticmethod
    def list(*, app_id: str | None = None, tags: dict[str, str] | None = None, client: Any = None) -> Iterator[Sandbox]:
        for sb in _running(app_id):
            if not sb.v2 and all(sb._tags.get(k) == v for k, v in (tags or {}).items()):
                yield sb

    def get_tags(self) -> dict[str, str]:
        return dict(self._tags)

    def set_tags(self, tags: dict[str, str], *, client: Any = None) -> None:
        self._tags = dict(tags)

    def tunnels(self, timeout: int = 50) -> dict[int, Tunnel]:
        return {port: Tunnel("127.0.0.1", port) for port in self._ports}

    def exec(
        self,
        *args: str,
        timeout: int | None = None,
        workdir: str | None = None,
        env: dict[str, str | None] | None = None,
        text: bool = True,
        **kwargs: Any,
    ) -> ContainerProcess:
        if not all(isinstance(a, str) for a in args):
            raise InvalidError("All entrypoint arguments must be strings")
        environ = {**self._environ(), **{k: v for k, v in (env or {}).items() if v is not None}}
        cwd = self._local(workdir) if workdir else self.root
        try:
            done = subprocess.run(list(args), cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return ContainerProcess(_text(e.stdout), _text(e.stderr), -1)
        except OSError as e:
            return ContainerProcess("", f"{e}\n", 127)
        return ContainerProcess(done.stdout, done.stderr, done.returncode)

    @property
    def filesystem(self) -> _SandboxFilesystem:
        return _SandboxFilesystem(self)

    def terminate(self, *, wait: bool = False) -> int | None:
        if self.poll() is None:
            self._kill()
            self._returncode = TERMINATED
        return self._returncode if wait else None

    def poll(self) -> int | None:
        if self._returncode is None:
            if self._deadline is not None and time.monotonic() > self._deadline:
                self._kill()
                self._returncode = TERMINATED
            elif self._proc is not None and self._proc.poll() is not None:
                self._returncode = self._proc.returncode  # Modal ends a sandbox when its command exits
        return self._returncode

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def _environ(self) -> dict[str, str]:
        return {**os.environ, "HOME": str(self.root), **self._env}

    def _local(self, remote_path: str) -> Path:
        path = PurePosixPath(remote_path)
        if not path.is_absolute() or ".." in path.parts:
            raise InvalidError(f"{remote_path!r} must be an absolute path")
        return self.root.joinpath(*path.parts[1:])

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()


def _running(app_id: str | None) -> list[Sandbox]:
    return [sb for sb in _sandboxes.values() if (app_id is None or sb._app.app_id == app_id) and sb.poll() is None]


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def sandboxes() -> list[Sandbox]:
    return list(_sandboxes.values())


def reset() -> None:
    for sb in _sandboxes.values():
        sb.terminate()
        shutil.rmtree(sb.root, ignore_errors=True)
    _sandboxes.clear()
    _apps.clear()
