"""Sandbox provider plugins for the tests: one that is never usable here (to test fallback chains)."""

from agent_env.providers import Capabilities, ProviderUnavailable, SandboxProvider


class Offline(SandboxProvider):
    name = "offline"
    capabilities = Capabilities(isolated=True)

    def __init__(self, settings) -> None:
        self.settings = settings

    async def check(self) -> None:
        raise ProviderUnavailable("the offline provider never answers", "use another provider")

    async def create(self, spec):
        raise AssertionError("a provider that is not usable is never asked to create")

    async def list(self, run_id=None):
        return []

    async def remove(self, sandbox_id):
        return False
