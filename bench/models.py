"""Model providers: the framework's overhead per model call through each provider's SDK (OpenAI chat completions,
OpenAI Responses, Anthropic Messages), against the fake model server in its own process over 127.0.0.1.

Baseline: the same request as raw HTTP (one reused httpx2 client posting the chat-completions JSON), measured in
the same run. A provider's overhead is its p50 minus the baseline's: the SDK, the message translation, usage
bookkeeping. Goal: <= 20 ms per turn (a turn makes one call here).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from common import free_port, row, summarize

CALLS = 200
FAKE = r"""
import sys, uvicorn
from agent_env.agents.fake_model import create_app
uvicorn.run(create_app({"bench": [{"say": "ok"}]}), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
PROVIDERS = {
    "openai chat": {"provider": "openai", "api": "chat"},
    "openai responses": {"provider": "openai", "api": "responses"},
    "anthropic messages": {"provider": "anthropic"},
}
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say ok."}]


async def _timed(call, n: int) -> list[float]:
    for _ in range(5):  # warm: connections, imports
        await call()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


async def _measure(base: str) -> dict[str, list[float]]:
    import httpx2

    from agent_env.agents.models import ChatModel
    from agent_env.config import ModelSettings

    out = {}
    async with httpx2.AsyncClient() as http:
        body = {"model": "bench", "messages": MESSAGES, "temperature": 0.0}

        async def raw() -> None:
            response = await http.post(f"{base}/chat/completions", json=body)
            assert response.json()["choices"][0]["message"]["content"] == "ok"

        out["baseline"] = await _timed(raw, CALLS)
    for name, fields in PROVIDERS.items():
        model = ChatModel(ModelSettings.model_validate({"base_url": base, "model": "bench", **fields}), None)

        async def call(model=model) -> None:
            reply = await model.complete(MESSAGES, user="bench")
            assert reply.content == "ok"

        out[name] = await _timed(call, CALLS)
    return out


def measure() -> dict:
    print("model providers (one model call through each SDK against the fake model server, 127.0.0.1)")
    port = free_port()
    fake = subprocess.Popen([sys.executable, "-c", FAKE, str(port)])
    try:
        base = f"http://127.0.0.1:{port}/v1"
        _wait_for(port)
        samples = asyncio.run(_measure(base))
    finally:
        fake.terminate()
        fake.wait(10)
    baseline = summarize(samples.pop("baseline"))
    row(
        "raw HTTP round trip p50 (baseline)",
        f"{baseline['median'] * 1000:.2f} ms",
        f"p90 {baseline['p90'] * 1000:.2f} ms",
    )
    results = {"baseline_p50_ms": baseline["median"] * 1000}
    for name, values in samples.items():
        s = summarize(values)
        overhead = (s["median"] - baseline["median"]) * 1000
        row(
            f"{name} call p50",
            f"{s['median'] * 1000:.2f} ms",
            f"p90 {s['p90'] * 1000:.2f} ms; overhead {overhead:.2f} ms over baseline; goal <= 20 ms",
        )
        key = name.replace(" ", "_")
        results[f"{key}_p50_ms"], results[f"{key}_overhead_ms"] = s["median"] * 1000, overhead
    return results


def _wait_for(port: int) -> None:
    import socket

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("the fake model server did not start")


if __name__ == "__main__":
    measure()
