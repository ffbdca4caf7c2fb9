"""Sandboxes on Modal (https://modal.com), through its Python SDK (`pip install 'agentenv-framework[modal]'`).

Every sandbox lives in one Modal app (`[sandboxes] modal_app`), carries agent-env's labels as Modal tags,
and is named after the spec, so a retried step finds the sandbox it started before. The SDK is imported
only when the provider is used, and its blocking API is called in a thread.

Written against modal 1.6: `Sandbox.create(tags=, outbound_cidr_allowlist=)` and the `sb.filesystem`
API (which replaced `sb.open` in 1.5/1.6).
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_env.providers.base import (
    LABEL_INSTALL,
    LABEL_RUN,
    Capabilities,
    ExecResult,
    Network,
    ProviderUnavailable,
    Sandbox,
    SandboxFailed,
    SandboxInfo,
    SandboxProvider,
    SandboxSpec,
    install_id,
)

if TYPE_CHECKING:
    from agent_env.config import Settings

MAX_LIFETIME = 24 * 3600  # Modal's longest sandbox timeout; the reaper handles longer TTLs
MAX_NAME = 64  # Modal object names are at most 64 characters


class ModalSandbox(Sandbox):
    def __init__(self, info: SandboxInfo, sb: Any) -> None:
        super().__init__(info)
        self._sb = sb

    async def exec(self, command: list[str], *, timeout: float = 60) -> ExecResult:
        return await asyncio.to_thread(self._exec, command, timeout)

    def _exec(self, command: list[str], timeout: float) -> ExecResult:
        from modal.exception import ExecTimeoutError

        try:
            proc = self._sb.exec(*command, timeout=max(1, math.ceil(timeout)))
            stdout, stderr = proc.stdout.read(), proc.stderr.read()
            code = proc.wait()
        except ExecTimeoutError:
            code = -1
        if code == -1:  # how Modal reports an exec that outlived its timeout; raised, as the other providers do
            raise TimeoutError(f"{command[0]} did not finish within {timeout:g}s in sandbox {self.info.name}")
        return ExecResult(exit_code=code, stdout=stdout, stderr=stderr)

    async def put_file(self, path: str, data: bytes) -> None:
        await asyncio.to_thread(self._sb.filesystem.write_bytes, data, path)

    async def get_file(self, path: str) -> bytes:
        from modal.exception import SandboxFilesystemNotFoundError

        try:
            return bytes(await asyncio.to_thread(self._sb.filesystem.read_bytes, path))
        except SandboxFilesystemNotFoundError:
            raise FileNotFoundError(f"{path} does not exist in sandbox {self.info.name}") from None

    async def stop(self) -> None:
        await asyncio.to_thread(self._sb.terminate)

    async def snapshot(self) -> str:
        """Modal's filesystem snapshot: an image id (`im-...`) a new sandbox's `image` can start from."""
        image = await asyncio.to_thread(self._sb.snapshot_filesystem)
        return image.object_id


class ModalProvider(SandboxProvider):
    name = "modal"
    capabilities = Capabilities(
        isolated=True, build=True, network=["open", "none", "allowlist"], resources=True, snapshot=True
    )
    # What a subclass (modal_vm) changes: its sandboxes' class, how one is started, found by name and listed,
    # its command and its default image (the methods below `_create`).
    sandbox_class: type[ModalSandbox] = ModalSandbox

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app_name = settings.sandboxes.modal_app
        self.install = install_id(settings)

    async def check(self) -> None:
        try:
            import modal  # noqa: F401
        except ImportError:
            raise ProviderUnavailable(
                f"the {self.name} provider needs the Modal SDK, which is not installed",
                "pip install 'agentenv-framework[modal]'",
            ) from None
        if not _has_credentials():
            raise ProviderUnavailable(
                "no Modal credentials (MODAL_TOKEN_ID/MODAL_TOKEN_SECRET unset and no ~/.modal.toml)",
                "run `modal token new`, or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET",
            )

    async def create(self, spec: SandboxSpec) -> Sandbox:
        self.refuse_unsupported(spec)
        return await asyncio.to_thread(self._create, spec)

    def _create(self, spec: SandboxSpec) -> ModalSandbox:
        import modal
        from modal.exception import AlreadyExistsError, NotFoundError, RemoteError

        app = modal.App.lookup(self.app_name, create_if_missing=True)
        name = _modal_name(spec.name)
        try:  # a retry of the same step: the sandbox it started is still running
            sb = self._by_name(name)
        except NotFoundError:
            pass
        else:
            tags = sb.get_tags()
            if tags.get(LABEL_INSTALL) != self.install:  # the app's sandbox names are shared by installs
                raise SandboxFailed(
                    f"a sandbox named {name!r} of another agent-env install runs in Modal app {self.app_name!r}",
                    "give this install its own app ([sandboxes] modal_app)",
                )
            return self.sandbox_class(self._info(sb, tags, spec.port), sb)
        labels = {k: v for k, v in spec.labels(self.install).items() if v}  # Modal tag values must not be empty
        try:
            sb = self._start(
                self._command(spec),
                app=app,
                name=name,
                tags=labels,
                image=self._image(spec),
                env=spec.env or None,
                timeout=min(int(spec.ttl), MAX_LIFETIME),
                cpu=spec.cpus,
                memory=spec.memory_mb,
                encrypted_ports=[spec.port] if spec.port else [],
                **_network(spec.network),
            )
        except AlreadyExistsError:  # a concurrent retry created it first
            sb = self._by_name(name)
            labels = sb.get_tags()
        except RemoteError as e:  # includes ImageBuildError
            raise SandboxFailed(
                f"Modal could not build or start sandbox {spec.name!r}: {e}",
                f"fix the image or Dockerfile; the build log is on modal.com (app {self.app_name!r})",
            ) from None
        return self.sandbox_class(self._info(sb, labels, spec.port), sb)

    def _start(self, command: list[str], **options: Any) -> Any:
        import modal

        return modal.Sandbox.create(*command, **options)

    def _by_name(self, name: str) -> Any:
        import modal

        return modal.Sandbox.from_name(self.app_name, name)

    def _listed(self, app_id: str, tags: dict[str, str]) -> Any:
        import modal

        return modal.Sandbox.list(app_id=app_id, tags=tags)

    def _command(self, spec: SandboxSpec) -> list[str]:
        return spec.command or []

    def _default_image(self) -> Any:
        return None  # Modal's default image

    def _image(self, spec: SandboxSpec) -> Any:
        import modal

        if spec.build:
            dockerfile = Path(spec.build) / "Dockerfile"
            if not dockerfile.is_file():
                raise SandboxFailed(
                    f"sandbox {spec.name!r}: no Dockerfile in {spec.build}",
                    "point `build` at a folder that holds a Dockerfile",
                )
            from agent_env.providers import sdk_wheels

            try:  # with agent-env's wheels, when the Dockerfile installs them
                context = sdk_wheels.context_folder(
                    Path(spec.build), Path(self.settings.state_dir) / "sandboxes" / "wheels"
                )
            except sdk_wheels.WheelsUnavailable as e:
                raise SandboxFailed(f"sandbox {spec.name!r}: {e.problem}", e.fix) from None
            return modal.Image.from_dockerfile(context / "Dockerfile", context_dir=str(context))
        if spec.image and spec.image.startswith("im-"):  # a snapshot (Sandbox.snapshot) or another Modal image
            return modal.Image.from_id(spec.image)
        return modal.Image.from_registry(spec.image) if spec.image else self._default_image()

    def _info(self, sb: Any, labels: dict[str, str], port: int | None) -> SandboxInfo:
        url = sb.tunnels()[port].url if port else None
        return SandboxInfo.from_labels(self.name, sb.object_id, labels, url=url)

    async def list(self, run_id: str | None = None) -> list[SandboxInfo]:
        return await asyncio.to_thread(self._list, run_id)

    def _list(self, run_id: str | None) -> builtins.list[SandboxInfo]:
        import modal
        from modal.exception import NotFoundError

        try:
            app = modal.App.lookup(self.app_name)
        except NotFoundError:  # nothing was ever created here
            return []
        out = []
        tags = {LABEL_INSTALL: self.install, **({LABEL_RUN: run_id} if run_id else {})}
        for sb in self._listed(app.app_id, tags):
            labels = sb.get_tags()
            if LABEL_RUN in labels:  # the app may hold sandboxes agent-env did not create
                out.append(SandboxInfo.from_labels(self.name, sb.object_id, labels))
        return out

    async def remove(self, sandbox_id: str) -> bool:
        return await asyncio.to_thread(self._remove, sandbox_id)

    def _remove(self, sandbox_id: str) -> bool:
        import modal
        from modal.exception import NotFoundError

        try:
            sb = modal.Sandbox.from_id(sandbox_id)
        except NotFoundError:
            return False
        if sb.poll() is not None:  # already finished
            return False
        sb.terminate()
        return True


def _has_credentials() -> bool:
    if os.environ.get("MODAL_TOKEN_ID") and os.environ.get("MODAL_TOKEN_SECRET"):
        return True
    return Path(os.environ.get("MODAL_CONFIG_PATH") or "~/.modal.toml").expanduser().is_file()


def _network(network: Network) -> dict[str, Any]:
    if network.mode == "none":
        return {"block_network": True}
    if network.mode == "allowlist":
        return {"outbound_cidr_allowlist": list(network.allow)}
    return {}


def _modal_name(name: str) -> str:
    """agentenv allows 128 characters, Modal 64: shorten long names, keeping them unique with a hash."""
    if len(name) <= MAX_NAME:
        return name
    return f"{name[: MAX_NAME - 9]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
