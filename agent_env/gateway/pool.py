"""Several gateways serving one install (`[gateway] pool`), seen by runs as one gateway.

Gateways are not stateless: an instance's data lives on the gateway that holds it. So the pool works by
placement and ownership (docs/architecture.md, "Gateway pool"):

- Placement: a new instance goes where its run already has instances (a run's world stays on one gateway),
  else to the least loaded gateway (fewest open instances and hosted agents; ties in turn, so runs one after
  another spread too). Hosted agents follow their run the same way. Two instances of one run deployed at the
  same moment may land apart: that costs nothing but locality, since each is reached on its own gateway.
- Ownership: everything about an instance (calls, clock pushes, trigger watches, data, snapshots, tokens) goes
  to the gateway that holds it, found by asking the pool (cached; the gateways are the truth, so a worker
  that starts afresh finds the same owners) and recorded in the deploy step's outputs (`gateway`).
- Tokens: the pool's gateways share one key (`[gateway] key_secret`, from the secret store), so one admin
  token serves them all; a role token names its instance, and only the instance's owner holds it.
- Run-wide requests (the run's end, parked hits, people's turns) go to every gateway.
- Failure: a gateway that restarts brings its instances back from its volume; while it is down, requests
  about its instances fail as unavailable (activities retry). A gateway gone for good is taken out of the
  pool's config; an instance no gateway of the pool holds then is rebuilt on another from its placement record
  (`keys.placement`: its spec and data, written at deploy) and its last snapshot (a `snapshot_env` step's),
  and the record says so (`restored`), which `runs show` prints.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from agent_env.gateway.client import GatewayClient, GatewayRefused, GatewayUnavailable
from agent_env.stores import in_thread, keys, open_stores
from agent_env.stores.base import MissingObject

if TYPE_CHECKING:
    from agent_env.config import Settings
    from agent_env.stores import Stores

log = logging.getLogger("agent_env.gateway.pool")

CACHED_OWNERS = 4096  # instances and agents whose gateway a long-lived worker remembers (oldest forgotten)


class Restored(BaseModel):
    """An instance rebuilt on another gateway after its own left the pool."""

    lost: str  # the gateway it was on
    on: str  # the gateway it is on now
    snapshot: str | None  # the snapshot it was restored from (None: its deploy-time data)
    at: str


class Placement(BaseModel):
    """Where an instance of a run was placed, and what rebuilds it elsewhere (`keys.placement`)."""

    spec: dict[str, Any]  # what deploy_env put (no secrets: apps, roles, agents)
    gateway: str
    data: list[str] = []  # the object keys of its deploy-time data
    last_snapshot: str | None = None
    restored: list[Restored] = []


class GatewayPool(GatewayClient):
    """The interface of `GatewayClient`, over several gateways (every method is routed: none reaches the base
    class's own HTTP client, which a pool does not have)."""

    def __init__(self, clients: list[GatewayClient], settings: Settings | None = None) -> None:  # (no HTTP client)
        if not clients:
            raise ValueError("a pool needs at least one gateway")
        self.clients = clients
        self.settings = settings  # for the stores that hold placement records (none: nothing is restored)
        self.base_url = clients[0].base_url  # (for messages; instances and agents have their own gateway's)
        self._owners: OrderedDict[tuple[str, str], GatewayClient] = OrderedDict()  # (kind, id) -> gateway
        self._turn = 0  # who wins the next tie

    async def __aenter__(self) -> GatewayPool:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()

    # -- ownership --

    def _remember(self, kind: str, key: str, client: GatewayClient) -> GatewayClient:
        self._owners[(kind, key)] = client
        self._owners.move_to_end((kind, key))
        while len(self._owners) > CACHED_OWNERS:
            self._owners.popitem(last=False)
        return client

    async def owner(self, instance: str) -> GatewayClient:
        """The gateway holding `instance`; a 404 `GatewayRefused` when none does."""
        return await self._find("instance", instance, lambda c: c.get_instance(instance))

    async def _at(self, instance: str, call):
        """`call(owner)`; when the remembered owner no longer holds the instance (404), forget it and ask the
        pool again, once (it was deleted and put again elsewhere, or rebuilt after its gateway was lost)."""
        remembered = ("instance", instance) in self._owners
        try:
            return await call(await self.owner(instance))
        except GatewayRefused as e:
            if e.status != 404 or not remembered:
                raise
        self._owners.pop(("instance", instance), None)
        return await call(await self.owner(instance))

    async def _find(self, kind: str, key: str, probe) -> GatewayClient:
        cached = self._owners.get((kind, key))
        if cached is not None:
            return cached
        down: list[GatewayUnavailable] = []

        async def holds(client: GatewayClient) -> bool:
            try:
                await probe(client)
                return True
            except GatewayRefused as e:
                if e.status == 404:
                    return False
                raise
            except GatewayUnavailable as e:
                down.append(e)
                return False

        found = await asyncio.gather(*(holds(c) for c in self.clients))
        for client, held in zip(self.clients, found, strict=True):
            if held:
                return self._remember(kind, key, client)
        if down:  # it may be on the gateway that does not answer: worth retrying, not a 404
            raise down[0]
        if kind == "instance" and (restored := await self._take_over(key)) is not None:
            return self._remember(kind, key, restored)
        raise GatewayRefused(404, f"no gateway of the pool holds {kind} {key!r}")

    # -- a gateway gone for good --

    def _stores(self) -> Stores | None:
        if self.settings is None:
            return None
        return open_stores(self.settings)

    def _placement(self, stores: Stores, instance: str) -> tuple[str, Placement] | None:
        run_id = instance.rpartition(".")[0]
        key = keys.placement(run_id, instance) if run_id else None
        try:
            return (key, Placement.model_validate_json(stores.objects.get(key))) if key else None
        except MissingObject:
            return None

    def snapshot_taken(self, stores: Stores, instance: str, snapshot: str) -> None:
        """Note `snapshot` as the state another gateway would restore `instance` from."""
        found = self._placement(stores, instance)
        if found is not None:
            key, placement = found
            placement.last_snapshot = snapshot
            stores.objects.put(key, placement.model_dump_json().encode())

    async def _take_over(self, instance: str) -> GatewayClient | None:
        """Rebuild an instance whose gateway is no longer in the pool on another: its spec, then its last
        snapshot (or its deploy-time data). None when it was never placed by a pool, or its gateway still is
        in the pool (then it was deleted, not lost)."""
        stores = await in_thread(self._stores)
        if stores is None:
            return None
        try:
            found = await in_thread(self._placement, stores, instance)
            if found is None or found[1].gateway in {c.base_url for c in self.clients}:
                return None
            key, placement = found
            target = await self.place(placement.spec.get("run_id"))
            await target.put_instance(placement.spec)
            if placement.last_snapshot:
                await target.restore(instance, await stores.aio.objects.get(placement.last_snapshot))
            elif placement.data:
                parts = [{"kind": "data", "data": json.loads(await stores.aio.objects.get(k))} for k in placement.data]
                await target.load(instance, parts, idempotency_key=f"{instance}/restored", reset=True)
            placement.restored.append(
                Restored(
                    lost=placement.gateway,
                    on=target.base_url,
                    snapshot=placement.last_snapshot,
                    at=datetime.now(UTC).isoformat(timespec="seconds"),
                )
            )
            placement.gateway = target.base_url
            await stores.aio.objects.put(key, placement.model_dump_json().encode())
        finally:
            stores.close()
        log.warning(
            "instance %s: its gateway %s left the pool; restored on %s from %s",
            instance,
            placement.restored[-1].lost,
            target.base_url,
            placement.last_snapshot or "its deploy-time data",
        )
        return target

    async def place(self, run_id: str | None) -> GatewayClient:
        """Where a new instance or hosted agent of `run_id` goes: with its run's instances, else the least
        loaded gateway that answers."""
        loads: list[tuple[int, int, GatewayClient]] = []
        for n, client in enumerate(self.clients):
            try:
                load = await client.busy(run_id)
            except GatewayUnavailable:
                continue
            if load["run_instances"]:
                return client
            loads.append((load["instances"] + load["agents"], (n - self._turn) % len(self.clients), client))
        if not loads:
            raise GatewayUnavailable(
                f"no gateway of the pool answers ({', '.join(c.base_url for c in self.clients)})",
                "start them, or check [gateway] pool",
            )
        self._turn += 1
        return min(loads, key=lambda entry: entry[:2])[2]

    async def busy(self, run_id: str | None = None) -> dict[str, Any]:
        parts = await asyncio.gather(*(c.busy(run_id) for c in self.clients))
        return {
            "instances": sum(p["instances"] for p in parts),
            "agents": sum(p["agents"] for p in parts),
            "run_instances": [i for p in parts for i in p["run_instances"]],
        }

    async def url_for(self, instance: str) -> str:
        """The base URL of the gateway holding `instance` (where its agents reach it)."""
        return (await self.owner(instance)).base_url

    async def agent_url_base(self, agent_id: str) -> str:
        return (await self._agent_owner(agent_id)).base_url

    async def _agent_owner(self, agent_id: str) -> GatewayClient:
        return await self._find("agent", agent_id, lambda c: c.get_agent(agent_id))

    # -- admin: per instance --

    async def _placed(self, instance: str, run_id: str | None) -> GatewayClient:
        """The owner of `instance`, or, for a new one, the gateway it is placed on (remembered until created)."""
        try:
            return await self.owner(instance)  # a retry, or an update: where it already is
        except GatewayRefused as e:
            if e.status != 404:
                raise
        return self._remember("instance", instance, await self.place(run_id))

    async def put_instance(self, spec: dict[str, Any]) -> dict[str, Any]:
        return await (await self._placed(spec["id"], spec.get("run_id"))).put_instance(spec)

    async def get_instance(self, instance: str) -> dict[str, Any]:
        return await self._at(instance, lambda c: c.get_instance(instance))

    async def fork(self, source: str, spec: dict[str, Any]) -> dict[str, Any]:
        """On the gateway holding `source` (a fork copies its data there); the new instance is remembered there."""

        async def fork_on(client: GatewayClient) -> dict[str, Any]:
            forked = await client.fork(source, spec)
            self._remember("instance", spec["id"], client)
            return forked

        return await self._at(source, fork_on)

    async def delete_instance(self, instance: str, *, keep_data: bool = False) -> bool:
        try:
            client = await self.owner(instance)
        except GatewayRefused as e:
            if e.status == 404:
                return False
            raise
        deleted = await client.delete_instance(instance, keep_data=keep_data)
        self._owners.pop(("instance", instance), None)
        return deleted

    async def token(self, instance: str, agent: str) -> str:
        return await self._at(instance, lambda c: c.token(instance, agent))

    async def server_token(self, instance: str, app: str) -> str:
        """Asked before the instance exists (its sandboxes start first): this places it. A run's instance ids
        are `RUN.STEP`."""
        return await (await self._placed(instance, instance.rpartition(".")[0] or None)).server_token(instance, app)

    async def set_role(self, instance: str, role: str, tools: list[str], deny: list[str] | None = None) -> list[str]:
        return await self._at(instance, lambda c: c.set_role(instance, role, tools, deny))

    async def change_role(self, instance: str, role: str, enable: list[str], disable: list[str]) -> list[str]:
        return await self._at(instance, lambda c: c.change_role(instance, role, enable, disable))

    async def push_world(self, instance: str, push: dict[str, Any]) -> list[dict[str, Any]]:
        return await self._at(instance, lambda c: c.push_world(instance, push))

    async def set_agent_role(self, instance: str, agent: str, role: str) -> None:
        await self._at(instance, lambda c: c.set_agent_role(instance, agent, role))

    async def call_as(self, instance: str, tool: str, arguments: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return await self._at(instance, lambda c: c.call_as(instance, tool, arguments, **kwargs))

    async def load(
        self, instance: str, parts: list[dict[str, Any]], *, idempotency_key: str | None = None, reset: bool = False
    ) -> None:
        await self._at(instance, lambda c: c.load(instance, parts, idempotency_key=idempotency_key, reset=reset))

    async def snapshot(self, instance: str) -> bytes:
        return await self._at(instance, lambda c: c.snapshot(instance))

    async def restore(self, instance: str, blob: bytes) -> None:
        await self._at(instance, lambda c: c.restore(instance, blob))

    async def trajectory(self, instance: str, after: int = 0) -> list[dict[str, Any]]:
        return await self._at(instance, lambda c: c.trajectory(instance, after))

    async def last_seq(self, instance: str) -> int:
        return await self._at(instance, lambda c: c.last_seq(instance))

    async def data(self, instance: str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self._at(instance, lambda c: c.data(instance, method, params))

    async def list_tools(self, instance: str, token: str) -> list[dict[str, Any]]:
        return await self._at(instance, lambda c: c.list_tools(instance, token))

    async def call_tool(self, instance: str, token: str, tool: str, arguments: dict[str, Any]) -> Any:
        return await self._at(instance, lambda c: c.call_tool(instance, token, tool, arguments))

    # -- admin: run-wide, on every gateway --

    async def end_run(self, run_id: str) -> dict[str, Any]:
        ended: dict[str, Any] = {"instances": [], "agents": [], "sessions": 0}
        for part in await asyncio.gather(*(c.end_run(run_id) for c in self.clients)):
            ended["instances"] += part["instances"]
            ended["agents"] += part["agents"]
            ended["sessions"] += part.get("sessions", 0)
        for key in [k for k in self._owners if k[1].startswith(f"{run_id}.")]:  # nothing kept per finished run
            del self._owners[key]
        return ended

    async def list_instances(self) -> list[dict[str, Any]]:
        return [i for part in await asyncio.gather(*(c.list_instances() for c in self.clients)) for i in part]

    async def list_agents(self) -> list[dict[str, Any]]:
        return [a for part in await asyncio.gather(*(c.list_agents() for c in self.clients)) for a in part]

    async def parked_hits(self, run_id: str) -> list[dict[str, Any]]:
        return [hit for part in await asyncio.gather(*(c.parked_hits(run_id) for c in self.clients)) for hit in part]

    async def human_turns(self) -> list[dict[str, Any]]:
        return [turn for part in await asyncio.gather(*(c.human_turns() for c in self.clients)) for turn in part]

    async def answer_human_turn(self, turn_id: str, answer: str) -> dict[str, Any]:
        for client in self.clients:
            try:
                return await client.answer_human_turn(turn_id, answer)
            except GatewayRefused as e:
                if e.status != 404:
                    raise
        raise GatewayRefused(404, f"no gateway of the pool has a turn {turn_id!r} waiting")

    # -- hosted agents --

    async def put_agent(self, spec: dict[str, Any]) -> dict[str, Any]:
        try:
            client = await self._agent_owner(spec["id"])
        except GatewayRefused as e:
            if e.status != 404:
                raise
            client = self._remember("agent", spec["id"], await self.place(spec.get("run_id")))
        return await client.put_agent(spec)

    async def get_agent(self, agent_id: str) -> dict[str, Any]:
        return await (await self._agent_owner(agent_id)).get_agent(agent_id)

    async def delete_agent(self, agent_id: str) -> bool:
        try:
            client = await self._agent_owner(agent_id)
        except GatewayRefused as e:
            if e.status == 404:
                return False
            raise
        self._owners.pop(("agent", agent_id), None)
        return await client.delete_agent(agent_id)
