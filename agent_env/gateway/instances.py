"""The gateway's instances: created (or updated), forked, opened from the store on demand, closed, deleted,
and the storage budgets they are admitted against. Specs are persisted in the gateway's own store and app data
lives in per-instance SQLite files, so a restarted gateway serves the same instances with the same data."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

from pydantic import ValidationError

from agent_env.envs.mcp import ChangeChannel
from agent_env.errors import from_validation_error
from agent_env.gateway import foreign
from agent_env.gateway.auth import Auth
from agent_env.gateway.callers import GatewayError
from agent_env.gateway.env_instance import EnvInstance
from agent_env.gateway.spec import InstanceSpec
from agent_env.gateway.state import COLLECTION, WORLDS
from agent_env.gateway_client import wire
from agent_env.spec.roles import role_tools
from agent_env.spec.world_state import WorldPush


class Instances(Auth):
    def folder(self, instance_id: str) -> Path:
        return self.root / "instances" / instance_id

    async def get(self, instance_id: str) -> EnvInstance:
        inst = self._instances.get(instance_id)
        if inst is not None:
            inst.last_used = time.monotonic()
            return inst
        doc = self.store.get(COLLECTION, instance_id)
        if doc is None:
            raise GatewayError(404, f"no environment instance {instance_id!r} on this gateway")
        return await self._open(InstanceSpec.model_validate(doc))

    async def _open(self, spec: InstanceSpec, source: EnvInstance | None = None) -> EnvInstance:
        """Open `spec`'s instance (`source`: as a fork of that one, starting from its current state)."""
        try:
            if source is None:
                inst = await EnvInstance.open(spec, self.folder(spec.id), key=self.key)
            else:
                inst = await source.fork(spec, self.folder(spec.id), key=self.key)
        except (OSError, RuntimeError) as e:  # a remote app that does not answer (stopped, or not up yet)
            raise GatewayError(502, f"instance {spec.id}: {e}") from None
        if world := self.store.get(WORLDS, spec.id):
            inst.apply_world(WorldPush.model_validate(world))
        try:
            await foreign.push_view(inst)  # apps at URLs: the run's roles and clock, not their own (see there)
        except BaseException:
            await inst.close()
            raise
        if spec.id in self._instances:  # opened meanwhile by a concurrent request: keep that one
            await inst.close()
            return self._instances[spec.id]
        self._instances[spec.id] = inst
        self._tokens[spec.id] = {self._digest(self._role_token(spec, agent)): agent for agent in inst.agents}
        self._channels.setdefault(spec.id, ChangeChannel())
        return inst

    def _save(self, inst: EnvInstance) -> None:
        self.store.put(COLLECTION, inst.spec.id, inst.spec.model_dump(mode="json"))

    def list_instances(self) -> list[wire.JsonObject]:
        return self.store.query(COLLECTION)

    def busy(self, run_id: str | None = None) -> wire.Load:
        """What placement weighs: instances open here, hosted agents, and those of `run_id` held here."""
        held = [doc["id"] for doc in self.store.query(COLLECTION, where={"run_id": run_id})] if run_id else []
        return {"instances": len(self._instances), "agents": len(self.agents.list()), "run_instances": held}

    async def put(self, spec: InstanceSpec) -> EnvInstance:
        """Create an instance, or update roles, agents and clock of an existing one (idempotent)."""
        try:
            current = await self.get(spec.id)
        except GatewayError:
            current = None
        if current is None:
            self._refuse_storage(self.storage.admit_new())
            inst = await self._open(spec)
            self._save(inst)
            return inst
        if [a.model_dump() for a in current.spec.apps] != [a.model_dump() for a in spec.apps]:
            raise GatewayError(409, f"instance {spec.id!r} already exists with other apps; tear it down first")
        if spec.run_id == current.spec.run_id and current.spec.ended_at is not None:
            spec.ended_at = current.spec.ended_at  # a late retry of the run's deploy does not revive its tokens
        for role, role_spec in spec.roles.items():
            await foreign.push_role(current, role, role_tools(role, role_spec, current.entries))  # (as world.py)
            current.set_role(role, role_spec)
        current.agents = spec.agent_roles()
        current.spec = spec
        self._tokens[spec.id] = {self._digest(self._role_token(spec, a)): a for a in current.agents}
        self._save(current)
        await self._tools_changed(spec.id)
        return current

    async def fork(self, source_id: str, new: wire.JsonObject) -> EnvInstance:
        """A new instance starting from the source's current state: the source's env, roles and apps, with the
        id, run and time of `new` (and its agents and apps at URLs, when given). Idempotent on the new id: a
        retry finds the fork made (it is stored only once complete) and copies nothing again."""
        if self.store.get(COLLECTION, new["id"]) is not None:
            return await self.get(new["id"])
        source_spec = (await self.get(source_id)).spec
        spec = _parse_spec(
            {
                **source_spec.model_dump(mode="json"),
                "run_id": None,
                "now": None,
                **{k: v for k, v in new.items() if v is not None},
                "expires_at": None,  # a prototype's end is not its forks'
                "ended_at": None,
            },
            f"fork {new['id']}",
        )
        if spec.id in self._forking:
            raise GatewayError(409, f"instance {spec.id!r} is being forked right now; retry in a moment")
        self._refuse_storage(self.storage.admit_new())
        self._forking.add(spec.id)
        try:
            source = await self.get(source_id)
            source.busy += 1  # not closed as idle while it is copied
            try:
                inst = await self._open(spec, source)
            finally:
                source.busy -= 1
            self._save(inst)
            return inst
        except BaseException:
            if self.store.get(COLLECTION, spec.id) is None:  # nothing half-made is left behind
                with contextlib.suppress(Exception):
                    await self._unload(spec.id)
                shutil.rmtree(self.folder(spec.id), ignore_errors=True)
            raise
        finally:
            self._forking.discard(spec.id)

    async def delete(self, instance_id: str, *, keep_data: bool = False) -> bool:
        if instance_id not in self._instances and self.store.get(COLLECTION, instance_id) is None:
            return False
        with contextlib.suppress(Exception):  # its remote apps may be gone (a stopped sandbox): forget it anyway
            await self._unload(instance_id)  # a closed instance is not opened only to be closed
        await self._end_sessions(instance_id)
        self.store.delete(COLLECTION, instance_id)
        self.store.delete(WORLDS, instance_id)
        if not keep_data:
            self.trajectory.flush()
            shutil.rmtree(self.folder(instance_id), ignore_errors=True)
        return True

    def _refuse_storage(self, refusal: str | None, via: str | None = None) -> None:
        """Raise a storage refusal (507 Insufficient Storage, as for a quota), counted."""
        if refusal is None:
            return
        self.metrics.refused("storage")
        if via is not None:
            self.metrics.counted(via, "refused")
        raise GatewayError(507, refusal)

    def admit_load(self, inst: EnvInstance, size: int, *, replaces: bool = False) -> None:
        """Refuse (507) data of `size` bytes loaded into (or, `replaces`, restored over) `inst` past its budget
        or below the free-space floor."""
        self._refuse_storage(self.storage.admit_load(inst.usage, inst.spec.id, size, replaces=replaces))

    async def _unload(self, instance_id: str) -> bool:
        """Close an open instance (apps, their processes, its trajectory file); it stays stored, and
        `get` reopens it. Returns whether it was open."""
        inst = self._instances.pop(instance_id, None)
        self._tokens.pop(instance_id, None)
        for key in [k for k in self._listings if k[0] == instance_id]:
            del self._listings[key]
        if inst is None:
            return False
        try:
            await inst.close()
        finally:
            self.trajectory.release(inst.trajectory_path)
        return True

    async def _end_sessions(self, instance_id: str) -> int:
        """End the MCP sessions of the instance's agents (their next request gets 404) and forget its channel."""
        self._channels.pop(instance_id, None)
        ended = 0
        for sid in self.limits.forget(instance_id):
            ended += await self.mcp.end_session(sid)
        return ended

    async def _tools_changed(self, instance_id: str) -> None:
        for key in [k for k in self._listings if k[0] == instance_id]:
            del self._listings[key]
        if channel := self._channels.get(instance_id):
            await channel.tools_changed()


def _parse_spec(data: wire.JsonObject, what: str) -> InstanceSpec:

    try:
        spec = InstanceSpec.model_validate(data)
        spec.agent_roles()
    except ValidationError as e:
        raise from_validation_error(e, what) from None
    except ValueError as e:
        raise GatewayError(400, f"{what}: {e}") from None
    return spec
