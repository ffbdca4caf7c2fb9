"""Sandboxed apps of an environment (and sandboxed agents): their build contexts pinned at plan time, their
sandboxes started by `deploy_env` (`deploy_agent`) and stopped by `teardown_env`, the run's end, or the reaper."""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentenv.errors import BadInput
from agentenv.providers.base import Network, SandboxSpec

if TYPE_CHECKING:
    from agentenv.config import Settings
    from agentenv.spec.env import SandboxRun
    from agentenv.stores import Stores


def pin_build(stores: Stores, record_folder: Path, build: str) -> str:
    """Store the build context as a content-addressed tar (so any worker can build it, and an unchanged
    context maps to the same image); returns its object key."""
    from agentenv.providers.docker import context_tar

    root = record_folder.resolve()
    folder = (root / build).resolve()
    if not folder.is_relative_to(root):
        raise BadInput(f"build folder {build!r} is outside the record's folder {root}",
                       "keep the Dockerfile's folder inside the record's folder (envs/NAME/ or agents/NAME/)")
    if not (folder / "Dockerfile").is_file():
        raise BadInput(f"{folder} has no Dockerfile", "point `build` at a folder with a Dockerfile")
    data = context_tar(folder)
    key = f"artifacts/sha256-{hashlib.sha256(data).hexdigest()}.tar"
    if not stores.objects.exists(key):
        stores.objects.put(key, data)
    return key


def unpack_build(settings: Settings, stores: Stores, key: str, name: str) -> Path:
    """The context on this machine, unpacked once per content hash."""
    digest = key.rsplit("sha256-", 1)[1].removesuffix(".tar")
    folder = Path(settings.state_dir) / "sandboxes" / "contexts" / digest[:32] / name
    if not (folder / "Dockerfile").is_file():
        tmp = folder.with_name(f"{name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(stores.objects.get(key))) as tar:
            tar.extractall(tmp, filter="data")
        try:
            tmp.rename(folder)
        except OSError:  # unpacked meanwhile by another worker
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def sandbox_name(instance: str, app: str) -> str:
    return re.sub(r"[^a-z0-9_.\-]", "-", f"{instance}.{app}".lower())[:128]


def run_spec(settings: Settings, run_id: str, owner: str, name: str, box: SandboxRun,
             build: Path | None) -> SandboxSpec:
    """What a provider runs for a sandboxed app or agent; `owner` is what removes it early (an env instance)."""
    return SandboxSpec(
        name=name, run_id=run_id, owner=owner, image=box.image,
        build=str(build) if build else None, command=box.command, env=box.env, port=box.port,
        host_port=box.host_port, cpus=box.cpus, memory_mb=box.memory_mb, network=Network.parse(box.network),
        ttl=(box.ttl_hours or settings.sandboxes.ttl_hours) * 3600)


async def start(settings: Settings, stores: Stores, *, run_id: str, owner: str, name: str, box: SandboxRun,
                build_key: str | None, chain: str, label: str):
    """Start (or, on a retry, find) the sandbox of an app or agent (`label`, e.g. "app 'echo' of env desk"),
    building its image from the pinned context if it has one. Returns (provider, sandbox); problems
    become one StepFailed naming `label` and the bundle's folder (not this worker's copy of it)."""
    from agentenv.errors import AgentEnvError
    from agentenv.providers import registry
    from agentenv.steps import StepFailed

    build = None
    if box.build:
        if build_key is None:
            raise StepFailed(f"{label}: its build context was not pinned when the run was planned")
        build = unpack_build(settings, stores, build_key, name)
    spec = run_spec(settings, run_id, owner, sandbox_name(owner, name), box, build)
    try:
        return await registry.create(chain, spec, settings)
    except AgentEnvError as e:  # no usable provider, a broken Dockerfile, something it cannot enforce
        message = str(e)
        if build is not None:
            message = message.replace(f"{build}/", f"{box.build}/")
        raise StepFailed(f"{label}: {message}") from None


async def remove_sandboxes(settings: Settings, run_id: str, owner: str | None = None) -> list[dict[str, Any]]:
    """Remove the run's sandboxes (only those `owner` owns, if given) on every usable provider."""
    from agentenv.providers import registry

    removed = []
    for provider in await registry.usable(settings):
        for info in await provider.list(run_id):
            if owner is None or info.owner == owner:
                await provider.remove(info.id)
                removed.append({"provider": provider.name, "id": info.id})
    return removed
