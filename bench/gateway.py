"""The gateway: tool-call latency against the same app served alone, throughput with 50 clients,
snapshot/restore of 10,000 rows, and memory per idle instance.

Goals: latency ratio (gateway / direct, p50) <= 1.1; >= 500 calls/s with 50 concurrent clients;
snapshot and restore of 10,000 rows <= 50 ms each; <= 2 MiB per idle instance. Both servers run as
their own processes; clients run in another process, all on this 2-core machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx2
from common import AGENT_ENV, exit_now, free_port, row, temp_dir

LATENCY_CALLS = 1000
CLIENTS = 50
CALLS_PER_CLIENT = 40
IDLE_INSTANCES = 200
ROWS = 10_000


def wait_ready(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx2.get(url).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{url} did not come up")
        time.sleep(0.05)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


CLIENT = r"""
import asyncio, json, statistics, sys, time
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

url, token, mode, n, clients = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])

async def connect(stack, url=url, token=token):
    http = await stack.enter_async_context(httpx2.AsyncClient(
        headers={"authorization": f"Bearer {token}"} if token != "-" else {}, timeout=60))
    return await stack.enter_async_context(Client(streamable_http_client(url, http_client=http)))

async def main():
    from contextlib import AsyncExitStack
    async with AsyncExitStack() as stack:
        if mode == "latency":
            # url and token are "direct_url|gateway_url" and "-|token": calls alternate between the two,
            # so both see the same machine load.
            pairs = list(zip(url.split("|"), token.split("|")))
            sessions = [await connect(stack, u, t) for u, t in pairs]
            for _ in range(20):
                for c in sessions:
                    await c.call_tool("read_note", {"key": "k"})
            samples = [[] for _ in sessions]
            for _ in range(n):
                for i, c in enumerate(sessions):
                    t = time.perf_counter(); r = await c.call_tool("read_note", {"key": "k"})
                    samples[i].append((time.perf_counter() - t) * 1000)
                    assert not r.is_error, r
            out = []
            for s in samples:
                s.sort()
                out.append({"p50": s[len(s) // 2], "p99": s[int(len(s) * 0.99)]})
            print(json.dumps(out))
        else:
            # one agent (one role token) per client, as concurrent episodes are: limits are per agent
            tokens = token.split(",")
            sessions = [await connect(stack, token=tokens[i % len(tokens)]) for i in range(clients)]
            for s in sessions:
                await s.call_tool("read_note", {"key": "k"})
            async def worker(s):
                for _ in range(n):
                    r = await s.call_tool("read_note", {"key": "k"})
                    assert not r.is_error
            t = time.perf_counter()
            await asyncio.gather(*(worker(s) for s in sessions))
            print(json.dumps({"per_s": clients * n / (time.perf_counter() - t)}))

asyncio.run(main())
"""


def run_client(url: str, token: str, mode: str, n: int, clients: int = 1):
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, url, token, mode, str(n), str(clients)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure() -> dict:
    from agent_env.envs.app_instance import AppInstance
    from agent_env.envs.builtin.notes import Notes
    from agent_env.envs.context import Ctx
    from agent_env.gateway import tokens

    root = temp_dir("agentenv-bench-gw-")
    direct_port, gw_port = free_port(), free_port()
    direct = subprocess.Popen(
        [AGENT_ENV, "env", "serve", "notes", "--port", str(direct_port), "--state", str(root / "direct")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    gateway = subprocess.Popen(
        [sys.executable, "-m", "agent_env.gateway", "--root", str(root / "gw"), "--port", str(gw_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    result: dict = {}
    try:
        wait_ready(f"http://127.0.0.1:{direct_port}/ready", direct)
        wait_ready(f"http://127.0.0.1:{gw_port}/ready", gateway)
        base = f"http://127.0.0.1:{gw_port}"
        admin = {"authorization": f"Bearer {tokens.admin_token((root / 'gw' / 'key').read_bytes())}"}
        note = {"notes": [{"key": "k", "text": "hello", "updated_at": "2026-01-01T00:00:00Z"}]}
        httpx2.post(
            f"http://127.0.0.1:{direct_port}/agentenv",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "data/add",
                "params": {"parts": [{"kind": "data", "data": note}]},
            },
        ).raise_for_status()
        httpx2.put(
            f"{base}/admin/instances/bench",
            headers=admin,
            json={"id": "bench", "apps": [{"app": "notes"}], "agents": {f"agent{i}": "agent" for i in range(CLIENTS)}},
        ).raise_for_status()
        httpx2.post(
            f"{base}/admin/instances/bench/load",
            headers=admin,
            json={"parts": [{"kind": "data", "data": {"notes": note}}]},
        ).raise_for_status()
        agent_tokens = [
            httpx2.get(f"{base}/admin/instances/bench/tokens/agent{i}", headers=admin).json()["token"]
            for i in range(CLIENTS)
        ]
        token = agent_tokens[0]
        direct_url, gw_url = f"http://127.0.0.1:{direct_port}/mcp", f"{base}/envs/bench/mcp"

        d, g = run_client(f"{direct_url}|{gw_url}", f"-|{token}", "latency", LATENCY_CALLS)
        result.update(direct_p50_ms=d["p50"], direct_p99_ms=d["p99"], gateway_p50_ms=g["p50"], gateway_p99_ms=g["p99"])
        result["gateway_per_s"] = run_client(gw_url, ",".join(agent_tokens), "throughput", CALLS_PER_CLIENT, CLIENTS)[
            "per_s"
        ]
        result["direct_per_s"] = run_client(direct_url, "-", "throughput", CALLS_PER_CLIENT, CLIENTS)["per_s"]

        before = rss_mib(gateway.pid)
        for i in range(IDLE_INSTANCES):
            httpx2.put(
                f"{base}/admin/instances/idle-{i}", headers=admin, json={"id": f"idle-{i}", "apps": [{"app": "notes"}]}
            ).raise_for_status()
        time.sleep(0.5)
        result["mib_per_idle_instance"] = (rss_mib(gateway.pid) - before) / IDLE_INSTANCES

        rows = {
            "notes": [{"key": f"k{i}", "text": "x" * 60, "updated_at": "2026-01-01T00:00:00Z"} for i in range(ROWS)]
        }
        httpx2.post(
            f"{base}/admin/instances/bench/load",
            headers=admin,
            json={"parts": [{"kind": "data", "data": {"notes": rows}}]},
        ).raise_for_status()
        t = time.perf_counter()
        blob = httpx2.get(f"{base}/admin/instances/bench/snapshot", headers=admin).content
        result["gateway_snapshot_ms"] = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        httpx2.put(f"{base}/admin/instances/bench/snapshot", headers=admin, content=blob).raise_for_status()
        result["gateway_restore_ms"] = (time.perf_counter() - t) * 1000
        result["snapshot_bytes"] = len(blob)
    finally:
        for proc in (direct, gateway):
            proc.terminate()
            proc.wait(10)

    inst = AppInstance(Notes, root / "local")
    inst.load({"notes": [{"key": f"k{i}", "text": "x" * 60, "updated_at": "t"} for i in range(ROWS)]})
    samples_s, samples_r = [], []
    for i in range(5):
        t = time.perf_counter()
        inst.snapshot(root / f"snap{i}.sqlite")
        samples_s.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        inst.restore(root / f"snap{i}.sqlite")
        samples_r.append((time.perf_counter() - t) * 1000)
    assert inst.call("list_notes", {}, Ctx(virtual_now=None))["count"] == ROWS
    result["app_snapshot_ms"], result["app_restore_ms"] = sorted(samples_s)[2], sorted(samples_r)[2]
    inst.close()

    print("gateway")
    row(
        "tool call p50, direct (app served alone)",
        f"{result['direct_p50_ms']:.2f} ms",
        f"p99 {result['direct_p99_ms']:.2f} ms",
    )
    row(
        "tool call p50, through the gateway",
        f"{result['gateway_p50_ms']:.2f} ms",
        f"p99 {result['gateway_p99_ms']:.2f} ms; ratio {result['gateway_p50_ms'] / result['direct_p50_ms']:.2f}x "
        f"(goal <= 1.1)",
    )
    row(
        f"calls/s, {CLIENTS} concurrent clients, gateway",
        f"{result['gateway_per_s']:.0f} /s",
        f"goal >= 500; same clients on the app alone: {result['direct_per_s']:.0f} /s",
    )
    row(
        f"snapshot / restore, {ROWS} rows (app file)",
        f"{result['app_snapshot_ms']:.1f} / {result['app_restore_ms']:.1f} ms",
        "goal <= 50 ms each",
    )
    row(
        f"snapshot / restore, {ROWS} rows (gateway API)",
        f"{result['gateway_snapshot_ms']:.1f} / {result['gateway_restore_ms']:.1f} ms",
        f"{result['snapshot_bytes'] // 1024} KiB over HTTP",
    )
    row(
        "memory per idle instance",
        f"{result['mib_per_idle_instance']:.2f} MiB",
        f"goal <= 2 MiB ({IDLE_INSTANCES} instances)",
    )
    return result


if __name__ == "__main__":
    measure()
    exit_now()
