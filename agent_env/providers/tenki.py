"""`tenki`: sandboxes that are Tenki VMs (https://tenki.cloud), through its SDK (`pip install
'agentenv-framework[tenki]'`; `tenki.AsyncClient`, whose sessions are the VMs).

Settings (`[sandboxes.providers.tenki]`, or the framework's `[sandbox.providers.tenki.config]`): `api_key` (a
`secret:NAME` reference, default `secret:tenki-api-key`; resolved in the activity that uses it and passed to
the SDK only), `base_url` (default the SDK's), and at most one of `image` and `snapshot_id` (what VMs without
an `image` of their own boot).

A VM carries agent-env's labels as Tenki metadata and the tag `agentenv`, which is how listing finds it and how
a retried step finds the VM it started. Its `env` is the session's environment and goes with each `exec` too.
The command runs in the background (its output in `api_vms.COMMAND_LOG`), commands run as root, and files
move through `exec`'s standard input and output (Tenki's file API keeps to the VM's work folder). A port is
exposed as a Tenki preview URL. Limits: `cpus` rounds up to whole cores, `memory_mb` up to an even number;
the network is open, none, or an allowlist of IPv4 addresses and CIDRs.

Written against tenki 1.4.
"""

from __future__ import annotations

import builtins
import ipaddress
import math
from typing import TYPE_CHECKING, Any

from agent_env.errors import BadInput
from agent_env.providers import api_vms
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

DEFAULT_SECRET = "tenki-api-key"
TAG = "agentenv"
MAX_LIFETIME = 24 * 3600  # the longest lifetime we ask Tenki for; the reaper handles longer TTLs
ENDED = {"TERMINATING", "TERMINATED", "GONE"}


class TenkiSandbox(Sandbox):
    def __init__(self, info: SandboxInfo, sb: Any, client: Any, env: dict[str, str] | None = None) -> None:
        super().__init__(info)
        self._sb, self._client = sb, client
        self._env = dict(env or {})

    async def _run(self, command: list[str], timeout: float, data: bytes | None = None) -> Any:
        return await self._sb.exec(*command, env=self._env or None, timeout=timeout, input=data, privileged=True)

    async def exec(self, command: list[str], *, timeout: float = 60) -> ExecResult:
        result = await self._run(command, timeout)
        if result.timed_out:
            raise TimeoutError(f"{command[0]} did not finish within {timeout:g}s in sandbox {self.info.name}")
        return ExecResult(exit_code=result.exit_code, stdout=result.stdout_text, stderr=result.stderr_text)

    async def put_file(self, path: str, data: bytes) -> None:
        result = await self._run(api_vms.write_script(path), 300, data)
        if result.exit_code != 0:
            raise OSError(f"could not write {path} in sandbox {self.info.name}: {self.redact(result.stderr_text)}")

    async def get_file(self, path: str) -> bytes:
        result = await self._run(api_vms.read_script(path), 300)
        if result.exit_code == api_vms.NOT_A_FILE:
            raise FileNotFoundError(f"{path} does not exist in sandbox {self.info.name}")
        if result.exit_code != 0:
            raise OSError(f"could not read {path} in sandbox {self.info.name}: {self.redact(result.stderr_text)}")
        return bytes(result.stdout)

    async def logs(self, lines: int = 20) -> str:
        result = await self._run(api_vms.tail_script(api_vms.COMMAND_LOG, lines), 30)
        return self.redact(result.stdout_text) if result.exit_code == 0 else ""

    async def stop(self) -> None:
        from tenki import SessionNotFoundError

        try:
            await self._sb.close_if_open()
        except SessionNotFoundError:
            pass
        finally:
            await self._client.close()


class TenkiProvider(SandboxProvider):
    name = "tenki"
    capabilities = Capabilities(isolated=True, build=False, network=["open", "none", "allowlist"], resources=True)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.install = install_id(settings)

    def _settings(self) -> dict[str, str | None]:
        values = api_vms.settings_of(
            self.name, self.config, {"api_key": None, "base_url": None, "image": None, "snapshot_id": None}
        )
        if values["image"] and values["snapshot_id"]:
            raise BadInput(
                "[sandboxes.providers.tenki] sets both image and snapshot_id", "keep the one VMs should boot"
            )
        return values

    def _client(self) -> Any:
        from tenki import AsyncClient

        base_url = self._settings()["base_url"]
        return AsyncClient(api_key=api_vms.api_key(self.name, self.config, DEFAULT_SECRET), base_url=base_url)

    async def check(self) -> None:
        try:
            import tenki  # noqa: F401
        except ImportError:
            raise ProviderUnavailable(
                "the tenki provider needs the Tenki SDK, which is not installed",
                "pip install 'agentenv-framework[tenki]'",
            ) from None
        api_vms.api_key(self.name, self.config, DEFAULT_SECRET)  # the key resolves
        self._settings()

    def refuse_unsupported(self, spec: SandboxSpec) -> None:
        super().refuse_unsupported(spec)
        if spec.build:
            raise BadInput(
                f"the tenki provider cannot build sandbox {spec.name!r} from {spec.build}: Tenki boots images "
                "and snapshots made ahead of time",
                "set `image` to an image Tenki can boot (or use the docker or modal provider)",
            )
        if any(ipaddress.ip_network(entry, strict=False).version != 4 for entry in spec.network.allow):
            raise BadInput(
                f"the tenki provider filters IPv4 only; sandbox {spec.name!r} allows {spec.network.allow}",
                "list IPv4 addresses and CIDRs only, or use another provider",
            )

    async def create(self, spec: SandboxSpec) -> Sandbox:
        self.refuse_unsupported(spec)
        settings = self._settings()
        client = self._client()
        try:
            for found in await self._find(client, {LABEL_NAME: spec.name}):  # a retry finds the VM it started
                url = None
                if spec.port:
                    urls = {p.port: p.url for p in await found.list_exposed_ports()}
                    url = _url(urls[spec.port]) if spec.port in urls else None
                labels = dict(found.info.metadata)
                return TenkiSandbox(
                    SandboxInfo.from_labels(self.name, found.id, labels, url=url), found, client, spec.env
                )
            labels = spec.labels(self.install)
            sb = await client.create(
                name=api_vms.vm_name(TAG, self.install, spec.name)[:63],
                wait=True,
                max_duration=min(int(spec.ttl), MAX_LIFETIME),
                cpu_cores=math.ceil(spec.cpus) if spec.cpus else None,
                memory_mb=math.ceil(spec.memory_mb / 2) * 2 if spec.memory_mb else None,
                metadata=labels,
                tags=[TAG],
                env=spec.env or None,
                image=spec.image or settings["image"],
                snapshot_id=None if spec.image else settings["snapshot_id"],
                **_network(spec),
            )
        except BaseException:
            await client.close()
            raise
        box = TenkiSandbox(SandboxInfo.from_labels(self.name, sb.id, labels), sb, client, spec.env)
        try:
            if spec.port:
                box.info.url = _url((await sb.expose_port(spec.port)).url)
            if spec.command:
                await box.exec(api_vms.background(spec.command))
        except BaseException:
            await box.stop()
            raise
        return box

    async def _find(self, client: Any, metadata: dict[str, str]) -> builtins.list[Any]:
        """This install's running VMs with that metadata (a workspace may be shared by installs)."""
        wanted = {**metadata, LABEL_INSTALL: self.install}
        return [
            s
            for s in await client.list(tags=[TAG])
            if s.state not in ENDED
            and LABEL_RUN in s.info.metadata
            and all(s.info.metadata.get(k) == v for k, v in wanted.items())
        ]

    async def list(self, run_id: str | None = None) -> builtins.list[SandboxInfo]:
        async with self._client() as client:
            found = await self._find(client, {LABEL_RUN: run_id} if run_id else {})
        return [SandboxInfo.from_labels(self.name, s.id, dict(s.info.metadata), status=s.state.lower()) for s in found]

    async def remove(self, sandbox_id: str) -> bool:
        from tenki import SessionNotFoundError

        async with self._client() as client:
            try:
                sb = await client.get(sandbox_id)
            except SessionNotFoundError:
                return False
            if sb.state in ENDED:
                return False
            await sb.close()
        return True


def _network(spec: SandboxSpec) -> dict[str, bool | builtins.list[str]]:
    """Tenki's egress: empty allowlists allow everything, so no network turns outbound access off."""
    if spec.network.mode == "none" or (spec.network.mode == "allowlist" and not spec.network.allow):
        return {"allow_outbound": False}
    if spec.network.mode == "allowlist":
        return {"allow_cidrs": [str(ipaddress.ip_network(entry, strict=False)) for entry in spec.network.allow]}
    return {}


def _url(url: str) -> str:
    return url if url.startswith(("http://", "https://")) else f"https://{url}"
