"""One environment instance in the gateway: its apps (composed), tools, roles, agents and clock."""

from __future__ import annotations

import io
import tarfile
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agentenv.envs import dataplane
from agentenv.envs.app import ToolError, ToolSpec
from agentenv.envs.instance import AppInstance, load_app_class
from agentenv.gateway.mcp_tools import GET_TIME, get_time_spec
from agentenv.gateway.roles import ToolEntry, allowed_tools
from agentenv.gateway.spec import InstanceSpec, RoleSpec


class CompositionError(ValueError):
    pass


@dataclass(frozen=True)
class Route:
    """Where an exposed tool name leads: an app instance (None for gateway tools) and its tool."""

    app: AppInstance | None
    app_name: str
    spec: ToolSpec  # as the app declares it (its own name)
    exposed: str

    @property
    def qualified(self) -> str:
        return f"{self.app_name}.{self.spec.name}"


class EnvInstance:
    def __init__(self, spec: InstanceSpec, folder: Path) -> None:
        from agentenv.envs.builtin import APPS

        self.spec = spec
        self.folder = folder
        self.apps: dict[str, AppInstance] = {}
        self.tools: dict[str, Route] = {GET_TIME: Route(None, "gateway", get_time_spec(), GET_TIME)}
        try:
            for ref in spec.apps:
                app_cls = load_app_class(APPS.get(ref.app, ref.app))
                name = ref.name or app_cls.name
                if name in self.apps:
                    raise CompositionError(f"two apps are named {name!r} in instance {spec.id}; give one a `name`")
                inst = AppInstance(app_cls, folder / "apps" / name)
                self.apps[name] = inst
                for tool in app_cls.tools.values():
                    exposed = ref.prefix + tool.name
                    if exposed in self.tools:
                        raise CompositionError(
                            f"tool name clash in instance {spec.id}: {name}.{tool.name} and "
                            f"{self.tools[exposed].qualified} are both exposed as {exposed!r}; give one app a "
                            f"`prefix` (e.g. prefix = \"{name}_\")")
                    self.tools[exposed] = Route(inst, name, tool, exposed)
            self.entries = [ToolEntry(n, r.qualified, r.spec.hidden) for n, r in self.tools.items()]
            self.allowed: dict[str, frozenset[str]] = {}
            for role, role_spec in spec.roles.items():
                self.set_role(role, role_spec)
            self.agents = spec.agent_roles()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for inst in self.apps.values():
            inst.close()

    @property
    def trajectory_path(self) -> Path:
        return self.folder / "trajectory.sqlite"

    def set_role(self, role: str, spec: RoleSpec) -> frozenset[str]:
        allowed = allowed_tools(role, spec, self.entries) | {GET_TIME}
        self.allowed[role] = allowed
        self.spec.roles[role] = spec
        return allowed

    def role_of(self, agent: str) -> str:
        return self.agents[agent]

    def now(self) -> datetime:
        return self.spec.now or datetime.now(UTC)

    def time_answer(self, zone: str | None) -> dict[str, Any]:
        now = self.now()
        answer = {"utc": now.isoformat().replace("+00:00", "Z")}
        if zone:
            try:
                answer.update(zone=zone, local=now.astimezone(ZoneInfo(zone)).isoformat())
            except (ZoneInfoNotFoundError, ValueError):
                raise ToolError(f"unknown time zone {zone!r}; use an IANA name such as 'Europe/Paris'") from None
        return answer

    # -- data plane: fanned out to every app --
    operations = ["data/reset", "data/add", "data/get"]

    async def reset(self) -> None:
        for inst in self.apps.values():
            inst.reset()

    async def add(self, parts: list[dict[str, Any]], *, key: str | None = None) -> None:
        """Load parts into their apps. With `key`, each (part, app) loads once however often it is sent."""
        for i, part in enumerate(parts):
            payload, app = dataplane.part_payload(part, None)
            targets = {app: payload} if app else payload
            unknown = [name for name in targets if name not in self.apps]
            if unknown:
                raise dataplane.InvalidParams(
                    f"data for {unknown[0]!r}, which is not an app of this environment (apps: {', '.join(self.apps)}); "
                    "send {app: {table: [rows]}} or name the app in the part's metadata 'agentenv.io/app'")
            for name, data in targets.items():
                self.apps[name].load(data, key=f"{key}/{i}/{name}" if key else None)

    async def get(self) -> list[dict[str, Any]]:
        return [{"kind": "data", "data": inst.export(), "metadata": {dataplane.META_APP: name}}
                for name, inst in self.apps.items()]

    # -- snapshots: one tar of every app's SQLite file --
    def snapshot(self) -> bytes:
        buffer = io.BytesIO()
        with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, inst in self.apps.items():
                path = Path(tmp) / f"{name}.sqlite"
                inst.snapshot(path)
                tar.add(path, arcname=f"{name}.sqlite")
        return buffer.getvalue()

    def restore(self, blob: bytes) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
                members = {m.name: m for m in tar.getmembers() if m.isfile()}
                expected = {f"{name}.sqlite" for name in self.apps}
                if set(members) != expected:
                    raise ValueError(f"snapshot holds {sorted(members)}, this instance needs {sorted(expected)}")
                tar.extractall(tmp, members=list(members.values()), filter="data")
            for name, inst in self.apps.items():
                inst.restore(Path(tmp) / f"{name}.sqlite")
