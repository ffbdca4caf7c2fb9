"""One moto server for a test module (`python -m moto.server` on a free port of 127.0.0.1, over real HTTP), with
dummy credentials in the environment, so nothing of the user's AWS configuration is read. Shared by the AWS
store tests and the registry's tests of installs sharing AWS stores."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid

import pytest

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """One moto server for the module, and dummy credentials in the environment while it runs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with pytest.MonkeyPatch.context() as env, log.open("wb") as out:
        for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_REGION"):
            env.delenv(var, raising=False)
        for var, value in {
            **CREDENTIALS,
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        }.items():
            env.setenv(var, value)
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert server.poll() is None, f"moto's server exited: {log.read_text()[-2000:]}"
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "moto's server did not start in 60 s"
                    time.sleep(0.1)
            yield f"http://127.0.0.1:{port}"
        finally:
            server.terminate()
            server.wait(10)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"
