"""How deeply JSON may nest: measured before anything parses it (SECURITY.md, "the door").

Python's json, and what is built on it (Starlette's `request.json()`, protobuf's json_format), recurses once
per level of nesting. A thousand levels raise RecursionError where the text is parsed; a value a little
shallower parses, then raises wherever it is dumped or walked again (a trajectory read, a response). So:
- every request body is measured piece by piece as the app reads it, each piece before the app gets it
  (`JsonBodies`, which `guard.HostGuard` puts in front of each app): JSON nested deeper than MAX_DEPTH levels
  is answered 400 (a JSON-RPC error on the paths that speak it), and what the app gets instead is a body no
  JSON parser takes, so nothing parses it. The app's own checks (tokens, per-caller limits) come first, as
  before: the door holds no body back;
- JSON from elsewhere (inside a string, in a store) is measured where it is parsed (`loads`);
- a RecursionError that escapes an app anyway is answered 422, never a 500 with a traceback.

Measuring is linear and never recurses: a few C-level passes over the bytes (escapes out, only quotes and
brackets kept, strings cut out) and a running sum over the brackets left. bench/json_depth.py, on this 2-core
machine: 2 us for a tool call or a typical 1 KB body (the door adds ~3 us to a request), 9 ms for 1 MB of
typical JSON (json.loads: 13-26 ms), 26 ms for the worst 1 MB (all brackets; json.loads: 85 ms). A body is
measured as it arrives, as a JSON parser would read it: UTF-16 and UTF-32 are decoded first, as `json.loads`
does, and a text that does not open an array or object nests nothing.
"""

from __future__ import annotations

import codecs
import json
import logging
import re
from collections.abc import Mapping
from itertools import accumulate
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("agent_env.json_depth")

MAX_DEPTH = 64  # levels of arrays and objects inside one another; the deepest of our own payloads is ~10
# JSON-RPC paths answer with a JSON-RPC error object, with the HTTP status their protocol uses for one:
JSON_RPC = 200  # the agent-env data plane and A2A (DESIGN.md §8: errors come back with HTTP 200)
MCP = 400  # MCP's streamable HTTP: a body it cannot parse is a 400 with a JSON-RPC error
PARSE_ERROR, INTERNAL_ERROR = -32700, -32603

_STRUCTURE = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # openers +1, closers -1 (as signed bytes)
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[{]}')  # dropped: all but quotes and brackets
_OPEN, _QUOTE = b"\x01", b'"'
_WHITESPACE = b" \t\n\r"
_SUMS = 65536  # brackets summed at a time: bounds the list a hostile body can make us build


class TooDeep(ValueError):
    """JSON nested deeper than the limit (a ValueError: where invalid JSON is refused, so is this)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"JSON nested deeper than {limit} levels (arrays and objects inside one another) is refused; "
            "send flatter JSON"
        )
        self.limit = limit


class DepthScanner:
    """The nesting of a JSON text fed in pieces (a request body as it arrives). `feed` raises TooDeep as
    soon as the text so far nests deeper than `limit`; `done` is set once nothing after can nest (the text
    is not an array or object, or not text in its encoding). Invalid JSON may count deeper than a parser
    would get (it stops at the first error), never shallower."""

    def __init__(self, limit: int = MAX_DEPTH) -> None:
        self.limit = limit
        self.depth = 0
        self.done = False
        self._head = b""  # the first bytes, kept until there are enough (4) to tell the encoding
        self._encoded = False  # the encoding is known
        self._decoder: codecs.IncrementalDecoder | None = None  # UTF-16/32: decoded to UTF-8 first
        self._started = False  # past the leading whitespace: the text opens an array or object
        self._in_string = False
        self._escaped = False  # the last piece ended with a backslash inside a string

    def feed(self, data: bytes, *, last: bool = False) -> None:
        """The next piece of the text (`last`: the text ends with it)."""
        if self.done or not (data or last and self._head):
            return
        if last and self._decoder is None:  # (a decoder may hold bytes of the pieces before)
            rest = self._head + data if self._head else data
            if self.depth + rest.count(b"[") + rest.count(b"{") <= self.limit:
                self.done = True  # too few brackets left to get too deep (in any encoding): most bodies end here
                return
        if not self._encoded:
            self._head += data
            if len(self._head) < 4 and not last:
                return
            data, self._head, self._encoded = self._head, b"", True
            encoding = json.detect_encoding(data)  # what json.loads(bytes) decodes with
            if encoding not in ("utf-8", "utf-8-sig"):
                self._decoder = codecs.getincrementaldecoder(encoding)("surrogatepass")
            elif data.startswith(codecs.BOM_UTF8):
                data = data[len(codecs.BOM_UTF8) :]
        if self._decoder is not None:
            try:
                data = self._decoder.decode(data).encode("utf-8", "surrogatepass")
            except UnicodeDecodeError:  # not text in that encoding: parsers stop at decoding it
                self.done = True
                return
        if not self._started:
            data = data.lstrip(_WHITESPACE)
            if not data:
                return
            if data[0] not in b"[{":  # a scalar, or not JSON: a parser reads one value, nothing nested
                self.done = True
                return
            self._started = True
        self._scan(data)

    def _scan(self, data: bytes) -> None:
        """Every step is a C-level pass over the piece; no step looks at a byte twice in Python."""
        if self._escaped:
            data, self._escaped = b"\\" + data, False
        if b"\\" in data:  # escapes: only an escaped quote hides a quote, and `\\` pairs decide which are
            data = data.replace(b"\\\\", b"")
            if data.endswith(b"\\"):  # it escapes the next piece's first byte
                data, self._escaped = data[:-1], True
            data = data.replace(b'\\"', b"")
        # Quotes and brackets are all that is left; two quotes in a row hold nothing and go (what is inside
        # or outside a string stays so); then what lies between odd and even quotes is inside strings.
        data = data.translate(_STRUCTURE, _NOT_STRUCTURE).replace(b'""', b"")
        if _QUOTE in data:
            parts = data.split(_QUOTE)
            data = b"".join(parts[1 if self._in_string else 0 :: 2])
            self._in_string ^= len(parts) % 2 == 0  # an odd number of quotes
        elif self._in_string:
            return
        self._count(data)

    def _count(self, steps: bytes) -> None:
        opened = steps.count(_OPEN)
        if self.depth + opened > self.limit:  # (else it cannot get too deep: most bodies stop here)
            view = memoryview(steps).cast("b")
            for at in range(0, len(view), _SUMS):
                if max(accumulate(view[at : at + _SUMS], initial=self.depth)) > self.limit:
                    raise TooDeep(self.limit)
                self.depth += sum(view[at : at + _SUMS])
            return
        self.depth += 2 * opened - len(steps)


def depth_ok(text: bytes | str, limit: int = MAX_DEPTH) -> bool:
    """Whether `text`, read as JSON, nests at most `limit` levels."""
    try:
        check(text, limit)
    except TooDeep:
        return False
    return True


def check(text: bytes | str, limit: int = MAX_DEPTH) -> None:
    """Raises TooDeep if `text`, read as JSON, nests deeper than `limit`."""
    if len(text) <= limit:  # (every level takes a character at least)
        return
    DepthScanner(limit).feed(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text, last=True)


def loads(text: bytes | str, limit: int = MAX_DEPTH) -> Any:
    """`json.loads`, for JSON nested at most `limit` levels (TooDeep, a ValueError, for deeper)."""
    check(text, limit)
    try:
        return json.loads(text)
    except RecursionError:  # a limit close to Python's own, or a deep stack already
        raise TooDeep(limit) from None


class JsonBodies:
    """ASGI middleware: each piece of a request body is measured before the app gets it (see the module's doc).

    `json_rpc`: paths (regular expressions, matched whole) whose answers are JSON-RPC error objects, with
    the HTTP status their protocol gives those (JSON_RPC or MCP); other paths get `{"error": ...}`.
    """

    def __init__(self, app: ASGIApp, *, json_rpc: Mapping[str, int] | None = None, limit: int = MAX_DEPTH) -> None:
        self.app = app
        self.limit = limit
        self.json_rpc = [(re.compile(path), status) for path, status in (json_rpc or {}).items()]

    def answer(self, scope: Scope, message: str, code: int, status: int) -> tuple[int, bytes]:
        """(HTTP status, body) of a refusal on this path: `code` and `message` as a JSON-RPC error on the
        JSON-RPC paths (with their status), else `status` and `{"error": message}`."""
        path = scope.get("path", "")
        for pattern, rpc_status in self.json_rpc:
            if pattern.fullmatch(path):
                error = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
                return rpc_status, json.dumps(error).encode()
        return status, json.dumps({"error": message}).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scanner = DepthScanner(self.limit)
        refused = started = False
        deferred: list[Message] = []  # a 500 the app sends, held until we know whether a RecursionError made it

        async def measured() -> Message:
            """The body as the app reads it (after its own checks: tokens, limits), each piece measured first."""
            nonlocal refused
            message = await receive()
            if message["type"] == "http.request" and not refused:
                try:
                    scanner.feed(message.get("body", b""), last=not message.get("more_body", False))
                except TooDeep as e:
                    refused = True
                    if not started:
                        await _send(send, *self.answer(scope, str(e), PARSE_ERROR, 400))
                    # What the app has read so far nests within the limit; ended by a byte no JSON parser takes,
                    # it is refused by the app too (its answer goes nowhere), quietly: no read is cut off.
                    return {"type": "http.request", "body": b"\x00", "more_body": False}
            return message

        async def send_app(message: Message) -> None:
            nonlocal started
            if refused:
                return  # our answer went instead
            if deferred or (message["type"] == "http.response.start" and message["status"] == 500):
                deferred.append(message)
                return
            started = True
            await send(message)

        try:
            await self.app(scope, measured, send_app)
        except Exception as e:
            if refused:
                return  # the app stumbled over the body we ended; it was answered
            if isinstance(e, RecursionError) and not started:
                log.warning(
                    "%s %s: a value nested too deeply to handle (RecursionError)", scope["method"], scope["path"]
                )
                problem = (
                    f"a value here nests too deeply to handle; JSON is limited to {self.limit} levels "
                    "(arrays and objects inside one another)"
                )
                await _send(send, *self.answer(scope, problem, INTERNAL_ERROR, 422))
                return
            for message in deferred:
                await send(message)
            raise
        if not refused:  # (else our answer went, and the app's 500 before it stays unsent)
            for message in deferred:
                await send(message)


async def _send(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
