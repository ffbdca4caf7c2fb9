"""A tiny MCP server over streamable HTTP (JSON responses), standard library only, so it runs in a
bare Python image. Tools: `echo` (gives back what it is sent) and `whoami` (where it runs).

Listens on $HOST:$PORT (default 0.0.0.0:8000); MCP endpoint at /mcp. With $AGENT_ENV_SERVER_TOKEN set
(deploy_env sets it to a token only the gateway holds), every request must carry
`Authorization: Bearer <it>`, else 401: an agent on the same machine cannot bypass the gateway.
"""

import hmac
import json
import os
import platform
import socket
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
TOKEN = os.environ.pop("AGENT_ENV_SERVER_TOKEN", "") or None  # popped: nothing this server starts inherits it
TOOLS = [
    {
        "name": "echo",
        "description": "Give back the text you send, unchanged.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "what to echo"}},
            "required": ["text"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "whoami",
        "description": "Where this server runs: host name, OS and Python version.",
        "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
        "annotations": {"readOnlyHint": True},
    },
]


def call_tool(name, arguments):
    result: dict[str, object]  # (a local annotation: never evaluated, any Python 3 runs it)
    if name == "echo":
        text = arguments.get("text")
        if not isinstance(text, str):
            return {"isError": True, "content": [{"type": "text", "text": "`text` must be a string"}]}
        result = {"text": text}
    elif name == "whoami":
        result = {
            "hostname": socket.gethostname(),
            "system": platform.platform(),
            "python": platform.python_version(),
            "pid": os.getpid(),
        }
    else:
        return {"isError": True, "content": [{"type": "text", "text": f"unknown tool {name!r}"}]}
    return {"content": [{"type": "text", "text": json.dumps(result)}], "structuredContent": result}


def answer(message):
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        asked = params.get("protocolVersion")
        return {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "echo-mcp", "version": "1.0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        return call_tool(params.get("name"), params.get("arguments") or {})
    raise LookupError(method)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Headers and body go out as separate writes: without this, Nagle's algorithm and delayed ACKs
        # hold each reply back ~40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def _send(self, status, body=None, headers=()):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorized(self):
        """Whether the request carries the server's token (compared as bytes, in constant time); if not,
        it has been answered 401."""
        if TOKEN is None:
            return True
        header = self.headers.get("Authorization") or ""
        given = header[7:].strip() if header[:7].lower() == "bearer " else ""
        if given and hmac.compare_digest(given.encode("utf-8", "surrogateescape"), TOKEN.encode()):
            return True
        # Its body is left unread, so the connection cannot carry another request: say so, and close it.
        self._send(
            401,
            {"error": "this server answers only the agent-env gateway: call its tools through the gateway"},
            [("WWW-Authenticate", "Bearer"), ("Connection", "close")],
        )
        return False

    def do_POST(self):
        if not self.authorized():
            return
        if self.path.split("?")[0] != "/mcp":
            return self._send(404, {"error": "not found"})
        try:
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        except (ValueError, RecursionError):  # not JSON, or nested too deeply for Python's parser
            return self._send(400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}})
        if "id" not in message:  # a notification
            return self._send(202)
        try:
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer(message)}
        except LookupError:
            reply = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": -32601, "message": f"method not found: {message.get('method')}"},
            }
        headers = [("Mcp-Session-Id", uuid.uuid4().hex)] if message.get("method") == "initialize" else []
        self._send(200, reply, headers)

    def do_GET(self):  # no server-initiated stream
        if self.authorized():
            self._send(405, {"error": "use POST"})

    def do_DELETE(self):
        if self.authorized():
            self._send(200, {})


if __name__ == "__main__":
    address = (os.environ.get("HOST", "0.0.0.0"), int(os.environ.get("PORT", "8000")))
    print(f"echo-mcp listening on {address[0]}:{address[1]}", flush=True)
    ThreadingHTTPServer(address, Handler).serve_forever()
