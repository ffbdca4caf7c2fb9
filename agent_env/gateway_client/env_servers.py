"""Env servers: instances deployed on a server of their own (a topology other than `gateway`), and the client that
routes to them.

A `server` topology, or an `agent_env.env_providers` plugin's, gives one environment instance a server of its own:
the gateway's code serving that instance alone, reached directly at its own URL (docs/architecture.md, "Topologies").
Its key is derived from the install's admin token and the instance id (`server_key`), so every worker of the install
can reach it with admin rights and nothing about it is a secret on disk or in history; the deploy_env step records
where it is served in the object store (`keys.env_server`). `EnvServers` is the client runs see: a request about an
instance goes to the server recorded for it, else to the install's gateway (or pool); run-wide requests go to both.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Self

from pydantic import BaseModel, ConfigDict

from agent_env.gateway_client import keys as gateway_keys
from agent_env.gateway_client import wire
from agent_env.gateway_client.api import GatewayClient, GatewayUnavailable
from agent_env.gateway_client.configured import admin_token
from agent_env.gateway_client.single import SingleGateway
from agent_env.gateway_client.wire import JsonObject
from agent_env.stores import keys

if TYPE_CHECKING:
    from agent_env.config import Settings
    from agent_env.stores import Stores

CACHED = 4096  # instances a long-lived worker remembers the server of (oldest forgotten, their clients closed)


class EnvServerRecord(BaseModel):
    """Where one instance is served (`keys.env_server`): no credential, only what finds it again."""

    model_config = ConfigDict(extra="forbid")
    instance: str
    run_id: str
    env: str
    topology: str  # the env's env_provider_type
    url: str
    handle: str = ""  # what the topology's provider stops it by (its own, opaque)


def server_key(settings: Settings, instance: str) -> bytes:
    """The key of `instance`'s own server: HMAC of the instance under the install's admin token. The server derives
    role and admin tokens from it as any gateway does from its key."""
    return hmac.new(admin_token(settings).encode(), f"env-server\x00{instance}".encode(), hashlib.sha256).digest()


def server_client(settings: Settings, record: EnvServerRecord) -> SingleGateway:
    """An admin client of the recorded server."""
    return SingleGateway(record.url, gateway_keys.admin_token(server_key(settings, record.instance)))


async def record_of(stores: Stores, instance: str) -> EnvServerRecord | None:
    """The record of `instance`'s own server; None for an instance on the install's gateway (run instance ids are
    `RUN.STEP`)."""
    run_id = instance.rpartition(".")[0]
    if not run_id:
        return None
    key = keys.env_server(run_id, instance)
    if not await stores.aio.objects.exists(key):
        return None
    return EnvServerRecord.model_validate_json(await stores.aio.objects.get(key))


async def run_records(stores: Stores, run_id: str) -> list[EnvServerRecord]:
    found = []
    for key in await stores.aio.objects.list(keys.env_servers(run_id)):
        found.append(EnvServerRecord.model_validate_json(await stores.aio.objects.get(key)))
    return found


async def save(stores: Stores, record: EnvServerRecord) -> None:
    await stores.aio.objects.put(keys.env_server(record.run_id, record.instance), record.model_dump_json().encode())


class EnvServers:
    """`api.GatewayClient` over the install's gateway (`base`) and the env servers runs recorded: each request about
    an instance goes to the one serving it."""

    def __init__(self, base: GatewayClient, settings: Settings, stores: Stores) -> None:
        self.base = base
        self.base_url = base.base_url
        self.settings, self.stores = settings, stores
        self._closing: set[asyncio.Task[None]] = set()
        # instance -> its own server's client, or None: the base serves it. An instance is deployed once, on one
        # topology, before any step names it, so what was found stays true for the instance's life.
        self._servers: OrderedDict[str, SingleGateway | None] = OrderedDict()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for client in self._servers.values():
            if client is not None:
                await client.aclose()
        self._servers.clear()
        await self.base.aclose()

    def remember(self, instance: str, client: SingleGateway | None) -> SingleGateway | None:
        """Note what serves `instance` (None: the base)."""
        self.forget(instance)
        self._servers[instance] = client
        while len(self._servers) > CACHED:
            self._close(self._servers.popitem(last=False)[1])
        return client

    def forget(self, instance: str) -> None:
        self._close(self._servers.pop(instance, None))

    def forget_run(self, run_id: str) -> None:
        """The run is over: nothing of it is kept (its own servers' clients closed), whoever ended it."""
        for instance in [i for i in self._servers if i.startswith(f"{run_id}.")]:
            self.forget(instance)

    def _close(self, client: SingleGateway | None) -> None:
        if client is not None:
            task = asyncio.get_running_loop().create_task(client.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def holder(self, instance: str) -> GatewayClient:
        """The client of whatever serves `instance`: its own server when one is recorded, else the base."""
        if instance in self._servers:
            self._servers.move_to_end(instance)
            return self._servers[instance] or self.base
        record = await record_of(self.stores, instance)
        return self.remember(instance, server_client(self.settings, record) if record else None) or self.base

    async def _run_servers(self, run_id: str) -> list[GatewayClient]:
        return [await self.holder(r.instance) for r in await run_records(self.stores, run_id)]

    # -- instances: on whatever serves them --
    async def put_instance(self, spec: JsonObject) -> wire.InstanceView:
        return await (await self.holder(spec["id"])).put_instance(spec)

    async def get_instance(self, instance: str) -> wire.InstanceView:
        return await (await self.holder(instance)).get_instance(instance)

    async def fork(self, source: str, spec: JsonObject) -> wire.InstanceView:
        return await (await self.holder(source)).fork(source, spec)

    async def list_instances(self) -> list[JsonObject]:
        return await self.base.list_instances()

    async def busy(self, run_id: str | None = None) -> wire.Load:
        return await self.base.busy(run_id)

    async def url_for(self, instance: str) -> str:
        return await (await self.holder(instance)).url_for(instance)

    async def agent_url_base(self, agent_id: str) -> str:
        return await self.base.agent_url_base(agent_id)

    async def delete_instance(self, instance: str, *, keep_data: bool = False) -> bool:
        return await (await self.holder(instance)).delete_instance(instance, keep_data=keep_data)

    async def token(self, instance: str, agent: str) -> str:
        return await (await self.holder(instance)).token(instance, agent)

    async def token_and_tools(self, instance: str, agent: str) -> tuple[str, list[JsonObject] | None]:
        return await (await self.holder(instance)).token_and_tools(instance, agent)

    async def server_token(self, instance: str, app: str) -> str:
        return await (await self.holder(instance)).server_token(instance, app)

    async def set_role(self, instance: str, role: str, tools: list[str], deny: list[str] | None = None) -> list[str]:
        return await (await self.holder(instance)).set_role(instance, role, tools, deny)

    async def change_role(self, instance: str, role: str, enable: list[str], disable: list[str]) -> list[str]:
        return await (await self.holder(instance)).change_role(instance, role, enable, disable)

    async def push_world(self, instance: str, push: JsonObject) -> list[JsonObject]:
        return await (await self.holder(instance)).push_world(instance, push)

    async def set_agent_role(self, instance: str, agent: str, role: str) -> None:
        await (await self.holder(instance)).set_agent_role(instance, agent, role)

    async def call_as(
        self,
        instance: str,
        tool: str,
        arguments: JsonObject,
        *,
        role: str | None = None,
        agent: str | None = None,
        idempotency_key: str | None = None,
        cause: str | None = None,
        at: str | None = None,
    ) -> wire.CallOutcome:
        return await (await self.holder(instance)).call_as(
            instance, tool, arguments, role=role, agent=agent, idempotency_key=idempotency_key, cause=cause, at=at
        )

    async def load(
        self, instance: str, parts: list[JsonObject], *, idempotency_key: str | None = None, reset: bool = False
    ) -> None:
        await (await self.holder(instance)).load(instance, parts, idempotency_key=idempotency_key, reset=reset)

    async def snapshot(self, instance: str) -> bytes:
        return await (await self.holder(instance)).snapshot(instance)

    async def restore(self, instance: str, blob: bytes) -> None:
        await (await self.holder(instance)).restore(instance, blob)

    async def trajectory(self, instance: str, after: int = 0) -> list[JsonObject]:
        return await (await self.holder(instance)).trajectory(instance, after)

    async def last_seq(self, instance: str) -> int:
        return await (await self.holder(instance)).last_seq(instance)

    async def changes(self, instance: str, after_id: int = 0, limit: int = 1000) -> wire.ChangesPage:
        return await (await self.holder(instance)).changes(instance, after_id, limit)

    async def data(self, instance: str, method: str, params: JsonObject | None = None) -> JsonObject:
        return await (await self.holder(instance)).data(instance, method, params)

    async def env_card(self, instance: str) -> JsonObject:
        return await (await self.holder(instance)).env_card(instance)

    async def invoke_extension(self, instance: str, verb: str, path: str, body: JsonObject) -> Any:
        return await (await self.holder(instance)).invoke_extension(instance, verb, path, body)

    # -- runs: the base and the run's own servers --
    async def parked_hits(self, run_id: str) -> list[JsonObject]:
        parked = await self.base.parked_hits(run_id)
        for client in await self._run_servers(run_id):
            parked += await client.parked_hits(run_id)
        return parked

    async def end_run(self, run_id: str, *, trajectories: bool = False) -> wire.RunEnded:
        ended = await self.base.end_run(run_id, trajectories=trajectories)
        for record in await run_records(self.stores, run_id):
            try:
                part = await (await self.holder(record.instance)).end_run(run_id, trajectories=trajectories)
            except GatewayUnavailable:  # it stopped (its sandbox was lost): nothing of it is left to end
                continue
            ended["instances"] += part["instances"]
            ended["sessions"] = ended.get("sessions", 0) + part.get("sessions", 0)
            if "trajectories" in part:
                ended["trajectories"] = {**ended.get("trajectories", {}), **part["trajectories"]}
        self.forget_run(run_id)  # nothing kept per finished run
        return ended

    # -- hosted agents and people's turns: the base's --
    async def list_agents(self) -> list[JsonObject]:
        return await self.base.list_agents()

    async def put_agent(self, spec: JsonObject) -> JsonObject:
        return await self.base.put_agent(spec)

    async def get_agent(self, agent_id: str) -> JsonObject:
        return await self.base.get_agent(agent_id)

    async def delete_agent(self, agent_id: str) -> bool:
        return await self.base.delete_agent(agent_id)

    async def human_turns(self) -> list[JsonObject]:
        return await self.base.human_turns()

    async def human_turn(self, turn_id: str, wait_s: float = 0) -> JsonObject:
        return await self.base.human_turn(turn_id, wait_s)

    async def open_review(self, request: JsonObject) -> JsonObject:
        return await self.base.open_review(request)

    async def answer_human_turn(self, turn_id: str, answer: str, **verdict: Any) -> JsonObject:
        return await self.base.answer_human_turn(turn_id, answer, **verdict)

    # -- agents (REST, with a role token) --
    async def list_tools(self, instance: str, token: str) -> list[JsonObject]:
        return await (await self.holder(instance)).list_tools(instance, token)

    async def call_tool(self, instance: str, token: str, tool: str, arguments: JsonObject) -> Any:
        return await (await self.holder(instance)).call_tool(instance, token, tool, arguments)


def unrouted(client: GatewayClient) -> GatewayClient:
    """The install's own gateway client behind `client` (a pool, or one gateway's)."""
    return client.base if isinstance(client, EnvServers) else client
