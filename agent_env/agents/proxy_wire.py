"""`urn:agentenv:proxy/v1`'s wire: the bodies a driver and a proxy agent exchange, wire-identical to the protocol's
reference (`agentenv_protocol.a2a_agent.extensions`, whose extra-only package we do not import), and where each
operation is served.

A proxy is an agent with no model: each message it gets is an open turn until a driver outside its sandbox replies.
The driver claims it once with a token of its own (every later call carries that token), reads the open turns
(`next`, a long poll on a version number), lists what a turn can call (`tools`: the registered env servers' tools,
and `bash`), has the proxy run each action where it works (`act`, then `result` until it is done), may record its
model's calls (`record`), and replies (`reply`: the turn's text parts, or an error).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_env.gateway_client.wire import JsonObject

PROXY = "urn:agentenv:proxy/v1"
ENDPOINT = "/ext/proxy"
OPERATIONS = ("claim", "next", "tools", "act", "result", "record", "reply")  # each POST at ENDPOINT/<name>
TOKEN_MIN_LENGTH = 22  # the protocol's floor: a claim token is a secret, not a name
MAX_ACTION_ID = 128


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Answer(BaseModel):
    # A driver reads answers leniently (a newer proxy may add fields); the proxy writes exactly these.
    model_config = ConfigDict(extra="ignore", frozen=True)


class ProxyClaim(_Request):
    token: str = Field(min_length=TOKEN_MIN_LENGTH)


class ProxyNext(_Request):
    token: str
    after: int = Field(default=0, ge=0)


class ProxyText(_Request):
    kind: Literal["text"] = "text"
    text: str


class ProxySkillListed(_Answer):
    name: str
    description: str
    path: str


class ProxyOpenTurn(_Answer):
    task_id: str
    context_id: str
    parts: list[ProxyText]
    system_prompt: str | None = None
    skills: list[ProxySkillListed] = Field(default_factory=list)


class ProxyTurns(_Answer):
    version: int
    turns: list[ProxyOpenTurn]


class ProxyToolsAsked(_Request):
    token: str
    task_id: str


class ProxyToolListed(_Answer):
    name: str
    description: str | None = None
    input_schema: JsonObject | None = None
    server: str | None = None  # the env server that offers it; None for the proxy's own `bash`


class ProxyToolList(_Answer):
    tools: list[ProxyToolListed]


class ProxyToolAction(_Request):
    kind: Literal["tool"]
    server: str
    name: str
    arguments: JsonObject = Field(default_factory=dict)
    timeout_seconds: float | None = Field(default=None, gt=0)


class ProxyBashAction(_Request):
    kind: Literal["bash"]
    command: str
    timeout_seconds: float | None = Field(default=None, gt=0)


ProxyAction = Annotated[ProxyToolAction | ProxyBashAction, Field(discriminator="kind")]


class ProxyAct(_Request):
    token: str
    task_id: str
    action_id: str = Field(min_length=1, max_length=MAX_ACTION_ID)
    action: ProxyAction


class ProxyResultAsked(_Request):
    token: str
    action_id: str


class ProxyBashResult(_Answer):
    kind: Literal["bash"] = "bash"
    exit_code: int | None = None  # None when the command was stopped
    stdout: str
    stderr: str
    timed_out: bool


class ProxyToolResult(_Answer):
    kind: Literal["tool"] = "tool"
    content: list[JsonObject]
    is_error: bool


class ProxyActionState(_Answer):
    done: bool
    result: Annotated[ProxyBashResult | ProxyToolResult, Field(discriminator="kind")] | None = None


class ProxyRecord(_Request):
    token: str
    task_id: str
    message: str | JsonObject
    model: str | None = None
    usage: JsonObject | None = None


class ProxyReply(_Request):
    token: str
    task_id: str
    parts: list[ProxyText] | None = Field(default=None, min_length=1)
    error: str | None = None

    @model_validator(mode="after")
    def _parts_or_error(self) -> ProxyReply:
        if (self.parts is None) == (self.error is None):
            raise ValueError("a reply carries exactly one of parts and error")
        return self


def path(operation: str) -> str:
    return f"{ENDPOINT}/{operation}"


def _fields(model: type[BaseModel]) -> JsonObject:
    required = [n for n, f in model.model_fields.items() if f.is_required()]
    optional = [n for n, f in model.model_fields.items() if not f.is_required()]
    return {"required": required, **({"optional": optional} if optional else {})}


def card_methods() -> JsonObject:
    """proxy/v1's `methods` as a card declares them, as the reference renders them: each operation's own endpoint,
    its request's required and optional fields, and its answer's where it has one."""
    shapes: dict[str, tuple[type[BaseModel], type[BaseModel] | None]] = {
        "claim": (ProxyClaim, None),
        "next": (ProxyNext, ProxyTurns),
        "tools": (ProxyToolsAsked, ProxyToolList),
        "act": (ProxyAct, ProxyActionState),
        "result": (ProxyResultAsked, ProxyActionState),
        "record": (ProxyRecord, None),
        "reply": (ProxyReply, None),
    }
    methods: JsonObject = {}
    for name, (request, response) in shapes.items():
        method: JsonObject = {"method": "POST", "endpoint": path(name), "request": _fields(request)}
        if response is not None:
            method["response"] = _fields(response)
        methods[name] = method
    return methods
