"""`collect_artifacts`: keep what a run produced in its artifacts, with a manifest, for a judge or a later run: the
trajectories and exported data of deploy_env steps (`envs`), the run's transcripts, and files out of a deployed
thing's filesystem, as the framework's fields name them.

Files come from the sandbox of a deploy_agent step (the framework's `agent_name`), of a deploy_env step (`env_id`),
of a deploy_sandbox step (`sandbox_name`), or a run_docker_container container beside one (`sandbox_name` and
`container_name`). Which files: the `artifacts` map in the JSON answer of a prompt_agent step (`manifest_step_id`:
logical name -> path), else `artifact_paths`, else every file under `base_path`. A relative path is under
`base_path`; an absolute one is read as is; an entry with a URL scheme is no file of the sandbox (kept as a link).
Paths are normalised (no `..`), the provider keeps every read inside the sandbox, and the count and bytes are
bounded. The files go to the run's artifacts (`runs/RUN/artifacts/STEP/...`) and, together, into a new version of a
registry artifact named after the run (`universe_id_suffix` appended): a file universe, for a judge or a later run.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from agent_env.errors import AgentEnvError, BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.registry.store import Registry
from agent_env.registry.universes import push_new_version
from agent_env.spec.artifacts import FILE_UNIVERSE, Lineage
from agent_env.spec.run import PlannedConfig
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, step_type
from agent_env.steps.builtin.bare_sandboxes import deploying_step
from agent_env.steps.builtin.env_export import export_data
from agent_env.steps.builtin.envs import instance_id
from agent_env.steps.builtin.grading import json_in
from agent_env.steps.builtin.sandbox_steps import SandboxStep, _files_matching, attach, sandbox_path
from agent_env.steps.builtin.task_containers import prepare_verifier
from agent_env.stores import in_thread, keys

if TYPE_CHECKING:
    from agent_env.providers.base import Sandbox

URL_ENTRY = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
MAX_NAME = 128  # a registry artifact's name


@dataclass(frozen=True)
class Wanted:
    """One file to collect: the key it is listed under, and its absolute path in the sandbox."""

    key: str
    path: str


def prepare_source(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """`deployed`: a reference to the outputs of the step that started the sandbox (or the container)."""
    if config.get("container_name") is not None:
        found = prepare_verifier(dict(config), plan)  # the run_docker_container step of that name and sandbox
        config["deployed"] = {"sandbox": found["deployed"]}
    elif config.get("sandbox_name") is not None:
        config["deployed"] = ref(f"steps.{deploying_step(config, plan, 'collect_artifacts')}.outputs")
    elif config.get("sandbox") is not None:
        config["deployed"] = ref(f"steps.{config['sandbox']}.outputs")
    if config.get("manifest") is not None:
        config["manifest_answer"] = ref(f"steps.{config['manifest']}.outputs.answer")
    return config


def wanted_files(
    base_path: str, entries: list[str], manifest: object, exclude: set[str]
) -> tuple[list[Wanted] | None, list[str]]:
    """(the files named, or None to take every file under base_path; the URL entries, kept as links)."""
    if manifest is not None:
        named = _manifest(manifest)
        return [Wanted(k, _absolute(base_path, p, f"the manifest's {k!r}")) for k, p in named.items()], []
    if not entries:
        return None, []
    links = [e for e in entries if URL_ENTRY.match(e)]
    files = [Wanted(e, _absolute(base_path, e, "artifact_paths")) for e in entries if not URL_ENTRY.match(e)]
    return [w for w in files if posixpath.basename(w.path) not in exclude], links


def _manifest(answer: object) -> dict[str, str]:
    try:
        data = json_in(answer)
    except ValueError:
        raise StepFailed("the manifest step's answer holds no JSON with an `artifacts` map") from None
    named = data.get("artifacts") if isinstance(data, dict) else None
    if not isinstance(named, dict) or not all(isinstance(p, str) for p in named.values()):
        raise StepFailed('the manifest step\'s answer has no `artifacts` map of name -> path (e.g. {"report": ...})')
    return {str(k): p for k, p in named.items()}


def _absolute(base_path: str, entry: str, where: str) -> str:
    path = entry if entry.startswith("/") else f"{base_path.rstrip('/')}/{entry}"
    try:
        return sandbox_path(path)
    except ValueError as e:
        raise StepFailed(f"{where}: {e}") from None


async def _under(sandbox_: Sandbox, base_path: str, limit: int) -> list[tuple[str, int]]:
    """(path, size) of the regular files under base_path (links not followed), at most limit + 1 of them."""
    root = sandbox_.inside(base_path)
    script = (
        'cd "$1" 2>/dev/null || exit 0; find . -type f | head -n "$2" | '
        'while IFS= read -r p; do printf "%s %s\\n" "$(wc -c < "$p")" "${p#./}"; done'
    )
    done = await sandbox_.exec(["sh", "-c", script, "sh", root, str(limit + 1)], timeout=120)
    if done.exit_code != 0:
        raise StepFailed(f"could not list {base_path} in the sandbox: {sandbox_.redact(done.stderr.strip())[:500]}")
    found = []
    for line in done.stdout.splitlines():
        size, _, relative = line.partition(" ")
        if size.isdigit() and relative and ".." not in relative.split("/"):
            found.append((f"{base_path.rstrip('/')}/{relative}", int(size)))
    return found


@dataclass
class Bounds:
    max_files: int
    max_bytes: int
    max_total_bytes: int


async def collect_from_sandbox(
    ctx: StepContext,
    source: SandboxStep,
    base_path: str,
    wanted: list[Wanted] | None,
    exclude: set[str],
    bounds: Bounds,
) -> tuple[list[JsonObject], list[str], dict[str, bytes]]:
    """(the files kept, each with its key in the store; the paths that were not there; name -> bytes)."""
    sandbox_ = await attach(ctx, source)
    if wanted is None:
        listed = await _under(sandbox_, base_path, bounds.max_files)
        found = [(Wanted(p.removeprefix(base_path.rstrip("/") + "/"), p), n) for p, n in listed]
        found = [(w, n) for w, n in found if posixpath.basename(w.path) not in exclude]
        missing: list[str] = []
    else:
        if len(wanted) > bounds.max_files:  # (a manifest is an agent's answer: bounded before a probe each)
            raise StepFailed(f"{len(wanted)} files named, more than max_files ({bounds.max_files}): raise it")
        found, missing = [], []
        for want in wanted:
            sized = [(p, n) for p, n in await _files_matching(sandbox_, want.path) if p == want.path]
            if sized:
                found.append((want, sized[0][1]))
            else:
                missing.append(want.path)
    if len(found) > bounds.max_files:
        raise StepFailed(f"more than {bounds.max_files} files to collect (raise `max_files`, or name fewer)")
    kept: list[JsonObject] = []
    contents: dict[str, bytes] = {}
    total = 0
    for want, size in found:
        if size > bounds.max_bytes:
            raise StepFailed(f"{want.path} is {size} bytes, more than max_bytes ({bounds.max_bytes}): raise it")
        try:
            data = await sandbox_.get_file(want.path)
        except (AgentEnvError, OSError) as e:
            raise StepFailed(f"could not read {want.path} from the sandbox: {e}") from None
        total += len(data)
        if len(data) > bounds.max_bytes or total > bounds.max_total_bytes:
            raise StepFailed(f"the files collected pass max_total_bytes ({bounds.max_total_bytes}): raise it")
        key = keys.artifact(ctx.run_id, ctx.step_id, want.path.lstrip("/"))
        await ctx.stores.aio.objects.put(key, data)
        ctx.heartbeat()
        contents[want.path.lstrip("/")] = data
        digest = hashlib.sha256(data).hexdigest()
        kept.append({"name": want.key, "path": want.path, "key": key, "size": len(data), "sha256": digest})
    return kept, missing, contents


async def push_file_universe(ctx: StepContext, suffix: str | None, contents: dict[str, bytes]) -> JsonObject:
    """The files as the next version of registry artifact RUN_ID+suffix (type file_artifact_universe)."""
    name = f"{ctx.run_id}{suffix or ''}"
    if len(name) > MAX_NAME:
        raise StepFailed(
            f"the universe's name {name[:40]}... is over {MAX_NAME} characters: shorten universe_id_suffix"
        )
    record = {
        "type": FILE_UNIVERSE,
        "lineage": Lineage(
            run_id=ctx.run_id, step=ctx.step_id, source=keys.artifact(ctx.run_id, ctx.step_id)
        ).model_dump(exclude_none=True),
    }
    registry = Registry(ctx.stores.documents, ctx.stores.objects)
    try:
        pushed = await in_thread(push_new_version, registry, name, record, contents)
    except BadInput as e:
        raise StepFailed(f"could not keep the files as artifact {name!r}: {e}") from None
    return {"id": pushed.name, "version": pushed.label}


# -- the step --


class CollectConfig(StepConfig):
    framework_names = {
        "agent_name": ("sandbox", "agent_step"),
        "env_id": ("sandbox", "env_step"),
        "manifest_step_id": ("manifest", "prompt_step"),
    }
    refused_fields = {
        "artifacts_key": "a run here has no seed row to read a file list from: list the files in artifact_paths",
    }

    envs: list[str] = Field(default_factory=list, description="deploy_env steps whose trajectory and data to keep")
    data: bool = Field(
        True, description="export each environment's data (data/get; apps that declare data-objects/v1 upload theirs)"
    )
    sandbox: str | None = Field(
        None, description="collect files from the sandbox of this deploy_agent or deploy_env step"
    )
    app: str | None = Field(None, description="which sandboxed app of that deploy_env step (default: its only one)")
    sandbox_name: str | None = Field(None, description="collect files from this deploy_sandbox sandbox")
    container_name: str | None = Field(
        None, description="with sandbox_name: from this run_docker_container container beside it"
    )
    base_path: str = Field("/app/artifact", description="where relative paths are, and what is taken with no list")
    artifact_paths: list[str] = Field(
        default_factory=list, max_length=1000, description="files: relative to base_path, absolute, or URLs (links)"
    )
    exclude_basenames: list[str] = Field(default_factory=list, description="file names never taken")
    manifest: str | None = Field(
        None, description='a prompt_agent step whose JSON answer maps names to paths: {"artifacts": {...}}'
    )
    universe_id_suffix: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._-]{1,64}$", description="appended to the run id: the files' universe's name"
    )
    max_files: int = Field(100, gt=0, le=1000, description="the most files it collects")
    max_bytes: int = Field(10 * 1024 * 1024, gt=0, le=1024**3, description="the largest file it collects")
    max_total_bytes: int = Field(100 * 1024 * 1024, gt=0, le=4 * 1024**3, description="all the files' bytes")
    deployed: JsonObject | str | None = Field(None, description="filled in when the run is planned")
    manifest_answer: object = Field(None, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _one_source(self) -> CollectConfig:
        if self.sandbox is not None and self.sandbox_name is not None:
            raise ValueError("give `sandbox` (agent_name, env_id) or `sandbox_name`, not both")
        if self.container_name is not None and self.sandbox_name is None:
            raise ValueError("`container_name` needs `sandbox_name`: the sandbox the container runs beside")
        files = self.artifact_paths or self.manifest or self.exclude_basenames or self.universe_id_suffix
        if files and not self.from_sandbox:
            raise ValueError(
                "files are collected from a sandbox: name it (agent_name, env_id, sandbox_name or `sandbox`)"
            )
        if self.from_sandbox:
            try:
                sandbox_path(self.base_path)
                for entry in self.artifact_paths:
                    if not URL_ENTRY.match(entry) and "${" not in entry:
                        sandbox_path(entry if entry.startswith("/") else f"{self.base_path}/{entry}")
            except ValueError as e:
                raise ValueError(f"base_path or artifact_paths: {e}") from None
        return self

    @property
    def from_sandbox(self) -> bool:
        return self.sandbox is not None or self.sandbox_name is not None


async def _sandbox_files(ctx: StepContext, config: CollectConfig) -> tuple[JsonObject, list[str]]:
    """(what the outputs say of the files, their keys in the store)."""
    label = config.container_name or config.sandbox_name or config.sandbox or ""
    deployed = config.deployed if isinstance(config.deployed, dict) else None
    source = SandboxStep(sandbox=label, app=config.app, deployed=deployed)
    exclude = set(config.exclude_basenames)
    wanted, links = wanted_files(config.base_path, config.artifact_paths, config.manifest_answer, exclude)
    bounds = Bounds(config.max_files, config.max_bytes, config.max_total_bytes)
    kept, missing, contents = await collect_from_sandbox(ctx, source, config.base_path, wanted, exclude, bounds)
    found: JsonObject = {"files": kept, "missing": missing, "links": links}
    if contents:
        found["universe"] = await push_file_universe(ctx, config.universe_id_suffix, contents)
    return found, [str(f["key"]) for f in kept]


@step_type(
    "collect_artifacts",
    config=CollectConfig,
    timeout="10m",
    prepare=prepare_source,
    step_refs=("envs", "sandbox", "manifest"),
)
async def collect_artifacts(ctx: StepContext, config: CollectConfig) -> JsonObject:
    """Keep what a run produced in its artifact folder: trajectories, exported data, transcripts, files out of a
    sandbox; with a manifest."""
    objects = ctx.stores.aio.objects
    kept: list[str] = []
    gateway = await ctx.gateway() if config.envs else None
    for env in config.envs:
        instance = instance_id(ctx, env)
        entries = await gateway.trajectory(instance)  # type: ignore[union-attr]  # (envs: a gateway)
        key = keys.artifact(ctx.run_id, env, "trajectory.jsonl")
        await objects.put(key, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries).encode())
        kept.append(key)
        if config.data:  # (through data-objects/v1 where an app declares it: env_export)
            kept += await export_data(ctx, gateway, env, instance)  # type: ignore[arg-type]  # (envs: a gateway)
    files: JsonObject = {}
    if config.from_sandbox:
        files, file_keys = await _sandbox_files(ctx, config)
        kept += file_keys
    kept += await objects.list(keys.transcripts(ctx.run_id))
    manifest = keys.artifact(ctx.run_id, "manifest.json")
    listing: JsonObject = {"run_id": ctx.run_id, "artifacts": kept, **({"collected": files} if files else {})}
    await objects.put(manifest, json.dumps(listing, indent=1).encode())
    return {"artifacts": kept, "manifest": manifest, **files}
