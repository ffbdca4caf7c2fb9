"""What agent-env's small FastAPI servers share (the explorer, `episodes serve`, the fake model): an app with no
public documents, refusals answered by exception handlers, and request bodies read within a size limit (413)
and measured for nesting (400) before anything parses them.

It is the gateway's pattern (docs/architecture.md, "Why FastAPI"): per-method routes, guards as dependencies,
pydantic models for bodies. Bodies are read here, never by FastAPI, whose body parameters read a whole body
before anything could refuse it. Each server still sits behind `HostGuard`, which also measures every piece
of a body as it is read (`json_depth`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agent_env import guard, json_depth
from agent_env.errors import from_validation_error

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request, Exception], Awaitable[Response]]


class Refused(Exception):
    """An answer other than success: `status`, `message` and perhaps the `fix`, shaped by the app's handler
    (`{"error": message, "fix": fix}` unless the app speaks another protocol's errors)."""

    def __init__(
        self, status: int, message: str, fix: str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.fix = fix
        self.headers = dict(headers or {})


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) past `limit` bytes without reading the rest."""
    try:
        return await guard.read_body(request, limit)
    except guard.BodyTooLarge:
        raise Refused(413, f"request body over the {limit // 1024} KiB limit; send a smaller one") from None


async def read_json(request: Request, limit: int, *, empty: Any = None) -> Any:
    """The body as JSON, read within `limit` bytes (413) and nesting at most `json_depth.MAX_DEPTH` levels
    (400); `empty`: what an empty body means (None: it is refused as not JSON)."""
    raw = await read_body(request, limit)
    if not raw.strip() and empty is not None:
        return empty
    return parse_json(raw)


def parse_json(raw: bytes) -> Any:
    """`raw` as JSON nesting at most `json_depth.MAX_DEPTH` levels; a 400 for anything else."""
    try:
        return json_depth.loads(raw)
    except json_depth.TooDeep as e:
        raise Refused(400, str(e)) from None
    except ValueError:
        raise Refused(400, "the body is not JSON; send a JSON object (Content-Type: application/json)") from None


def parse(model: type[M], data: Any, what: str) -> M:
    """`data` as `model`, or BadInput naming every problem under `what`."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, what) from None


async def read_model(request: Request, model: type[M], limit: int, what: str) -> M:
    """The body (`{}` when empty) as `model`: read within `limit`, measured, then validated."""
    return parse(model, await read_json(request, limit, empty={}), what)


def error(status: int, message: str, fix: str | None = None, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """The answer to a refusal: `{"error": message}`, with `"fix"` when there is one."""
    return JSONResponse({"error": message, **({"fix": fix} if fix else {})}, status_code=status, headers=headers)


async def _refused(request: Request, e: Exception) -> Response:
    assert isinstance(e, Refused)
    return error(e.status, e.message, e.fix, e.headers)


async def _http_error(request: Request, e: Exception) -> Response:  # no such path, method not allowed
    assert isinstance(e, HTTPException)
    return error(e.status_code, str(e.detail), headers=e.headers)


async def _invalid_params(request: Request, e: Exception) -> Response:  # typed path and query parameters
    assert isinstance(e, RequestValidationError)
    return error(400, "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()))


def create(
    title: str,
    *,
    handlers: Mapping[type[Exception], Handler] | None = None,
    dependencies: Sequence[Any] | None = None,
    lifespan: Any = None,
) -> FastAPI:
    """A FastAPI app serving no documents (no /docs, /redoc or /openapi.json), whose refusals are
    `{"error": ...}`; `handlers` add to (or replace) those for `Refused`, HTTP errors and bad parameters."""
    answers: dict[Any, Any] = {Refused: _refused, HTTPException: _http_error, RequestValidationError: _invalid_params}
    answers.update(handlers or {})
    return FastAPI(
        title=title,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        dependencies=dependencies,
        exception_handlers=answers,
    )
