"""One environment instance in the gateway: its apps (composed), tools, roles, agents and clock."""

from __future__ import annotations

import asyncio
import functools
import inspect
import io
import json
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent_env.envs import changelog, dataplane
from agent_env.envs.app import ToolError, ToolInfo
from agent_env.envs.app_instance import DB_FILE, AppInstance, load_app_class
from agent_env.envs.card import OPERATIONS
from agent_env.envs.extensions import data_objects
from agent_env.gateway import tokens
from agent_env.gateway.mcp_tools import GET_TIME, get_time_spec
from agent_env.gateway.remote import RemoteApp, exports_objects
from agent_env.gateway.spec import InstanceSpec, RoleSpec
from agent_env.gateway.storage import InstanceUsage
from agent_env.gateway.watch import Watcher
from agent_env.spec.roles import GATEWAY_APP, ToolClash, ToolEntry, role_tools, tool_entries
from agent_env.spec.times import iso
from agent_env.spec.world_state import WorldPush


class CompositionError(ValueError):
    pass


@dataclass(frozen=True)
class Route:
    """Where an exposed tool name leads: an app (None for gateway tools) and the tool as it declares it."""

    app: AppInstance | RemoteApp | None
    app_name: str
    spec: ToolInfo  # a ToolSpec for in-process apps
    exposed: str

    @property
    def qualified(self) -> str:
        return f"{self.app_name}.{self.spec.name}"


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _data(app: AppInstance | RemoteApp, method: str, *args: Any, **kwargs: Any) -> Any:
    """A data-plane operation: a remote app's over HTTP; an in-process app's in its turn (after the calls
    before it) on a worker thread, so a big load or a slow tool holding the app never stalls the gateway."""
    if isinstance(app, RemoteApp):
        return await getattr(app, method)(*args, **kwargs)
    return await app.run_in_turn(functools.partial(getattr(app, method), *args, **kwargs))


class EnvInstance:
    entries: list[ToolEntry]  # set by open()

    def __init__(self, spec: InstanceSpec, folder: Path) -> None:
        self.spec = spec
        self.folder = folder
        self.apps: dict[str, AppInstance | RemoteApp] = {}
        self.tools: dict[str, Route] = {GET_TIME: Route(None, GATEWAY_APP, get_time_spec(), GET_TIME)}
        self.allowed: dict[str, frozenset[str]] = {}
        self.agents: dict[str, str] = {}
        self.world: WorldPush | None = None  # the run's clock and what to watch, pushed by the run
        self.watcher: Watcher | None = None
        self.busy = 0  # calls in flight: an instance is closed as idle only without any
        self.last_used = time.monotonic()
        self.usage = InstanceUsage(folder)  # what it keeps on disk, for its storage budgets
        self.change_ids = changelog.ChangeIds()  # its in-process apps' changelog ids (changelog.py)
        # consistent mode: its tool calls one at a time, in arrival order (an asyncio.Lock wakes its waiters FIFO)
        self.in_order = asyncio.Lock() if spec.gateway_mode == "consistent" else None

    @classmethod
    async def open(cls, spec: InstanceSpec, folder: Path, *, key: bytes | None = None) -> EnvInstance:
        """`key`: the gateway's, from which the token of each app at a URL (a sandbox deploy_env started
        with `tokens.server_token`) is derived; subprocess apps get a fresh token of their own."""
        from agent_env.envs.builtin import app_targets

        inst = cls(spec, folder)
        app: AppInstance | RemoteApp
        mounted: list[tuple[str, str, AppInstance | RemoteApp]] = []  # (name, prefix, app)
        try:
            for ref in spec.apps:
                if ref.sandbox is not None:
                    raise CompositionError(
                        f"app {ref.name!r} runs in a sandbox, which the deploy_env step starts; "
                        "the gateway takes its `url`"
                    )
                if ref.url is not None:
                    name = cast(str, ref.name)  # (AppRef: an app at a URL has a name)
                    if name in inst.apps:
                        raise CompositionError(f"two apps are named {name!r} in instance {spec.id}")
                    token = tokens.server_token(key, spec.id, name) if key else None
                    inst.apps[name] = app = await RemoteApp.connect(name, ref.url, ref.path, token=token)
                else:
                    target = cast(
                        str, app_targets().get(cast(str, ref.app), ref.app)
                    )  # (neither sandbox nor url: an app)
                    app_cls = load_app_class(target)
                    name = ref.name or app_cls.name
                    if name in inst.apps:
                        raise CompositionError(f"two apps are named {name!r} in instance {spec.id}; give one a `name`")
                    app_folder = folder / "apps" / name
                    app = (
                        await RemoteApp.spawn(target, name, app_folder)
                        if ref.run == "subprocess"
                        else AppInstance(app_cls, app_folder, change_ids=inst.change_ids)
                    )
                    inst.apps[name] = app
                mounted.append((name, ref.prefix, app))
            try:
                inst.entries = list(tool_entries((n, prefix, a.tools.values()) for n, prefix, a in mounted).values())
            except ToolClash as e:
                raise CompositionError(f"tool name clash in instance {spec.id}: {e}") from None
            for name, prefix, app in mounted:
                for tool in app.tools.values():
                    inst.tools[prefix + tool.name] = Route(app, name, tool, prefix + tool.name)
            for role, role_spec in spec.roles.items():
                inst.set_role(role, role_spec)
            inst.agents = spec.agent_roles()
        except BaseException:
            await inst.close()
            raise
        return inst

    async def fork(self, spec: InstanceSpec, folder: Path, *, key: bytes | None = None) -> EnvInstance:
        """A new instance (`spec`, in `folder`) starting from this one's current state. In-process apps are
        copied before it opens, through SQLite's online backup (milliseconds, no downtime: what
        `AppInstance.fork` does); apps in their own processes or at URLs through export -> reset -> load."""
        copied = set()
        for name, app in self.apps.items():
            if isinstance(app, AppInstance):  # the new instance opens this file as its app's database
                await _data(app, "snapshot", folder / "apps" / name / DB_FILE)
                copied.add(name)
        inst = await EnvInstance.open(spec, folder, key=key)
        try:
            if set(inst.apps) != set(self.apps):
                raise CompositionError(
                    f"instance {spec.id} has apps {sorted(inst.apps)}; the instance it forks, {self.spec.id}, has "
                    f"{sorted(self.apps)}: a fork keeps its source's apps (give new servers for apps at URLs only)"
                )
            for name, app in inst.apps.items():
                source = self.apps[name]
                if name in copied and isinstance(app, AppInstance):
                    continue
                if not all(getattr(a, "data_plane", True) for a in (source, app)):
                    continue  # a plain MCP server keeps no data the framework can copy
                data = await _data(source, "export")
                await _data(app, "reset")
                await _data(app, "load", data)
        except BaseException:
            await inst.close()
            raise
        return inst

    async def close(self) -> None:
        """Close every app, even past one that fails to close (each may hold a process)."""
        failed: BaseException | None = None
        for app in self.apps.values():
            try:
                await _maybe(app.close())
            except Exception as e:  # noqa: BLE001 - raised once the others are closed
                failed = failed or e
        if failed is not None:
            raise failed

    @property
    def keeps_changes(self) -> bool:
        """Whether it has a changelog: its in-process apps keep one (apps in processes of their own or at URLs
        do not, so an instance of those only serves none)."""
        return any(isinstance(app, AppInstance) for app in self.apps.values())

    async def changes(self, after_id: int, limit: int) -> tuple[list[dict[str, changelog.JsonValue]], bool]:
        """Its apps' change rows past `after_id` in id order, at most `limit`, and whether more follow. Only its
        last `changelog.KEEP` ids are served (what its apps keep past them is pruned as they write)."""
        start = max(after_id, self.change_ids.last - changelog.KEEP)
        apps = [(name, app.path) for name, app in self.apps.items() if isinstance(app, AppInstance)]
        rows = await asyncio.to_thread(changelog.read_apps, apps, start, limit + 1)
        return rows[:limit], len(rows) > limit

    @property
    def trajectory_path(self) -> Path:
        return self.folder / "trajectory.sqlite"

    def set_role(self, role: str, spec: RoleSpec) -> frozenset[str]:
        allowed = role_tools(role, spec, self.entries)
        self.allowed[role] = allowed
        self.spec.roles[role] = spec
        return allowed

    def role_of(self, agent: str) -> str:
        return self.agents[agent]

    def apply_world(self, push: WorldPush) -> None:
        old = self.watcher
        self.world = push
        self.watcher = Watcher(push.watches) if push.watches else None
        if old is not None and self.watcher is not None:  # keep what state watches last saw
            self.watcher.truth = {k: v for k, v in old.truth.items() if any(w.trigger == k for w in push.watches)}

    def now(self) -> datetime:
        if self.world is not None and self.world.clock is not None:
            return self.world.clock.now(datetime.now(UTC))
        return self.spec.now or datetime.now(UTC)

    def time_answer(self, zone: str | None) -> dict[str, Any]:
        now = self.now()
        if zone is None and self.world is not None and self.world.clock is not None:
            zone = self.world.clock.zone
        answer = {"utc": iso(now)}
        if zone:
            try:
                answer.update(zone=zone, local=now.astimezone(ZoneInfo(zone)).isoformat())
            except (ZoneInfoNotFoundError, ValueError):
                raise ToolError(f"unknown time zone {zone!r}; use an IANA name such as 'Europe/Paris'") from None
        return answer

    # -- data plane: fanned out to every app --
    operations = OPERATIONS

    async def reset(self) -> None:
        for app in self.apps.values():
            await _data(app, "reset")

    async def add(self, parts: list[dataplane.Part], *, key: str | None = None) -> None:
        """Load parts into their apps. With `key`, each (part, app) loads once however often it is sent."""
        for i, part in enumerate(parts):
            payload, app = dataplane.part_payload(part, None)
            targets = {app: payload} if app else payload
            unknown = [name for name in targets if name not in self.apps]
            if unknown:
                raise dataplane.InvalidParams(
                    f"data for {unknown[0]!r}, which is not an app of this environment (apps: {', '.join(self.apps)}); "
                    "send {app: {table: [rows]}} or name the app in the part's metadata 'agentenv.io/app'"
                )
            for name, data in targets.items():
                await _data(self.apps[name], "load", data, key=f"{key}/{i}/{name}" if key else None)

    async def get(self) -> list[dataplane.Part]:
        return [dataplane.app_part(name, await _data(app, "export")) for name, app in self.apps.items()]

    async def export_to(self, write_namespace: object) -> list[dataplane.Part]:
        """data/get with a namespace grant (data-objects/v1): each app whose card declares it and that the grant
        reaches uploads its export below `ROOT/APP` (the grant's policy holds every key below ROOT) and is answered
        by the parts naming its objects, their paths relative to ROOT; the others answer inline."""
        grant = data_objects.parse_grant(write_namespace)
        parts: list[dataplane.Part] = []
        for name, app in self.apps.items():
            if not (isinstance(app, RemoteApp) and exports_objects(app, grant.write.url)):
                parts.append(dataplane.app_part(name, await _data(app, "export")))
                continue
            for part in await app.export_to(grant.model_copy(update={"root_path": f"{grant.root_path}/{name}"})):
                parts.append(data_objects.below(part, name))
        return parts

    # -- snapshots: one tar of every app's state (its SQLite file; an export for remote apps) --
    async def snapshot(self) -> bytes:
        buffer = io.BytesIO()
        with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, app in self.apps.items():
                if isinstance(app, RemoteApp):
                    path = Path(tmp) / f"{name}.json"
                    path.write_text(json.dumps(await app.export()))
                else:
                    path = Path(tmp) / f"{name}.sqlite"
                    await _data(app, "snapshot", path)
                tar.add(path, arcname=path.name)
        return buffer.getvalue()

    async def restore(self, blob: bytes) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
                members = {m.name: m for m in tar.getmembers() if m.isfile()}
                expected = {f"{n}.json" if isinstance(a, RemoteApp) else f"{n}.sqlite" for n, a in self.apps.items()}
                if set(members) != expected:
                    raise ValueError(f"snapshot holds {sorted(members)}, this instance needs {sorted(expected)}")
                tar.extractall(tmp, members=list(members.values()), filter="data")
            for name, app in self.apps.items():
                if isinstance(app, RemoteApp):
                    if not app.data_plane:
                        continue  # a plain MCP server keeps no data the framework can restore
                    await app.reset()
                    await app.load(json.loads((Path(tmp) / f"{name}.json").read_text()))
                else:
                    await _data(app, "restore", Path(tmp) / f"{name}.sqlite")
