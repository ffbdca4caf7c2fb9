"""Providers by name: the built-ins plus plugins from the `agent_env.sandbox_providers` entry-point group.

`"docker,local"` is a fallback chain: the first provider that is usable here creates the sandbox.
A provider that is usable but fails (a broken Dockerfile) does not fall through: that is the user's
error to see, not to hide behind another provider.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from agent_env.errors import AgentEnvError, BadInput
from agent_env.providers.base import (
    ProviderConfig,
    ProviderUnavailable,
    Sandbox,
    SandboxInfo,
    SandboxProvider,
    SandboxSpec,
)

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from agent_env.config import Settings

ENTRY_POINT_GROUP = "agent_env.sandbox_providers"  # (the framework's name; `agent-env plugin` lists it)
BUILTIN = {
    "local": "agent_env.providers.local:LocalProvider",
    "docker": "agent_env.providers.docker:DockerProvider",
    "modal": "agent_env.providers.modal:ModalProvider",
    "modal_vm": "agent_env.providers.modal_vm:ModalVmProvider",
    "e2b": "agent_env.providers.e2b:E2BProvider",
    "smol_vm": "agent_env.providers.smol_vm:SmolVMProvider",
    "tensorlake": "agent_env.providers.tensorlake:TensorlakeProvider",
    "tenki": "agent_env.providers.tenki:TenkiProvider",
}


@functools.cache
def _plugins() -> dict[str, EntryPoint]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def names() -> list[str]:
    return sorted({*BUILTIN, *_plugins()})


def load(name: str, settings: Settings) -> SandboxProvider:
    """One provider by name, constructed for these settings."""
    name = name.strip()
    if name in BUILTIN:
        module, _, attr = BUILTIN[name].partition(":")
        import importlib

        cls = getattr(importlib.import_module(module), attr)
    elif name in _plugins():
        try:
            cls = _plugins()[name].load()
        except Exception as e:  # noqa: BLE001 - a broken plugin is the user's to fix
            raise BadInput(
                f"sandbox provider plugin {name!r} failed to load: {e}", "fix or uninstall the package that provides it"
            ) from None
    else:
        import difflib

        close = difflib.get_close_matches(name, names(), n=1)
        raise BadInput(
            f"no sandbox provider named {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
            f"use one of: {', '.join(names())}, or install a plugin in the {ENTRY_POINT_GROUP!r} entry-point group",
        )
    if not (isinstance(cls, type) and issubclass(cls, SandboxProvider)):
        raise BadInput(
            f"sandbox provider {name!r} is not a SandboxProvider subclass",
            "its entry point must name a class deriving from agent_env.providers.SandboxProvider",
        )
    provider = cls(settings)  # type: ignore[call-arg]  # SandboxProvider declares no __init__; providers take their settings
    provider.config = ProviderConfig(settings.sandboxes.providers.get(name), settings)
    return provider


def parse_chain(value: str) -> list[str]:
    chain = [n.strip() for n in value.split(",") if n.strip()]
    if not chain:
        raise BadInput("an empty sandbox provider", 'name one, e.g. "docker" or "docker,local"')
    return chain


async def create(chain: str, spec: SandboxSpec, settings: Settings) -> tuple[SandboxProvider, Sandbox]:
    """Create the sandbox on the first provider of the chain that is usable here and can enforce what the
    spec asks (network, limits)."""
    refusals: list[tuple[str, AgentEnvError]] = []
    for name in parse_chain(chain):
        provider = load(name, settings)
        try:
            provider.refuse_unsupported(spec)
            await provider.check()
        except (ProviderUnavailable, BadInput) as e:
            refusals.append((name, e))
            continue
        return provider, await provider.create(spec)
    if len(refusals) == 1:
        name, refusal = refusals[0]
        raise (
            ProviderUnavailable(f"{name}: {refusal.problem}", refusal.fix)
            if isinstance(refusal, ProviderUnavailable)
            else refusal
        )
    raise ProviderUnavailable(
        f"no sandbox provider of the chain {chain!r} can run {spec.name!r} here:\n  "
        + "\n  ".join(f"{name}: {e}" for name, e in refusals),
        "start or configure one of them, or relax what the sandbox asks for",
    )


async def usable(settings: Settings, names_: list[str] | None = None) -> list[SandboxProvider]:
    """The providers that can be asked about their sandboxes here (for `sandboxes list` and the reaper)."""
    found = []
    for name in names_ or names():
        try:
            provider = load(name, settings)
            await provider.check()
        except (ProviderUnavailable, BadInput):
            continue
        found.append(provider)
    return found


async def list_all(settings: Settings, run_id: str | None = None) -> list[SandboxInfo]:
    out: list[SandboxInfo] = []
    for provider in await usable(settings):
        out.extend(await provider.list(run_id))
    return out
