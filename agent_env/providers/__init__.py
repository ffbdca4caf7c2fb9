"""Sandbox providers: where envs and agents run when not in the gateway's own process.

Built-ins: `local` (processes; not isolated), `docker`, `modal`, `modal_vm` (Modal VMs), `e2b`, `smol_vm` (a QEMU
microVM on KVM), `tensorlake` and `tenki` (cloud VMs; `api_vms.py` has what those two share); more by the
`agent_env.sandbox_providers` entry-point group. Pick one by name (or a fallback chain, "docker,local") in
`[sandboxes]` of the config, per step (`provider = ...`) or per app (`sandbox.provider`). See `base.py` for the interface; a
provider's own settings (`[sandboxes.providers.NAME]`) reach it as `provider.config`.
"""

from agent_env.providers.base import (
    Capabilities,
    ExecResult,
    Network,
    ProviderConfig,
    ProviderUnavailable,
    Sandbox,
    SandboxFailed,
    SandboxInfo,
    SandboxProvider,
    SandboxSpec,
)

__all__ = [
    "Capabilities",
    "ExecResult",
    "Network",
    "SandboxProvider",
    "ProviderConfig",
    "ProviderUnavailable",
    "Sandbox",
    "SandboxFailed",
    "SandboxInfo",
    "SandboxSpec",
]
