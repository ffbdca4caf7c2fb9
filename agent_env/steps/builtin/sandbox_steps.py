"""Steps that work inside a deployed app's or agent's sandbox: `sandbox_exec` runs a command there, `put_files`
puts files in, `collect_files` brings files out into the run's artifacts (for a judge, or for the next run).

A step names the `deploy_env` or `deploy_agent` step that started the sandbox (`sandbox`, and `app` for an
environment with several sandboxed apps); when the run is planned, `deployed` becomes a reference to that
step's outputs, so the step finds the provider and sandbox id the deploy recorded, on any worker.

Files put in are pinned when the run is planned, as content-addressed objects: a rerun, or a worker on another
machine, puts the very same bytes. History carries decisions, not traffic: outputs hold an exit code, the
tails of what a command printed and the keys, sizes and digests of files; the bytes go to the object store.

Retries: putting a file is idempotent. A command runs again when its step is retried (a worker lost mid-step)
unless `once = true`: then its result is kept in a marker file in the sandbox, keyed by the step's idempotency
key, and a retry that finds the marker returns that result instead of running the command again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import posixpath
import re
import shlex
from collections.abc import Awaitable, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from pydantic import Field, field_validator, model_validator

from agent_env import packing
from agent_env.errors import AgentEnvError, BadInput, NotFound
from agent_env.gateway_client.wire import JsonObject
from agent_env.providers import by_name
from agent_env.registry.manifest import file_sha256
from agent_env.registry.resolve import split_ref
from agent_env.registry.store import Registry
from agent_env.spec.run import PlannedConfig
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, step_type
from agent_env.stores import in_thread, keys

if TYPE_CHECKING:
    from agent_env.providers.base import ExecResult, Sandbox

T = TypeVar("T")

TAIL_BYTES = 2048  # of each stream, in a step's outputs; the whole of it goes to the run's artifacts
MAX_PUT_FILES = 1000
MAX_PUT_BYTES = 256 * 1024 * 1024
HEARTBEAT_EVERY = 2.0
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|PRIVATE|AUTH", re.IGNORECASE)
ONCE_DIR = "/tmp/agentenv-once"


def sandbox_path(path: str, *, glob: bool = False) -> str:
    """An absolute, normalised path inside a sandbox (ValueError naming the fix otherwise)."""
    if not path.startswith("/") or path == "/":
        raise ValueError(f"{path!r}: paths in a sandbox are absolute (e.g. /work/notes.txt)")
    if ".." in path.split("/") or posixpath.normpath(path) != path:
        raise ValueError(f"{path!r} is not a normalised path: write it without '..', '.', '//' or a trailing '/'")
    if "\n" in path or "\0" in path:
        raise ValueError(f"{path!r}: a path in a sandbox holds no newline or NUL")
    if not glob and any(c in path for c in "*?"):
        raise ValueError(f"{path!r}: only collect_files takes patterns (* and ?)")
    return path


# -- finding the sandbox --


class SandboxStep(StepConfig):
    sandbox: str = Field(description="the deploy_env or deploy_agent step whose sandbox this step works in")
    app: str | None = Field(None, description="which sandboxed app of a deploy_env step (default: its only one)")
    deployed: dict[str, Any] | None = Field(
        None, description="filled in when the run is planned: a reference to that step's outputs"
    )


def prepare_sandbox(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    config["deployed"] = f"${{steps.{config['sandbox']}.outputs}}"  # resolved by the run, once the deploy is done
    return config


def located(config: SandboxStep) -> tuple[str, str]:
    """(provider, sandbox id) as the deploy step recorded them."""
    outputs = config.deployed or {}
    if "sandbox" in outputs:  # deploy_agent: one sandbox, the agent's
        if config.app:
            raise StepFailed(f"step {config.sandbox!r} deployed an agent, which has one sandbox: remove `app`")
        return outputs["sandbox"]["provider"], outputs["sandbox"]["id"]
    boxes = outputs.get("sandboxes") or []
    if not boxes:
        raise StepFailed(
            f"step {config.sandbox!r} started no sandbox: name a deploy_env step with a sandboxed app, "
            "or a deploy_agent step of an a2a agent with a `sandbox`"
        )
    apps = [b["app"] for b in boxes]
    if config.app is None and len(boxes) > 1:
        raise StepFailed(f"step {config.sandbox!r} started sandboxes for apps {', '.join(apps)}: choose one with `app`")
    for box in boxes:
        if config.app in (None, box["app"]):
            return box["provider"], box["id"]
    raise StepFailed(
        f"step {config.sandbox!r} has no sandboxed app {config.app!r} (its sandboxed apps: {', '.join(apps)})"
    )


async def attach(ctx: StepContext, config: SandboxStep) -> Sandbox:
    """The sandbox, checked to be this run's: a step never reaches into another run's sandbox."""
    provider_name, sandbox_id = located(config)
    try:
        sandbox = await by_name.load(provider_name, ctx.settings).attach(sandbox_id)
    except AgentEnvError as e:
        raise StepFailed(f"the sandbox of step {config.sandbox!r}: {e}") from None
    if sandbox.info.run_id != ctx.run_id:
        raise StepFailed(f"sandbox {sandbox_id!r} is not this run's")
    sandbox.secrets += await _environment_secrets(sandbox)
    return sandbox


async def _environment_secrets(sandbox: Sandbox) -> tuple[str, ...]:
    """Values of the sandbox's environment variables whose names say they are secret (tokens, keys,
    passwords): kept out of what the step outputs and stores. A sandbox without `env` hides nothing."""
    try:
        result = await sandbox.exec(["env"], timeout=10)
    except Exception:  # noqa: BLE001 - no `env` in the image: nothing to read, nothing to hide
        return ()
    pairs = (line.partition("=") for line in result.stdout.splitlines())
    return tuple(value for name, _, value in pairs if SECRET_NAME.search(name) and len(value) >= 6)


async def heartbeating(ctx: StepContext, work: Awaitable[T]) -> T:
    """Await `work`, heartbeating meanwhile, so a long command is not taken for a lost worker."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_EVERY)
        if done:
            return task.result()
        ctx.heartbeat()


def _failed(where: str, e: Exception) -> StepFailed:
    return StepFailed(f"{where}: {e}")


# -- sandbox_exec --


class SandboxExecConfig(SandboxStep):
    command: list[str] | str = Field(
        description='what to run: an argument list, or a string run by `sh -c` (e.g. "make test > /out/log")'
    )
    env: dict[str, str] = Field(default_factory=dict, description="variables added to the sandbox's environment")
    cwd: str | None = Field(None, description="the absolute folder it runs in (default: the sandbox's own)")
    timeout: float = Field(60, gt=0, le=3000, description="seconds before the command is stopped and the step fails")
    expect_exit: int | None = Field(0, description="the exit code it must end with (null: any)")
    once: bool = Field(False, description="a retried step returns the first attempt's result instead of running again")

    @field_validator("command")
    @classmethod
    def _some_command(cls, value: list[str] | str) -> list[str] | str:
        if not value or (isinstance(value, list) and not value[0]):
            raise ValueError("give a command: a non-empty argument list or shell string")
        return value

    @field_validator("env")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name (letters, digits, '_')")
        return value

    @field_validator("cwd")
    @classmethod
    def _cwd(cls, value: str | None) -> str | None:
        return None if value is None else sandbox_path(value)


def command_line(sandbox: Sandbox, config: SandboxExecConfig) -> list[str]:
    """The argument list to run: a string through `sh -c`; `cwd` and `env` set by a small sh prologue that
    takes every value as an argument, so none of them is ever parsed by the shell."""
    argv = ["sh", "-c", config.command] if isinstance(config.command, str) else list(config.command)
    if config.cwd is None and not config.env:
        return argv
    script, args = "", []
    if config.cwd is not None:
        script += 'cd -- "$1" || exit 125; shift; '
        args.append(sandbox.inside(config.cwd))
    for name, value in config.env.items():
        script += f'export {name}="$1"; shift; '
        args.append(value)
    return ["sh", "-c", script + 'exec "$@"', "sh", *args, *argv]


def tail(text: str, limit: int = TAIL_BYTES) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return "…" + data[-limit:].decode(errors="ignore")


@step_type(
    "sandbox_exec",
    config=SandboxExecConfig,
    timeout="1h",
    prepare=prepare_sandbox,
    step_refs=("sandbox",),
)
async def sandbox_exec(ctx: StepContext, config: SandboxExecConfig) -> JsonObject:
    """Run a command in a deployed app's or agent's sandbox; outputs its exit code and the tails of its output."""
    sandbox = await attach(ctx, config)
    marker = f"{ONCE_DIR}/{hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:32]}.json"
    if config.once and await _files_matching(sandbox, marker):
        outputs: JsonObject = json.loads(await sandbox.get_file(marker))  # what this step wrote there
    else:
        try:
            result = await heartbeating(ctx, sandbox.exec(command_line(sandbox, config), timeout=config.timeout))
        except TimeoutError:
            raise StepFailed(f"the command did not finish within {config.timeout:g}s (raise `timeout`)") from None
        except AgentEnvError as e:
            raise _failed("the command could not run", e) from None
        outputs = await in_thread(_exec_outputs, ctx, sandbox, result)
        if config.once:
            await sandbox.put_file(marker, json.dumps(outputs).encode())
    if config.expect_exit is not None and outputs["exit_code"] != config.expect_exit:
        shown = outputs["stderr"] or outputs["stdout"]
        raise StepFailed(
            f"the command exited with {outputs['exit_code']} (expected {config.expect_exit})"
            + (f"; its last output:\n{shown}" if shown else "")
        )
    return outputs


def _exec_outputs(ctx: StepContext, sandbox: Sandbox, result: ExecResult) -> dict[str, Any]:
    outputs: dict[str, Any] = {"exit_code": result.exit_code}
    for stream in ("stdout", "stderr"):
        text = sandbox.redact(getattr(result, stream))
        outputs[stream] = tail(text)
        if text:
            key = keys.artifact(ctx.run_id, ctx.step_id, stream)
            ctx.stores.objects.put(key, text.encode())
            outputs[f"{stream}_key"] = key
            outputs[f"{stream}_bytes"] = len(text.encode())
    return outputs


# -- put_files --


class PutFile(TypedDict):
    """One file a step put into a sandbox, as its outputs list it."""

    path: str
    size: int
    sha256: str


class FileSource(StepConfig):
    """Exactly one of: inline `text`, a registry `artifact`, or a `file` (or folder) of the bundle."""

    text: str | None = Field(None, description="the file's content")
    artifact: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*(@[A-Za-z0-9_.\-]+)?$",
        description="NAME[@VERSION]: the bundle's artifacts/NAME, or the registry's (a folder puts its files)",
    )
    file: str | None = Field(None, description="a file or folder of the bundle, relative to its folder")

    @model_validator(mode="after")
    def _one(self) -> FileSource:
        if sum(v is not None for v in (self.text, self.artifact, self.file)) != 1:
            raise ValueError("give exactly one of `text`, `artifact` or `file`")
        return self


class PutFilesConfig(SandboxStep):
    files: dict[str, FileSource] = Field(
        min_length=1, description="path in the sandbox -> what to put there (a folder's files go under the path)"
    )
    into: str | None = Field(None, description="the absolute folder that relative paths of `files` are put under")
    pinned: dict[str, str] = Field(
        default_factory=dict, description="filled in when the run is planned: path -> the bytes' object key"
    )

    @field_validator("into")
    @classmethod
    def _into(cls, value: str | None) -> str | None:
        return None if value is None else sandbox_path(value)

    @model_validator(mode="after")
    def _paths(self) -> PutFilesConfig:
        for path in self.files:
            self.target(path)
        for path in self.pinned:
            sandbox_path(path)
        return self

    def target(self, path: str) -> str:
        if not path.startswith("/"):
            if self.into is None:
                raise ValueError(f"{path!r} is relative: give `into` (the folder it goes under) or an absolute path")
            path = f"{self.into}/{path}"
        return sandbox_path(path)


def prepare_put(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """Pin every bundle file and artifact as a content-addressed object, keyed by where it goes."""
    config = prepare_sandbox(config, plan)
    checked = PutFilesConfig.model_validate({k: v for k, v in config.items() if k != "deployed"})
    pinned: dict[str, str] = {}
    for path, source in checked.files.items():
        if source.text is not None:
            continue  # inline: it may hold ${...} references, resolved when the step runs
        found = _artifact_files(plan, source.artifact) if source.artifact else _bundle_files(plan, source.file or "")
        for relative, data in found:
            pinned[checked.target(path) + (f"/{relative}" if relative else "")] = _pin(plan, data)
    if len(pinned) > MAX_PUT_FILES:
        raise BadInput(f"put_files would put {len(pinned)} files", f"put at most {MAX_PUT_FILES} in one step")
    config["pinned"] = pinned
    return config


def _pin(plan: PlanContext, data: bytes) -> str:
    key = keys.content(data, "bin")
    if not plan.stores.objects.exists(key):
        plan.stores.objects.put(key, data)
    return key


def _folder_files(bundle: Path, relative: str, what: str) -> list[tuple[str, bytes]]:
    """The file at `relative` in the bundle as [("", bytes)]; a folder as its files, by their path relative to it
    (bounded). Read through `packing`: a link in it is refused, naming it, and never followed."""

    try:
        entries = packing.walk(bundle, relative)
    except packing.NotInside:
        raise BadInput(f"{what} is not inside the bundle {bundle}", "name a file of the bundle") from None
    except BadInput as e:
        raise BadInput(f"{what}: {e.problem}", e.fix) from None
    base = PurePosixPath(relative)
    if len(entries) == 1 and not entries[0].folder and PurePosixPath(entries[0].path) == base:
        return [("", packing.read(bundle, entries[0].path))]
    files = [e for e in entries if not e.folder and PurePosixPath(e.path).name != "artifact.toml"]
    if len(files) > MAX_PUT_FILES or sum(e.size for e in files) > MAX_PUT_BYTES:
        raise BadInput(
            f"{what} holds more than {MAX_PUT_FILES} files or {MAX_PUT_BYTES >> 20} MiB",
            "put a smaller folder (or an archive, and unpack it with sandbox_exec)",
        )
    return [(PurePosixPath(e.path).relative_to(base).as_posix(), packing.read(bundle, e.path)) for e in files]


def _bundle_files(plan: PlanContext, name: str) -> list[tuple[str, bytes]]:
    if plan.bundle is None:
        raise BadInput(
            f"put_files file {name!r}: a task outside a bundle has no files",
            "put the task in a bundle, or give the file's `text` inline",
        )
    return _folder_files(plan.bundle, name, f"put_files file {name!r}")


def _artifact_files(plan: PlanContext, ref: str) -> list[tuple[str, bytes]]:
    """The bundle's `artifacts/NAME` (unless a version is named), else the registry's version of it."""

    name, label = split_ref(ref)
    if label is None and plan.bundle is not None and os.path.lexists(plan.bundle / "artifacts" / name):
        return _folder_files(plan.bundle, f"artifacts/{name}", f"artifact {name!r}")
    try:
        return _registry_files(plan, name, label)
    except NotFound as e:
        where = "the bundle's artifacts/ nor " if label is None else ""
        raise BadInput(f"artifact {ref!r} is in neither {where}the registry: {e.problem}", e.fix) from None


def _registry_files(plan: PlanContext, name: str, label: str | None) -> list[tuple[str, bytes]]:

    version = Registry(plan.stores.documents, plan.stores.objects).version("artifacts", name, label)
    prefix = f"artifacts/{name}"
    found = []
    for entry in version.files:
        if entry.path.endswith("/artifact.toml"):
            continue
        data = plan.stores.objects.get(keys.registry_blob(entry.sha256))
        if file_sha256(data) != entry.sha256:
            raise BadInput(
                f"{version.ref}: the stored bytes of {entry.path} do not match their digest", "push it again"
            )
        found.append((entry.path.removeprefix(prefix).lstrip("/"), data))
    return found


def pin_skills(plan: PlanContext, refs: list[str]) -> dict[str, str]:
    """Each skill artifact's files, pinned, by where a sandboxed agent finds them: /skills/NAME/..."""

    pinned = {}
    for ref in refs:
        name = split_ref(ref)[0]
        found = _artifact_files(plan, ref)
        if "SKILL.md" not in {relative for relative, _ in found}:
            raise BadInput(f"skill {ref!r} has no SKILL.md", "a skill is an artifact folder with a SKILL.md")
        pinned.update({f"/skills/{name}/{relative}": _pin(plan, data) for relative, data in found})
    return pinned


async def put_pinned(ctx: StepContext, sandbox: Sandbox, contents: Mapping[str, bytes | str]) -> list[PutFile]:
    """Put each file (its bytes, or the object key they were pinned under) at its path in the sandbox."""
    put: list[PutFile] = []
    for path in sorted(contents):
        data = contents[path]
        data = await ctx.stores.aio.objects.get(data) if isinstance(data, str) else data
        try:
            await sandbox.put_file(path, data)
        except AgentEnvError as e:
            raise _failed(f"could not put {path}", e) from None
        ctx.heartbeat()
        put.append(PutFile(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest()))
    return put


@step_type("put_files", config=PutFilesConfig, timeout="10m", prepare=prepare_put, step_refs=("sandbox",))
async def put_files(ctx: StepContext, config: PutFilesConfig) -> JsonObject:
    """Put files into a deployed app's or agent's sandbox: inline text, bundle files, registry artifacts."""
    sandbox = await attach(ctx, config)
    texts = {config.target(p): s.text.encode() for p, s in config.files.items() if s.text is not None}
    return {"files": await put_pinned(ctx, sandbox, {**config.pinned, **texts})}


# -- collect_files --


class CollectFilesConfig(SandboxStep):
    paths: list[str] = Field(
        min_length=1, max_length=100, description="absolute files or patterns (* and ? match within a name)"
    )
    optional: bool = Field(False, description="a path that matches no file is listed in `missing` instead of failing")
    max_bytes: int = Field(10 * 1024 * 1024, gt=0, le=1024**3, description="the largest file it collects")
    max_files: int = Field(100, gt=0, le=1000, description="the most files it collects")

    @field_validator("paths")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        return [sandbox_path(p, glob=True) for p in value]


def shell_pattern(pattern: str) -> str:
    """`pattern` for sh: every character quoted except the * and ? that match (no other expansion)."""
    return "".join(part if part in ("*", "?") else shlex.quote(part) for part in re.split(r"([*?])", pattern) if part)


async def _files_matching(sandbox: Sandbox, pattern: str) -> list[tuple[str, int]]:
    """(path, size) of the regular files matching `pattern` in the sandbox."""
    root = sandbox.inside("/").rstrip("/")
    script = (
        f"for p in {shell_pattern(sandbox.inside(pattern))}; do "
        'if [ -f "$p" ]; then printf "%s %s\\n" "$(wc -c < "$p")" "$p"; fi; done'
    )
    result = await sandbox.exec(["sh", "-c", script], timeout=60)
    if result.exit_code != 0:
        raise StepFailed(f"could not list {pattern} in the sandbox: {sandbox.redact(result.stderr.strip())}")
    found = []
    for line in result.stdout.splitlines():
        size, _, path = line.strip().partition(" ")
        if size.isdigit() and path.startswith(root):
            found.append(("/" + path[len(root) :].lstrip("/"), int(size)))
    return found


@step_type("collect_files", config=CollectFilesConfig, timeout="10m", prepare=prepare_sandbox, step_refs=("sandbox",))
async def collect_files(ctx: StepContext, config: CollectFilesConfig) -> JsonObject:
    """Copy files out of a deployed app's or agent's sandbox into the run's artifacts; outputs their keys."""
    sandbox = await attach(ctx, config)
    matched: dict[str, int] = {}
    missing = []
    for pattern in config.paths:
        found = await _files_matching(sandbox, pattern)
        if not found:
            missing.append(pattern)
        matched.update(found)
        if len(matched) > config.max_files:
            raise StepFailed(f"more than {config.max_files} files match {', '.join(config.paths)} (raise `max_files`)")
    if missing and not config.optional:
        raise StepFailed(f"no file in the sandbox at {', '.join(missing)} (or set `optional = true`)")
    files = []
    for path, size in sorted(matched.items()):
        if size > config.max_bytes:
            raise StepFailed(f"{path} is {size} bytes, more than max_bytes ({config.max_bytes}): raise it")
        try:
            data = await sandbox.get_file(path)
        except AgentEnvError as e:
            raise _failed(f"could not read {path}", e) from None
        key = keys.artifact(ctx.run_id, ctx.step_id, path.lstrip("/"))
        await ctx.stores.aio.objects.put(key, data)
        ctx.heartbeat()
        files.append({"path": path, "key": key, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return {"files": files, **({"missing": missing} if missing else {})}
