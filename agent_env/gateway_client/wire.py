"""The gateway's answers as its clients read them: one definition shared by the server (the routes declare them
as `response_model`, so `GET /admin/openapi.json` documents every answer) and the clients (which parse into
them, through `model_of`). TypedDicts: what crosses the wire stays a plain JSON object, so callers that index it keep working, and
the routes return their `JSONResponse` as before (FastAPI validates nothing on that path: the hot path pays
nothing for the documentation). Each allows fields it does not name (a newer gateway may add some)."""

import functools
from typing import Any, NotRequired, TypedDict, TypeVar, cast, get_args, get_origin, get_type_hints, is_typeddict

from pydantic import BaseModel, ConfigDict, create_model

OPEN = ConfigDict(extra="allow")
T = TypeVar("T")
JsonObject = dict[str, Any]  # a JSON object whose shape another room owns: a tool's arguments, a spec, a data part


class Hit(TypedDict):
    """A trigger hit (spec.world_state.TriggerHit as JSON): the run validates it itself."""

    trigger: str
    instance: str
    virtual_time: str
    match: JsonObject


class InstanceView(TypedDict):
    """An instance as the gateway serves it (`forked_from`: a fork's source)."""

    id: str
    env: str
    apps: list[str]
    agents: dict[str, str]  # agent -> role
    roles: dict[str, list[str]]  # role -> the tools it may call
    paths: dict[str, str]  # mcp, tools, card -> its path on the gateway
    forked_from: NotRequired[str]


class Instances(TypedDict):
    instances: list[JsonObject]  # the stored specs


class Load(TypedDict):
    """How busy a gateway is (a pool places by it), and which instances of the asked run it holds."""

    instances: int
    agents: int
    run_instances: list[str]


class Deleted(TypedDict):
    deleted: bool


class Token(TypedDict):
    token: str
    # Asked with `tools=1` (an agent's token): its role and that role's tools, as `GET /envs/{instance}/tools`
    # lists them with the token (one request where a trainer's first turn made two). Older gateways leave them out.
    role: NotRequired[str]
    tools: NotRequired[list[JsonObject]]


class RoleTools(TypedDict):
    role: str
    tools: list[str]


class Hits(TypedDict):
    hits: list[Hit]


class AgentRoleSet(TypedDict):
    agent: str
    role: str


class CallOutcome(TypedDict, total=False):
    """A tool call's outcome: `result`, or `error` (`refused`: the role may not call it; `unknown`: no such
    tool); `hits`: trigger hits of the run's own call, which it applies in order."""

    result: Any
    error: str
    refused: bool
    unknown: bool
    hits: list[Hit]


class Loaded(TypedDict):
    loaded: int


class SnapshotRestored(TypedDict):
    restored: str


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


class TrajectoryPage(TypedDict):
    entries: list[TrajectoryEntry]
    more: NotRequired[bool]  # a full page: ask again after its last seq (a gateway that does not say: ask)


class ChangesPage(TypedDict):
    """A page of changes/v1: change rows (their shape: envs/changelog.py) and whether more follow."""

    changes: list[JsonObject]
    has_more: bool


class RunEnded(TypedDict):
    """What a run's end released on a gateway."""

    instances: list[str]
    agents: list[str]
    sessions: NotRequired[int]  # MCP sessions ended (gateways before it was counted do not say)
    # Asked with `trajectories=1`: closed instances' trajectories, whole, by instance, as many as one trajectory page
    # holds in all (the ones left out, and all from older gateways, are read with GET .../trajectory).
    trajectories: NotRequired[dict[str, list[JsonObject]]]


class Parked(TypedDict):
    parked: list[JsonObject]


class Agents(TypedDict):
    agents: list[JsonObject]


class Turns(TypedDict):
    turns: list[JsonObject]


class ToolList(TypedDict):
    role: str
    tools: list[JsonObject]


class ToolResult(TypedDict):
    result: Any


@functools.cache
def model_of(shape: Any) -> Any:
    """The pydantic model of a shape (and of the shapes inside it), allowing fields it does not name: what
    validates an answer and what the routes declare as `response_model`. (Pydantic reads `typing.TypedDict`
    itself only from Python 3.12.)"""
    if is_typeddict(shape):
        hints = get_type_hints(shape)
        fields: Any = {  # name -> (its type, its default: ... when required)
            name: (model_of(kind), ... if name in shape.__required_keys__ else None) for name, kind in hints.items()
        }
        model: type[BaseModel] = create_model(shape.__name__, __config__=OPEN, **fields)
        model.__doc__ = shape.__doc__
        return model
    if get_origin(shape) in (list, dict):
        return get_origin(shape)[tuple(model_of(arg) for arg in get_args(shape))]
    return shape


def parse(shape: type[T], data: Any) -> T:
    """`data` checked as `shape` (a ValidationError names what the gateway sent wrong), as the plain object it
    came as: only the fields it had, those it does not name kept."""
    model: Any = model_of(cast(Any, shape))
    checked: T = model.model_validate(data).model_dump(exclude_unset=True)
    return checked
