"""The gateway's answers as its clients read them: one definition shared by the server (the routes declare them
as `response_model`, so `GET /admin/openapi.json` documents every answer) and the clients (which parse into
them). TypedDicts: what crosses the wire stays a plain JSON object, so callers that index it keep working, and
the routes return their `JSONResponse` as before (FastAPI validates nothing on that path: the hot path pays
nothing for the documentation). Each allows fields it does not name (a newer gateway may add some)."""

from __future__ import annotations

from typing import Any, NotRequired, TypeVar

from pydantic import ConfigDict, TypeAdapter, with_config
from typing_extensions import TypedDict

OPEN = ConfigDict(extra="allow")
T = TypeVar("T")
JsonObject = dict[str, Any]  # a JSON object whose shape another room owns: a tool's arguments, a spec, a data part


@with_config(OPEN)
class Hit(TypedDict):
    """A trigger hit (spec.world_state.TriggerHit as JSON): the run validates it itself."""

    trigger: str
    instance: str
    virtual_time: str
    match: JsonObject


@with_config(OPEN)
class InstanceView(TypedDict):
    """An instance as the gateway serves it (`forked_from`: a fork's source)."""

    id: str
    env: str
    apps: list[str]
    agents: dict[str, str]  # agent -> role
    roles: dict[str, list[str]]  # role -> the tools it may call
    paths: dict[str, str]  # mcp, tools, card -> its path on the gateway
    forked_from: NotRequired[str]


@with_config(OPEN)
class Instances(TypedDict):
    instances: list[JsonObject]  # the stored specs


@with_config(OPEN)
class Load(TypedDict):
    """How busy a gateway is (a pool places by it), and which instances of the asked run it holds."""

    instances: int
    agents: int
    run_instances: list[str]


@with_config(OPEN)
class Deleted(TypedDict):
    deleted: bool


@with_config(OPEN)
class Token(TypedDict):
    token: str


@with_config(OPEN)
class RoleTools(TypedDict):
    role: str
    tools: list[str]


@with_config(OPEN)
class Hits(TypedDict):
    hits: list[Hit]


@with_config(OPEN)
class AgentRoleSet(TypedDict):
    agent: str
    role: str


@with_config(OPEN)
class CallOutcome(TypedDict, total=False):
    """A tool call's outcome: `result`, or `error` (`refused`: the role may not call it; `unknown`: no such
    tool); `hits`: trigger hits of the run's own call, which it applies in order."""

    result: Any
    error: str
    refused: bool
    unknown: bool
    hits: list[Hit]


@with_config(OPEN)
class Loaded(TypedDict):
    loaded: int


@with_config(OPEN)
class SnapshotRestored(TypedDict):
    restored: str


@with_config(OPEN)
class TrajectoryEntry(TypedDict, total=False):
    """One call as the gateway recorded it (`seq`: its place in the instance's trajectory, once stored). Every
    field may be missing: an entry that cannot be read back is served as a note instead (`unreadable`, `bytes`),
    never as an error, and entries recorded by older gateways may lack newer fields."""

    seq: int
    instance: str
    run_id: str | None
    agent: str
    role: str
    tool: str
    arguments: JsonObject
    via: str  # rest, mcp, run
    result: Any
    error: str
    refused: bool
    virtual_time: str
    real_time: str
    duration_ms: float
    cause: str
    unreadable: str  # why this entry cannot be read (then only `bytes`, its size, comes with it)
    bytes: int


@with_config(OPEN)
class TrajectoryPage(TypedDict):
    entries: list[TrajectoryEntry]
    more: NotRequired[bool]  # a full page: ask again after its last seq (a gateway that does not say: ask)


@with_config(OPEN)
class RunEnded(TypedDict):
    """What a run's end released on a gateway."""

    instances: list[str]
    agents: list[str]
    sessions: NotRequired[int]  # MCP sessions ended (gateways before it was counted do not say)


@with_config(OPEN)
class Parked(TypedDict):
    parked: list[JsonObject]


@with_config(OPEN)
class Agents(TypedDict):
    agents: list[JsonObject]


@with_config(OPEN)
class Turns(TypedDict):
    turns: list[JsonObject]


@with_config(OPEN)
class ToolList(TypedDict):
    role: str
    tools: list[JsonObject]


@with_config(OPEN)
class ToolResult(TypedDict):
    result: Any


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def parse(shape: type[T], data: Any) -> T:
    """`data` checked as `shape` (a ValidationError names what the gateway sent wrong)."""
    adapter = _ADAPTERS.get(shape)
    if adapter is None:
        adapter = _ADAPTERS[shape] = TypeAdapter(shape)
    result: T = adapter.validate_python(data)
    return result
