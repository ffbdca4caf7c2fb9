"""proxy/v1: an agent with no model whose turns a driver outside its sandbox answers. Our SDK serves one
(`agent_env.agents.proxy_agent.ProxyAgent`, in a process of its own) and our driver (`proxy_driver.ProxyDriver`)
plays it over real HTTP: claim, read the turn, list its tools, run a tool call on a registered env server (a real
`agent-env env serve notes`) and a bash command in the agent's folder, reply; the A2A sender gets the reply. A wrong
token is refused; a cancelled turn stops its running command. Our driver also drives the protocol reference's own
ProxyAgent (in its side venv, as tests/test_protocol_agents.py runs reference agents).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import free_port
from test_protocol_agents import reference_python  # noqa: F401 - the fixture, by import

from agent_env.agents.client import AgentClient
from agent_env.agents.extensions import McpServer
from agent_env.agents.proxy_driver import ProxyDriver, ProxyRefused
from agent_env.agents.proxy_wire import PROXY, ProxyBashAction, ProxyToolAction, ProxyTurns

AGENT_ENV = str(Path(sys.executable).with_name("agent-env"))

OUR_PROXY = """
import sys
from agent_env.agents.proxy_agent import ProxyAgent
from agent_env.agents.sdk import serve

serve(ProxyAgent(work_dir=sys.argv[2], long_poll_seconds=2), port=int(sys.argv[1]))
"""

REFERENCE_PROXY = """
import sys
from agentenv_protocol.a2a_agent.proxy import ProxyAgent

ProxyAgent(long_poll_seconds=2).serve(host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _wait_for(url: str, process: subprocess.Popen, log: Path, what: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, log.read_text()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url).status_code == 200:
                return
        assert time.monotonic() < deadline, f"{what} did not come up in 60s: {log.read_text()}"
        time.sleep(0.05)


@contextlib.contextmanager
def _process(argv: list[str], url: str, folder: Path, what: str, cwd: Path | None = None) -> Iterator[str]:
    log_path = folder / f"{what}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
        try:
            _wait_for(url, process, log_path, what)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
                raise


@pytest.fixture(scope="module")
def notes_mcp(tmp_path_factory) -> Iterator[str]:
    """A real env server (`agent-env env serve notes`): its MCP URL."""
    root = tmp_path_factory.mktemp("notes")
    port = free_port()
    argv = [AGENT_ENV, "env", "serve", "notes", "--port", str(port), "--state", str(root / "state")]
    with _process(argv, f"http://127.0.0.1:{port}/ready", root, "notes") as ready:
        yield ready.removesuffix("/ready") + "/mcp"


@contextlib.contextmanager
def our_proxy(folder: Path, work_dir: Path) -> Iterator[str]:
    script = folder / "proxy_agent.py"
    script.write_text(OUR_PROXY)
    port = free_port()
    argv = [sys.executable, str(script), str(port), str(work_dir)]
    with _process(argv, f"http://127.0.0.1:{port}/.well-known/agent-card.json", folder, "proxy"):
        yield f"http://127.0.0.1:{port}/"


async def _open_turn(driver: ProxyDriver, asked: asyncio.Task) -> tuple[str, ProxyTurns]:
    after = 0
    while True:
        assert not asked.done(), asked.result()  # the sender got an answer before any turn opened
        turns = await driver.next(after)
        if turns.turns:
            return turns.turns[0].task_id, turns
        after = turns.version


async def _drive_one_turn(url: str, notes_mcp: str, work_dir: Path) -> object:
    """Register the env server, send a message, and play its turn with our driver: the trajectory the agent kept."""
    async with httpx.AsyncClient(timeout=30) as http:
        agent = AgentClient(url, http)
        extensions = await agent.extensions()
        await extensions.configure(mcp=McpServer(url=notes_mcp, name="notes"), config={}, skills=[])
        card = await agent.card()
        asked = asyncio.create_task(agent.ask("note 'hello' as k1", {}, context_id="c-1", deadline_s=60))
        driver = ProxyDriver(http, url, card)
        await driver.claim()
        await driver.claim()  # the same driver again: still its own
        task_id, turns = await _open_turn(driver, asked)
        assert [p.text for p in turns.turns[0].parts] == ["note 'hello' as k1"]
        assert turns.turns[0].context_id == "c-1"

        tools = {t.name: t for t in await driver.tools(task_id)}
        assert tools["bash"].server is None and tools["write_note"].server == "notes"
        assert tools["write_note"].input_schema and "key" in tools["write_note"].input_schema["properties"]

        note = {"key": "k1", "text": "hello"}
        written = await driver.act(
            task_id, ProxyToolAction(kind="tool", server="notes", name="write_note", arguments=note)
        )
        assert written.kind == "tool" and not written.is_error, written
        asked_note = ProxyToolAction(kind="tool", server="notes", name="read_note", arguments={"key": "k1"})
        read = await driver.act(task_id, asked_note)
        assert read.kind == "tool" and "hello" in read.content[0]["text"]
        missing = await driver.act(task_id, ProxyToolAction(kind="tool", server="nowhere", name="read_note"))
        assert missing.kind == "tool" and missing.is_error

        ran = await driver.act(task_id, ProxyBashAction(kind="bash", command="pwd; echo oops >&2; exit 3"))
        assert ran.kind == "bash" and ran.exit_code == 3 and not ran.timed_out
        assert Path(ran.stdout.strip()).resolve() == work_dir.resolve() and ran.stderr == "oops\n"

        # an outsider with another token is refused everything, and may not claim it
        outsider = ProxyDriver(http, url, card)
        for refused in (
            outsider.next(0),
            outsider.tools(task_id),
            outsider.act(task_id, ProxyBashAction(kind="bash", command="touch pwned")),
            outsider.reply(task_id, text="mine"),
        ):
            with pytest.raises(ProxyRefused) as wrong:
                await refused
            assert wrong.value.status == 401
        with pytest.raises(ProxyRefused) as taken:
            await outsider.claim()
        assert taken.value.status == 409
        assert not (work_dir / "pwned").exists()

        assert await driver.reply(task_id, text="noted k1")
        reply = await asked
        assert reply.text == "noted k1" and not reply.failed
        assert not await driver.reply(task_id, text="again")  # the turn is over
        with pytest.raises(ProxyRefused) as over:
            await driver.act(task_id, ProxyBashAction(kind="bash", command="true"))
        assert over.value.status == 404
        return await extensions.trajectory(reply.task_id)


async def test_a_driver_plays_our_proxy_agents_turn_with_env_tools_and_bash(notes_mcp, tmp_path):
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    with our_proxy(tmp_path, work_dir) as url:
        trajectory = await _drive_one_turn(url, notes_mcp, work_dir)
    assert isinstance(trajectory, list)
    ran = [(e["tool"], "error" in e) for e in trajectory if e.get("event") == "tool"]
    assert ran == [("write_note", False), ("read_note", False), ("read_note", True), ("bash", False)]
    assert trajectory[-1] == {"event": "answer", "text": "noted k1", "failed": False}


async def test_a_cancelled_turn_stops_its_running_command(tmp_path):
    from a2a.types import CancelTaskRequest

    with our_proxy(tmp_path, tmp_path) as url:
        async with httpx.AsyncClient(timeout=30) as http:
            agent = AgentClient(url, http)
            driver = ProxyDriver(http, url, await agent.card())
            await driver.claim()
            asked = asyncio.create_task(agent.ask("wait", {}, context_id="c-2", deadline_s=120))
            task_id, _ = await _open_turn(driver, asked)
            command = "echo $$ > pid; exec sleep 300"
            acting = asyncio.create_task(driver.act(task_id, ProxyBashAction(kind="bash", command=command)))
            pid_file = tmp_path / "pid"
            while not pid_file.exists() or not pid_file.read_text().strip():
                assert not acting.done(), acting
                await asyncio.sleep(0.05)
            pid = int(pid_file.read_text())
            os.kill(pid, 0)  # running

            client = await agent._connect()
            await client.cancel_task(CancelTaskRequest(id=task_id))
            with pytest.raises(ProxyRefused) as stopped:
                await acting
            assert stopped.value.status == 404 and "stopped" in stopped.value.detail
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
            asked.cancel()
            await asyncio.gather(asked, return_exceptions=True)
            assert (await driver.next(0)).turns == []


async def test_our_driver_plays_the_reference_proxy_agent(reference_python, notes_mcp, tmp_path):  # noqa: F811
    script = tmp_path / "reference_proxy.py"
    script.write_text(REFERENCE_PROXY)
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    port = free_port()
    argv = [str(reference_python), str(script), str(port)]
    card_url = f"http://127.0.0.1:{port}/.well-known/agent-card.json"
    with _process(argv, card_url, tmp_path, "reference-proxy", cwd=work_dir):
        trajectory = await _drive_one_turn(f"http://127.0.0.1:{port}/", notes_mcp, work_dir)
    assert trajectory, "the reference proxy recorded the turn"


async def test_our_proxys_card_declares_proxy_v1_as_the_reference_defines_it(tmp_path):
    from agentenv_protocol.a2a_agent import PROXY_V1
    from agentenv_protocol.a2a_agent.extensions import request_fields

    with our_proxy(tmp_path, tmp_path) as url:
        card = httpx.get(url + ".well-known/agent-card.json").json()
    declared = {e["uri"]: e["params"] for e in card["capabilities"]["extensions"]}
    assert declared[PROXY]["endpoint"] == PROXY_V1.endpoint
    for name, op in PROXY_V1.operations.items():
        method = declared[PROXY]["methods"][name]
        assert (method["method"], method["endpoint"]) == (op.method, op.path)
        assert method["request"]["required"] == list(request_fields(op.request.model).required)


async def test_a_trainer_plays_a_deployed_proxy_with_the_episode_turn_interface(notes_mcp, tmp_path):
    from agent_env.agents.sdk import ToolFailed
    from agent_env.episodes.proxy_player import ProxyPlayer

    work_dir = tmp_path / "work"
    work_dir.mkdir()
    with our_proxy(tmp_path, work_dir) as url:
        async with httpx.AsyncClient(timeout=30) as http:
            agent = AgentClient(url, http)
            await (await agent.extensions()).configure(mcp=McpServer(url=notes_mcp, name="notes"), config={}, skills=[])
            player = await ProxyPlayer.attach(url)
            assert await player.next_turn(wait=0) is None  # no turn yet
            asked = asyncio.create_task(agent.ask("list the notes", {}, context_id="c-3", deadline_s=60))
            turn = await player.next_turn()
            assert turn is not None and turn.prompt == "list the notes"
            async with turn.tools() as tools:
                assert {"bash", "write_note", "list_notes"} <= {t["name"] for t in tools.list()}
                assert await tools.call("write_note", {"key": "k2", "text": "from the trainer"})
                listed = await tools.call("list_notes", {})
                assert isinstance(listed, dict) and "k2" in json.dumps(listed)
                assert await tools.call("bash", {"command": "echo made > made.txt; cat made.txt"}) == "made\n"
                with pytest.raises(ToolFailed, match="exit code 2"):
                    await tools.call("bash", {"command": "ls no-such-file"})
                with pytest.raises(ToolFailed, match="offers no tool"):
                    await tools.call("rm_everything", {})
                assert [c["tool"] for c in tools.calls] == ["write_note", "list_notes", "bash", "bash", "rm_everything"]
            assert (work_dir / "made.txt").read_text() == "made\n"  # it ran where the agent works
            await turn.record_model_call({"role": "assistant", "content": "all listed"}, model="trainer-model")
            assert await turn.end("there is one note")
            reply = await asked
            assert reply.text == "there is one note" and not reply.failed
            trajectory = await (await agent.extensions()).trajectory(reply.task_id)
            assert any(e.get("event") == "model" and e.get("model") == "trainer-model" for e in trajectory)
            await player.close()


async def test_an_episode_plays_a_deployed_proxy_through_the_run(client, settings, worker, tmp_path):
    """The run deploys the proxy (registering the env's MCP server with the agent's role token) and prompts it;
    the trainer's turn comes from the proxy and its tools run there: the env's tools as the agent's role, bash in
    the agent's folder. The run gets the reply and grades it."""
    from agent_env.episodes import Episodes, EpisodeSpec
    from agent_env.planning.tasks import parse_task
    from agent_env.spec.run import RunStatus

    work_dir = tmp_path / "work"
    work_dir.mkdir()
    with our_proxy(tmp_path, work_dir) as url:
        record = {"name": "proxied", "type": "a2a", "role": "support", "config": {"url": url}}
        task = parse_task(
            {
                "id": "proxied-episode",
                "steps": [
                    {"id": "desk", "type": "deploy_env", "config": {"env_id": "support-desk"}},
                    {
                        "id": "agent",
                        "type": "deploy_agent",
                        "depends_on": ["desk"],
                        "config": {"record": record, "env": "desk"},
                    },
                    {
                        "id": "ask",
                        "type": "prompt_agent",
                        "depends_on": ["agent"],
                        "config": {"agent": "agent", "prompt": "What is TCK-1004 about?", "turn_deadline": "60s"},
                    },
                    {
                        "id": "grade",
                        "type": "check_response",
                        "depends_on": ["ask"],
                        "config": {
                            "response": "${steps.ask.outputs.answer}",
                            "checks": [{"name": "read it", "contains": "TCK-1004"}],
                        },
                    },
                ],
            },
            "test task",
        )
        spec = EpisodeSpec.from_task(task, proxied_agents=["proxied"])
        assert spec.trainer_agents == [] and spec.proxied_agents == {"proxied": "agent"}
        episode = await spec.start(Episodes(client, settings))
        player = await episode.proxy("proxied")
        turn = await player.next_turn()
        assert turn is not None and turn.prompt == "What is TCK-1004 about?"
        async with turn.tools() as tools:
            names = {t["name"] for t in tools.list()}
            assert {"bash", "get_ticket"} <= names and "issue_refund" not in names  # the support role's tools
            ticket = await tools.call("get_ticket", {"ticket_id": "TCK-1004"})
            assert await tools.call("bash", {"command": "echo looked > seen.txt; cat seen.txt"}) == "looked\n"
        assert (work_dir / "seen.txt").exists()
        await turn.end(f"TCK-1004: {json.dumps(ticket)[:200]}")
        scores = await asyncio.wait_for(episode.result(), 120)
        await player.close()
    assert episode.state.status is RunStatus.PASSED and scores == {"grade": 1.0}, episode.state


async def test_what_an_outsider_sends_a_proxy_is_bounded_and_checked(tmp_path):
    """Attack: a web page's rebinding Host, a body over the limit, a guessable claim token, and a command flooding
    its output: each refused or clipped, and the proxy still answers its driver."""
    from agent_env.agents.proxy_actions import MAX_OUTPUT_BYTES
    from agent_env.agents.proxy_agent import MAX_BODY_BYTES

    with our_proxy(tmp_path, tmp_path) as url:
        async with httpx.AsyncClient(timeout=60) as http:
            claim = url + "ext/proxy/claim"
            rebound = await http.post(claim, json={"token": "t" * 30}, headers={"host": "evil.example"})
            assert rebound.status_code == 421
            foreign = await http.post(claim, json={"token": "t" * 30}, headers={"origin": "https://evil.example"})
            assert foreign.status_code == 403
            huge = await http.post(claim, content=b'{"token": "' + b"t" * MAX_BODY_BYTES + b'"}')
            assert huge.status_code == 413
            short = await http.post(claim, json={"token": "short"})
            assert short.status_code == 400 and "token" in short.json()["detail"]

            agent = AgentClient(url, http)
            driver = ProxyDriver(http, url, await agent.card())
            await driver.claim()
            asked = asyncio.create_task(agent.ask("flood", {}, context_id="c-4", deadline_s=60))
            task_id, _ = await _open_turn(driver, asked)
            flood = f"head -c {3 * MAX_OUTPUT_BYTES} /dev/zero | tr '\\0' x"
            flooded = await driver.act(task_id, ProxyBashAction(kind="bash", command=flood))
            assert flooded.kind == "bash" and flooded.exit_code == 0
            assert (
                flooded.stdout.startswith("x" * MAX_OUTPUT_BYTES)
                and f"{2 * MAX_OUTPUT_BYTES} more bytes dropped" in flooded.stdout
            )
            slow = await driver.act(task_id, ProxyBashAction(kind="bash", command="sleep 30", timeout_seconds=0.5))
            assert slow.kind == "bash" and slow.timed_out and slow.exit_code is None
            assert await driver.reply(task_id, error="gave up")
            reply = await asked
            assert reply.failed and reply.text == "gave up"
