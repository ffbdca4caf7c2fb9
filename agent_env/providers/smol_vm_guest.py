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
dockerd at boot instead of a command, and the provider streams the image's tar to PUT /image; the agent streams it
on to dockerd (`docker load`), runs the container on the VM's network (host mode: the VM is the sandbox) with the
sandbox's env and command, and from then on exec runs in the container (as `docker exec`), files are the
container's (through its init's /proc/PID/root) and logs are its output. It talks to dockerd's Engine API on its
socket, not through docker's CLI: each start of that Go binary costs seconds in an emulated guest.
"""

import contextlib
import hmac
import http.client
import http.server
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
from collections import deque
from collections.abc import Iterable

AGENT_PORT = 7000
APP_LOG = "/var/log/agentenv-app.log"
CONTAINER = "agentenv-app"
DOCKER_SOCKET = "/run/docker.sock"
DOCKERD = ["dockerd", "--storage-driver=overlay2", "--iptables=false", "--ip-masq=false", "--bridge=none"]
DOCKERD_TIMEOUT = 600  # seconds for dockerd to answer (software emulation on a busy host is slow)
CHUNK = 1 << 20


def say(what: str) -> None:
    """A line on the VM's console (the provider shows its tail when the VM fails), with the seconds since boot."""
    print(f"agentenv: [{time.clock_gettime(time.CLOCK_BOOTTIME):.1f}s] {what}", flush=True)


def load_config(path: str) -> dict:
    with open(path, "rb") as f:
        return json.loads(f.read())


# -- dockerd's Engine API on its socket: no docker CLI (each start of that Go binary costs seconds when emulated) --


class _DockerConnection(http.client.HTTPConnection):
    def __init__(self, timeout: float | None) -> None:
        super().__init__("docker", timeout=timeout)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(self.timeout)
        self.sock.connect(DOCKER_SOCKET)


def docker_api(method: str, path: str, body=None, *, timeout: float | None = 60, length: int | None = None):
    """(status, body) of one call; `body` is a JSON-able value, or chunks of `length` bytes to stream."""
    conn = _DockerConnection(timeout)
    try:
        headers = {"Content-Type": "application/json"}
        if length is not None:
            headers = {"Content-Type": "application/x-tar", "Content-Length": str(length)}
        elif body is not None:
            body = json.dumps(body).encode()
        conn.request(method, "/v1.41" + path, body=body, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def demux(raw: bytes) -> tuple[bytes, bytes]:
    """A container's output as dockerd streams it without a TTY: frames of [stream, 0, 0, 0, size] + bytes."""
    out, err, at = bytearray(), bytearray(), 0
    while at + 8 <= len(raw):
        kind, size = raw[at], struct.unpack(">I", raw[at + 4 : at + 8])[0]
        (err if kind == 2 else out).extend(raw[at + 8 : at + 8 + size])
        at += 8 + size
    return bytes(out), bytes(err)


def wait_for_dockerd() -> None:
    deadline = time.monotonic() + DOCKERD_TIMEOUT
    while True:
        try:
            if docker_api("GET", "/_ping", timeout=5)[0] == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise OSError(f"dockerd did not answer within {DOCKERD_TIMEOUT}s (see /var/log/dockerd.log)")
        time.sleep(0.1)


def load_and_run(tar: Iterable[bytes], length: int, env: dict, command: list | None) -> tuple[str, int]:
    """Load a `docker save` tar and run its image as the sandbox's container: (the image's id, its init's pid)."""
    wait_for_dockerd()
    say("dockerd answers")
    status, loaded = docker_api("POST", "/images/load?quiet=1", tar, timeout=None, length=length)
    lines = [json.loads(line) for line in loaded.splitlines() if line.strip()]
    errors = [line.get("error") for line in lines if line.get("error")]
    refs = [line["stream"].strip().rsplit(": ", 1)[-1] for line in lines if "Loaded image" in line.get("stream", "")]
    if status != 200 or errors or not refs:
        raise OSError(f"docker load failed ({status}): {errors or loaded[-800:]!r}")
    say(f"loaded {refs[-1]}")
    spec = {"Image": refs[-1], "Env": [f"{k}={v}" for k, v in env.items()], "HostConfig": {"NetworkMode": "host"}}
    if command:
        spec["Cmd"] = command
    status, made = docker_api("POST", f"/containers/create?name={CONTAINER}", spec)
    if status == 201:
        status, made = docker_api("POST", f"/containers/{CONTAINER}/start")
    if status not in (201, 204):
        raise OSError(f"the container did not start ({status}): {made[-800:]!r}")
    state = json.loads(docker_api("GET", f"/containers/{CONTAINER}/json")[1])
    if not state["State"]["Pid"]:
        out, err = demux(docker_api("GET", f"/containers/{CONTAINER}/logs?stdout=1&stderr=1&tail=20")[1])
        raise OSError(f"the container exited at once ({state['State']['ExitCode']}): {(out + err)[-800:]!r}")
    say(f"container {CONTAINER} runs (pid {state['State']['Pid']})")
    return state["Image"], state["State"]["Pid"]


def exec_in_container(command: list, timeout: float) -> dict | None:
    """Run a command in the container as `docker exec` does: its answer, or None when it timed out (then killed)."""
    status, made = docker_api(
        "POST", f"/containers/{CONTAINER}/exec", {"Cmd": command, "AttachStdout": True, "AttachStderr": True}
    )
    if status != 201:
        return {"exit_code": 126, "stdout": "", "stderr": made.decode(errors="replace")}
    exec_id = json.loads(made)["Id"]
    try:
        raw = docker_api("POST", f"/exec/{exec_id}/start", {"Detach": False, "Tty": False}, timeout=timeout)[1]
    except TimeoutError:
        say(f"{command[0]} in the container timed out after {timeout:g}s: killing it")
        deadline = time.monotonic() + 60  # it may not even have started yet (runc is slow when emulated)
        while time.monotonic() < deadline:
            state = json.loads(docker_api("GET", f"/exec/{exec_id}/json")[1])
            if state.get("Pid") or (not state.get("Running") and state.get("ExitCode") is not None):
                break
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            if state.get("Pid") and state.get("Running"):
                os.kill(state["Pid"], signal.SIGKILL)
        return None
    while (done := json.loads(docker_api("GET", f"/exec/{exec_id}/json")[1]))["Running"]:
        time.sleep(0.02)
    out, err = demux(raw)
    return {
        "exit_code": done["ExitCode"],
        "stdout": out.decode(errors="replace"),
        "stderr": err.decode(errors="replace"),
    }


class Handler(http.server.BaseHTTPRequestHandler):
    token = ""
    env: dict = {}  # what commands in the guest get (none run there in an image workload)
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
                out, err = demux(docker_api("GET", f"/containers/{CONTAINER}/logs?stdout=1&stderr=1&tail={lines}")[1])
                self._send(200, out + err, "text/plain")
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
        if self.root:
            answer = exec_in_container(ask["command"], float(ask.get("timeout", 60)))
            if answer is None:
                self._send(504, b"timed out")
            else:
                self._send(200, json.dumps(answer).encode(), "application/json")
            return
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

    def _run_image(self) -> None:
        """Load the streamed `docker save` tar and run it as the sandbox's container; answer its image id."""
        if self.container is None or self.root:
            self._send(409, b"this sandbox runs no image workload, or its container already runs")
            return
        left = int(self.headers.get("Content-Length") or 0)

        def chunks():
            nonlocal left
            while left > 0 and (chunk := self.rfile.read(min(CHUNK, left))):
                left -= len(chunk)
                yield chunk

        try:
            image_id, pid = load_and_run(chunks(), left, self.container["env"], self.container["command"])
        except OSError as e:
            self._send(500, str(e).encode())
            return
        type(self).root = f"/proc/{pid}/root"
        self._send(200, json.dumps({"image_id": image_id}).encode(), "application/json")


def main(config_path: str) -> None:
    config = load_config(config_path)
    guest = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    env = {**guest, **(config.get("env") or {})}
    Handler.token = config["token"]
    server = http.server.ThreadingHTTPServer(("0.0.0.0", AGENT_PORT), Handler)
    if config.get("container"):  # an image workload: the sandbox's env and command are its container's
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
    say("agent ready")
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])  # the config fw_cfg passed (see the image's /sbin/agentenv-init)
