"""The gateway's doors: role tokens (each bound to its agent, instance and run), who is calling, the admin
token, and the end of a run's tokens."""

from __future__ import annotations

import hmac

from agent_env.gateway import tokens
from agent_env.gateway.callers import Caller, GatewayError
from agent_env.gateway.spec import InstanceSpec
from agent_env.gateway.state import COLLECTION, GatewayState
from agent_env.guard import tokens_equal
from agent_env.spec.times import iso


class Auth(GatewayState):
    async def token(self, instance_id: str, agent: str) -> str:
        if instance_id not in self._instances and (doc := self.store.get(COLLECTION, instance_id)) is not None:
            self._refuse_if_ended(InstanceSpec.model_validate(doc))  # not opened only to say its run ended
        inst = await self.get(instance_id)
        if agent not in inst.agents:
            raise GatewayError(
                404, f"no agent {agent!r} in instance {instance_id!r} (agents: {', '.join(inst.agents)})"
            )
        self._refuse_if_ended(inst.spec)
        return self._role_token(inst.spec, agent)

    def _role_token(self, spec: InstanceSpec, agent: str) -> str:
        """An agent's token, bound to its instance and run: a token of another run is refused even where
        an instance id is reused."""
        scope = spec.id if spec.run_id is None else f"{spec.id}\x00run\x00{spec.run_id}"
        return tokens.agent_token(self.key, scope, agent)

    async def authenticate(self, instance_id: str, authorization: str | None) -> Caller:
        token = tokens.bearer(authorization)
        if token is None:
            self.metrics.refused("token")
            raise GatewayError(
                401,
                "missing role token: send 'Authorization: Bearer <token>' "
                "(get one with `agent-env tools token INSTANCE AGENT`)",
            )
        digest = self._digest(token)
        if instance_id not in self._instances:
            # Not open: check the token against the stored spec first, so a stranger's request opens nothing
            # (opening starts an instance's processes).
            doc = self.store.get(COLLECTION, instance_id)
            if doc is None:
                raise GatewayError(404, f"no environment instance {instance_id!r} on this gateway")
            spec = InstanceSpec.model_validate(doc)
            if not any(self._digest(self._role_token(spec, a)) == digest for a in spec.agent_roles()):
                self.metrics.refused("token")
                raise GatewayError(403, f"this token is not valid for instance {instance_id!r}")
            self._refuse_if_ended(spec)  # before opening it: a token of an ended run starts nothing
        inst = await self.get(instance_id)
        agent = self._tokens[instance_id].get(digest)
        if agent is None:
            self.metrics.refused("token")
            raise GatewayError(403, f"this token is not valid for instance {instance_id!r}")
        self._refuse_if_ended(inst.spec)  # (open again for the operator's reads)
        return Caller(inst, agent)

    def _digest(self, token: str) -> bytes:
        return hmac.digest(self._lookup_key, token.encode("utf-8", "surrogatepass"), "sha256")

    def is_admin(self, authorization: str | None) -> bool:
        return tokens_equal(tokens.bearer(authorization), self.admin_token)

    def _refuse_if_ended(self, spec: InstanceSpec) -> None:
        if spec.ended_at is not None:
            self.metrics.refused("token")
            raise GatewayError(
                410,
                f"instance {spec.id!r} belongs to run {spec.run_id!r}, which ended at {iso(spec.ended_at)}: its "
                f"agents' role tokens no longer work (read what they did with `agent-env runs trajectory "
                f"{spec.run_id}`)",
            )
