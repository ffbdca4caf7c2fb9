"""The agent inside a smol_vm guest: runs the sandbox's command and serves the provider's exec channel.

This file is not imported by agent-env: the smol_vm provider hands its text to the VM at boot (QEMU's fw_cfg,
beside a JSON config), and the guest's init runs it with the guest's own Python 3 (stdlib only). It listens on
the guest's port AGENT_PORT, which QEMU's user-mode network forwards from a port on the host's loopback; every
request must carry the sandbox's bearer token (the config's `token`), since any local user can reach that port.

    GET  /ready                -> 204 once the agent serves
    POST /exec {command, timeout} -> {exit_code, stdout, stderr} (504 on timeout)
    PUT  /file?path=ABS  body  -> 204;   GET /file?path=ABS -> the bytes (404 when missing)
    GET  /logs?lines=N         -> the last lines the sandbox's command printed
    PUT  /image  body          -> {image_id}: an image workload's `docker save` tar, loaded and run (below)

An image workload (the config's `container`, in the guest scripts/smol-vm-image --docker builds): the agent starts
dockerd at boot instead of a command, and the provider streams the image's tar to PUT /image; the agent pipes it
into `docker load`, runs the container on the VM's network (`--network host`: the VM is the sandbox) with the
sandbox's env and command, and from then on exec runs in the container (`docker exec`), files are the container's
(through its init's /proc/PID/root) and logs are its output.
"""

import hmac
import http.server
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
from collections import deque

AGENT_PORT = 7000
APP_LOG = "/var/log/agentenv-app.log"
CONTAINER = "agentenv-app"
DOCKER = "/usr/bin/docker"  # by its path: a sandbox's env may set PATH
DOCKER_SOCKET = "/run/docker.sock"
DOCKERD = ["dockerd", "--storage-driver=overlay2", "--iptables=false", "--ip-masq=false", "--bridge=none"]
DOCKERD_TIMEOUT = 600  # seconds for dockerd to answer (software emulation on a busy host is slow)
CHUNK = 1 << 20


def load_config(path: str) -> dict:
    with open(path, "rb") as f:
        return json.loads(f.read())


def _docker(*args: str, env: dict, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([DOCKER, *args], env=env, stdout=subprocess.PIPE, **kw)


def _dockerd_answers() -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(DOCKER_SOCKET)
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in s.recv(64)
    except OSError:
        return False


def wait_for_dockerd() -> None:
    """Poll dockerd's socket (cheap: starting docker's CLI in a loop would slow an emulated guest's dockerd)."""
    deadline = time.monotonic() + DOCKERD_TIMEOUT
    while not _dockerd_answers():
        if time.monotonic() > deadline:
            raise OSError(f"dockerd did not answer within {DOCKERD_TIMEOUT}s (see /var/log/dockerd.log)")
        time.sleep(0.1)


class Handler(http.server.BaseHTTPRequestHandler):
    token = ""
    env: dict = {}  # the guest's own commands' (docker's CLI, for an image workload)
    home = "/root"  # where commands run
    app_log = APP_LOG
    container: dict | None = None  # an image workload: {"env": ..., "command": ...} until it runs
    root = ""  # an image workload's files: its init's /proc/PID/root once it runs

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
                with open(self._path(self._query()["path"]), "rb") as f:
                    self._send(200, f.read())
            except (KeyError, OSError) as e:
                self._send(404, str(e).encode())
        elif route == "/logs":
            lines = int(self._query().get("lines", "20"))
            if self.root:
                logs = _docker("logs", "--tail", str(lines), CONTAINER, env=self.env, stderr=subprocess.STDOUT)
                self._send(200, logs.stdout, "text/plain")
                return
            try:
                with open(self.app_log, "rb") as f:
                    tail = b"".join(deque(f, maxlen=lines))
            except OSError:
                tail = b""
            self._send(200, tail, "text/plain")
        else:
            self._send(404)

    def _path(self, path: str) -> str:
        """A path the caller names: the container's once an image workload runs, else the guest's."""
        return os.path.join(self.root, path.lstrip("/")) if self.root else path

    def do_PUT(self):  # noqa: N802
        if not self._authorized():
            return
        if urllib.parse.urlsplit(self.path).path == "/image":
            self._run_image()
            return
        try:
            path = self._path(self._query()["path"])
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
        command = [DOCKER, "exec", CONTAINER, *ask["command"]] if self.root else ask["command"]
        try:
            done = subprocess.run(
                command,
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

    def _run_image(self) -> None:
        """Load the streamed `docker save` tar and run it as the sandbox's container; answer its image id."""
        if self.container is None or self.root:
            self._send(409, b"this sandbox runs no image workload, or its container already runs")
            return
        try:
            wait_for_dockerd()
            load = subprocess.Popen([DOCKER, "load", "-q"], env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            left = int(self.headers.get("Content-Length") or 0)
            while left > 0:
                chunk = self.rfile.read(min(CHUNK, left))
                if not chunk:
                    break
                load.stdin.write(chunk)
                left -= len(chunk)
            loaded, _ = load.communicate()
        except OSError as e:
            self._send(500, str(e).encode())
            return
        image = loaded.decode(errors="replace").strip().rsplit(": ", 1)[-1]  # "Loaded image[ ID]: X"
        if load.returncode != 0 or not image:
            self._send(500, b"docker load failed: " + loaded[-800:])
            return
        env = {**self.env, **self.container["env"]}  # values reach docker's CLI by name, never on its command line
        names = [a for name in self.container["env"] for a in ("-e", name)]
        run = _docker("run", "-d", "--name", CONTAINER, "--network", "host", *names, image,
                      *(self.container.get("command") or []), env=env)  # fmt: skip
        inspect = _docker("inspect", "-f", "{{.State.Pid}} {{.Image}}", CONTAINER, env=self.env)
        pid, _, image_id = inspect.stdout.decode().strip().partition(" ")
        if run.returncode != 0 or inspect.returncode != 0 or pid in ("", "0"):
            logs = _docker("logs", "--tail", "20", CONTAINER, env=self.env, stderr=subprocess.STDOUT).stdout
            self._send(500, b"the container did not start: " + (run.stderr + logs)[-800:])
            return
        type(self).root = f"/proc/{pid}/root"
        self._send(200, json.dumps({"image_id": image_id}).encode(), "application/json")


def main(config_path: str) -> None:
    config = load_config(config_path)
    guest = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    env = {**guest, **(config.get("env") or {})}
    Handler.token = config["token"]
    server = http.server.ThreadingHTTPServer(("0.0.0.0", AGENT_PORT), Handler)
    if config.get("container"):  # an image workload: the guest's commands are docker's, the sandbox's env is its
        Handler.env = guest
        Handler.container = {"env": config.get("env") or {}, "command": config.get("command")}
        with open("/var/log/dockerd.log", "ab") as log:
            subprocess.Popen(DOCKERD, env=Handler.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    elif config.get("command"):
        Handler.env = env
        with open(APP_LOG, "ab") as log:
            try:
                subprocess.Popen(
                    config["command"], env=env, cwd="/root", stdin=subprocess.DEVNULL, stdout=log, stderr=log
                )
            except OSError as e:
                log.write(f"agentenv: cannot start {config['command'][0]!r}: {e}\n".encode())
    else:
        Handler.env = env
    print("agentenv: agent ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])  # the config fw_cfg passed (see the image's /sbin/agentenv-init)
