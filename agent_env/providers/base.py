"""What every sandbox provider offers: create a sandbox, run commands in it, move files in and out,
reach a port, stop it, and list what belongs to a run.

A sandbox is labelled with its run id and an expiry time when it is created, so whatever happens to the
process that created it (SIGKILL, a lost worker, a terminated run) the reaper can find and remove it.
Providers are async; SDKs that block are called in a thread.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_env.errors import AgentEnvError, BadInput
from agent_env.spec.env import Network  # the sandbox's network as declared (re-exported)
from agent_env.spec.secret_refs import is_reference
from agent_env.stores import open_secrets
from agent_env.stores.local import create_private_once

if TYPE_CHECKING:
    from agent_env.config import Settings

# Labels (Docker), tags (Modal) and metadata (E2B) carry these keys.
LABEL_RUN = "agentenv.run"
LABEL_NAME = "agentenv.name"
LABEL_EXPIRES = "agentenv.expires"
LABEL_OWNER = "agentenv.owner"  # e.g. the env instance; `teardown_env` stops what it owns
LABEL_INSTALL = "agentenv.install"  # whose sandbox it is: a provider lists, and the reaper judges, only its own

INSTALL_ID = re.compile(r"^[st]-[0-9a-f]{20}$")
DEFAULT_TTL = 6 * 3600.0
SANDBOX_NAME = re.compile(r"^[a-z0-9][a-z0-9_.\-]{0,127}$")


class ProviderUnavailable(AgentEnvError):
    """The provider cannot be used here (no daemon, no SDK, no credentials): a fallback chain tries the next."""

    exit_code = 3


class SandboxFailed(AgentEnvError):
    """The sandbox could not be built or started for a reason the user must fix (a broken Dockerfile)."""


class SandboxSpec(BaseModel):
    """What to run. Providers that cannot honour a field refuse it (see `Capabilities`)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="unique per provider: retries of the same step find the same sandbox")
    run_id: str
    owner: str = ""
    image: str | None = Field(None, description="an image to run (docker, modal)")
    build: str | None = Field(None, description="a folder with a Dockerfile, built into the image")
    command: list[str] | None = Field(None, description="what to run; default: the image's own command")
    env: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description="exactly what the sandbox's process gets (with HOST and PORT), "
        "secrets resolved: it never leaves the activity that starts it",
    )
    port: int | None = Field(None, ge=1, le=65535, description="the port the sandbox serves on; exposed to the host")
    host_port: int | None = Field(None, ge=1, le=65535, description="publish on this host port (default: a free one)")
    cpus: float | None = Field(None, gt=0)
    memory_mb: int | None = Field(None, ge=16)
    network: Network = Field(default_factory=Network)
    ttl: float = Field(DEFAULT_TTL, gt=0, description="seconds after which the reaper removes it whatever the run")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SANDBOX_NAME.match(value):
            raise ValueError("sandbox names are lowercase letters, digits, '.', '_' and '-' (max 128)")
        return value

    def labels(self, install: str) -> dict[str, str]:
        return {
            LABEL_RUN: self.run_id,
            LABEL_NAME: self.name,
            LABEL_OWNER: self.owner,
            LABEL_EXPIRES: f"{time.time() + self.ttl:.3f}",
            LABEL_INSTALL: install,
        }


class SandboxInfo(BaseModel):
    """One sandbox as its provider lists it."""

    provider: str
    id: str
    name: str
    run_id: str
    owner: str = ""
    install: str = ""  # the install that created it ("" for sandboxes made before installs had ids)
    status: str = "running"
    expires_at: float | None = None
    url: str | None = None
    image_id: str | None = None  # the exact image it runs ("sha256:..."), where the provider knows it

    @classmethod
    def from_labels(cls, provider: str, id: str, labels: dict[str, str], **extra: Any) -> SandboxInfo:
        expires = labels.get(LABEL_EXPIRES)
        return cls(
            provider=provider,
            id=id,
            name=labels.get(LABEL_NAME, id),
            run_id=labels.get(LABEL_RUN, ""),
            owner=labels.get(LABEL_OWNER, ""),
            install=labels.get(LABEL_INSTALL, ""),
            expires_at=float(expires) if expires else None,
            **extra,
        )

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or time.time())


class ExecResult(BaseModel):
    exit_code: int
    stdout: str = ""
    stderr: str = ""


class Capabilities(BaseModel):
    isolated: bool = Field(description="the sandbox cannot see the host's files and processes")
    build: bool = Field(False, description="builds images from a Dockerfile")
    network: list[str] = Field(default_factory=lambda: ["open"], description="network modes it enforces")
    resources: bool = Field(False, description="enforces cpus and memory_mb")
    snapshot: bool = Field(False, description="can snapshot a sandbox's filesystem")


class Sandbox(ABC):
    """A running sandbox. `info.url` is where its port is reachable from the host (and the gateway)."""

    secrets: tuple[str, ...] = ()  # the resolved values it was started with: kept out of what is reported

    def __init__(self, info: SandboxInfo) -> None:
        self.info = info

    def redact(self, text: str) -> str:
        """`text` (e.g. its output, for an error message) without the secret values it was started with."""
        return redact(text, self.secrets)

    @property
    def url(self) -> str | None:
        return self.info.url

    def inside(self, path: str) -> str:
        """Where the sandbox's absolute `path` (as put_file and get_file take it) is for a command run in it:
        the same path, except where a provider maps the sandbox's root onto a host folder (local)."""
        return path

    @abstractmethod
    async def exec(self, command: list[str], *, timeout: float = 60) -> ExecResult: ...

    @abstractmethod
    async def put_file(self, path: str, data: bytes) -> None: ...

    @abstractmethod
    async def get_file(self, path: str) -> bytes: ...

    @abstractmethod
    async def stop(self) -> None: ...

    async def logs(self, lines: int = 20) -> str:
        """The last lines the sandbox printed, where its provider keeps them ("" where it does not)."""
        return ""

    async def snapshot(self) -> str:
        """Save the sandbox's filesystem; returns an image reference that a new sandbox's `image` can start
        from. Only providers whose capabilities include `snapshot`."""
        raise BadInput(
            f"the {self.info.provider} provider cannot snapshot a sandbox's filesystem",
            "use the docker or modal provider, or snapshot the environment's data (snapshot_env)",
        )


class ProviderConfig(dict[str, Any]):
    """A provider's own table (`[sandboxes.providers.NAME]`) as the config file wrote it: `secret:NAME`
    references stay references until `resolved` reads one, where it is used, from the configured secret store."""

    def __init__(self, values: dict[str, Any] | None = None, settings: Settings | None = None) -> None:
        super().__init__(values or {})
        self.settings = settings

    def resolved(self, key: str, default: Any = None) -> Any:
        """The value of `key`, a `secret:NAME` reference replaced by the secret (MissingSecret names the fix)."""

        value = self.get(key, default)
        if not is_reference(value):
            return value
        if self.settings is None:
            raise BadInput(
                f"{key} is a secret reference, and this provider config has no settings to resolve it with",
                "construct it with the settings, as agent_env.providers.by_name.load does",
            )

        store = open_secrets(self.settings)
        try:
            return store.resolve(value)
        finally:
            store.close()


class SandboxProvider(ABC):
    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    # Its own settings ([sandboxes.providers.NAME]), set by `by_name.load` once the provider is constructed.
    config: ProviderConfig = ProviderConfig()

    @abstractmethod
    async def check(self) -> None:
        """Raise ProviderUnavailable (naming what to start or install) when it cannot be used here."""

    @abstractmethod
    async def create(self, spec: SandboxSpec) -> Sandbox:
        """Start a sandbox, or return the running one of the same name (retries are idempotent)."""

    @abstractmethod
    async def list(self, run_id: str | None = None) -> list[SandboxInfo]:
        """Sandboxes this provider holds for agent-env, of one run or all."""

    @abstractmethod
    async def remove(self, sandbox_id: str) -> bool:
        """Stop and delete a sandbox by id; False when it was already gone."""

    async def attach(self, sandbox_id: str) -> Sandbox:
        """A sandbox of this install by id, to run commands in and move files (NotFound when it is gone)."""
        raise BadInput(
            f"the {self.name} provider cannot reattach to a sandbox by its id",
            "run the sandbox on the local or docker provider to use sandbox steps on it",
        )

    def refuse_unsupported(self, spec: SandboxSpec) -> None:
        caps = self.capabilities
        if spec.network.mode not in caps.network:
            raise BadInput(
                f"the {self.name} provider cannot enforce network {spec.network.mode!r} "
                f"(it supports: {', '.join(caps.network)})",
                "choose another provider for this sandbox, or relax its `network`",
            )
        if (spec.cpus or spec.memory_mb) and not caps.resources:
            raise BadInput(
                f"the {self.name} provider cannot limit cpus or memory",
                "remove cpus/memory_mb, or use the docker, modal or e2b provider",
            )


def redact(text: str, secrets: tuple[str, ...]) -> str:
    for value in secrets:
        if value:
            text = text.replace(value, "[secret]")
    return text


def install_id(settings: Settings) -> str:
    """Which install a sandbox belongs to. The reaper judges a sandbox by asking Temporal about its run, so
    an install is a Temporal: every worker of one cluster and namespace shares an id (any of them may reap
    what a lost one left), while an embedded dev server, whose histories live in the state dir, gets a random
    id kept there. Another install sharing the Docker daemon or cloud account never has its sandboxes judged
    by runs it cannot see."""
    if not settings.embedded:
        where = f"{settings.temporal.address}\0{settings.temporal.namespace}"
        return "t-" + hashlib.sha256(where.encode()).hexdigest()[:20]
    path = Path(settings.state_dir) / "install-id"
    try:
        return _read_install_id(path)
    except FileNotFoundError:
        create_private_once(path, ("s-" + secrets.token_hex(10)).encode())
        return _read_install_id(path)


def _read_install_id(path: Path) -> str:
    value = path.read_text().strip()
    if not INSTALL_ID.match(value):
        raise BadInput(
            f"{path} does not hold an install id",
            "delete it (a new id is made; sandboxes labelled with the old one are then left to you: "
            "remove them with `docker rm`, or on the cloud provider's console)",
        )
    return value
