"""The gateway's state and logic: instances, who may call what, and the calls themselves.

Instance specs are persisted in the gateway's own store and app data lives in per-instance SQLite
files, so a restarted gateway serves the same instances with the same data and the same tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from agent_env import telemetry
from agent_env.envs.app import ToolError, ToolSpec
from agent_env.envs.context import Ctx
from agent_env.envs.mcp import ChangeChannel, McpEndpoint, mcp_tool, owned_by, refuse, tool_error, tool_result
from agent_env.gateway import tokens, trajectory
from agent_env.gateway.delivery import Delivery
from agent_env.gateway.env_instance import EnvInstance
from agent_env.gateway.mcp_tools import GET_TIME
from agent_env.gateway.metrics import GatewayMetrics
from agent_env.gateway.spec import InstanceSpec, RoleSpec
from agent_env.gateway.storage import Storage, StorageLimits
from agent_env.guard import tokens_equal
from agent_env.spec.paths import walk
from agent_env.spec.times import iso, utc_now_iso
from agent_env.spec.world_state import TriggerHit, WorldPush
from agent_env.stores.local import SqliteDocumentStore

if TYPE_CHECKING:
    import mcp.types as types

COLLECTION = "gateway_instances"
WORLDS = "gateway_worlds"
EXPIRY_SWEEP_S = 60.0  # how often instances past their `expires_at` are looked for
EXPIRY_PAGE = 500  # instances the sweep reads at a time


class GatewayError(Exception):
    """A refusal with an HTTP status: the message says what is wrong and what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Caller:
    """An agent of an instance; `as_role` is for the run's own setup calls, made as a role."""

    __slots__ = ("instance", "agent", "as_role")

    def __init__(self, instance: EnvInstance, agent: str, as_role: str | None = None) -> None:
        self.instance, self.agent, self.as_role = instance, agent, as_role

    @property
    def role(self) -> str:
        return self.as_role or self.instance.role_of(self.agent)

    @property
    def key(self) -> tuple[str, str]:
        """Whose limits a request counts against: one agent of one instance (one role token)."""
        return self.instance.spec.id, self.agent


CallerKey = tuple[str, str]


class CallerLimits:
    """What one caller may hold at once, so that no agent can use up what all agents share
    (docs/architecture.md §5): tool calls in flight, MCP sessions open, MCP requests open (streams included).
    Beyond a limit the caller is refused with 429; other callers never notice. `on_refusal(via)` hears of each
    429 (`via`: the transport of a refused tool call, else None)."""

    def __init__(self, calls: int, sessions: int, requests: int) -> None:
        self.calls, self.sessions, self.requests = calls, sessions, requests
        self.on_refusal: Callable[[str | None], None] = lambda via: None
        self._calls: Counter[CallerKey] = Counter()
        self._requests: Counter[CallerKey] = Counter()
        self._opening: Counter[CallerKey] = Counter()  # session-opening requests not answered yet
        self._sessions: dict[CallerKey, set[str]] = {}

    @staticmethod
    def _who(key: CallerKey) -> str:
        return f"agent {key[1]!r} of instance {key[0]!r}"

    @contextlib.contextmanager
    def _hold(
        self, counts: Counter[CallerKey], key: CallerKey, limit: int, refusal: str, via: str | None = None
    ) -> Iterator[None]:
        if counts[key] >= limit:
            self.on_refusal(via)
            raise GatewayError(429, refusal)
        counts[key] += 1
        try:
            yield
        finally:
            counts[key] -= 1
            if not counts[key]:
                del counts[key]

    def calling(self, key: CallerKey, via: str):
        return self._hold(
            self._calls,
            key,
            self.calls,
            f"{self._who(key)} already has {self.calls} tool calls in flight (the most one agent "
            "may have); wait for one to finish, then call again",
            via,
        )

    def requesting(self, key: CallerKey):
        return self._hold(
            self._requests,
            key,
            self.requests,
            f"{self._who(key)} already has {self.requests} MCP requests open (the most one agent "
            "may have); close streams you no longer read, then retry",
        )

    def open_sessions(self, key: CallerKey, alive: Callable[[str], bool]) -> int:
        ids = {sid for sid in self._sessions.get(key, ()) if alive(sid)}  # ended sessions drop out here
        if ids:
            self._sessions[key] = ids
        else:
            self._sessions.pop(key, None)
        return len(ids) + self._opening[key]

    def forget(self, instance_id: str) -> set[str]:
        """Drop the instance's agents from the session table; returns the ids of their sessions."""
        ids: set[str] = set()
        for key in [k for k in self._sessions if k[0] == instance_id]:
            ids |= self._sessions.pop(key)
        return ids

    @contextlib.contextmanager
    def opening(self, key: CallerKey, alive: Callable[[str], bool]) -> Iterator[Callable[[str], None]]:
        """Admit a request that opens an MCP session; it calls the yielded function with the new session's id."""
        if self.open_sessions(key, alive) >= self.sessions:
            self.on_refusal(None)
            raise GatewayError(
                429,
                f"{self._who(key)} already has {self.sessions} MCP sessions open (the most one "
                "agent may have); end sessions you no longer use (HTTP DELETE with their "
                "mcp-session-id) or reuse one",
            )
        with self._hold(self._opening, key, self.sessions, "too many MCP sessions opening at once"):
            yield lambda sid: self._sessions.setdefault(key, set()).add(sid)


class Gateway:
    def __init__(
        self,
        root: Path,
        *,
        max_body_bytes: int = 16 * 1024 * 1024,
        settings=None,
        max_calls_per_agent: int = 32,
        max_sessions_per_agent: int = 16,
        max_mcp_requests_per_agent: int | None = None,
        idle_close_s: float | None = 600.0,
        key: bytes | None = None,
        max_app_data_mib: int = 256,
        max_trajectory_mib: int = 512,
        min_free_disk_mib: int = 1024,
    ) -> None:
        """`idle_close_s`: an open instance no one called for this long is closed (its apps, processes and
        trajectory file); its next request reopens it from the store. None: never. The storage budgets
        (`max_app_data_mib`, `max_trajectory_mib` per instance, `min_free_disk_mib` for the gateway's disk;
        0: none) are described in storage.py."""
        self.root = root
        self.idle_close_s = idle_close_s
        root.mkdir(parents=True, exist_ok=True)
        self.key = key if key is not None else tokens.load_or_create_key(root / "key")  # a pool's: shared
        self.admin_token = tokens.admin_token(self.key)
        self.store = SqliteDocumentStore(root / "instances.sqlite")
        self.max_body_bytes = max_body_bytes
        self._instances: dict[str, EnvInstance] = {}
        self._tokens: dict[str, dict[bytes, str]] = {}  # instance -> {digest of a token: agent}
        self._lookup_key = os.urandom(32)  # looking tokens up by a keyed digest: no timing tells a token
        self._channels: dict[str, ChangeChannel] = {}
        self._listings: dict[tuple[str, str], list[types.Tool]] = {}
        self._forking: set[str] = set()  # new instances being forked now (a concurrent retry is told to wait)
        self.trajectory = trajectory.TrajectoryWriter()
        self.storage = Storage(root, StorageLimits.mib(max_app_data_mib, max_trajectory_mib, min_free_disk_mib))
        self.delivery = Delivery(self.store, settings)
        self.mcp = McpEndpoint(self, "agentenv-gateway", max_body_bytes=max_body_bytes)
        # Per agent: its calls in flight, its sessions, and requests enough for both (one stream per session).
        self.limits = CallerLimits(
            max_calls_per_agent,
            max_sessions_per_agent,
            max_mcp_requests_per_agent or max_calls_per_agent + max_sessions_per_agent,
        )
        self.metrics = GatewayMetrics(
            instances=lambda: len(self._instances),
            sessions=lambda: len(self.mcp.sessions),
            agents=lambda: len(self.agents.list()),
        )
        self.limits.on_refusal = self._over_limit
        from agent_env.agents.host import AgentHost, public_base

        self.agents = AgentHost(self.store, public_base(settings))  # cards name the configured URL, not Host
        self.agents.secrets_from = settings

    async def shutdown(self) -> None:
        """Close every open instance (stopping apps that run in processes of their own)."""
        await self.delivery.close()
        await self.agents.close()
        for instance_id in list(self._instances):
            await self._unload(instance_id)

    def _over_limit(self, via: str | None) -> None:
        self.metrics.refused("rate_limit")
        if via is not None:
            self.metrics.counted(via, "refused")

    def readiness(self) -> str | None:
        """None when ready to serve; else why not (for `/readyz`)."""
        try:
            self.store.get(COLLECTION, "")  # the instance store answers
        except Exception as e:  # noqa: BLE001 - any failure means not ready; the reason says which
            return f"the instance store does not answer: {type(e).__name__}: {e}"
        if failure := self.trajectory.health():
            lost = {"trajectory": failure}
            return f"lost data: {lost}"
        if low := self.storage.floor.low(fresh=True):
            return f"low disk: {low}"
        return None

    def health(self) -> dict[str, Any] | None:
        """None when all is well; else what is wrong: a trajectory writer that lost entries, a disk below the
        gateway's free-space floor (writes are refused)."""
        problems: dict[str, Any] = {}
        if failure := self.trajectory.health():
            problems["trajectory"] = failure
        if low := self.storage.floor.low(fresh=True):
            problems["disk"] = low
        return problems or None

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

    # -- releasing what is no longer used --

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

    async def end_run(self, run_id: str) -> dict[str, Any]:
        """The run is over: its agents' role tokens stop working (recorded with each instance, so a restarted
        gateway knows it too), its instances close (kept, so they can still be read; reopened on demand), its
        agents' MCP sessions end, its hosted agents are deleted. Idempotent."""
        docs = self.store.query(COLLECTION, where={"run_id": run_id})
        instances = [doc["id"] for doc in docs]
        self._mark_ended(docs, datetime.now(UTC))
        sessions = 0
        for instance_id in instances:
            with contextlib.suppress(Exception):  # a broken app must not keep the rest of the run open
                await self._unload(instance_id)
            sessions += await self._end_sessions(instance_id)
        from agent_env.agents.host import AGENTS

        agents = [a["id"] for a in self.store.query(AGENTS, where={"run_id": run_id})]
        for agent_id in agents:
            await self.agents.delete(agent_id)
        return {"instances": instances, "agents": agents, "sessions": sessions}

    def _mark_ended(self, docs: list[dict[str, Any]], when: datetime) -> None:
        """Record that the instances' run ended (the first time only): no request of its agents is served after."""
        for doc in docs:
            inst = self._instances.get(doc["id"])
            spec = inst.spec if inst is not None else InstanceSpec.model_validate(doc)
            if spec.ended_at is None:
                spec.ended_at = when
                self.store.put(COLLECTION, spec.id, spec.model_dump(mode="json"))

    def _refuse_if_ended(self, spec: InstanceSpec) -> None:
        if spec.ended_at is not None:
            self.metrics.refused("token")
            raise GatewayError(
                410,
                f"instance {spec.id!r} belongs to run {spec.run_id!r}, which ended at {iso(spec.ended_at)}: its "
                f"agents' role tokens no longer work (read what they did with `agent-env runs trajectory "
                f"{spec.run_id}`)",
            )

    async def close_idle(self, now: float | None = None) -> list[str]:
        """Close instances unused for `idle_close_s` and with no call in flight."""
        if self.idle_close_s is None:
            return []
        now = time.monotonic() if now is None else now
        idle = [i for i, inst in self._instances.items() if not inst.busy and now - inst.last_used >= self.idle_close_s]
        for instance_id in idle:
            with contextlib.suppress(Exception):
                await self._unload(instance_id)
        return idle

    async def delete_expired(self, now: datetime | None = None) -> list[str]:
        """Delete instances past their `expires_at` (what a trainer that died could not release)."""
        now = now or datetime.now(UTC)
        expired, after = [], None
        while True:  # those with an expiry first (indexed): it stops at the first without, not at the end
            page = self.store.page(COLLECTION, order_by="expires_at", descending=True, limit=EXPIRY_PAGE, after=after)
            dated = [doc for doc in page.items if doc.get("expires_at")]
            expired += [doc["id"] for doc in dated if _aware(datetime.fromisoformat(doc["expires_at"])) <= now]
            if page.next is None or len(dated) < len(page.items):
                break
            after = page.next
        for instance_id in expired:
            await self.delete(instance_id)
        return expired

    async def run_idle_closer(self) -> None:
        """Close idle instances and delete expired ones now and then, for the gateway's life (started by its
        web app)."""
        every = EXPIRY_SWEEP_S if self.idle_close_s is None else max(1.0, min(EXPIRY_SWEEP_S, self.idle_close_s / 4))
        while True:
            await asyncio.sleep(every)
            await self.close_idle()
            with contextlib.suppress(Exception):  # a failing sweep is tried again at the next
                await self.delete_expired()

    def close(self) -> None:
        self.trajectory.close()
        self.store.close()

    # -- instances --

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
        if spec.id in self._instances:  # opened meanwhile by a concurrent request: keep that one
            await inst.close()
            return self._instances[spec.id]
        self._instances[spec.id] = inst
        self._tokens[spec.id] = {self._digest(self._role_token(spec, agent)): agent for agent in inst.agents}
        self._channels.setdefault(spec.id, ChangeChannel())
        if world := self.store.get(WORLDS, spec.id):
            inst.apply_world(WorldPush.model_validate(world))
        return inst

    def _save(self, inst: EnvInstance) -> None:
        self.store.put(COLLECTION, inst.spec.id, inst.spec.model_dump(mode="json"))

    def list_instances(self) -> list[dict[str, Any]]:
        return self.store.query(COLLECTION)

    def busy(self, run_id: str | None = None) -> dict[str, Any]:
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
            current.set_role(role, role_spec)
        current.agents = spec.agent_roles()
        current.spec = spec
        self._tokens[spec.id] = {self._digest(self._role_token(spec, a)): a for a in current.agents}
        self._save(current)
        await self._tools_changed(spec.id)
        return current

    async def fork(self, source_id: str, new: dict[str, Any]) -> EnvInstance:
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

    async def set_role(self, instance_id: str, role: str, spec: RoleSpec) -> frozenset[str]:
        inst = await self.get(instance_id)
        allowed = inst.set_role(role, spec)
        self._save(inst)
        await self._tools_changed(instance_id)
        return allowed

    async def change_role(self, instance_id: str, role: str, enable: list[str], disable: list[str]) -> frozenset[str]:
        """Enable or disable tools for a role (names or patterns), keeping the rest of its rules."""
        inst = await self.get(instance_id)
        if role not in inst.spec.roles:
            raise GatewayError(
                400, f"no role {role!r} in instance {instance_id!r} (roles: {', '.join(inst.spec.roles)})"
            )
        current = inst.spec.roles[role]
        tools = current.tools + [t for t in enable if t not in current.tools]
        deny = [d for d in current.deny if d not in enable] + [d for d in disable if d not in current.deny]
        return await self.set_role(instance_id, role, RoleSpec(tools=tools, deny=deny))

    async def push_world(self, instance_id: str, push: WorldPush) -> list[dict[str, Any]]:
        """The run's clock and conditions for this instance. Returns hits of state conditions already true."""
        inst = await self.get(instance_id)
        inst.apply_world(push)
        self.store.put(WORLDS, instance_id, push.model_dump(mode="json"))
        if inst.watcher is None or not inst.watcher.states:
            return []
        vnow = inst.now()
        values = await self._state_values(inst)
        return [
            TriggerHit(
                trigger=w.trigger, instance=instance_id, virtual_time=vnow, match={"value": values[w.trigger]}
            ).model_dump(mode="json")
            for w in inst.watcher.state_edges(values)
        ]

    async def _state_values(self, inst: EnvInstance) -> dict[str, Any]:
        """Each state condition's current value, read through its (read-only) tool."""
        assert inst.watcher is not None  # (callers check)
        values: dict[str, Any] = {}
        first_role = next(iter(inst.spec.roles))
        for watch, when in inst.watcher.states:
            route = inst.tools.get(when.tool)
            if route is None or route.app is None:
                continue
            ctx = Ctx(
                role=when.role or first_role,
                run_id=inst.spec.run_id,
                agent="@watch",
                instance=inst.spec.id,
                virtual_now=inst.now(),
            )
            try:
                result = await route.app.call_async(route.spec.name, when.arguments, ctx)
                values[watch.trigger] = walk(result, when.path)
            except (ToolError, KeyError):
                continue
        return values

    async def set_agent_role(self, instance_id: str, agent: str, role: str) -> None:
        inst = await self.get(instance_id)
        if role not in inst.spec.roles:
            raise GatewayError(
                400, f"no role {role!r} in instance {instance_id!r} (roles: {', '.join(inst.spec.roles)})"
            )
        inst.agents[agent] = role
        inst.spec.agents = dict(inst.agents)
        self._tokens[instance_id][self._digest(self._role_token(inst.spec, agent))] = agent
        self._save(inst)
        await self._tools_changed(instance_id)

    async def _tools_changed(self, instance_id: str) -> None:
        for key in [k for k in self._listings if k[0] == instance_id]:
            del self._listings[key]
        if channel := self._channels.get(instance_id):
            await channel.tools_changed()

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

    # -- who is calling --

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

    # -- what one agent may hold at once --

    async def serve_mcp(self, caller: Caller, scope, receive, send) -> None:
        """Serve one MCP request of `caller` within its limits; a refusal (429) is raised before anything is sent.
        Its MCP session is the caller's alone: another agent, another run's or no token cannot use or end it."""
        owned_by(scope, json.dumps([caller.instance.spec.id, caller.instance.spec.run_id, caller.agent]))
        with self.limits.requesting(caller.key):
            if not _opens_session(scope):
                await self.mcp(scope, receive, send)
                return
            with self.limits.opening(caller.key, self._session_alive) as opened:

                async def watch(message) -> None:
                    if message["type"] == "http.response.start":
                        sid = _header(message.get("headers") or [], b"mcp-session-id")
                        if sid:
                            opened(sid)
                    await send(message)

                await self.mcp(scope, receive, watch)

    def _session_alive(self, session_id: str) -> bool:
        return session_id in self.mcp.sessions

    # -- tools (the MCP tool host) --

    def channel(self, request) -> ChangeChannel:
        return self._channels[request.scope["agentenv.caller"].instance.spec.id]

    def input_schema(self, name: str) -> dict[str, Any] | None:
        return None  # schemas depend on the instance; arguments are validated when the call runs

    def listing(self, caller: Caller) -> list[types.Tool]:
        inst, role = caller.instance, caller.role
        key = (inst.spec.id, role)
        tools = self._listings.get(key)
        if tools is None:
            allowed = inst.allowed[role]
            tools = self._listings[key] = [
                mcp_tool(_exposed(route)) for name, route in inst.tools.items() if name in allowed
            ]
        return tools

    async def list_tools(self, request) -> list[types.Tool]:
        return self.listing(request.scope["agentenv.caller"])

    async def call_tool(self, request, name: str, arguments: dict[str, Any], meta: dict[str, Any]):
        caller: Caller = request.scope["agentenv.caller"]
        try:
            with self.limits.calling(caller.key, "mcp"):
                outcome = await self.call(caller, name, arguments, via="mcp")
        except GatewayError as e:  # over its limit or its storage budget: a protocol error
            raise refuse(str(e)) from None
        return tool_error(outcome["error"]) if "error" in outcome else tool_result(outcome["result"])

    async def call(
        self,
        caller: Caller,
        name: str,
        arguments: dict[str, Any],
        *,
        via: str,
        idempotency_key: str | None = None,
        cause: str | None = None,
        at: datetime | None = None,
    ) -> dict[str, Any]:
        """Call a tool as `caller`, enforcing its role, and record it. Returns {"result"} or {"error", "refused"?}.
        Past a storage budget it raises GatewayError(507) instead, and records nothing (storage.py)."""
        inst, role = caller.instance, caller.role
        started = time.perf_counter()
        vnow = at.astimezone(UTC) if at is not None else inst.now()
        outcome: dict[str, Any]
        route = inst.tools.get(name)
        writes = route is not None and route.app is not None and not route.spec.read_only and name in inst.allowed[role]
        self._refuse_storage(self.storage.admit(inst.usage, inst.spec.id, writes=writes, arguments=arguments), via)
        if route is None:
            outcome = {"error": f"unknown tool {name!r}", "unknown": True}
        elif name not in inst.allowed[role]:
            outcome = {"error": f"tool {name!r} is not available to role {role!r}", "refused": True}
        else:
            ctx = Ctx(
                role=role,
                run_id=inst.spec.run_id,
                agent=caller.agent,
                instance=inst.spec.id,
                virtual_now=vnow,
                idempotency_key=idempotency_key,
            )
            inst.busy += 1  # not closed as idle while a call is in flight
            try:
                if route.app is None:  # a gateway tool
                    result = inst.time_answer(cast(ToolSpec, route.spec).parse_arguments(arguments).get("zone"))
                else:
                    with telemetry.span(f"app {route.qualified}", instance=inst.spec.id, agent=caller.agent, via=via):
                        result = await route.app.call_async(route.spec.name, arguments, ctx)
                outcome = {"result": result}
            except ToolError as e:
                outcome = {"error": str(e)}
            except Exception as e:  # noqa: BLE001 - a broken tool must not take the gateway down
                outcome = {"error": f"internal error in tool {name!r}: {type(e).__name__}: {e}"}
            finally:
                inst.busy -= 1
                inst.last_used = time.monotonic()
        duration = time.perf_counter() - started
        if "result" in outcome:
            self.metrics.called(via, "ok", duration)
        elif outcome.get("refused"):
            self.metrics.refused("role")
            self.metrics.called(via, "refused", duration)
        else:
            self.metrics.called(via, "error", duration)
        entry = {
            "instance": inst.spec.id,
            "run_id": inst.spec.run_id,
            "agent": caller.agent,
            "role": role,
            "tool": name,
            "arguments": arguments,
            "via": via,
            **({"result": outcome["result"]} if "result" in outcome else {"error": outcome["error"]}),
            "refused": bool(outcome.get("refused")),
            "virtual_time": iso(vnow),
            "real_time": utc_now_iso(),
            "duration_ms": round(duration * 1000, 3),
        }
        if cause:
            entry["cause"] = cause
        self.trajectory.record(inst.trajectory_path, entry)
        if inst.watcher is not None and route is not None and "unknown" not in outcome:
            await self._watch(inst, route, entry, outcome, vnow, via)
        return outcome

    async def _watch(
        self, inst: EnvInstance, route, entry: dict[str, Any], outcome: dict[str, Any], vnow: datetime, via: str
    ) -> None:
        """Match the call against the run's conditions. The run's own calls get their hits back in the
        answer (it applies them in order); agents' calls have them delivered as updates."""
        assert inst.watcher is not None  # (the caller checks)
        call = {k: entry[k] for k in ("agent", "role", "tool", "arguments")}
        call.update({"result": outcome["result"]} if "result" in outcome else {"error": outcome["error"]})
        found = [(w, call) for w in inst.watcher.calls(call)]
        if inst.watcher.states and "result" in outcome and not route.spec.read_only:
            values = await self._state_values(inst)
            found += [(w, {"value": values[w.trigger], "after": call}) for w in inst.watcher.state_edges(values)]
        if not found:
            return
        hits = [(w, TriggerHit(trigger=w.trigger, instance=inst.spec.id, virtual_time=vnow, match=m)) for w, m in found]
        if via == "run":
            outcome["hits"] = [h.model_dump(mode="json") for _, h in hits]
            return
        for watch, hit in hits:
            await self.delivery.send(inst.world.run_id, hit, watch.barrier_s)  # type: ignore[union-attr]  # a watcher comes with a world

    async def read_trajectory(self, instance_id: str, after: int = 0, *, last: bool = False) -> list[dict[str, Any]]:
        if instance_id not in self._instances and self.store.get(COLLECTION, instance_id) is None:
            raise GatewayError(404, f"no environment instance {instance_id!r} on this gateway")
        await asyncio.to_thread(self.trajectory.flush)  # the gateway serves others meanwhile
        return trajectory.read(self.folder(instance_id) / "trajectory.sqlite", after, last=last)


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)  # a time without a zone is UTC


def _parse_spec(data: dict[str, Any], what: str) -> InstanceSpec:
    from pydantic import ValidationError

    from agent_env.errors import from_validation_error

    try:
        spec = InstanceSpec.model_validate(data)
        spec.agent_roles()
    except ValidationError as e:
        raise from_validation_error(e, what) from None
    except ValueError as e:
        raise GatewayError(400, f"{what}: {e}") from None
    return spec


def _header(headers, name: bytes) -> str | None:
    return next((v.decode("latin-1") for k, v in headers if k.lower() == name), None)


def _opens_session(scope) -> bool:
    """A request the MCP SDK answers by opening a session: handshake era, and no session named yet."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    headers = scope.get("headers") or []
    if _header(headers, b"mcp-session-id") is not None:
        return False
    version = _header(headers, b"mcp-protocol-version")
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS


def _exposed(route):
    """The tool as agents see it: its exposed name (app prefix applied)."""
    if route.spec.name == route.exposed:
        return route.spec
    from dataclasses import replace

    return replace(route.spec, name=route.exposed)


__all__ = ["GET_TIME", "Caller", "Gateway", "GatewayError"]
