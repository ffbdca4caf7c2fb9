"""Where this install keeps its state and which Temporal it talks to.

Sources, later ones win: defaults, `.agentenv/config.toml` (found upward from the working directory,
or named by AGENT_ENV_CONFIG), then environment variables (AGENT_ENV_*, and the Temporal CLI's own
TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE / TEMPORAL_API_KEY / TEMPORAL_TLS*, and OpenTelemetry's
OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_SERVICE_NAME; every one is in ENV_VARIABLES). Which source set each value is
recorded while loading (`Settings.origin`), so `agent-env config show` reports it instead of guessing.

A file written for the reference system's shape (`[sandbox] default`, `agent_default`,
`[sandbox.providers.NAME.config]`) is read as our `[sandboxes]`; setting one value in both shapes is an error.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from agent_env.errors import BadInput, from_validation_error

CONFIG_RELPATH = Path(".agentenv") / "config.toml"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TemporalSettings(_Section):
    """Which Temporal cluster runs the workflows. No address means the embedded dev server."""

    address: str | None = Field(None, description="host:port of a Temporal frontend; unset = embedded dev server")
    namespace: str = "default"
    task_queue: str = Field("agentenv", description="task queue of the orchestration workers")
    api_key: str | None = Field(None, description="Temporal Cloud API key; prefer the TEMPORAL_API_KEY env var")
    tls: bool = False
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    tls_server_name: str | None = None
    ui_url: str | None = Field(None, description="base URL of the cluster's web UI, for run links")
    connect_timeout: float = Field(5.0, gt=0, description="seconds to wait for the cluster to answer")
    plan_key_secret: str | None = Field(
        None,
        description="the secret (in [stores.secrets]) holding the key this install's planners and workers seal "
        "and check runs with (64 hex digits); needed when they run on several machines. Unset: the state "
        "directory's plan.key",
    )


class ServerSettings(_Section):
    """The embedded Temporal dev server, used when no address is configured."""

    ip: str = "127.0.0.1"
    port: int = Field(7233, ge=1, le=65535)
    ui_port: int = Field(8233, ge=1, le=65535)
    ui: bool = Field(
        False,
        description="serve the Temporal web UI on ui_port. Off by default: the dev server's UI has no sign-in and "
        "answers any Host, so any page the browser visits can read and cancel runs through it (SECURITY.md)",
    )


class GatewaySettings(_Section):
    """The gateway agents reach environments through. No url means the embedded one (a local daemon)."""

    url: str | None = Field(None, description="base URL of a running gateway; unset = the embedded gateway")
    admin_token: str | None = Field(None, description="admin token of that gateway; prefer AGENT_ENV_GATEWAY_TOKEN")
    ip: str = "127.0.0.1"
    port: int = Field(8790, ge=1, le=65535)
    max_body_kib: int = Field(16 * 1024, ge=16, description="largest request body the gateway accepts")
    max_calls_per_agent: int = Field(32, ge=1, description="tool calls one agent may have in flight (429 beyond)")
    max_sessions_per_agent: int = Field(16, ge=1, description="MCP sessions one agent may hold open (429 beyond)")
    max_app_data_mib: int = Field(
        256,
        ge=0,
        description="what one instance's apps may keep on the gateway's disk (their SQLite files, anything an app "
        "writes in its folder); past it the instance's calls that write are refused (507), its reads served; 0: none",
    )
    max_trajectory_mib: int = Field(
        512,
        ge=0,
        description="what one instance's trajectory may grow to; past it every tool call of the instance is refused "
        "(507): each would add an entry; 0: no limit",
    )
    min_free_disk_mib: int = Field(
        1024,
        ge=0,
        description="free space the gateway keeps on its disk; below it every instance's writes are refused (507) "
        "and /ready and /readyz answer 503 (low disk); 0: no floor",
    )
    pool: list[str] = Field(
        default_factory=list,
        description="base URLs of several gateways serving this install: each env instance is placed on one "
        "(the least loaded; a run's instances together) and everything about it goes there",
    )
    key_secret: str | None = Field(
        None,
        description="the secret (in [stores.secrets]) holding the key a pool's gateways share (64 hex digits): "
        "their tokens then verify on each, and workers derive the admin token from it",
    )

    def urls(self) -> list[str]:
        """The gateways runs use: the pool, else the one `url` (empty: the embedded gateway)."""
        return [u.rstrip("/") for u in self.pool] or ([self.url.rstrip("/")] if self.url else [])


def url_origin(url: str | None) -> str | None:
    """`scheme://host:port` of a URL (default ports filled in), the unit a credential is bound to."""
    from urllib.parse import urlsplit

    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:  # a malformed port: it is nobody's origin
        return None
    host = (parts.hostname or "").lower()
    if not parts.scheme or not host:
        return None
    return f"{parts.scheme.lower()}://{'[' + host + ']' if ':' in host else host}:{port}"


class ModelSettings(_Section):
    """A model endpoint for one purpose (agent, persona, judge) or all (`default`), spoken to through its
    provider's SDK: OpenAI (or any OpenAI-compatible server) or Anthropic."""

    provider: Literal["openai", "anthropic"] = Field(
        "openai", description='"openai": OpenAI or any OpenAI-compatible server; "anthropic": the Messages API'
    )
    api: Literal["chat", "responses"] = Field(
        "chat", description='openai only: "chat" (chat completions, what compatible servers speak) or "responses"'
    )
    base_url: str | None = Field(None, description="e.g. https://api.openai.com/v1 (or https://api.anthropic.com)")
    model: str | None = Field(None, description="the model name the endpoint expects")
    api_key: str | None = Field(
        None,
        description='a `secret:NAME` reference, e.g. "secret:openai" (leave it '
        "out for servers that need no key); sent only to base_url's origin",
    )
    timeout: float = Field(120.0, gt=0, description="seconds per request")
    max_retries: int = Field(
        2, ge=0, le=10, description="retries of a failed request (connection errors, 408/409/429/5xx; Retry-After)"
    )
    max_tokens: int = Field(4096, ge=1, description="the longest reply, in tokens (Anthropic requires a limit)")
    temperature: float = Field(0.0, ge=0, le=2)
    withheld_key: str | None = Field(
        None,
        description="set by agent-env, not by you: the configured key an override "
        "moved to another origin did not take along",
    )

    def overridden(self, override: dict | None) -> ModelSettings:
        """This endpoint with an override's fields. A key belongs to its endpoint's origin: an override that
        moves `base_url` to another origin (a bundle's agent, a task's judge, --model-url) gets no key
        unless it names its own, so the configured key never goes where a bundle points."""
        given = {k: v for k, v in (override or {}).items() if v is not None}
        merged = {**self.model_dump(), **given}
        moved = "base_url" in given and url_origin(given["base_url"]) != url_origin(self.base_url)
        if moved and self.api_key and given.get("api_key") in (None, self.api_key):
            merged.update(api_key=None, withheld_key=self.api_key)
        elif "base_url" in given or "api_key" in given:
            merged["withheld_key"] = None
        return ModelSettings.model_validate(merged)

    def withheld_notice(self) -> str | None:
        """Why no key goes to this endpoint, when an override left the configured one behind."""
        if not self.withheld_key:
            return None
        return (
            f"no API key is sent to {self.base_url}: the configured key {self.withheld_key} belongs to the "
            "configured endpoint, and keys go only to their own origin; if this one needs a key, give the "
            'override a key of its own (api_key = "secret:NAME", or [models.PURPOSE] in .agentenv/config.toml)'
        )


class SandboxSettings(_Section):
    """Where sandboxed envs and agents run: a provider name or a fallback chain ("docker,local")."""

    envs: str = Field("local", description="default provider for environments (steps and apps can override)")
    agents: str = Field("local", description="default provider for agents")
    ttl_hours: float = Field(6.0, gt=0, description="a sandbox older than this is reaped whatever its run")
    reap_every: float = Field(300.0, ge=0, description="seconds between a worker's reaper passes (0 = never)")
    modal_app: str = Field("agentenv", description="the Modal app sandboxes are created in")
    e2b_template: str = Field("base", description="the E2B template for sandboxes without an image")
    providers: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="each provider's own settings by its name ([sandboxes.providers.NAME], e.g. an api_key as "
        "`secret:NAME`), handed to that provider as `provider.config`; references are resolved where used",
    )


class WorkerSettings(_Section):
    """`agent-env worker`, a long-lived worker process."""

    drain_timeout: float = Field(
        30.0,
        ge=0,
        description="seconds a stopping worker (SIGTERM, Ctrl-C) lets its running activities finish; those still "
        "running then are handed back, and Temporal retries them on another worker",
    )
    health_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="serve /healthz, /readyz and /metrics (the Temporal SDK's worker metrics) on this port; 0: off",
    )
    health_host: str = Field(
        "127.0.0.1", description="the address the health port binds (0.0.0.0 in a container, for probes and scrapes)"
    )


class TelemetrySettings(_Section):
    """Tracing runs end to end (OpenTelemetry, OTLP over HTTP). Off: nothing of OpenTelemetry is loaded for it."""

    traces: bool = Field(False, description="trace every run: CLI, workers, gateway, apps and agents in one trace")
    otlp_endpoint: str = Field(
        "http://127.0.0.1:4318", description="the OTLP/HTTP collector's base URL (spans go to its /v1/traces)"
    )
    service_name: str = Field("agentenv", description="the service name spans are exported under")
    sample_ratio: float = Field(1.0, ge=0, le=1, description="the share of runs traced (a run is traced whole)")

    @property
    def traces_url(self) -> str:
        return self.otlp_endpoint.rstrip("/") + "/v1/traces"


class StoreSettings(BaseModel):
    """One store's backend and its options. The options are the backend's own keys (e.g. `bucket`, `table`,
    `region`, `endpoint_url`, `prefix`), checked by the backend when it opens."""

    model_config = ConfigDict(extra="allow")

    backend: str = Field("local", description="local (default), aws, gcp, or a plugin's name (agent_env.stores)")

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class StoresSettings(_Section):
    """Where runs, the registry and artifacts are kept. Installs pointing at the same stores share them."""

    documents: StoreSettings = StoreSettings()
    objects: StoreSettings = StoreSettings()
    images: StoreSettings = StoreSettings()
    secrets: StoreSettings = StoreSettings()


class Origin(BaseModel):
    """Where one setting's value came from."""

    source: Literal["file", "env", "default"] = "default"
    name: str | None = Field(None, description="the config file's path, or the environment variable's name")
    written_as: str | None = Field(
        None, description="the file's own spelling, when it used the reference system's shape ([sandbox] default)"
    )


class Settings(_Section):
    state_dir: Path
    stores: StoresSettings = StoresSettings()
    temporal: TemporalSettings = TemporalSettings()
    server: ServerSettings = ServerSettings()
    gateway: GatewaySettings = GatewaySettings()
    sandboxes: SandboxSettings = SandboxSettings()
    worker: WorkerSettings = WorkerSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    models: dict[str, ModelSettings] = Field(
        default_factory=dict, description="by purpose: default, agent, persona, judge"
    )
    config_file: Path | None = Field(None, exclude=True)
    _origins: dict[tuple[str, ...], Origin] = PrivateAttr(default_factory=dict)

    def origin(self, *path: str) -> Origin:
        """Where the value at `path` (e.g. "temporal", "address") came from: the file, a variable, or the default."""
        return self._origins.get(path, Origin())

    def model(self, purpose: str, override: dict | None = None) -> ModelSettings:
        """The endpoint for a purpose: its own section, else `default`, then the override's fields."""
        base = self.models.get(purpose) or self.models.get("default") or ModelSettings()
        return base.overridden(override)

    @property
    def embedded(self) -> bool:
        return not self.temporal.address

    @property
    def address(self) -> str:
        return self.temporal.address or f"{self.server.ip}:{self.server.port}"

    @property
    def ui_base(self) -> str | None:
        if self.temporal.ui_url:
            return self.temporal.ui_url.rstrip("/")
        if self.embedded and self.server.ui:
            return f"http://{self.server.ip}:{self.server.ui_port}"
        return None

    def run_url(self, run_id: str) -> str | None:
        base = self.ui_base
        return f"{base}/namespaces/{self.temporal.namespace}/workflows/{run_id}" if base else None

    def describe_address_source(self) -> str:
        origin = self.origin("temporal", "address")
        if origin.source == "env":
            return f"the {origin.name} environment variable"
        if origin.source == "file":
            return f"[temporal] address in {origin.name}"
        return "the configuration"


def default_state_dir() -> Path:
    if home := os.environ.get("AGENT_ENV_HOME"):
        return Path(home).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(xdg) / "agentenv"


def find_config_file(start: Path | None = None) -> Path | None:
    if explicit := os.environ.get("AGENT_ENV_CONFIG"):
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise BadInput(
                f"AGENT_ENV_CONFIG names {path}, which is not a file",
                "point AGENT_ENV_CONFIG at an existing config.toml, or unset it",
            )
        return path
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / CONFIG_RELPATH
        if candidate.is_file():
            return candidate
    return None


class EnvVar(NamedTuple):
    """An environment variable agent-env reads: `setting` is the path in `Settings` it overrides (empty: none)."""

    name: str
    setting: tuple[str, ...] = ()


# Every environment variable agent-env reads, the one list of them: `load_settings` applies those with a setting
# from it, and `.env.example` documents each (tests/test_repo_files.py holds the file and the code to this list).
ENV_VARIABLES: tuple[EnvVar, ...] = (
    EnvVar("AGENT_ENV_HOME", ("state_dir",)),
    EnvVar("XDG_STATE_HOME", ("state_dir",)),  # the state dir's parent when AGENT_ENV_HOME is unset
    EnvVar("AGENT_ENV_CONFIG"),  # find_config_file
    EnvVar("TEMPORAL_ADDRESS", ("temporal", "address")),
    EnvVar("TEMPORAL_NAMESPACE", ("temporal", "namespace")),
    EnvVar("TEMPORAL_API_KEY", ("temporal", "api_key")),
    EnvVar("TEMPORAL_TLS", ("temporal", "tls")),
    EnvVar("TEMPORAL_TLS_CERT", ("temporal", "tls_cert")),
    EnvVar("TEMPORAL_TLS_KEY", ("temporal", "tls_key")),
    EnvVar("TEMPORAL_TLS_CA", ("temporal", "tls_ca")),
    EnvVar("TEMPORAL_TLS_SERVER_NAME", ("temporal", "tls_server_name")),
    EnvVar("AGENT_ENV_TASK_QUEUE", ("temporal", "task_queue")),
    EnvVar("AGENT_ENV_PLAN_KEY_SECRET", ("temporal", "plan_key_secret")),
    EnvVar("AGENT_ENV_SERVER_PORT", ("server", "port")),
    EnvVar("AGENT_ENV_UI_PORT", ("server", "ui_port")),
    EnvVar("AGENT_ENV_UI", ("server", "ui")),
    EnvVar("AGENT_ENV_GATEWAY_URL", ("gateway", "url")),
    EnvVar("AGENT_ENV_GATEWAY_TOKEN", ("gateway", "admin_token")),
    EnvVar("AGENT_ENV_GATEWAY_PORT", ("gateway", "port")),
    EnvVar("AGENT_ENV_GATEWAY_MAX_APP_DATA_MIB", ("gateway", "max_app_data_mib")),
    EnvVar("AGENT_ENV_GATEWAY_MAX_TRAJECTORY_MIB", ("gateway", "max_trajectory_mib")),
    EnvVar("AGENT_ENV_GATEWAY_MIN_FREE_DISK_MIB", ("gateway", "min_free_disk_mib")),
    EnvVar("AGENT_ENV_ENV_PROVIDER", ("sandboxes", "envs")),
    EnvVar("AGENT_ENV_AGENT_PROVIDER", ("sandboxes", "agents")),
    EnvVar("AGENT_ENV_TRACES", ("telemetry", "traces")),
    EnvVar("OTEL_EXPORTER_OTLP_ENDPOINT", ("telemetry", "otlp_endpoint")),
    EnvVar("OTEL_SERVICE_NAME", ("telemetry", "service_name")),
    # The default model endpoint ([models.default]), e.g. a local server's.
    EnvVar("AGENT_ENV_MODEL_BASE_URL", ("models", "default", "base_url")),
    EnvVar("AGENT_ENV_MODEL", ("models", "default", "model")),
    EnvVar("AGENT_ENV_MODEL_API_KEY", ("models", "default", "api_key")),
    EnvVar("AGENT_ENV_MODEL_PROVIDER", ("models", "default", "provider")),
    # Read where they are used:
    EnvVar("AGENT_ENV_SECRET_<NAME>"),  # a secret's value, ahead of every store (stores/secrets.py)
    EnvVar("AGENT_ENV_SERVER_TOKEN"),  # what an env server requires of callers (envs/serve.py, `env serve`)
    EnvVar("AGENT_ENV_PUBLIC_URL"),  # where an A2A agent served by the SDK is reached (agents/sdk.py)
    EnvVar("AGENT_ENV_WORKDIR"),  # the folder the CLI agent runs its command in (agents/cli_agent.py)
    EnvVar("AGENT_ENV_STAGING_MAX_BYTES"),  # how much an SDK agent's staging/v1 area holds (agents/staging.py)
)


def _apply_env_overrides(data: dict[str, Any], origins: dict[tuple[str, ...], Origin]) -> None:
    """Set every setting an environment variable overrides (a non-empty one) in the file's document."""
    for var in ENV_VARIABLES:
        if len(var.setting) < 2 or not (value := os.environ.get(var.name)):
            continue  # the state dir is settled before; variables that are no setting are read where used
        *tables, key = var.setting
        table = data
        for name in tables:
            table = table.setdefault(name, {})
            if not isinstance(table, dict):
                break  # the file's own shape error is reported by validation
        else:
            table[key] = value
            origins[var.setting] = Origin(source="env", name=var.name)


def load_settings(cwd: Path | None = None) -> Settings:
    """Read the config file (if any) and the environment. Errors name the file, field and fix."""
    path = find_config_file(cwd)
    data: dict[str, Any] = {}
    origins: dict[tuple[str, ...], Origin] = {}
    if path:
        import tomllib

        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise BadInput(f"{path} is not valid TOML: {e}", "fix the syntax at that line") from None
        written_as = _read_seed_sandbox(data, path)
        for leaf, _ in leaves(data):
            origins[leaf] = Origin(source="file", name=str(path), written_as=written_as.get(leaf))
        if "state_dir" in data:  # relative to the project folder that holds .agentenv/
            data["state_dir"] = str((path.parent.parent / Path(data["state_dir"]).expanduser()).resolve())
    if os.environ.get("AGENT_ENV_HOME") or "state_dir" not in data:
        data["state_dir"] = str(default_state_dir())
        var = next((v.name for v in ENV_VARIABLES if v.setting == ("state_dir",) and os.environ.get(v.name)), None)
        origins[("state_dir",)] = Origin(source="env", name=var) if var else Origin()
    _apply_env_overrides(data, origins)
    try:
        settings = Settings.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, str(path) if path else "environment settings") from None
    settings.config_file = path
    settings._origins = origins
    secure_state_dir(settings.state_dir)
    return settings


def leaves(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every value of a nested document (a TOML file, a settings dump) with its path; an empty table is one."""
    out: list[tuple[tuple[str, ...], Any]] = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.extend(leaves(value, (*prefix, key)))
        else:
            out.append(((*prefix, key), value))
    return out


_SEED_SANDBOX_KEYS = {"default": "envs", "agent_default": "agents"}


def _read_seed_sandbox(data: dict[str, Any], path: Path) -> dict[tuple[str, ...], str]:
    """Move the reference system's `[sandbox]` table into our `[sandboxes]` (in place). Returns how the file
    wrote each value it moved, by the value's path in our shape."""
    seed = data.pop("sandbox", None)
    if seed is None:
        return {}
    fix = "write it as [sandboxes] (see .agentenv/config.example.toml)"
    ours = data.setdefault("sandboxes", {})
    if not isinstance(seed, dict) or not isinstance(ours, dict):
        raise BadInput(f"{path}: [sandbox] and [sandboxes] must be tables", fix)
    written_as: dict[tuple[str, ...], str] = {}

    def move(target: tuple[str, ...], value: Any, seed_key: str) -> None:
        table = ours
        for part in target[:-1]:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise BadInput(f"{path}: [sandboxes.{'.'.join(target[:-1])}] must be a table", fix)
        if target[-1] in table:
            raise BadInput(
                f"{path} sets {seed_key} and [sandboxes{''.join('.' + p for p in target[:-1])}] {target[-1]}, "
                "the same setting in two shapes",
                "keep one of them",
            )
        table[target[-1]] = value
        written_as[("sandboxes", *target)] = seed_key

    for key, value in seed.items():
        if key in _SEED_SANDBOX_KEYS:
            move((_SEED_SANDBOX_KEYS[key],), value, f"[sandbox] {key}")
            continue
        if key != "providers" or not isinstance(value, dict):
            raise BadInput(
                f"{path}: [sandbox] {key} is not read by agent-env",
                "[sandbox] takes default, agent_default and [sandbox.providers.NAME.config]; remove it, or " + fix,
            )
        for name, table in value.items():
            config = table.get("config", {}) if isinstance(table, dict) else None
            if not isinstance(config, dict) or set(table) - {"config"}:
                raise BadInput(
                    f"{path}: [sandbox.providers.{name}] takes only a config table",
                    f"put the provider's own settings under [sandbox.providers.{name}.config] (a provider plugin "
                    "is found by its name in the agent_env.providers entry-point group, not by a class path)",
                )
            if not config:  # an empty table still names the provider
                ours.setdefault("providers", {}).setdefault(name, {})
                written_as[("sandboxes", "providers", name)] = f"[sandbox.providers.{name}.config]"
            for option, option_value in config.items():
                move(("providers", name, option), option_value, f"[sandbox.providers.{name}.config] {option}")
    return written_as


def secure_state_dir(path: Path) -> Path:
    """Create the state dir 0700, or tighten one that is open to others. Its contents (secrets, the gateway
    key, run records) are then out of other users' reach whatever their own modes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.stat()
    if not stat.S_ISDIR(info.st_mode):
        raise BadInput(f"the state dir {path} is not a folder", "point AGENT_ENV_HOME (or state_dir) at a folder")
    if info.st_uid != os.getuid() or info.st_mode & stat.S_ISVTX:  # e.g. /tmp: shared, others may plant files
        raise BadInput(
            f"the state dir {path} is not a private folder of this user (uid {os.getuid()})",
            "point AGENT_ENV_HOME (or state_dir in .agentenv/config.toml) at a folder of your own",
        )
    if info.st_mode & 0o077:
        path.chmod(0o700)
    return path
