"""Agents: the framework's overhead per agent turn (A2A round trip plus bookkeeping) with the scripted agent.

Measured three ways, all over real HTTP on 127.0.0.1:
- baseline: a minimal a2a-sdk server answering at once (its own process), the SDK's client reused;
- hosted: a scripted agent hosted by the gateway (its own process), through our AgentClient;
- in a run: a `prompt_agent` conversation between two scripted agents (20 turns each), the step's own
  time divided by its answers: what a turn costs in a real run (transcript, trajectory, the conversation
  sent with every turn). A one-turn step before it pays the worker's one-time costs (imports, connections).

Goal: <= 20 ms p50 per agent turn.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from common import AGENT_ENV, free_port, isolated_env, row, summarize, temp_dir

TURNS = 300
CONVERSATION_TURNS = 20

MINIMAL_AGENT = r"""
import sys, uvicorn
from starlette.applications import Starlette
from a2a.helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill

class Echo(AgentExecutor):
    async def execute(self, context, queue):
        task = new_task_from_user_message(context.message)
        await queue.enqueue_event(task)
        updater = TaskUpdater(queue, task.id, task.context_id)
        await updater.complete(updater.new_agent_message([new_text_part("ok")]))
    async def cancel(self, context, queue):
        pass

port = int(sys.argv[1])
url = f"http://127.0.0.1:{port}/"
card = AgentCard(name="echo", description="answers ok", version="1",
                 supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
                 capabilities=AgentCapabilities(streaming=False), default_input_modes=["text/plain"],
                 default_output_modes=["text/plain"], skills=[AgentSkill(id="ok", name="ok", description="ok", tags=["ok"])])
handler = DefaultRequestHandler(agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card)
app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/"))
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""

CONVERSATION = """
id = "agent-turns"
[[steps]]
id = "a"
type = "deploy_agent"
config = {{ record = {{ name = "a", type = "scripted", config = {{ turns = [[{{ say = "from a" }}]] }} }} }}
[[steps]]
id = "b"
type = "deploy_agent"
config = {{ record = {{ name = "b", type = "scripted", config = {{ turns = [[{{ say = "from b" }}]] }} }} }}
[[steps]]
id = "warm"
type = "prompt_agent"
depends_on = ["a", "b"]
config = {{ agent = "a", prompt = "hello" }}
[[steps]]
id = "talk"
type = "prompt_agent"
depends_on = ["warm"]
config = {{ agent = "a", prompt = "hello", conversation = {{ partner = "b", max_turns = {turns} }} }}
"""


async def round_trips(url: str, headers: dict[str, str]) -> list[float]:
    import httpx

    from agent_env.agents.client import AgentClient

    async with httpx.AsyncClient(headers=headers) as http:
        client = AgentClient(url, http)
        for _ in range(20):  # warm up (card, connection)
            await client.ask("hi", {}, context_id="warm", deadline_s=10)
        samples = []
        for n in range(TURNS):
            start = time.perf_counter()
            await client.ask(
                "hi", {"turn": 0, "conversation": []}, context_id="bench", message_id=f"m-{n}", deadline_s=10
            )
            samples.append(time.perf_counter() - start)
        return samples


def wait_card(url: str, proc: subprocess.Popen) -> None:
    import httpx

    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + ".well-known/agent-card.json").status_code == 200:
                return
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{url} did not come up")
        time.sleep(0.05)


def baseline() -> list[float]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", MINIMAL_AGENT, str(port)])
    try:
        wait_card(f"http://127.0.0.1:{port}/", proc)
        return asyncio.run(round_trips(f"http://127.0.0.1:{port}/", {}))
    finally:
        proc.terminate()
        proc.wait()


def hosted() -> list[float]:
    import httpx

    root = temp_dir("agentenv-bench-agents-")
    port = free_port()
    # Its own state and URL: the hosted agent's card must name the origin it is fetched from (no user config).
    env = {**isolated_env(), "AGENT_ENV_GATEWAY_PORT": str(port)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_env.gateway", "--root", str(root), "--port", str(port)], env=env
    )
    try:
        from agent_env.gateway import tokens

        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the gateway did not come up")
            time.sleep(0.05)
        headers = {"authorization": f"Bearer {tokens.admin_token(tokens.load_or_create_key(root / 'key'))}"}
        record = {"name": "echo", "type": "scripted", "config": {"turns": [[{"say": "ok"}]]}}
        httpx.put(
            f"{base}/admin/agents/bench", json={"id": "bench", "record": record}, headers=headers
        ).raise_for_status()
        return asyncio.run(round_trips(f"{base}/agents/bench/", headers))
    finally:
        proc.terminate()
        proc.wait()


def in_a_run() -> tuple[float, float, float]:
    env = isolated_env()
    folder = temp_dir("agentenv-bench-turns-") / "tasks"
    folder.mkdir()
    task = folder / "turns.toml"
    task.write_text(CONVERSATION.format(turns=CONVERSATION_TURNS))
    try:
        done = subprocess.run(
            [AGENT_ENV, "run", str(task), "--json"], env=env, capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            raise SystemExit(f"the conversation run failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        state = json.loads(done.stdout)
        talk = state["steps"]["talk"]
        transcript = json.loads((Path(env["AGENT_ENV_HOME"]) / "objects" / talk["outputs"]["transcript"]).read_text())
        answers = [m["seconds"] for m in transcript["messages"] if "seconds" in m]
        return talk["duration_ms"] / len(answers), summarize(answers)["median"] * 1000, talk["duration_ms"]
    finally:
        subprocess.run([AGENT_ENV, "gateway", "stop"], env=env, capture_output=True)
        subprocess.run([AGENT_ENV, "server", "stop"], env=env, capture_output=True)


def measure() -> dict:
    print("agents (a turn = one prompt to an agent and its answer, over A2A on 127.0.0.1)")
    base = summarize(baseline())
    mine = summarize(hosted())
    per_turn, ask_p50, step_ms = in_a_run()
    row(
        "minimal a2a-sdk agent round trip p50 (baseline)",
        f"{base['median'] * 1000:.2f} ms",
        f"p90 {base['p90'] * 1000:.2f} ms",
    )
    row(
        "hosted scripted agent round trip p50",
        f"{mine['median'] * 1000:.2f} ms",
        f"p90 {mine['p90'] * 1000:.2f} ms; {mine['median'] / base['median']:.2f}x baseline",
    )
    row(
        "answer round trip p50 inside a run",
        f"{ask_p50:.2f} ms",
        f"{ask_p50 / 1000 / base['median']:.2f}x baseline (the whole conversation travels with each turn)",
    )
    row(
        "per turn in a prompt_agent conversation (mean)",
        f"{per_turn:.2f} ms",
        f"{2 * CONVERSATION_TURNS - 1} answers in {step_ms:.0f} ms, bookkeeping included; goal <= 20 ms",
    )
    return {
        "baseline_p50_ms": base["median"] * 1000,
        "hosted_p50_ms": mine["median"] * 1000,
        "hosted_p90_ms": mine["p90"] * 1000,
        "ask_p50_in_run_ms": ask_p50,
        "per_turn_in_run_ms": per_turn,
    }


if __name__ == "__main__":
    measure()
