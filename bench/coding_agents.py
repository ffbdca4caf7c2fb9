"""CLI coding agents: a turn's start -> the CLI's first tool call, and -> its answer, for Codex and Claude Code run
by agent-env's A2A bridge (agent_env.agents.cli_agent) in a warm container (agentenv/cli-agents:bookworm) and as a
local process; the fake model scripts one tool call then an answer.

Baseline, measured in the same run: the same CLI started directly by this process with the same preset's
config (no A2A, no bridge). The difference is what agent-env adds to a CLI's turn: the A2A round trip, the bridge,
and (in Docker) `docker`-free process start inside a running container, which costs nothing extra.

Needs the CLIs from npm (tests/test_cli_presets.py caches them in ~/.cache/agentenv-tests/cli-agents) and, for the
container rows, a Docker daemon with the image (scripts/cli-agent-image).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from common import free_port, row, summarize, temp_dir

TURNS = 8
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentenv-tests" / "cli-agents"
BIN = CACHE / "node_modules" / ".bin"
IMAGE = "agentenv/cli-agents:bookworm"
SCRIPTS = {"bench": [{"tool": "ping", "arguments": {}}, {"say": "pong"}]}
MODELS = {"codex": ("bench", "openai"), "claude_code": ("bench", "anthropic")}


def serve(app, port: int) -> None:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)


class Tools:
    """A real MCP server with one tool; remembers when each call arrived."""

    def __init__(self) -> None:
        from mcp.server import MCPServer

        self.calls: list[float] = []
        mcp = MCPServer("bench", log_level="WARNING")  # its default sets up INFO logging for the whole process

        @mcp.tool()
        def ping() -> str:
            """Answer pong."""
            self.calls.append(time.perf_counter())
            return "pong"

        self.app = mcp.streamable_http_app()


def first_call_after(tools: Tools, started: float) -> float:
    return next(t for t in tools.calls if t >= started) - started


def direct(preset: str, model_url: str, mcp_url: str) -> tuple[list[float], list[float]]:
    """The CLI started by this process, the preset's config, no bridge: (start -> first call, start -> done)."""
    from agent_env.agents.cli_presets import PRESETS, McpEndpoint, ModelEndpoint

    firsts, totals = [], []
    for _ in range(TURNS + 1):
        home = temp_dir("agentenv-bench-cli-")
        invocation = PRESETS[preset].prepare(
            home=home,
            workdir=home,
            prompt="ping",
            model=ModelEndpoint(base_url=model_url, model=MODELS[preset][0], api_key="k"),
            mcp=McpEndpoint(url=mcp_url, token="t"),
            resume=False,
            executable=str(BIN / PRESETS[preset].executable),
        )
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "NO_COLOR": "1", "CI": "1", **invocation.env}
        started = time.perf_counter()
        subprocess.run(invocation.argv, env=env, cwd=home, capture_output=True, stdin=subprocess.DEVNULL, check=True)
        totals.append(time.perf_counter() - started)
        firsts.append(first_call_after(TOOLS, started))
        shutil.rmtree(home, ignore_errors=True)
    return firsts[1:], totals[1:]  # the first warms the page cache


async def bridged(url: str, preset: str, model_url: str, mcp_url: str, executable: str | None):
    """Turns through the bridge at `url` over A2A: (start -> first call, start -> answer)."""
    from agent_env.agents.cli_agent import CliModel, CliSettings
    from agent_env.agents.client import agent_client
    from agent_env.agents.extensions import McpServer
    from agent_env.config import Settings

    client = agent_client(Settings(state_dir=temp_dir()), url, hosted=False)
    for _ in range(200):  # the bridge starting
        try:
            await client.card()
            break
        except Exception:  # noqa: BLE001
            await asyncio.sleep(0.1)
    model, provider = MODELS[preset]
    settings = CliSettings(
        preset=preset,  # type: ignore[arg-type]
        executable=executable,
        model=CliModel(base_url=model_url, model=model, provider=provider, api_key="k"),  # type: ignore[arg-type]
    )
    extensions = await client.extensions()
    await extensions.configure(
        mcp=McpServer(url=mcp_url, name="agentenv", headers={"authorization": "Bearer t"}),
        config=settings.model_dump(mode="json"),
        skills=[],
    )
    firsts, totals = [], []
    for _ in range(TURNS + 1):
        started = time.perf_counter()
        reply = await client.ask("ping", {}, context_id=str(uuid.uuid4()), deadline_s=120)
        assert not reply.failed and reply.text == "pong", reply.text
        totals.append(time.perf_counter() - started)
        firsts.append(first_call_after(TOOLS, started))
    return firsts[1:], totals[1:]


def local_bridge(preset: str, model_url: str, mcp_url: str):
    port = free_port()
    env = {**os.environ, "HOST": "127.0.0.1", "PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "-m", "agent_env.agents.cli_agent"], env=env, cwd=temp_dir())
    try:
        executable = str(BIN / ("claude" if preset == "claude_code" else "codex"))
        return asyncio.run(bridged(f"http://127.0.0.1:{port}/", preset, model_url, mcp_url, executable))
    finally:
        proc.terminate()
        proc.wait(10)


def docker_bridge(preset: str, model_url: str, mcp_url: str):
    port = free_port()
    name = f"bench-cli-{uuid.uuid4().hex[:8]}"
    env = ["-e", "HOST=127.0.0.1", "-e", f"PORT={port}"]
    subprocess.run(
        ["docker", "run", "-d", "--rm", "--name", name, "--network", "host", *env, IMAGE],
        check=True,
        capture_output=True,
    )
    try:
        return asyncio.run(bridged(f"http://127.0.0.1:{port}/", preset, model_url, mcp_url, None))
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def docker_ready() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode == 0


TOOLS = Tools()


def measure() -> dict:
    import logging

    from agent_env.agents.fake_model import create_app

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise

    if not (BIN / "codex").exists() or not (BIN / "claude").exists():
        print(f"needs the CLIs in {BIN}: run `pytest tests/test_cli_presets.py` (it installs them) first")
        return {}
    model_port, mcp_port = free_port(), free_port()
    serve(create_app(SCRIPTS), model_port)
    serve(TOOLS.app, mcp_port)
    model_url, mcp_url = f"http://127.0.0.1:{model_port}/v1", f"http://127.0.0.1:{mcp_port}/mcp"
    results: dict = {}
    for preset in ("codex", "claude_code"):
        where = {"direct (baseline)": lambda p=preset: direct(p, model_url, mcp_url)}
        where["bridge, local process"] = lambda p=preset: local_bridge(p, model_url, mcp_url)
        if docker_ready():
            where["bridge, warm container"] = lambda p=preset: docker_bridge(p, model_url, mcp_url)
        base = None
        for label, run in where.items():
            firsts, totals = run()
            first, total = summarize(firsts), summarize(totals)
            results[f"{preset} {label}"] = {"first_tool_call": first, "turn": total}
            p50 = (first["median"] * 1000, total["median"] * 1000)
            base = base or p50
            note = (
                f"+{p50[0] - base[0]:.0f} ms to the first call, {p50[1] / base[1]:.2f}x the turn" if base != p50 else ""
            )
            row(f"{preset}: {label}", f"first tool call {p50[0]:.0f} ms, answer {p50[1]:.0f} ms (p50)", note)
        if not docker_ready():
            row(f"{preset}: warm container", "skipped", f"no Docker daemon or no {IMAGE} (scripts/cli-agent-image)")
    return results


if __name__ == "__main__":
    measure()
