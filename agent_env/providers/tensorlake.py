"""`tensorlake`: sandboxes that are Tensorlake microVMs (https://tensorlake.ai), through its SDK
(`pip install 'agentenv-framework[tensorlake]'`; `tensorlake.sandbox.AsyncSandbox` and `AsyncSandboxClient`).

Settings (`[sandboxes.providers.tensorlake]`, or the framework's `[sandbox.providers.tensorlake.config]`):
`api_key` (a `secret:NAME` reference, default `secret:tensorlake-api-key`; resolved in the activity that uses
it and passed to the SDK only), `api_url` (default the public API; passed to every call, so creating and
removing reach the same service) and `image` (a registered Tensorlake image, for sandboxes without one).

Tensorlake sandboxes have a name but no labels. The name is this install's prefix and a hash of the sandbox's
name (`api_vms.vm_name`): a retried step finds its VM by it, and listing finds this install's VMs by a name the
workload cannot change. The other labels (run, owner, expiry) are written into the VM at LABELS when it is
created and read back when it is listed; a VM whose labels were never written (its create was cut short)
counts as expiring LABEL_GRACE seconds after its creation, so the reaper removes it. A workload that rewrites
the file can at worst keep its VM until Tensorlake's own timeout, which is the sandbox's TTL.

Tensorlake takes no environment for the VM itself: the sandbox's `env` goes to its command and to each `exec`
(on a handle this process created; a VM found again on a retry is handed back without it). The command runs
in the background (its output in `api_vms.COMMAND_LOG`); a port is exposed through Tensorlake's ingress, without
authentication (a bearer header would hand the API key to whoever calls the URL).

Written against tensorlake 0.5.
"""

from __future__ import annotations

import builtins
import json
import time
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

DEFAULT_API_URL = "https://api.tensorlake.ai"
DEFAULT_SECRET = "tensorlake-api-key"
MAX_LIFETIME = 24 * 3600  # the longest timeout we ask Tensorlake for; the reaper handles longer TTLs
LABELS = "/tmp/agentenv/labels.json"
LABEL_GRACE = 900.0  # seconds a VM without labels (its create cut short) is kept after its creation
ENDED = {"terminated", "timeout", "failed"}


class TensorlakeSandbox(Sandbox):
    def __init__(self, info: SandboxInfo, sb: Any, env: dict[str, str] | None = None) -> None:
        super().__init__(info)
        self._sb = sb
        self._env = dict(env or {})

    async def exec(self, command: list[str], *, timeout: float = 60) -> ExecResult:
        result = await self._sb.run(command[0], args=command[1:], env=self._env or None, timeout=timeout)
        if result.timed_out:
            raise TimeoutError(f"{command[0]} did not finish within {timeout:g}s in sandbox {self.info.name}")
        return ExecResult(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr)

    async def put_file(self, path: str, data: bytes) -> None:
        from tensorlake.sandbox import SandboxError

        try:
            await self._sb.write_file(path, data)
        except SandboxError:  # its folder may be missing: make it, and write again
            await self._sb.run("mkdir", args=["-p", path.rsplit("/", 1)[0] or "/"])
            await self._sb.write_file(path, data)

    async def get_file(self, path: str) -> bytes:
        data = await _read(self._sb, path)
        if data is None:
            raise FileNotFoundError(f"{path} does not exist in sandbox {self.info.name}")
        return data

    async def logs(self, lines: int = 20) -> str:
        data = await _read(self._sb, api_vms.COMMAND_LOG)
        text = (data or b"").decode(errors="replace")
        return self.redact("".join(text.splitlines(keepends=True)[-lines:]))

    async def stop(self) -> None:
        from tensorlake.sandbox import SandboxNotFoundError

        try:
            await self._sb.terminate()
        except SandboxNotFoundError:
            pass


class TensorlakeProvider(SandboxProvider):
    name = "tensorlake"
    capabilities = Capabilities(isolated=True, build=False, network=["open", "none", "allowlist"], resources=True)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.install = install_id(settings)

    def _settings(self) -> dict[str, str | None]:
        return api_vms.settings_of(self.name, self.config, {"api_key": None, "api_url": DEFAULT_API_URL, "image": None})

    def _client_kwargs(self) -> dict[str, str]:
        """What every SDK call takes: the resolved key, and the API it goes to."""
        api_url = self._settings()["api_url"] or DEFAULT_API_URL
        return {"api_key": api_vms.api_key(self.name, self.config, DEFAULT_SECRET), "api_url": api_url}

    async def check(self) -> None:
        try:
            import tensorlake.sandbox  # noqa: F401
        except ImportError:
            raise ProviderUnavailable(
                "the tensorlake provider needs the Tensorlake SDK, which is not installed",
                "pip install 'agentenv-framework[tensorlake]'",
            ) from None
        self._client_kwargs()  # the settings are valid and the key resolves

    def refuse_unsupported(self, spec: SandboxSpec) -> None:
        super().refuse_unsupported(spec)
        if spec.build:
            raise BadInput(
                f"the tensorlake provider cannot build sandbox {spec.name!r} from {spec.build}: Tensorlake "
                "registers images ahead of time",
                "register the image with Tensorlake's CLI (`tl sbx image create`), then set `image` to its name "
                "(or use the docker or modal provider)",
            )

    async def create(self, spec: SandboxSpec) -> Sandbox:
        from tensorlake.sandbox import AsyncSandbox

        self.refuse_unsupported(spec)
        kwargs = self._client_kwargs()
        name = api_vms.vm_name("agentenv", self.install, spec.name)
        for found in await self._ours(kwargs):
            if found.name == name:  # a retry finds the VM it started
                sb = await AsyncSandbox.connect(found.sandbox_id, **kwargs)
                labels = await _read_labels(sb) or spec.labels(self.install)
                return self._sandbox(sb, found, labels, spec.port)
        labels = spec.labels(self.install)
        sb = await AsyncSandbox.create(
            image=spec.image or self._settings()["image"],
            cpus=spec.cpus,
            memory_mb=spec.memory_mb,
            timeout_secs=min(int(spec.ttl), MAX_LIFETIME),
            name=name,
            **_network(spec),
            **kwargs,
        )
        try:
            box = TensorlakeSandbox(SandboxInfo.from_labels(self.name, sb.sandbox_id, labels), sb, spec.env)
            await box.put_file(LABELS, json.dumps(labels).encode())
            info = (
                (await sb.update(exposed_ports=[spec.port], allow_unauthenticated_access=True)) if spec.port else None
            )
            if spec.command:
                await box.exec(api_vms.background(spec.command))
        except BaseException:
            await sb.terminate()  # nothing else holds its id yet
            raise
        box.info.url = info.url_for_port(spec.port) if info is not None and spec.port else None
        return box

    def _sandbox(self, sb: Any, found: Any, labels: dict[str, str], port: int | None) -> TensorlakeSandbox:
        url = found.url_for_port(port) if port else None
        return TensorlakeSandbox(SandboxInfo.from_labels(self.name, found.sandbox_id, labels, url=url), sb)

    async def _ours(self, kwargs: dict[str, str]) -> builtins.list[Any]:
        """This install's VMs that still run (by their names' prefix)."""
        from tensorlake.sandbox import AsyncSandboxClient

        prefix = api_vms.install_prefix("agentenv", self.install)
        async with AsyncSandboxClient.for_cloud(**kwargs) as client:
            listed = await client.list()
        return [s for s in listed if (s.name or "").startswith(prefix) and _status(s) not in ENDED]

    async def list(self, run_id: str | None = None) -> builtins.list[SandboxInfo]:
        from tensorlake.sandbox import AsyncSandbox, SandboxError

        kwargs = self._client_kwargs()
        out = []
        for found in await self._ours(kwargs):
            try:
                labels = await _read_labels(await AsyncSandbox.connect(found.sandbox_id, **kwargs))
            except SandboxError:  # it stopped meanwhile, or does not answer yet
                labels = None
            if labels is None:  # its create was cut short before it was labelled
                created = _timestamp(found.created_at) or time.time()
                labels = {LABEL_NAME: found.name, LABEL_RUN: "", "agentenv.expires": f"{created + LABEL_GRACE:.3f}"}
            labels[LABEL_INSTALL] = self.install  # from its name, which the workload cannot change
            if run_id is None or labels.get(LABEL_RUN) == run_id:
                out.append(SandboxInfo.from_labels(self.name, found.sandbox_id, labels, status=_status(found)))
        return out

    async def remove(self, sandbox_id: str) -> bool:
        from tensorlake.sandbox import AsyncSandboxClient, SandboxNotFoundError

        async with AsyncSandboxClient.for_cloud(**self._client_kwargs()) as client:
            try:
                if _status((await client.get(sandbox_id)).value) in ENDED:
                    return False
                await client.delete(sandbox_id)
            except SandboxNotFoundError:
                return False
        return True


async def _read(sb: Any, path: str) -> bytes | None:
    """The file at `path` in the VM, None when there is none (Tensorlake answers 404)."""
    from tensorlake.sandbox import RemoteAPIError

    try:
        return bytes((await sb.read_file(path)).value)
    except RemoteAPIError as e:
        if e.status_code == 404:
            return None
        raise


async def _read_labels(sb: Any) -> dict[str, str] | None:
    from tensorlake.sandbox import SandboxError

    try:
        data = await _read(sb, LABELS)
        labels = json.loads(data) if data is not None else None
    except (SandboxError, ValueError):
        return None
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        return None
    return {str(k): v for k, v in labels.items()}


def _network(spec: SandboxSpec) -> dict[str, bool | builtins.list[str]]:
    """Tensorlake's egress: an empty `allow_out` allows everything, so no network turns internet access off."""
    if spec.network.mode == "none" or (spec.network.mode == "allowlist" and not spec.network.allow):
        return {"allow_internet_access": False}
    if spec.network.mode == "allowlist":
        return {"allow_internet_access": True, "allow_out": list(spec.network.allow)}
    return {}


def _status(info: Any) -> str:
    status = info.status
    return str(getattr(status, "value", status))


def _timestamp(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return float(value.timestamp())
