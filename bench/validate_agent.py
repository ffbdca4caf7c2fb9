"""`agent-env a2a-agent validate URL`: wall time of a full validation (every A2A validator installed, a mail
environment deployed for the MCP check) of an agent written with our SDK that needs no model (the built-in
scripted agent, searching the mail it is given). Goal <= 10 s warm (server, gateway and worker running), no model.
Cold (a new state directory: the server, gateway and background worker start first) is shown beside it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
from pathlib import Path

import uvicorn
from common import AGENT_ENV, exit_now, free_port, isolated_env, row, summarize, timed
from starlette.applications import Starlette

from agent_env.agents.builtin import ScriptedAgent
from agent_env.agents.sdk import a2a_routes
from agent_env.spec.agent import AgentRecord
from agent_env.stores.local_tls import trust_bundle

WARM_RUNS = 5


def serve_scripted_agent() -> str:
    """The scripted agent served by our SDK (with the extensions) from a thread; its URL."""
    record = AgentRecord(
        name="mail-searcher",
        type="scripted",
        config={"turns": [[{"tool": "search_messages", "arguments": {"query": "invoice"}}, {"say": "I searched."}]]},
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    routes, _ = a2a_routes(ScriptedAgent(record), url, extensions=True)
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        threading.Event().wait(0.01)
    return url


def measure() -> dict:
    logging.getLogger("a2a").setLevel(logging.ERROR)  # the protocol check's provoked errors are expected
    env = isolated_env()
    # the agent trusts this install's grants (its local store's CA), as one run beside it is told to: the object
    # transfers' checks then move their objects instead of retrying a TLS failure
    os.environ["SSL_CERT_FILE"] = str(trust_bundle(Path(env["AGENT_ENV_HOME"]) / "tls"))
    try:
        url = serve_scripted_agent()
        cold = timed([AGENT_ENV, "a2a-agent", "validate", url], env)[0]
        warm, mib, run_s = [], 0.0, []
        for _ in range(WARM_RUNS):
            wall, peak = timed([AGENT_ENV, "a2a-agent", "validate", url], env)
            warm.append(wall)
            mib = max(mib, peak)
        done = subprocess.run(
            [AGENT_ENV, "a2a-agent", "validate", url, "--json"], env=env, capture_output=True, text=True
        )
        result = json.loads(done.stdout)
        run_s.append(result["run_seconds"])
    finally:
        subprocess.run([AGENT_ENV, "server", "stop"], env=env, capture_output=True)
        subprocess.run([AGENT_ENV, "gateway", "stop"], env=env, capture_output=True)
    median = summarize(warm)["median"]
    print("agent-env a2a-agent validate (a scripted agent of our SDK, no model)")
    row(f"warm, median of {WARM_RUNS}", f"{median:.2f} s", f"goal <= 10 s; p90 {summarize(warm)['p90']:.2f} s")
    row("cold (new state: server, gateway, worker start)", f"{cold:.2f} s")
    row("the validation run itself (in Temporal)", f"{run_s[0]:.2f} s", f"peak CLI memory {mib:.0f} MiB")
    print(
        "  passed"
        if result["passed"]
        else f"  FAILED: {[n for n, r in result['validators'].items() if not r['passed']]}"
    )
    return {"warm_s": median, "cold_s": cold, "run_s": run_s[0], "passed": result["passed"]}


if __name__ == "__main__":
    measure()
    exit_now()
