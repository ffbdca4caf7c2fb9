"""Run in a sandbox by `env_outcome_verifier` (standard library only: the sandbox's Python may have nothing else):
load a verifier script, call its `verify(mcp_url)`, write what it returns as JSON.

    python3 outcome_runner.py VERIFY.py GATEWAY_MCP_URL TOKEN_FILE RESULT_FILE

The framework's verifier scripts are given a bare MCP URL. The gateway's endpoint wants the agent's token in an
Authorization header, so the script is given a forwarder on 127.0.0.1 instead, which adds the header and passes
every request and its (possibly streamed) answer through. The token is read from a file that is then deleted.
"""

from __future__ import annotations

import asyncio
import http.client
import importlib.util
import inspect
import json
import os
import sys
import threading
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PASSED_HEADERS = ("content-type", "accept", "mcp-session-id", "mcp-protocol-version", "last-event-id")
MAX_RESULT_CHARS = 1_000_000


def forwarder(target: str, token: str) -> ThreadingHTTPServer:
    """A server on 127.0.0.1 that relays each request to `target` with the token added."""
    url = urllib.parse.urlsplit(target)
    connection = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection

    class Relay(BaseHTTPRequestHandler):
        def relay(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() in PASSED_HEADERS}
            headers["Authorization"] = f"Bearer {token}"
            upstream = connection(url.hostname or "127.0.0.1", url.port, timeout=600)
            try:
                upstream.request(self.command, url.path, body=body, headers=headers)
                answer = upstream.getresponse()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() in PASSED_HEADERS:
                        self.send_header(name, value)
                self.send_header("Connection", "close")  # the body ends when the connection does (streams too)
                self.end_headers()
                while chunk := answer.read1(65536):
                    self.wfile.write(chunk)
                    self.wfile.flush()
            finally:
                upstream.close()

        do_GET = do_POST = do_DELETE = relay

        def log_message(self, format: str, *args: object) -> None:  # quiet: stderr is the verifier's
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(script: str, target: str, token_file: str, result_file: str) -> int:
    with open(token_file) as f:
        token = f.read().strip()
    os.unlink(token_file)
    server = forwarder(target, token)
    local = f"http://127.0.0.1:{server.server_address[1]}/mcp"
    try:
        spec = importlib.util.spec_from_file_location("outcome_verifier", script)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {script}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        verify = getattr(module, "verify", None)
        if verify is None:
            raise AttributeError("the script has no `verify(mcp_url)` function")
        if "run" in inspect.signature(verify).parameters:
            raise TypeError("verify(mcp_url, run=...) is not supported yet: write verify(mcp_url)")
        results = verify(local)
        if inspect.iscoroutine(results):
            results = asyncio.run(results)
        outcome = {"results": results}
    except BaseException as e:  # noqa: BLE001 - whatever the script raises is the verifier's error, reported
        outcome = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
    finally:
        server.shutdown()
    text = json.dumps(outcome, default=str)
    if len(text) > MAX_RESULT_CHARS:
        text = json.dumps({"error": f"the results are {len(text)} characters; at most {MAX_RESULT_CHARS}"})
    with open(result_file, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
