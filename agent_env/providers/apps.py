"""Sandboxed apps of an environment (and sandboxed agents): their build contexts pinned at plan time, their
sandboxes started by `deploy_env` (`deploy_agent`) and stopped by `teardown_env`, the run's end, or the reaper."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from agent_env import packing
from agent_env.envs.server_token import SERVER_TOKEN_ENV
from agent_env.errors import AgentEnvError, BadInput, StepFailed
from agent_env.providers import by_name
from agent_env.providers.base import Network, SandboxSpec, redact
from agent_env.providers.docker_images import context_tar
from agent_env.stores import in_thread, keys, open_secrets
from agent_env.stores.secrets import PREFIX, MissingSecret, env_var, is_reference

if TYPE_CHECKING:
    from agent_env.config import Settings
    from agent_env.spec.env import SandboxRun
    from agent_env.stores import Stores


def pin_build(stores: Stores, record_folder: Path, build: str) -> str:
    """Store the build context as a content-addressed tar (so any worker can build it, and an unchanged
    context maps to the same image); returns its object key. A link in it refuses the run (see `packing`)."""
    root = record_folder.resolve()
    try:
        entries = packing.walk(root, build)
    except packing.NotInside:
        raise BadInput(
            f"build folder {build!r} is outside the record's folder {root}",
            "keep the Dockerfile's folder inside the record's folder (envs/NAME/ or agents/NAME/)",
        ) from None
    except BadInput as e:
        raise BadInput(f"build folder {build!r}: {e.problem}", e.fix) from None
    dockerfile = (PurePosixPath(build) / "Dockerfile").as_posix()
    if not any(e.path == dockerfile and not e.folder for e in entries):
        raise BadInput(f"{root / build} has no Dockerfile", "point `build` at a folder with a Dockerfile")
    try:
        data = context_tar(root, build)
    except BadInput as e:  # changed since it was walked
        raise BadInput(f"build folder {build!r}: {e.problem}", e.fix) from None
    key = keys.content(data, "tar")
    if not stores.objects.exists(key):
        stores.objects.put(key, data)
    return key


def unpack_build(settings: Settings, stores: Stores, key: str, name: str) -> Path:
    """The context on this machine, unpacked once per content hash (files and folders only: see `packing`)."""
    digest = keys.content_digest(key)
    folder = Path(settings.state_dir) / "sandboxes" / "contexts" / digest[:32] / name
    if not (folder / "Dockerfile").is_file():
        tmp = folder.with_name(f"{name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            packing.unpack(
                stores.objects.get(key),
                tmp,
                f"the build context {key} of {name}",
                "plan the run again (its context is pinned anew from the bundle's folder)",
            )
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        try:
            tmp.rename(folder)
        except OSError:  # unpacked meanwhile by another worker
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def sandbox_name(instance: str, app: str) -> str:
    return re.sub(r"[^a-z0-9_.\-]", "-", f"{instance}.{app}".lower())[:128]


def env_secrets(box: SandboxRun) -> dict[str, str]:
    """env variable -> the secret its value references."""
    return {var: value[len(PREFIX) :] for var, value in box.env.items() if is_reference(value)}


def check_secrets(settings: Settings, box: SandboxRun, label: str) -> None:
    """Fail when the run is planned, not when the sandbox starts, if a secret its env references is not set."""
    store = open_secrets(settings)
    for var, name in env_secrets(box).items():
        if not store.has(name):
            raise MissingSecret(
                f"{label}: env {var} references secret:{name}, which is not set",
                f"set it with `agent-env secrets set {name}` or the environment variable {env_var(name)}",
            )


def resolve_env(settings: Settings, box: SandboxRun, label: str) -> dict[str, str]:
    """The sandbox's env with its `secret:` references resolved: called in the activity, just before the
    provider starts it, and never logged or returned."""
    store, env = open_secrets(settings), dict(box.env)
    for var, name in env_secrets(box).items():
        try:
            env[var] = store.get(name)
        except MissingSecret:  # deleted since the run was planned, or not set on this worker
            raise StepFailed(
                f"{label}: env {var} references secret:{name}, which is not set on this worker "
                f"(set it with `agent-env secrets set {name}` or the environment variable "
                f"{env_var(name)}, where the worker runs)"
            ) from None
    return env


def run_spec(
    settings: Settings, run_id: str, owner: str, name: str, box: SandboxRun, build: Path | None
) -> SandboxSpec:
    """What a provider runs for a sandboxed app or agent; `owner` is what removes it early (an env instance).
    Its env is as declared, `secret:` references unresolved (see `resolve_env`)."""
    return SandboxSpec(
        name=name,
        run_id=run_id,
        owner=owner,
        image=box.image,
        build=str(build) if build else None,
        command=box.command,
        env=box.env,
        port=box.port,
        host_port=box.host_port,
        cpus=box.cpus,
        memory_mb=box.memory_mb,
        network=Network.parse(box.network),
        ttl=(box.ttl_hours or settings.sandboxes.ttl_hours) * 3600,
    )


async def start(
    settings: Settings,
    stores: Stores,
    *,
    run_id: str,
    owner: str,
    name: str,
    box: SandboxRun,
    build_key: str | None,
    chain: str,
    label: str,
    server_token: str | None = None,
):
    """Start (or, on a retry, find) the sandbox of an app or agent (`label`, e.g. "app 'echo' of env desk"),
    building its image from the pinned context if it has one. Returns (provider, sandbox); problems
    become one StepFailed naming `label` and the bundle's folder (not this worker's copy of it).
    `server_token`: for an env app, what its server must require of callers ($AGENT_ENV_SERVER_TOKEN)."""
    build = None
    if box.build:
        if build_key is None:
            raise StepFailed(f"{label}: its build context was not pinned when the run was planned")
        build = await in_thread(unpack_build, settings, stores, build_key, name)
    spec = run_spec(settings, run_id, owner, sandbox_name(owner, name), box, build)
    env = await in_thread(resolve_env, settings, box, label)  # (the secret store)
    secrets = tuple(env[var] for var in env_secrets(box) if env[var])
    if server_token:  # set after the bundle's env, so a bundle cannot choose its server's token
        env[SERVER_TOKEN_ENV] = server_token
        secrets += (server_token,)
    spec = spec.model_copy(update={"env": env})  # resolved here, at the last moment
    try:
        provider, sandbox = await by_name.create(chain, spec, settings)
    except AgentEnvError as e:  # no usable provider, a broken Dockerfile, something it cannot enforce
        message = redact(str(e), secrets)
        if build is not None:
            message = message.replace(f"{build}/", f"{box.build}/")
        raise StepFailed(f"{label}: {message}") from None
    except Exception as e:  # an SDK's own error may echo what it was sent
        if secrets and any(value in str(e) for value in secrets):
            raise StepFailed(
                f"{label}: the sandbox could not be started ({type(e).__name__}, its message "
                "withheld: it holds a secret value)",
                retryable=True,
            ) from None
        raise
    sandbox.secrets = secrets  # its output, when an error quotes it, is redacted
    return provider, sandbox


async def remove_sandboxes(settings: Settings, run_id: str, owner: str | None = None) -> list[dict[str, Any]]:
    """Remove the run's sandboxes (only those `owner` owns, if given) on every usable provider."""
    removed = []
    for provider in await by_name.usable(settings):
        for info in await provider.list(run_id):
            if owner is None or info.owner == owner:
                await provider.remove(info.id)
                removed.append({"provider": provider.name, "id": info.id})
    return removed
