"""The agent inside a smol_vm guest: runs the sandbox's command and serves the provider's exec channel.

This file is not imported by agent-env: the smol_vm provider hands its text to the VM at boot (QEMU's fw_cfg,
beside a JSON config), and the guest's init runs it with the guest's own Python 3 (stdlib only). It listens on
the guest's port AGENT_PORT, which QEMU's user-mode network forwards from a port on the host's loopback; every
request must carry the sandbox's bearer token (the config's `token`), since any local user can reach that port.

    GET  /ready                -> 204 once the agent serves
    POST /exec {command, timeout} -> {exit_code, stdout, stderr} (504 on timeout)
    PUT  /file?path=ABS  body  -> 204;   GET /file?path=ABS -> the bytes (404 when missing)
    GET  /logs?lines=N         -> the last lines the sandbox's command printed
"""

import hmac
import http.server
import json
import os
import subprocess
import sys
import urllib.parse
from collections import deque

AGENT_PORT = 7000
APP_LOG = "/var/log/agentenv-app.log"


def load_config(path: str) -> dict:
    with open(path, "rb") as f:
        return json.loads(f.read())


class Handler(http.server.BaseHTTPRequestHandler):
    token = ""
    env: dict = {}
    home = "/root"  # where commands run
    app_log = APP_LOG

    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        pass  # the console is not a request log

    def _authorized(self) -> bool:
        given = self.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            return True
        self._send(401, b"unauthorized")
        return False

    def _send(self, code: int, body: bytes = b"", kind: str = "application/octet-stream") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _query(self) -> dict:
        return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self):  # noqa: N802 - the stdlib's name
        if not self._authorized():
            return
        route = urllib.parse.urlsplit(self.path).path
        if route == "/ready":
            self._send(204)
        elif route == "/file":
            try:
                with open(self._query()["path"], "rb") as f:
                    self._send(200, f.read())
            except (KeyError, OSError) as e:
                self._send(404, str(e).encode())
        elif route == "/logs":
            lines = int(self._query().get("lines", "20"))
            try:
                with open(self.app_log, "rb") as f:
                    tail = b"".join(deque(f, maxlen=lines))
            except OSError:
                tail = b""
            self._send(200, tail, "text/plain")
        else:
            self._send(404)

    def do_PUT(self):  # noqa: N802
        if not self._authorized():
            return
        try:
            path = self._query()["path"]
            data = self._body()
            os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        except (KeyError, OSError) as e:
            self._send(400, str(e).encode())
            return
        self._send(204)

    def do_POST(self):  # noqa: N802
        if not self._authorized():
            return
        if urllib.parse.urlsplit(self.path).path != "/exec":
            self._send(404)
            return
        ask = json.loads(self._body())
        try:
            done = subprocess.run(
                ask["command"],
                env=self.env,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=float(ask.get("timeout", 60)),
            )
        except subprocess.TimeoutExpired:
            self._send(504, b"timed out")
            return
        except OSError as e:
            answer = {"exit_code": 127, "stdout": "", "stderr": str(e)}
        else:
            answer = {
                "exit_code": done.returncode,
                "stdout": done.stdout.decode(errors="replace"),
                "stderr": done.stderr.decode(errors="replace"),
            }
        self._send(200, json.dumps(answer).encode(), "application/json")


def main(config_path: str) -> None:
    config = load_config(config_path)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    env.update(config.get("env") or {})
    Handler.token = config["token"]
    Handler.env = env
    server = http.server.ThreadingHTTPServer(("0.0.0.0", AGENT_PORT), Handler)
    if config.get("command"):
        with open(APP_LOG, "ab") as log:
            try:
                subprocess.Popen(
                    config["command"], env=env, cwd="/root", stdin=subprocess.DEVNULL, stdout=log, stderr=log
                )
            except OSError as e:
                log.write(f"agentenv: cannot start {config['command'][0]!r}: {e}\n".encode())
    print("agentenv: agent ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])  # the config fw_cfg passed (see the image's /sbin/agentenv-init)
