"""What the gateway's routes share: the app's gateway, bounded bodies, payload models, OpenAPI body schemas.

Bodies are read here, never by FastAPI: its body parameters read the whole body before anything could
refuse it, and an agent is an adversary that may send gigabytes. `read_body` stops at the limit instead
(413), and `parse` turns a payload that does not fit its model into a 400 naming every problem. Routes
declare their body model for the OpenAPI document with `json_body(Model)` instead.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, TypeVar

from fastapi import Depends
from pydantic import BaseModel, ValidationError
from starlette.requests import HTTPConnection, Request

from agent_env.errors import from_validation_error
from agent_env.gateway.service import Gateway, GatewayError
from agent_env.guard import BodyTooLarge, read_body

M = TypeVar("M", bound=BaseModel)


def gateway_of(connection: HTTPConnection) -> Gateway:
    """The gateway the app serves (set by `create_app`); raw ASGI endpoints reach it through their scope."""
    gateway: Gateway = connection.scope["app"].state.gateway
    return gateway


async def _gateway(request: Request) -> Gateway:  # async: a sync dependency would cost a thread hop per request
    return gateway_of(request)


GatewayDep = Annotated[Gateway, Depends(_gateway)]


async def bounded_body(request: Request, limit: int) -> bytes:
    try:
        return await read_body(request, limit)
    except BodyTooLarge:
        raise GatewayError(413, f"request body over the {limit // 1024} KiB limit") from None


async def json_of(request: Request) -> Any:
    """The body as JSON ({} when empty), within the gateway's body limit."""
    raw = await bounded_body(request, gateway_of(request).max_body_bytes)
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        raise GatewayError(400, "the body is not valid JSON") from None


def parse(model: type[M], data: Any, what: str) -> M:
    """`data` as `model`, or BadInput (400) listing every problem under `what`."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, what) from None


async def named_body(request: Request, model: type[M], key: str, what: str) -> M:
    """A PUT's body as `model`, its `id` defaulting to the path's `key` (and refused if it names another)."""
    data = await json_of(request)
    if isinstance(data, dict):
        data.setdefault("id", key)
    parsed = parse(model, data, f"{what} {key}")
    if getattr(parsed, "id", None) != key:
        raise GatewayError(400, f"the body's id {getattr(parsed, 'id', None)!r} differs from the path's {key!r}")
    return parsed


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """A route's `openapi_extra` documenting the body its handler reads itself as `model`."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
        }
    }
