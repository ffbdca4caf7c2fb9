"""Grants on the local object store, served over HTTPS by the process that issues them.

A grant's URL is `https://127.0.0.1:PORT/grants/TOKEN` (a prefix grant: `.../grants/TOKEN/REST`), where TOKEN is
`v1.<claims>.<HMAC-SHA256>` under a key that lives only in this process's memory: the claims name the method, the
store's root (by a digest, never its path), the key or prefix, the expiry, and for a PUT the media type and the
most it may write. The server trusts nothing but claims it signed: a token altered in one byte, expired, or used
with another method is a 403; a key is never taken from the request except below a prefix grant's prefix, and is
checked like every object key (no `..`, no absolute path) and resolved inside the root. A PUT is refused past its
size bound (413), declared or streamed, and lands atomically (a temp file renamed into place).

A namespace grant (an upload policy) is a POST of a multipart form to `.../grants/TOKEN`: the object's key in the
form's `key` field, below the grant's prefix, and its bytes in `file`. Each object is bounded like a PUT; the
namespace's count and total are checked against what is already below the prefix on disk, so a holder cannot pass
them however it splits its uploads (the token stays stateless).

The server starts with the first grant this process issues (a daemon thread; one per state directory's CA), and
keeps nothing per grant: tokens are stateless, so nothing grows with the runs it served. Its grants end with it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime
import hashlib
import hmac
import json
import os
import secrets
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Message

from agent_env.errors import BadInput
from agent_env.guard import BodyTooLarge, HostGuard
from agent_env.stores.base import check_object_key
from agent_env.stores.grants import Grant, NamespaceGrant, NamespaceLimits, ObjectGrants, check_ttl
from agent_env.stores.local_tls import server_files

_KEY = secrets.token_bytes(32)  # this process's: its grants die with it
_CHUNK = 64 * 1024
_START_TIMEOUT_S = 10.0
UPLOAD_KEY_FIELD, UPLOAD_FILE_FIELD = "key", "file"  # a namespace upload's form: the object's key, its bytes
_FORM_OVERHEAD = 64 * 1024  # what a multipart form may add to its object's bytes (boundaries, small fields)


class InvalidGrant(Exception):
    pass


@dataclass(frozen=True)
class Claims:
    method: str  # GET, PUT or POST (a namespace's upload policy)
    root: str  # the store's root, by digest
    expires: float  # epoch seconds
    key: str | None = None  # one object...
    prefix: str | None = None  # ...or (PUT, POST) any key below this, ending in '/'
    max_bytes: int | None = None  # PUT, POST: the most one object may hold
    media_type: str | None = None  # PUT: the content type it must declare
    max_objects: int | None = None  # POST: how many objects the namespace may hold
    max_total_bytes: int | None = None  # POST: and all of them together


def sign(claims: Claims) -> str:
    body = {k: v for k, v in claims.__dict__.items() if v is not None}
    payload = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
    return f"v1.{payload}.{_b64(_mac(payload))}"


def verify(token: str, *, now: float) -> Claims:
    """The claims of a token this process signed that has not expired; InvalidGrant otherwise."""
    version, _, rest = token.partition(".")
    payload, _, signature = rest.partition(".")
    if version != "v1" or not payload or not signature or len(token) > 8192:
        raise InvalidGrant("not a grant")
    try:
        valid = hmac.compare_digest(_unb64(signature), _mac(payload))
    except (binascii.Error, ValueError):
        valid = False
    if not valid:
        raise InvalidGrant("the grant's signature does not match")
    claims = Claims(**json.loads(_unb64(payload)))
    if claims.expires <= now:
        raise InvalidGrant("the grant has expired")
    return claims


def root_id(root: Path) -> str:
    return hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]


class LocalGrants(ObjectGrants):
    """Grants on the FileObjectStore at `root`, served by this process's grant server for `tls_dir`'s CA."""

    def __init__(self, root: Path, tls_dir: Path) -> None:
        self.root = root
        self.server = grant_server(tls_dir)
        self.root_id = self.server.register(root)

    def read(self, key: str, *, ttl_s: float = 300.0) -> Grant:
        return self._grant(Claims("GET", self.root_id, self._expiry(ttl_s), key=check_object_key(key)))

    def write(self, key: str, *, media_type: str, max_bytes: int, ttl_s: float = 300.0) -> Grant:
        claims = Claims(
            "PUT",
            self.root_id,
            self._expiry(ttl_s),
            key=check_object_key(key),
            max_bytes=max_bytes,
            media_type=media_type,
        )
        return self._grant(claims, {"content-type": media_type})

    def write_under(self, prefix: str, *, max_bytes: int, ttl_s: float = 300.0) -> Grant:
        """PUTs of any key below `prefix` (the URL's path goes on with the key's rest), each at most `max_bytes`."""
        check_object_key(prefix.rstrip("/"))
        claims = Claims("PUT", self.root_id, self._expiry(ttl_s), prefix=prefix.rstrip("/") + "/", max_bytes=max_bytes)
        return self._grant(claims)

    def namespace(self, root: str, *, limits: NamespaceLimits, ttl_s: float = 300.0) -> NamespaceGrant:
        root = check_object_key(root.rstrip("/"))
        claims = Claims(
            "POST",
            self.root_id,
            self._expiry(ttl_s),
            prefix=root + "/",
            max_bytes=limits.max_object_bytes,
            max_objects=limits.max_objects,
            max_total_bytes=limits.max_total_bytes,
        )
        return NamespaceGrant(
            url=f"{self.server.origin}/grants/{sign(claims)}",
            path_field=UPLOAD_KEY_FIELD,
            file_field=UPLOAD_FILE_FIELD,
            expires_at=datetime.datetime.fromtimestamp(int(claims.expires), datetime.UTC),
            root=root,
            root_path=root,
            limits=limits,
        )

    def size(self, key: str) -> int | None:
        path = self.root / check_object_key(key)
        return path.stat().st_size if path.is_file() else None

    @staticmethod
    def _expiry(ttl_s: float) -> float:
        return time.time() + check_ttl(ttl_s)

    def _grant(self, claims: Claims, headers: dict[str, str] | None = None) -> Grant:
        return Grant(
            method="GET" if claims.method == "GET" else "PUT",
            url=f"{self.server.origin}/grants/{sign(claims)}",
            headers=headers or {},
            expires_at=datetime.datetime.fromtimestamp(int(claims.expires), datetime.UTC),
            key=claims.key or claims.prefix or "",
            max_bytes=claims.max_bytes,
        )


class GrantServer:
    """Serves the grants of the local stores registered with it, over HTTPS on 127.0.0.1 (a daemon thread)."""

    def __init__(self, tls_dir: Path) -> None:
        self.tls_dir = tls_dir
        self.roots: dict[str, Path] = {}  # one per store opened in this process (not per run or grant)
        self.origin = ""
        self._lock = threading.Lock()

    def register(self, root: Path) -> str:
        ident = root_id(root)
        with self._lock:
            self.roots.setdefault(ident, root.resolve())
            if not self.origin:
                self._start()
        return ident

    def _start(self) -> None:
        import uvicorn

        cert, key = server_files(self.tls_dir, self.tls_dir / "run")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # so asyncio turns Nagle off
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            grant_app(self.roots),
            ssl_certfile=str(cert),
            ssl_keyfile=str(key),
            log_level="warning",
            access_log=False,  # its lines would carry tokens
            lifespan="off",
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="grant-server")
        thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise BadInput(f"the local grant server did not start on 127.0.0.1:{port}", "see the log above for why")
            time.sleep(0.01)
        for path in (cert, key):  # loaded: nothing needs them on disk any more
            path.unlink(missing_ok=True)
        self.origin = f"https://127.0.0.1:{port}"


_servers: dict[Path, GrantServer] = {}
_servers_lock = threading.Lock()


def grant_server(tls_dir: Path) -> GrantServer:
    with _servers_lock:
        return _servers.setdefault(tls_dir.resolve(), GrantServer(tls_dir))


def grant_app(roots: dict[str, Path]) -> HostGuard:
    """The grant server's app: GET, HEAD and PUT at /grants/TOKEN[/REST], behind the guard of every server."""

    async def handle(request: Request) -> Response:
        try:
            claims = verify(request.path_params["token"], now=time.time())
        except (InvalidGrant, ValueError, TypeError) as e:
            return refused(403, f"grant refused: {e}")
        if claims.method != ("GET" if request.method == "HEAD" else request.method):
            return refused(403, f"grant refused: it is for a {claims.method}, not a {request.method}")
        if claims.method == "POST":
            return await _post(request, claims, roots)
        rest = request.path_params.get("rest")
        if (rest is None) == (claims.prefix is not None):
            return refused(
                403, "grant refused: it names " + ("a prefix: add the key's rest" if rest is None else "one key")
            )
        root = roots.get(claims.root)
        if root is None:
            return refused(404, "grant refused: its store is not served here")
        try:
            key = check_object_key(claims.key or f"{claims.prefix}{rest}")
        except BadInput as e:
            return refused(400, str(e))
        path = (root / key).resolve()
        if not path.is_relative_to(root):  # a link inside the store may not lead out of it
            return refused(403, "grant refused: the key leads out of the store")
        if request.method in ("GET", "HEAD"):
            return await _serve(path, head=request.method == "HEAD")
        if claims.media_type is not None:
            sent = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if sent != claims.media_type.lower():
                return refused(403, f"grant refused: it is for content type {claims.media_type!r}, not {sent!r}")
        return await _store(request, path, claims.max_bytes or 0)

    routes = [
        Route("/grants/{token}", handle, methods=["GET", "HEAD", "PUT", "POST"]),
        Route("/grants/{token}/{rest:path}", handle, methods=["GET", "HEAD", "PUT"]),
    ]
    return HostGuard(Starlette(routes=routes), form_paths=("/grants/",))  # a namespace grant's upload is a form


async def _post(request: Request, claims: Claims, roots: dict[str, Path]) -> Response:
    """One object of a namespace, from a multipart form: its key below the grant's prefix, its bytes within the
    object's bound, and the namespace's count and total within theirs once it is written (nothing is written else)."""
    root, prefix, limit = roots.get(claims.root), claims.prefix or "", claims.max_bytes or 0
    if root is None or not prefix:
        return refused(404, "grant refused: its store is not served here")
    seen = 0

    async def counted() -> Message:  # the form is parsed as it arrives: its size is bounded as it arrives too
        nonlocal seen
        message = await request.receive()
        seen += len(message.get("body", b""))
        if seen > limit + _FORM_OVERHEAD:
            raise BodyTooLarge
        return message

    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit + _FORM_OVERHEAD:
        return refused(413, f"the object is larger than this grant's {limit} bytes")
    try:
        form = await Request(request.scope, counted).form(max_files=1, max_fields=16, max_part_size=8192)
    except BodyTooLarge:
        return refused(413, f"the object is larger than this grant's {limit} bytes")
    except HTTPException as e:
        return refused(400, f"not a namespace upload: {e.detail}")
    try:
        key, upload = form.get(UPLOAD_KEY_FIELD), form.get(UPLOAD_FILE_FIELD)
        if not isinstance(key, str) or not isinstance(upload, UploadFile):
            return refused(
                400, f"a namespace upload is a multipart form with {UPLOAD_KEY_FIELD!r} and {UPLOAD_FILE_FIELD!r}"
            )
        if not key.startswith(prefix):
            return refused(403, "grant refused: the key is not below its namespace")
        try:
            key = check_object_key(key)
        except BadInput as e:
            return refused(400, str(e))
        path = (root / key).resolve()
        folder = (root / prefix).resolve()
        if not path.is_relative_to(folder):
            return refused(403, "grant refused: the key leads out of its namespace")
        size = upload.size if upload.size is not None else 0
        if size > limit:
            return refused(413, f"the object is larger than this grant's {limit} bytes")
        others = [p for p in folder.rglob("*") if p.is_file() and p != path and not p.name.startswith(".tmp-")]
        if claims.max_objects is not None and len(others) + 1 > claims.max_objects:
            return refused(413, f"the namespace already holds {len(others)} objects, its grant's most")
        total = sum(p.stat().st_size for p in others) + size
        if claims.max_total_bytes is not None and total > claims.max_total_bytes:
            return refused(413, f"the namespace would hold {total} bytes, over its grant's {claims.max_total_bytes}")
        await asyncio.to_thread(_land, upload, path)
    finally:
        await form.close()
    return Response(status_code=204)


def _land(upload: UploadFile, path: Path) -> None:
    """An uploaded file at `path`, atomically (a temp file beside it, renamed into place)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        upload.file.seek(0)
        with os.fdopen(fd, "wb") as f:
            while chunk := upload.file.read(_CHUNK):
                f.write(chunk)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def refused(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


async def _serve(path: Path, *, head: bool) -> Response:
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the stream below
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return refused(404, "no such object")
    headers = {"content-length": str(os.fstat(f.fileno()).st_size), "content-type": "application/octet-stream"}
    if head:
        f.close()
        return Response(headers=headers)

    async def chunks():
        with f:
            while chunk := await asyncio.to_thread(f.read, _CHUNK):
                yield chunk

    return StreamingResponse(chunks(), headers=headers)


async def _store(request: Request, path: Path, limit: int) -> Response:
    """The body into `path`, atomically, if it is at most `limit` bytes (413 otherwise: nothing is written)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        return refused(413, f"the object is larger than this grant's {limit} bytes")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        size = 0
        with os.fdopen(fd, "wb") as f:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    return refused(413, f"the object is larger than this grant's {limit} bytes")
                await asyncio.to_thread(f.write, chunk)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return Response(status_code=200)


def _mac(payload: str) -> bytes:
    return hmac.new(_KEY, f"v1.{payload}".encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
