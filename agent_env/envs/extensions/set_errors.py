"""`urn:agentenv:set-errors/v1`: make a tool fail on purpose, so a task can test how an agent copes with errors
(the reference framework's `apply_server_config` step invokes it before the agent runs).

POST `{tool_name, error_rate, error_type}` to the endpoint the card names (`/agentenv/ext/set_errors`, the path
and shape the reference SDK's `@extension` gives a handler of that name). From then on that share of the tool's
calls answers an error of that type, `isError` with `"<type>: <message>"` as text and `{code, message, retryable,
applied: "no"}` as structured content, without running the tool. The failures are spread evenly, not drawn at
random, so a run is reproducible: at rate r, the n-th call fails when ceil(n*r) > ceil((n-1)*r) (at 0.5 the 1st,
3rd, 5th ...). A rate of 0 clears the tool's errors; setting a tool again starts its count anew.

Errors are the server's configuration, not its data: data/reset leaves them. The answer is every tool's errors
after the change; a refusal is the protocol's error body, `{ok: false, error: {code: invalid_params, message}}`,
its message naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from agentenv_protocol.types import RPC_PATH, EnvironmentExtension, error_body
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from agent_env import json_depth
from agent_env.errors import format_loc
from agent_env.guard import BodyTooLarge, read_body

URI = "urn:agentenv:set-errors/v1"
METHOD = "set_errors"
PATH = f"{RPC_PATH}/ext/{METHOD}"
MAX_BODY = 16 * 1024

ErrorType = Literal["error", "timeout", "rate_limit", "unavailable", "permission_denied"]
# What a caller reads for each type, and whether retrying may help.
MESSAGES: dict[str, tuple[str, bool]] = {
    "error": ("the tool failed (an error injected by the environment)", False),
    "timeout": ("the tool timed out (an error injected by the environment)", True),
    "rate_limit": ("too many requests: try again later (an error injected by the environment)", True),
    "unavailable": ("the service is unavailable (an error injected by the environment)", True),
    "permission_denied": ("permission denied (an error injected by the environment)", False),
}


class SetErrorsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool_name: str = Field(max_length=64, description="the tool to fail, one of the card's tools")
    error_rate: float = Field(ge=0, le=1, description="the share of its calls that fail: 0 (clears it) to 1 (all)")
    error_type: ErrorType = Field("error", description="the error its failed calls answer")


def _request_schema() -> dict[str, object]:
    schema = SetErrorsRequest.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


CARD = EnvironmentExtension(
    uri=URI,
    description="Make a tool fail on purpose: error_rate of its calls (spread evenly) answer an error of error_type.",
    params={"endpoint": PATH, "methods": {METHOD: {"method": "POST", "request": _request_schema()}}},
)


@dataclass
class _Rule:
    rate: Fraction
    error_type: str
    calls: int = 0


@dataclass(frozen=True)
class InjectedError:
    code: str
    message: str
    retryable: bool

    def fields(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, "retryable": self.retryable, "applied": "no"}


class InjectedErrors:
    """Which of an app's tools fail on purpose, and how often. One rule per tool at most: bounded by the app."""

    def __init__(self, service: str, tools: Iterable[str]) -> None:
        self.service = service
        self.tools = tuple(tools)
        self._rules: dict[str, _Rule] = {}

    def set(self, request: SetErrorsRequest) -> None:
        if request.tool_name not in self.tools:
            raise ValueError(
                f"tool_name {request.tool_name!r} is no tool of {self.service} (its tools: {', '.join(self.tools)})"
            )
        if request.error_rate == 0:
            self._rules.pop(request.tool_name, None)
        else:  # the decimal the caller wrote, exactly: 0.1 fails one call in ten, never one in nine
            self._rules[request.tool_name] = _Rule(Fraction(str(request.error_rate)), request.error_type)

    def view(self) -> dict[str, dict[str, object]]:
        return {
            tool: {"error_rate": float(rule.rate), "error_type": rule.error_type} for tool, rule in self._rules.items()
        }

    def next_call(self, tool: str) -> InjectedError | None:
        """Count a call of `tool`: the error it must answer instead of running, if any."""
        rule = self._rules.get(tool)
        if rule is None:
            return None
        rule.calls += 1
        if math.ceil(rule.calls * rule.rate) == math.ceil((rule.calls - 1) * rule.rate):
            return None
        message, retryable = MESSAGES[rule.error_type]
        return InjectedError(rule.error_type, message, retryable)


def _refused(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse(error_body("invalid_params", message, retryable=False, applied="no"), status_code=status)


def endpoint(errors: InjectedErrors):
    """The POST handler of the extension's one method."""

    async def set_errors(request: Request) -> JSONResponse:
        try:
            raw = await read_body(request, MAX_BODY)
        except BodyTooLarge:
            return _refused(f"the request body is over {MAX_BODY // 1024} KiB", 413)
        try:
            body = json_depth.loads(raw or b"{}")
        except ValueError:
            return _refused("the request body must be a JSON object {tool_name, error_rate, error_type}")
        try:
            errors.set(SetErrorsRequest.model_validate(body))
        except ValidationError as e:
            problems = "; ".join(f"{format_loc(tuple(p['loc']))}: {p['msg']}" for p in e.errors(include_url=False))
            return _refused(f"{problems} (send {{tool_name, error_rate: 0 to 1, error_type: {', '.join(MESSAGES)}}})")
        except ValueError as e:
            return _refused(str(e))
        return JSONResponse({"errors": errors.view()})

    return set_errors
