"""`agent-env env validate`: wall time of a full validation (card, data plane, MCP tools, OpenAPI document, gate) as
a run, warm (server, worker and gateway up), of an env server's URL and of a built-in app deployed by the run.
Goal <= 10 s."""

from __future__ import annotations

import subprocess
import sys
import time

from common import AGENT_ENV, free_port, isolated_env, row, summarize, timed

RUNS = 3


def measure() -> dict:
    env = isolated_env()
    port = free_port()
    server = subprocess.Popen(
        [AGENT_ENV, "env", "serve", "notes", "--port", str(port), "--state", env["AGENT_ENV_HOME"] + "/notes"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        time.sleep(1.5)
        cold = timed([AGENT_ENV, "env", "validate", url], env)[0]  # starts the embedded server and worker
        by_url = [timed([AGENT_ENV, "env", "validate", url], env)[0] for _ in range(RUNS)]
        by_name = [timed([AGENT_ENV, "env", "validate", "notes"], env)[0] for _ in range(RUNS)]
    finally:
        server.terminate()
        server.wait(10)
        subprocess.run([AGENT_ENV, "server", "stop"], env=env, capture_output=True)
        subprocess.run([AGENT_ENV, "gateway", "stop"], env=env, capture_output=True)
    result = {
        "cold_url_s": cold,
        "warm_url_s": summarize(by_url)["median"],
        "warm_name_s": summarize(by_name)["median"],
    }
    print("agent-env env validate")
    row("cold, a URL (starts server and worker)", f"{cold:.2f} s")
    row(f"warm, a URL (median of {RUNS})", f"{result['warm_url_s']:.2f} s", "goal <= 10 s")
    row(f"warm, notes deployed by the run (median of {RUNS})", f"{result['warm_name_s']:.2f} s", "goal <= 10 s")
    return result


if __name__ == "__main__":
    sys.exit(0 if measure() else 1)
