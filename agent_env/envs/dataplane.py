"""The JSON-RPC 2.0 data plane at `<base>/agentenv`: data/reset, data/add, data/get.

Params and results are the open protocol's own models (`agentenv_protocol.types`: AddDataRequest, its parts,
GetDataResponse), so what we take and answer is what its clients send and read.

Errors are JSON-RPC error objects with HTTP 200, as the protocol's reference client expects:
-32700 unparseable (id null), -32600 malformed request, -32601 unknown method (id echoed),
-32602 invalid params (`data: {"detail": ...}`), -32000 the operation failed (`data: {"code": ...}`).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

from agentenv_protocol.types import (
    METHOD_ADD,
    METHOD_RESET,
    AddDataRequest,
    AddDataResponse,
    DataPart,
    FileWithBytes,
    GetDataResponse,
    Part,
    ResetDataResponse,
    TextPart,
)
from pydantic import BaseModel, ValidationError

from agent_env import json_depth
from agent_env.errors import format_loc

META_APP = "agentenv.io/app"
PART_SHAPES = "a part is {kind: data, data: {...}}, {kind: text, text} or {kind: file, file: {bytes (base64) | uri}}"
MAX_LISTED_PROBLEMS = 5


class InvalidParams(ValueError):
    """The request's params are wrong (-32602): the message says what and how to fix it."""


class DataPlane(Protocol):
    operations: list[str]

    async def reset(self) -> None: ...

    async def add(self, parts: list[Part]) -> None: ...

    async def get(self) -> list[Part]: ...


@runtime_checkable
class ObjectExport(Protocol):
    """A data plane that takes data/get's `write_namespace` (the data-objects/v1 extension): it uploads its export
    under the grant and answers with the part naming the object. Others answer inline and never read the grant."""

    async def export_to(self, write_namespace: object) -> list[Part]: ...


def _error(id_: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": error}


def parse_parts(params: Any) -> list[Part]:
    """data/add's params, read as the protocol's AddDataRequest: its parts, or InvalidParams naming each
    field that is wrong."""
    if not isinstance(params, dict):
        raise InvalidParams("params must be an object with 'parts' (a non-empty list of parts)")
    try:
        parts: list[Part] = AddDataRequest.model_validate(params).parts
    except ValidationError as e:
        problems = [f"{format_loc(tuple(p['loc']))}: {p['msg']}" for p in e.errors(include_url=False)]
        if len(problems) > MAX_LISTED_PROBLEMS:
            problems[MAX_LISTED_PROBLEMS:] = [f"and {len(problems) - MAX_LISTED_PROBLEMS} more"]
        raise InvalidParams(f"{'; '.join(problems)} ({PART_SHAPES})") from None
    return parts


async def handle(body: bytes, plane: DataPlane) -> dict[str, Any]:
    """One JSON-RPC request body in, one response object out (always sent with HTTP 200)."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return _error(None, -32700, "parse error")
    if not isinstance(request, dict):
        return _error(None, -32600, "invalid request: send one JSON-RPC 2.0 request object")
    id_ = request.get("id")
    method = request.get("method")
    if request.get("jsonrpc") != "2.0" or not isinstance(method, str):
        return _error(id_, -32600, 'invalid request: needs jsonrpc "2.0" and a method')
    if method not in plane.operations:
        return _error(id_, -32601, f"method not found: {method}")
    params = request.get("params") or {}
    step = method.split("/", 1)[1]
    try:
        result: BaseModel
        if method == METHOD_RESET:
            await plane.reset()
            result = ResetDataResponse()
        elif method == METHOD_ADD:
            await plane.add(parse_parts(params))
            result = AddDataResponse()
        elif isinstance(plane, ObjectExport) and isinstance(params, dict) and params.get("write_namespace") is not None:
            result = GetDataResponse(parts=await plane.export_to(params["write_namespace"]))
        else:
            result = GetDataResponse(parts=await plane.get())
    except InvalidParams as e:
        return _error(id_, -32602, "invalid_request", {"detail": str(e)})
    except Exception as e:  # noqa: BLE001 - reported to the caller; the server keeps serving
        return _error(id_, -32000, str(e) or type(e).__name__, {"code": f"{step}_failed"})
    return {"jsonrpc": "2.0", "id": id_, "result": result.model_dump(mode="json", exclude_none=True)}


def app_part(app: str, data: dict[str, Any]) -> DataPart:
    """An app's data as a data/get part, naming the app in its metadata."""
    return DataPart(data=data, metadata={META_APP: app})


def part_payload(part: Part, data_root: Path | None) -> tuple[dict[str, Any], str | None]:
    """(JSON object carried by a part, the app it names in its metadata, if any).

    File URIs must be file:// paths inside `data_root`: a part cannot read files outside it.
    """
    app = (part.metadata or {}).get(META_APP)
    if isinstance(part, DataPart):
        return part.data, app
    raw: bytes | str
    if isinstance(part, TextPart):
        raw = part.text
    elif isinstance(part.file, FileWithBytes):
        try:
            raw = base64.b64decode(part.file.bytes, validate=True)
        except ValueError:
            raise InvalidParams("file.bytes is not valid base64") from None
    else:
        raw = _read_file_uri(part.file.uri, data_root)
    return json_payload(raw, part.kind), app


def json_payload(raw: bytes | str, kind: str) -> dict[str, object]:
    """The JSON object a part (of `kind`) carries as text or bytes, depth-measured before it is parsed."""
    try:
        payload = json_depth.loads(raw)  # JSON inside a string: the door measured only the string
    except json_depth.TooDeep as e:
        raise InvalidParams(f"a {kind} part: {e}") from None
    except ValueError:
        raise InvalidParams(f"a {kind} part must carry a JSON object (app data as {{table: [rows]}})") from None
    if not isinstance(payload, dict):
        raise InvalidParams(f"a {kind} part must carry a JSON object, not {type(payload).__name__}")
    return payload


def _read_file_uri(uri: str, data_root: Path | None) -> bytes:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        raise InvalidParams(f"file.uri {uri!r}: only file:// URIs are read here; send other data inline as bytes")
    if data_root is None:
        raise InvalidParams("this server reads no files: send the data inline (file.bytes or a data part)")
    root = data_root.resolve()
    path = Path(unquote(parsed.path))
    target = (root / path).resolve() if not path.is_absolute() else path.resolve()
    if not target.is_relative_to(root):
        raise InvalidParams(f"file.uri {uri!r} is outside the data folder {root}; only files inside it can be loaded")
    try:
        return target.read_bytes()
    except OSError as e:
        raise InvalidParams(f"file.uri {uri!r}: {e.strerror}") from None
