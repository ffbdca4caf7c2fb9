"""The depth check every request body passes (`agent_env.json_depth`): what it costs beside the parse it guards.

Measured in-process, per body: the scan alone (`json_depth.check`) and `json.loads` of the same bytes, for a
tool call's arguments, a typical 1 KB and 1 MB body (data/add rows: strings with escapes, nested objects),
bodies built to be slow to scan (all brackets; every byte an escape or a quote; 100,000 levels), and the
whole door (`JsonBodies` around an app that only answers) for a tool call.

Goal: on every body `json.loads` can parse, the scan costs less than that parse (the one it guards): a tool
call's ~2 us (the door's fast path counts too few brackets to look further), a typical MiB's ~9 ms against
~20 ms, the all-brackets MiB's ~25 ms against ~85 ms. Times are the best of several runs, compared within one
run: this machine's 2 cores are shared, so absolute times vary by 2x.
"""

from __future__ import annotations

import asyncio
import json
import time

from common import row, summarize

REPEATS = 15


def typical(size: int) -> bytes:
    """A data/add request of helpdesk rows, about `size` bytes."""
    rows: list[dict] = []
    body = {"jsonrpc": "2.0", "id": 1, "method": "data/add", "params": {"parts": [{"kind": "data", "data": rows}]}}
    while len(json.dumps(body)) < size:
        rows.append(
            {
                "id": f"TCK-{len(rows)}",
                "customer_email": "dana@example.com",
                "subject": 'Charged twice "again"',
                "tags": ["billing", "urgent"],
                "meta": {"n": len(rows), "ok": True, "notes": [{"by": "sam", "text": "hello\nworld"}]},
            }
        )
    return json.dumps(body).encode()


MIB = 1 << 20
BODIES = {
    "tool call (81 B)": b'{"customer_email": "x@example.com", "subject": "help", "description": "it broke"}',
    "typical 1 KB": typical(1024),
    "typical 1 MB": typical(MIB),
    "1 MB of [] (depth 1, all brackets)": b"[" + b"[]," * (MIB // 3) + b"[]]",
    "1 MB of [ (too deep at once)": b"[" * MIB,
    "100,000 levels": b"[" * 100_000 + b"]" * 100_000,
    "1 MB of escaped quotes": b'["' + b'\\"' * (MIB // 2) + b'"]',
    "1 MB of short strings": b"[" + b'"a",' * (MIB // 4) + b'"a"]',
}


def best_ms(fn, repeats: int = REPEATS) -> dict[str, float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return {k: v * 1000 for k, v in summarize(samples).items()}


def measure_door() -> float:
    """Microseconds the door adds to one tool call's request (an app that answers at once, no server)."""
    from agent_env.json_depth import JsonBodies

    body = BODIES["tool call (81 B)"]

    async def app(scope, receive, send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message) -> None:
        pass

    async def per_call(handler, n: int = 20_000) -> float:
        scope = {"type": "http", "method": "POST", "path": "/envs/d/tools/t", "headers": []}
        start = time.perf_counter()
        for _ in range(n):
            await handler(scope, receive, send)
        return (time.perf_counter() - start) / n * 1e6

    async def both() -> float:
        bare = min([await per_call(app) for _ in range(3)])
        door = min([await per_call(JsonBodies(app)) for _ in range(3)])
        return door - bare

    return asyncio.run(both())


def measure() -> dict:
    from agent_env.json_depth import TooDeep, check

    def scan(body: bytes) -> None:
        try:
            check(body)
        except TooDeep:
            pass

    print("json depth (the door's check of every request body, in-process)")
    results: dict[str, dict] = {}
    for label, body in BODIES.items():
        scanned = best_ms(lambda body=body: scan(body))["min"]
        try:
            parsed: float | None = best_ms(lambda body=body: json.loads(body), 5)["min"]
        except RecursionError:
            parsed = None
        results[label] = {"bytes": len(body), "scan_ms": scanned, "json_loads_ms": parsed}
        against = f"json.loads {parsed:.3f} ms" if parsed is not None else "json.loads: RecursionError"
        row(label, f"{scanned:.3f} ms", against)
    door_us = measure_door()
    row("the door around a tool call", f"{door_us:.1f} us", "JsonBodies, beside the bare app")
    met = all(r["scan_ms"] < r["json_loads_ms"] for r in results.values() if r["json_loads_ms"] is not None)
    row("goal: each scan below json.loads of it", "met" if met else "MISSED")
    return {"bodies": results, "door_us": door_us, "goal_met": met}


if __name__ == "__main__":
    measure()
