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
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Self, TypeVar

from agent_env.gateway_client import placement, wire
from agent_env.gateway_client.api import GatewayRefused, GatewayUnavailable
from agent_env.gateway_client.single import SingleGateway
from agent_env.gateway_client.wire import JsonObject

if TYPE_CHECKING:
    from agent_env.config import Settings
    from agent_env.stores import Stores

CACHED_OWNERS = 4096  # instances and agents whose gateway a long-lived worker remembers (oldest forgotten)
T = TypeVar("T")


class GatewayPool:
    """`api.GatewayClient` over several gateways: each request goes to the one gateway it concerns (routed), or
    to all of them (run-wide)."""

    def __init__(self, clients: list[SingleGateway], settings: Settings | None = None) -> None:
        if not clients:
            raise ValueError("a pool needs at least one gateway")
        self.clients = clients
        self.settings = settings  # for the stores that hold placement records (none: nothing is restored)
        self.base_url = clients[0].base_url  # (for messages; instances and agents have their own gateway's)
        self._owners: OrderedDict[tuple[str, str], SingleGateway] = OrderedDict()  # (kind, id) -> gateway
        self._turn = 0  # who wins the next tie

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()

    # -- ownership --

    def _remember(self, kind: str, key: str, client: SingleGateway) -> SingleGateway:
        self._owners[(kind, key)] = client
        self._owners.move_to_end((kind, key))
        while len(self._owners) > CACHED_OWNERS:
            self._owners.popitem(last=False)
        return client

    async def owner(self, instance: str) -> SingleGateway:
        """The gateway holding `instance`; a 404 `GatewayRefused` when none does."""
        return await self._find("instance", instance, lambda c: c.get_instance(instance))

    async def _at(self, instance: str, call: Callable[[SingleGateway], Awaitable[T]]) -> T:
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

    async def _find(self, kind: str, key: str, probe: Callable[[SingleGateway], Awaitable[Any]]) -> SingleGateway:
        cached = self._owners.get((kind, key))
        if cached is not None:
            return cached
        down: list[GatewayUnavailable] = []

        async def holds(client: SingleGateway) -> bool:
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
        if kind == "instance":  # a gateway gone for good: its instance rebuilt on another (placement.py)
            members = {c.base_url for c in self.clients}
            if (restored := await placement.take_over(self.settings, key, members, self.place)) is not None:
                return self._remember(kind, key, restored)
        raise GatewayRefused(404, f"no gateway of the pool holds {kind} {key!r}")

    def snapshot_taken(self, stores: Stores, instance: str, snapshot: str) -> None:
        """Note `snapshot` as the state another gateway would restore `instance` from."""
        placement.snapshot_taken(stores, instance, snapshot)

    async def place(self, run_id: str | None) -> SingleGateway:
        """Where a new instance or hosted agent of `run_id` goes: with its run's instances, else the least
        loaded gateway that answers."""
        loads: list[tuple[int, int, SingleGateway]] = []
        turn, self._turn = self._turn, self._turn + 1  # taken before any await: placements at once part on ties
        for n, client in enumerate(self.clients):
            try:
                load = await client.busy(run_id)
            except GatewayUnavailable:
                continue
            if load["run_instances"]:
                return client
            loads.append((load["instances"] + load["agents"], (n - turn) % len(self.clients), client))
        if not loads:
            raise GatewayUnavailable(
                f"no gateway of the pool answers ({', '.join(c.base_url for c in self.clients)})",
                "start them, or check [gateway] pool",
            )
        return min(loads, key=lambda entry: entry[:2])[2]

    async def busy(self, run_id: str | None = None) -> wire.Load:
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

    async def _agent_owner(self, agent_id: str) -> SingleGateway:
        return await self._find("agent", agent_id, lambda c: c.get_agent(agent_id))

    # -- admin: per instance --

    async def _placed(self, instance: str, run_id: str | None) -> SingleGateway:
        """The owner of `instance`, or, for a new one, the gateway it is placed on (remembered until created)."""
        try:
            return await self.owner(instance)  # a retry, or an update: where it already is
        except GatewayRefused as e:
            if e.status != 404:
                raise
        return self._remember("instance", instance, await self.place(run_id))

    async def put_instance(self, spec: JsonObject) -> wire.InstanceView:
        return await (await self._placed(spec["id"], spec.get("run_id"))).put_instance(spec)

    async def get_instance(self, instance: str) -> wire.InstanceView:
        return await self._at(instance, lambda c: c.get_instance(instance))

    async def fork(self, source: str, spec: JsonObject) -> wire.InstanceView:
        """On the gateway holding `source` (a fork copies its data there); the new instance is remembered there."""

        async def fork_on(client: SingleGateway) -> wire.InstanceView:
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

    async def token_and_tools(self, instance: str, agent: str) -> tuple[str, list[JsonObject] | None]:
        return await self._at(instance, lambda c: c.token_and_tools(instance, agent))

    async def server_token(self, instance: str, app: str) -> str:
        """Asked before the instance exists (its sandboxes start first): this places it. A run's instance ids
        are `RUN.STEP`."""
        return await (await self._placed(instance, instance.rpartition(".")[0] or None)).server_token(instance, app)

    async def set_role(self, instance: str, role: str, tools: list[str], deny: list[str] | None = None) -> list[str]:
        return await self._at(instance, lambda c: c.set_role(instance, role, tools, deny))

    async def change_role(self, instance: str, role: str, enable: list[str], disable: list[str]) -> list[str]:
        return await self._at(instance, lambda c: c.change_role(instance, role, enable, disable))

    async def push_world(self, instance: str, push: JsonObject) -> list[JsonObject]:
        return await self._at(instance, lambda c: c.push_world(instance, push))

    async def set_agent_role(self, instance: str, agent: str, role: str) -> None:
        await self._at(instance, lambda c: c.set_agent_role(instance, agent, role))

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
        return await self._at(
            instance,
            lambda c: c.call_as(
                instance, tool, arguments, role=role, agent=agent, idempotency_key=idempotency_key, cause=cause, at=at
            ),
        )

    async def load(
        self, instance: str, parts: list[JsonObject], *, idempotency_key: str | None = None, reset: bool = False
    ) -> None:
        await self._at(instance, lambda c: c.load(instance, parts, idempotency_key=idempotency_key, reset=reset))

    async def snapshot(self, instance: str) -> bytes:
        return await self._at(instance, lambda c: c.snapshot(instance))

    async def restore(self, instance: str, blob: bytes) -> None:
        await self._at(instance, lambda c: c.restore(instance, blob))

    async def trajectory(self, instance: str, after: int = 0) -> list[JsonObject]:
        return await self._at(instance, lambda c: c.trajectory(instance, after))

    async def last_seq(self, instance: str) -> int:
        return await self._at(instance, lambda c: c.last_seq(instance))

    async def changes(self, instance: str, after_id: int = 0, limit: int = 1000) -> wire.ChangesPage:
        return await self._at(instance, lambda c: c.changes(instance, after_id, limit))

    async def data(self, instance: str, method: str, params: JsonObject | None = None) -> JsonObject:
        return await self._at(instance, lambda c: c.data(instance, method, params))

    async def env_card(self, instance: str) -> JsonObject:
        return await self._at(instance, lambda c: c.env_card(instance))

    async def invoke_extension(self, instance: str, verb: str, path: str, body: JsonObject) -> Any:
        return await self._at(instance, lambda c: c.invoke_extension(instance, verb, path, body))

    async def list_tools(self, instance: str, token: str) -> list[JsonObject]:
        return await self._at(instance, lambda c: c.list_tools(instance, token))

    async def call_tool(self, instance: str, token: str, tool: str, arguments: JsonObject) -> Any:
        return await self._at(instance, lambda c: c.call_tool(instance, token, tool, arguments))

    # -- admin: run-wide, on every gateway --

    async def end_run(self, run_id: str, *, trajectories: bool = False) -> wire.RunEnded:
        ended = merged(await asyncio.gather(*(c.end_run(run_id, trajectories=trajectories) for c in self.clients)))
        for key in [k for k in self._owners if k[1].startswith(f"{run_id}.")]:  # nothing kept per finished run
            del self._owners[key]
        return ended

    async def list_instances(self) -> list[JsonObject]:
        return [i for part in await asyncio.gather(*(c.list_instances() for c in self.clients)) for i in part]

    async def list_agents(self) -> list[JsonObject]:
        return [a for part in await asyncio.gather(*(c.list_agents() for c in self.clients)) for a in part]

    async def parked_hits(self, run_id: str) -> list[JsonObject]:
        return [hit for part in await asyncio.gather(*(c.parked_hits(run_id) for c in self.clients)) for hit in part]

    async def human_turns(self) -> list[JsonObject]:
        return [turn for part in await asyncio.gather(*(c.human_turns() for c in self.clients)) for turn in part]

    async def human_turn(self, turn_id: str, wait_s: float = 0) -> JsonObject:
        owner = await self._find("turn", turn_id, lambda c: c.human_turn(turn_id))
        return await owner.human_turn(turn_id, wait_s)

    async def open_review(self, request: JsonObject) -> JsonObject:  # where it is (a retried step), else with its run
        try:
            client = await self._find("turn", request["id"], lambda c: c.human_turn(request["id"]))
        except GatewayRefused as e:
            if e.status != 404:
                raise
            client = self._remember("turn", request["id"], await self.place(request.get("run_id")))
        return await client.open_review(request)

    async def answer_human_turn(self, turn_id: str, answer: str, **verdict: Any) -> JsonObject:
        owner = await self._find("turn", turn_id, lambda c: c.human_turn(turn_id))
        return await owner.answer_human_turn(turn_id, answer, **verdict)

    # -- hosted agents --

    async def put_agent(self, spec: JsonObject) -> JsonObject:
        try:
            client = await self._agent_owner(spec["id"])
        except GatewayRefused as e:
            if e.status != 404:
                raise
            client = self._remember("agent", spec["id"], await self.place(spec.get("run_id")))
        return await client.put_agent(spec)

    async def get_agent(self, agent_id: str) -> JsonObject:
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


def merged(parts: list[wire.RunEnded]) -> wire.RunEnded:
    """A run's end on every gateway of the pool, as one answer."""
    ended: wire.RunEnded = {"instances": [], "agents": [], "sessions": 0}
    for part in parts:
        ended["instances"] += part["instances"]
        ended["agents"] += part["agents"]
        ended["sessions"] += part.get("sessions", 0)
        if "trajectories" in part:
            ended["trajectories"] = {**ended.get("trajectories", {}), **part["trajectories"]}
    return ended
