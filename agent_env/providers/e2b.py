"""Sandboxes on E2B (https://e2b.dev), through its Python SDK (`pip install 'agentenv-framework[e2b]'`).

A sandbox runs an E2B template (`image`, else `[sandboxes] e2b_template`) and carries agent-env's labels
as E2B metadata, which is also how a retried step finds the sandbox it started before. Templates fix the
resources and are built with `e2b template build`, so this provider refuses `build`, `cpus` and `memory_mb`.
The SDK is imported only when the provider is used; its async API (`AsyncSandbox`) is used directly.

Written against e2b 2.x: `AsyncSandbox.create()` and `AsyncSandbox.list()` returning a paginator.
"""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING, Any

from agent_env.errors import BadInput
from agent_env.providers.base import (
    LABEL_INSTALL,
    LABEL_NAME,
    LABEL_RUN,
    Capabilities,
    ExecResult,
    ProviderUnavailable,
    Sandbox,
    SandboxInfo,
    SandboxProvider,
    SandboxSpec,
    install_id,
)

if TYPE_CHECKING:
    from agent_env.config import Settings

MAX_LIFETIME = 24 * 3600  # E2B's longest sandbox timeout (Pro; Hobby is 1 h); the reaper handles longer TTLs


class E2BSandbox(Sandbox):
    def __init__(self, info: SandboxInfo, sb: Any) -> None:
        super().__init__(info)
        self._sb = sb

    async def exec(self, command: list[str], *, timeout: float = 60) -> ExecResult:
        from e2b import CommandExitException, TimeoutException

        try:
            result = await self._sb.commands.run(shlex.join(command), timeout=timeout)
        except CommandExitException as e:  # a non-zero exit is a result here, not an error
            return ExecResult(exit_code=e.exit_code, stdout=e.stdout or "", stderr=e.stderr or "")
        except TimeoutException as e:
            if type(e) is not TimeoutException:  # its subclasses mean the sandbox itself is gone
                raise
            raise TimeoutError(f"{command[0]} did not finish within {timeout:g}s in sandbox {self.info.name}") from None
        return ExecResult(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr)

    async def put_file(self, path: str, data: bytes) -> None:
        await self._sb.files.write(path, data)

    async def get_file(self, path: str) -> bytes:
        from e2b import FileNotFoundException

        try:
            return bytes(await self._sb.files.read(path, format="bytes"))
        except FileNotFoundException:
            raise FileNotFoundError(f"{path} does not exist in sandbox {self.info.name}") from None

    async def stop(self) -> None:
        await self._sb.kill()


class E2BProvider(SandboxProvider):
    name = "e2b"
    capabilities = Capabilities(isolated=True, build=False, network=["open", "none"], resources=False, snapshot=False)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.install = install_id(settings)

    async def check(self) -> None:
        try:
            import e2b  # noqa: F401
        except ImportError:
            raise ProviderUnavailable(
                "the e2b provider needs the E2B SDK, which is not installed", "pip install 'agentenv-framework[e2b]'"
            ) from None
        if not os.environ.get("E2B_API_KEY"):
            raise ProviderUnavailable(
                "no E2B credentials (E2B_API_KEY is unset)", "set E2B_API_KEY to a key from https://e2b.dev/dashboard"
            )

    def refuse_unsupported(self, spec: SandboxSpec) -> None:
        super().refuse_unsupported(spec)
        if spec.build:
            raise BadInput(
                f"the e2b provider cannot build sandbox {spec.name!r} from {spec.build}: E2B "
                "builds templates ahead of time, with `e2b template build`",
                "build the template with `e2b template build`, then set `image` to its name "
                "(or use the docker or modal provider)",
            )

    async def create(self, spec: SandboxSpec) -> Sandbox:
        from e2b import AsyncSandbox

        self.refuse_unsupported(spec)
        for found in await self._find({LABEL_NAME: spec.name}):  # a retry finds the sandbox it started
            sb = await AsyncSandbox.connect(found.sandbox_id)
            return self._sandbox(sb, found.metadata, spec.port)
        labels = spec.labels(self.install)
        sb = await AsyncSandbox.create(
            template=spec.image or self.settings.sandboxes.e2b_template,
            timeout=min(int(spec.ttl), MAX_LIFETIME),
            metadata=labels,
            envs=spec.env or None,
            allow_internet_access=spec.network.mode != "none",
        )
        if spec.command:
            # timeout=0: a background command's stream otherwise ends after 60 s, and E2B kills it then
            await sb.commands.run(shlex.join(spec.command), background=True, timeout=0)
        return self._sandbox(sb, labels, spec.port)

    def _sandbox(self, sb: Any, labels: dict[str, str], port: int | None) -> E2BSandbox:
        url = None
        if port:  # E2B's debug mode (E2B_DEBUG) serves sandboxes on localhost, without TLS
            url = f"{'http' if sb.connection_config.debug else 'https'}://{sb.get_host(port)}"
        return E2BSandbox(SandboxInfo.from_labels(self.name, sb.sandbox_id, labels, url=url), sb)

    async def _find(self, metadata: dict[str, str] | None) -> list[Any]:
        """This install's sandboxes with that metadata (an account may be shared by installs)."""
        from e2b import AsyncSandbox, SandboxQuery

        paginator = AsyncSandbox.list(query=SandboxQuery(metadata={**(metadata or {}), LABEL_INSTALL: self.install}))
        found = []
        while paginator.has_next:
            found.extend(await paginator.next_items())
        return [f for f in found if LABEL_RUN in f.metadata]  # the account may hold others' sandboxes

    async def list(self, run_id: str | None = None) -> list[SandboxInfo]:
        return [
            SandboxInfo.from_labels(self.name, f.sandbox_id, f.metadata, status=str(f.state.value))
            for f in await self._find({LABEL_RUN: run_id} if run_id else None)
        ]

    async def remove(self, sandbox_id: str) -> bool:
        from e2b import AsyncSandbox

        return await AsyncSandbox.kill(sandbox_id)
