"""`modal_vm`: sandboxes that are Modal VMs (a kernel of their own, so Docker runs inside), through the Modal SDK
(`pip install 'agentenv-framework[modal]'`, the same extra and credentials as the `modal` provider).

Modal starts a VM for a sandbox created with `experimental_options={"vm_runtime": True}`, which only its V2
sandbox backend (`Sandbox._experimental_create`) takes; V2 sandboxes are found by name with
`Sandbox._experimental_from_name` and listed with `Sandbox._experimental_list`. Everything else (the app,
tags as labels, names, images and Dockerfiles, limits, network, ports through Modal's tunnels, exec and files)
is the `modal` provider's.

A sandbox without an `image` boots a Docker-capable Ubuntu (`docker.io` installed). Whatever the image, a
Docker daemon found in it is started in the background before the sandbox's command (its log:
`/tmp/agentenv-dockerd.log`), so the command and `exec` can run containers; a sandbox with no command is kept
running. Filesystem snapshots are not offered on VMs: `snapshot` is refused.

Written against modal 1.6 (the V2 API is private to the SDK and may change: the live test in tests_live/
is the check).
"""

from __future__ import annotations

from typing import Any

from agent_env.providers.base import Capabilities, Sandbox, SandboxSpec
from agent_env.providers.modal import ModalProvider, ModalSandbox

VM_BASE_IMAGE = "ubuntu:24.04"
VM_PACKAGES = ("docker.io", "ca-certificates", "curl")
DOCKERD_LOG = "/tmp/agentenv-dockerd.log"
# Starts the image's Docker daemon, if it has one, and then the sandbox's command ("$@"), or waits forever.
START = (
    "if command -v dockerd >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then "
    f"(dockerd >{DOCKERD_LOG} 2>&1 </dev/null &); fi; "
)


class ModalVmSandbox(ModalSandbox):
    async def snapshot(self) -> str:
        return await Sandbox.snapshot(self)  # refused: the base's answer, naming the providers that can


class ModalVmProvider(ModalProvider):
    name = "modal_vm"
    capabilities = Capabilities(
        isolated=True, build=True, network=["open", "none", "allowlist"], resources=True, snapshot=False
    )
    sandbox_class = ModalVmSandbox

    def _start(self, command: list[str], **options: Any) -> Any:
        import modal

        return modal.Sandbox._experimental_create(*command, experimental_options={"vm_runtime": True}, **options)

    def _by_name(self, name: str) -> Any:
        import modal

        return modal.Sandbox._experimental_from_name(self.app_name, name)

    def _listed(self, app_id: str, tags: dict[str, str]) -> Any:
        import modal

        return modal.Sandbox._experimental_list(app_id=app_id, tags=tags)

    def _command(self, spec: SandboxSpec) -> list[str]:
        if spec.command:
            return ["sh", "-c", START + 'exec "$@"', "sh", *spec.command]
        return ["sh", "-c", START + "exec sleep infinity"]

    def _default_image(self) -> Any:
        import modal

        return modal.Image.from_registry(VM_BASE_IMAGE).apt_install(*VM_PACKAGES)
