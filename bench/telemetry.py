"""Tracing's per-run cost: runs of `hello` with `[telemetry] traces` off, then on.

Two figures: warm `agent-env run hello` (one CLI process per run, so "on" also pays for loading the tracing
SDK once), and runs one after another through one long-lived client and worker (what a worker pays per run).
On, every process (CLI or runner, the embedded gateway) exports its spans over OTLP/HTTP to a receiver this
benchmark runs (it decodes nothing; it answers as a collector would). Off and on alternate in blocks, each on
a gateway started with that setting, so drift on the machine falls on both.

Goal: on / off <= 1.05 per run in a long-lived worker. A CLI process that traces also loads the tracing SDK
and Temporal's interceptor once (about 50 ms on a quiet 2-core machine, several times that under load),
which its figure includes.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import subprocess
import sys
import threading
import time

from common import AGENT_ENV, isolated_env, row, summarize, timed

BLOCKS = 3
RUNS_PER_BLOCK = 4
IN_PROCESS_RUNS_PER_BLOCK = 30  # runs are ~0.1 s: enough of them to see a few percent)


class Receiver:
    """Accepts POST /v1/traces and counts the requests (an OTLP collector's answer: 200, empty message)."""

    def __init__(self) -> None:
        self.requests = 0
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                receiver.requests += 1
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def _runs_in_process(count: int) -> list[float]:
    """`count` runs of hello through one client and worker (this process's settings say whether it traces)."""
    from agent_env import telemetry
    from agent_env.config import load_settings
    from agent_env.task_lookup import resolve_target
    from agent_env.temporal import launch
    from agent_env.temporal.worker import create_worker
    from agent_env.temporal_client.client import connect

    settings = load_settings()
    telemetry.setup(settings, "bench")
    client = await connect(settings)
    walls = []
    async with create_worker(client, settings):
        for _ in range(count + 1):  # the first one warms up (imports, the gateway's first instance)
            start = time.perf_counter()
            state = await launch.wait_result(await launch.start_run(client, settings, resolve_target("hello")))
            walls.append(time.perf_counter() - start)
            assert state.status.value == "passed", state
    telemetry.flush()
    return walls[1:]


def measure() -> dict:
    receiver = Receiver()
    base = isolated_env()
    modes = {"off": base, "on": {**base, "AGENT_ENV_TRACES": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}}
    cli: dict[str, list[float]] = {"off": [], "on": []}
    steady: dict[str, list[float]] = {"off": [], "on": []}
    try:
        timed([AGENT_ENV, "server", "start"], base)
        timed([AGENT_ENV, "run", "hello"], base)  # the first run also registers search attributes
        for _ in range(BLOCKS):
            for mode, env in modes.items():
                subprocess.run([AGENT_ENV, "gateway", "stop"], env=env, capture_output=True, check=True)
                timed([AGENT_ENV, "run", "hello"], env)  # starts the gateway with this setting (not timed)
                cli[mode] += [timed([AGENT_ENV, "run", "hello"], env)[0] for _ in range(RUNS_PER_BLOCK)]
                runs = [sys.executable, __file__, "--in-process", str(IN_PROCESS_RUNS_PER_BLOCK)]
                done = subprocess.run(runs, env=env, capture_output=True, text=True, check=True)
                steady[mode] += json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run([AGENT_ENV, "gateway", "stop"], env=base, capture_output=True)
        subprocess.run([AGENT_ENV, "server", "stop"], env=base, capture_output=True)
        receiver.close()
    result: dict[str, float] = {"export_requests": receiver.requests}
    print("tracing: runs of hello, [telemetry] traces off vs on (exporting over OTLP/HTTP)")
    for name, samples in (("cli", cli), ("worker", steady)):
        off, on = summarize(samples["off"])["median"], summarize(samples["on"])["median"]
        result |= {f"{name}_off_s": off, f"{name}_on_s": on, f"{name}_ratio": on / off}
        label = "warm `agent-env run hello`" if name == "cli" else "one run in a long-lived client and worker"
        row(f"{label}: off", f"{off:.3f} s", f"median of {len(samples['off'])}")
        row(f"{label}: on", f"{on:.3f} s", f"median of {len(samples['on'])}")
        goal = "includes loading the tracing SDK" if name == "cli" else "goal <= 1.05"
        row(f"{label}: on / off", f"{on / off:.3f}x", goal)
    row("export requests the receiver answered", str(receiver.requests))
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--in-process"]:
        print(json.dumps(asyncio.run(_runs_in_process(int(sys.argv[2])))), flush=True)
        import os

        os._exit(0)  # (temporalio can abort at interpreter exit)
    measure()
