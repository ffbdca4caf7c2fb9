"""`urn:agentenv:staging/v1`, served by our agent SDK: a small object area on the agent's own server, below
`/ext/staging`. A run whose object store's grants cannot reach the agent (the local store, an agent on another host)
pushes there what the agent will read before a call and pulls what it wrote after (`staging_client`); the grants it
hands the agent name staged paths on the agent's own URL, so the agent moves its objects as it always does.

Routes below the endpoint; a PATH is `ID/REST`, ID an id the run makes and tells no one else:

    PUT PATH         store the body (201, naming its path, size_bytes, etag and sha256)
    GET PATH         the object, with its ETag
    POST ID/PREFIX   a multipart upload, its `key` field then its `file`, stored at PREFIX/key (a namespace grant's)
    GET PREFIX/      what is stored below PREFIX, by path relative to it
    DELETE PATH      remove it; with `If-Match`, only while it still has that tag (412 otherwise)
    DELETE PREFIX/   remove everything below PREFIX

A path is a normalized relative path (no '', '.', '..', backslash or NUL) whose first segment is at least 22
characters (about 128 bits: not guessed); another is a 400, a short id a 404 (as if nothing were there). Everything
staged counts against `max_bytes` (AGENT_ENV_STAGING_MAX_BYTES, 1 GiB by default; 0 serves and declares none), a
body is refused (413) as soon as it would pass it, and a write lands whole or not at all (a temp file renamed into
place). Objects live in a directory of this process's own, readable by its user alone, removed when it exits.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Message

from agent_env.agents.extension_table import ENDPOINTS, STAGING
from agent_env.gateway_client.wire import JsonObject

MAX_BYTES_ENV = "AGENT_ENV_STAGING_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 30
MIN_ID_CHARS = 22
MAX_PATH_CHARS = 1024
_CHUNK = 256 * 1024
_FORM_OVERHEAD = 64 * 1024  # what a multipart form adds to its file (boundaries, the key field)
DESCRIPTION = "Objects staged on the agent, for a run to push before a call and pull after."


class StagingRefused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


def configured_max_bytes() -> int:
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    if not raw.isdigit():
        raise ValueError(f"{MAX_BYTES_ENV} is a number of bytes (0 turns staging off), not {raw!r}")
    return int(raw)


def card_entries(max_bytes: int) -> list[Any]:
    """The card's staging/v1 entry (none when staging is off)."""
    if max_bytes <= 0:
        return []
    from a2a.types import AgentExtension

    params = {"endpoint": ENDPOINTS[STAGING], "max_bytes": max_bytes}
    return [AgentExtension(uri=STAGING, description=DESCRIPTION, params=params)]


def check_path(path: str) -> str:
    parts = path.split("/")
    if len(path) > MAX_PATH_CHARS or "\\" in path or "\x00" in path or any(p in ("", ".", "..") for p in parts):
        raise StagingRefused(400, "a staging path is a normalized relative path (no '', '.', '..' segment)")
    if len(parts[0]) < MIN_ID_CHARS:
        raise StagingRefused(404, "nothing is staged at this path")
    return path


def _etag(stat: os.stat_result) -> str:
    return f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"'


class StagingArea:
    """The objects staged on one agent server, within `max_bytes` in all."""

    def __init__(self, max_bytes: int, root: Path | None = None) -> None:
        self.max_bytes = max_bytes
        self._root = root
        self._used = 0
        self._lock = asyncio.Lock()
        self._last_stamp = 0

    @property
    def root(self) -> Path:
        if self._root is None:  # made on first use, the process's own (0700), gone when it exits
            self._root = Path(tempfile.mkdtemp(prefix="agent-env-staging-"))
            atexit.register(shutil.rmtree, self._root, ignore_errors=True)
        return self._root

    def file(self, path: str) -> Path:
        return self.root / "objects" / check_path(path)

    async def store(self, path: str, chunks: AsyncIterator[bytes]) -> JsonObject:
        """`chunks` at `path`, replacing what is there, each byte counted against the limit as it arrives."""
        target = self.file(path)
        incoming = self.root / "incoming"
        incoming.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=incoming)
        reserved, digest = 0, hashlib.sha256()
        try:
            with os.fdopen(fd, "wb") as f:
                async for chunk in chunks:
                    await self._reserve(len(chunk))
                    reserved += len(chunk)
                    digest.update(chunk)
                    await asyncio.to_thread(f.write, chunk)
            async with self._lock:
                replaced = target.stat().st_size if target.is_file() else 0
                try:
                    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                    stamp = self._last_stamp = max(time.time_ns(), self._last_stamp + 1000)
                    os.utime(tmp, ns=(stamp, stamp))  # a tag changes with each write
                    os.replace(tmp, target)
                except (FileExistsError, IsADirectoryError, NotADirectoryError):
                    raise StagingRefused(409, "the path conflicts with one already staged") from None
                self._used -= replaced
                reserved = 0
        finally:
            if reserved:
                async with self._lock:
                    self._used -= reserved
            Path(tmp).unlink(missing_ok=True)
        stat = target.stat()
        return {"path": path, "size_bytes": stat.st_size, "etag": _etag(stat), "sha256": digest.hexdigest()}

    async def _reserve(self, size: int) -> None:
        async with self._lock:
            if self._used + size > self.max_bytes:
                raise StagingRefused(413, f"staging is full (it holds at most {self.max_bytes} bytes)")
            self._used += size

    def listing(self, prefix: str) -> list[JsonObject]:
        top = self.file(prefix)
        found = [
            {"path": p.relative_to(top).as_posix(), "size_bytes": (s := p.stat()).st_size, "etag": _etag(s)}
            for p in top.rglob("*")
            if p.is_file()
        ]
        return sorted(found, key=lambda o: str(o["path"]))

    async def delete(self, path: str, if_match: str | None) -> None:
        target = self.file(path)
        async with self._lock:
            if not target.is_file():
                raise StagingRefused(404, "nothing is staged at this path")
            stat = target.stat()
            if if_match is not None and if_match != _etag(stat):
                raise StagingRefused(412, "the staged object has changed since its tag was read")
            target.unlink()
            self._used -= stat.st_size

    async def delete_below(self, prefix: str) -> None:
        top = self.file(prefix)
        async with self._lock:
            freed = sum(p.stat().st_size for p in top.rglob("*") if p.is_file())
            await asyncio.to_thread(shutil.rmtree, top, ignore_errors=True)
            self._used -= freed


def routes(area: StagingArea) -> list[Route]:
    """The staging routes below the endpoint (none when staging is off)."""
    if area.max_bytes <= 0:
        return []

    async def handle(request: Request) -> Response:
        path: str = request.path_params["path"]
        try:
            if path.endswith("/"):
                if request.method == "GET":
                    return JSONResponse({"objects": await asyncio.to_thread(area.listing, path[:-1])})
                if request.method == "DELETE":
                    await area.delete_below(path[:-1])
                    return Response(status_code=204)
                raise StagingRefused(405, "a prefix (ending in '/') is only listed or deleted")
            if request.method == "GET":
                return _object(area.file(path))
            if request.method == "PUT":
                declared = request.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > area.max_bytes:
                    raise StagingRefused(413, f"staging is full (it holds at most {area.max_bytes} bytes)")
                return JSONResponse(await area.store(path, request.stream()), status_code=201)
            if request.method == "POST":
                return JSONResponse(await _upload(area, path, request), status_code=201)
            await area.delete(path, request.headers.get("if-match"))
            return Response(status_code=204)
        except StagingRefused as e:
            return JSONResponse({"detail": str(e)}, status_code=e.status)
        except ClientDisconnect:
            return Response(status_code=400)

    return [Route(f"{ENDPOINTS[STAGING]}/{{path:path}}", handle, methods=["GET", "PUT", "POST", "DELETE"])]


def _object(file: Path) -> Response:
    try:
        f = open(file, "rb")  # noqa: SIM115 - closed by the stream below
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise StagingRefused(404, "nothing is staged at this path") from None
    stat = os.fstat(f.fileno())

    async def chunks() -> AsyncIterator[bytes]:
        with f:
            while chunk := await asyncio.to_thread(f.read, _CHUNK):
                yield chunk

    headers = {"content-length": str(stat.st_size), "etag": _etag(stat)}
    return StreamingResponse(chunks(), media_type="application/octet-stream", headers=headers)


async def _upload(area: StagingArea, prefix: str, request: Request) -> JsonObject:
    """A namespace grant's upload: the form's `key` below `prefix`, its `file` stored there."""
    check_path(prefix)
    seen = 0

    async def counted() -> Message:  # the form is bounded as it arrives, before it is spooled anywhere
        nonlocal seen
        message = await request.receive()
        seen += len(message.get("body", b""))
        if seen > area.max_bytes + _FORM_OVERHEAD:
            raise StagingRefused(413, f"staging is full (it holds at most {area.max_bytes} bytes)")
        return message

    try:
        form = await Request(request.scope, counted).form(max_files=1, max_fields=32, max_part_size=_FORM_OVERHEAD)
    except HTTPException as e:
        raise StagingRefused(400, f"not a multipart upload: {e.detail}") from None
    try:
        key, upload = form.get("key"), form.get("file")
        if not isinstance(key, str) or not isinstance(upload, UploadFile):
            raise StagingRefused(400, "an upload is a multipart form with a 'key' field and a 'file'")
        return await area.store(check_path(f"{prefix}/{key}"), _read(upload))
    finally:
        await form.close()


async def _read(upload: UploadFile) -> AsyncIterator[Any]:
    while chunk := await upload.read(_CHUNK):
        yield chunk
