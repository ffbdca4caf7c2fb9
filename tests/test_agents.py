"""Agents over real A2A on 127.0.0.1: the SDK, the gateway's agent host, the client's failure modes."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest
import uvicorn
from conftest import free_port
from gateway_util import running_gateway, support_data, support_spec
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agent_env.agents.client import AgentClient, AgentReplyInvalid, AgentTimedOut, AgentUnreachable
from agent_env.agents.sdk import Agent, Answer, Turn, a2a_routes

REFUSED_REFUND = {
    "tool": "issue_refund",
    "arguments": {"order_id": "ORD-1001", "charge_id": "CH-5002", "amount_cents": 4999, "reason": "duplicate"},
}


@contextlib.asynccontextmanager
async def serving(app, port: int | None = None):
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


class Recorder(Agent):
    """Answers with what it was told, and lists the tools its token shows it."""

    name = "recorder"

    def __init__(self) -> None:
        self.turns: list[Turn] = []

    async def answer(self, turn: Turn) -> Answer:
        self.turns.append(turn)
        if turn.prompt == "fail please":
            return Answer(text="I cannot do that", failed=True)
        if turn.prompt == "crash":
            raise RuntimeError("boom")
        tools = []
        if turn.mcp_url:
            async with turn.tools() as t:
                tools = sorted(x.name for x in await t.list())
        return Answer(text=f"turn {turn.number}: {turn.prompt}", data={"tools": tools})


async def test_sdk_agent_gets_the_turn_and_acts_with_its_role_token(tmp_path):
    agent = Recorder()
    async with running_gateway(tmp_path / "gw") as (gw, base, admin):
        await admin.put_instance(support_spec())
        token = await admin.token("desk-1", "sam")
        port = free_port()
        routes, handler = a2a_routes(agent, f"http://127.0.0.1:{port}/")
        server = uvicorn.Server(
            uvicorn.Config(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning")
        )
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        try:
            async with httpx.AsyncClient() as http:
                client = AgentClient(f"http://127.0.0.1:{port}/", http)
                assert (await client.card()).name == "recorder"
                context = {
                    "system_prompt": "be brief",
                    "mcp_url": f"{base}/envs/desk-1/mcp",
                    "token": token,
                    "role": "support",
                    "agent": "sam",
                    "run_id": "r1",
                    "config": {"k": "v"},
                    "conversation": [{"from": "user", "text": "hi"}, {"from": "agent", "text": "hello"}],
                }
                reply = await client.ask("what now?", context, context_id="c1", deadline_s=10)
                assert reply.text == "turn 1: what now?" and not reply.failed
                assert "issue_refund" not in reply.data["tools"] and "list_tickets" in reply.data["tools"]
                seen = agent.turns[-1]
                assert (seen.system_prompt, seen.role, seen.agent, seen.run_id, seen.config, seen.context_id) == (
                    "be brief",
                    "support",
                    "sam",
                    "r1",
                    {"k": "v"},
                    "c1",
                )
                failed = await client.ask("fail please", {}, context_id="c1", deadline_s=10)
                assert failed.failed and failed.state == "TASK_STATE_FAILED" and failed.text == "I cannot do that"
                crashed = await client.ask("crash", {}, context_id="c1", deadline_s=10)
                assert crashed.failed and "RuntimeError: boom" in crashed.text
        finally:
            server.should_exit = True
            await task
            await handler.aclose()


async def test_hosted_scripted_agent_is_refused_outside_its_role_and_answers_a_resent_turn_once(tmp_path):
    async with running_gateway(tmp_path / "gw") as (gw, base, admin):
        await admin.put_instance(support_spec())
        await admin.load("desk-1", [{"kind": "data", "data": support_data()}])
        record = {
            "name": "sam",
            "type": "scripted",
            "config": {
                "turns": [
                    [
                        {"tool": "get_ticket", "arguments": {"ticket_id": "TCK-1004"}},
                        REFUSED_REFUND,
                        {"say": "tried: ${prompt}"},
                    ],
                    [{"say": "second turn"}],
                ]
            },
        }
        deployed = await admin.put_agent({"id": "run-1.sam", "record": record})
        assert deployed["path"] == "/agents/run-1.sam/"
        token = await admin.token("desk-1", "sam")
        context = {"mcp_url": f"{base}/envs/desk-1/mcp", "token": token, "agent": "sam"}
        async with httpx.AsyncClient() as anonymous:
            card = await anonymous.get(f"{base}/agents/run-1.sam/.well-known/agent-card.json")
            assert card.status_code == 200 and card.json()["name"] == "sam"
            with pytest.raises(AgentReplyInvalid):  # messages need the admin token
                await AgentClient(f"{base}/agents/run-1.sam/", anonymous).ask("x", {}, context_id="c", deadline_s=5)
            missing = await anonymous.get(f"{base}/agents/nobody/.well-known/agent-card.json")
            assert missing.status_code == 404
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {gw.admin_token}"}) as http:
            client = AgentClient(f"{base}/agents/run-1.sam/", http)
            first = await client.ask("refund Dana", context, context_id="c", message_id="m-1", deadline_s=10)
            again = await client.ask("refund Dana", context, context_id="c", message_id="m-1", deadline_s=10)
            assert first.text == again.text == "tried: refund Dana"
            calls = first.data["tool_calls"]
            assert [c["tool"] for c in calls] == ["get_ticket", "issue_refund"]
            assert "not available to role 'support'" in calls[1]["error"]
            second = await client.ask("next", {**context, "turn": 1}, context_id="c", message_id="m-2", deadline_s=10)
            assert second.text == "second turn"
        entries = await admin.trajectory("desk-1")
        assert [(e["agent"], e["tool"], e["refused"]) for e in entries] == [
            ("sam", "get_ticket", False),
            ("sam", "issue_refund", True),
        ]  # the resent turn did nothing again
        assert await admin.last_seq("desk-1") == entries[-1]["seq"]
        assert await admin.delete_agent("run-1.sam") is True
        assert await admin.delete_agent("run-1.sam") is False


async def test_hosted_human_agent_waits_for_a_person(tmp_path):
    async with running_gateway(tmp_path / "gw") as (gw, base, admin):
        await admin.put_agent({"id": "r.h", "record": {"name": "pat", "type": "human"}})
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {gw.admin_token}"}) as http:
            client = AgentClient(f"{base}/agents/r.h/", http)
            asking = asyncio.create_task(
                client.ask("Approve the refund?", {}, context_id="c", message_id="m", deadline_s=20)
            )
            for _ in range(200):
                if turns := await admin.human_turns():
                    break
                await asyncio.sleep(0.05)
            assert [(t["agent"], t["prompt"]) for t in turns] == [("pat", "Approve the refund?")]
            await admin.answer_human_turn(turns[0]["id"], "Yes, approved.")
            reply = await asking
            assert reply.text == "Yes, approved." and not reply.failed
            assert await admin.human_turns() == []
            with pytest.raises(Exception, match="answered"):
                await admin.answer_human_turn(turns[0]["id"], "No!")


async def test_client_names_each_way_an_agent_can_fail():
    async def hang(request):
        await asyncio.sleep(1)  # past the 0.5 s deadline; the server waits for it when it stops
        return JSONResponse({})

    async def card(request):
        return JSONResponse(
            {
                "name": "broken",
                "description": "",
                "version": "1",
                "supportedInterfaces": [
                    {"url": str(request.base_url), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
                ],
                "capabilities": {},
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [],
            }
        )

    async def garbage(request):
        return Response("<html>not json-rpc</html>", media_type="text/html")

    async def restarting(request):
        return Response("upstream is restarting", status_code=503)

    async def wrong_shape(request):
        body = await request.json()
        return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "result": {"unexpected": True}})

    card_route = Route("/.well-known/agent-card.json", card)
    async with httpx.AsyncClient() as http:
        with pytest.raises(AgentUnreachable, match="no A2A agent answers"):
            await AgentClient(f"http://127.0.0.1:{free_port()}/", http).ask("x", {}, context_id="c", deadline_s=2)
        async with serving(Starlette(routes=[card_route, Route("/", hang, methods=["POST"])])) as url:
            with pytest.raises(AgentTimedOut, match="did not answer within 0.5s"):
                await AgentClient(url, http).ask("x", {}, context_id="c", deadline_s=0.5)
        async with serving(Starlette(routes=[card_route, Route("/", garbage, methods=["POST"])])) as url:
            with pytest.raises(AgentReplyInvalid):
                await AgentClient(url, http).ask("x", {}, context_id="c", deadline_s=5)
        async with serving(Starlette(routes=[card_route, Route("/", wrong_shape, methods=["POST"])])) as url:
            with pytest.raises(AgentReplyInvalid):
                await AgentClient(url, http).ask("x", {}, context_id="c", deadline_s=5)
        # the agent's server dies mid-turn (a gateway killed while its hosted agent answers): the turn may be
        # asked again (same message id), so this is "unreachable", which a step retries, not "invalid"
        async with serving(Starlette(routes=[card_route, Route("/", restarting, methods=["POST"])])) as url:
            with pytest.raises(AgentUnreachable, match="could not be reached"):
                await AgentClient(url, http).ask("x", {}, context_id="c", deadline_s=5)


def test_a_long_lived_worker_keeps_agent_clients_for_the_agents_it_used_last_only(settings):
    """A hosted agent's URL names its run: the clients (and cards) kept are bounded, the least recently used go."""
    from agent_env.agents import client as clients

    urls = [f"http://127.0.0.1:9/agents/run-{n}.agent/" for n in range(clients.MAX_CLIENTS + 50)]
    first = clients.agent_client(settings, urls[0], hosted=False)
    second = clients.agent_client(settings, urls[1], hosted=False)
    for url in urls[2:]:
        assert clients.agent_client(settings, urls[1], hosted=False) is second  # in use: kept
        clients.agent_client(settings, url, hosted=False)
    assert len(clients._CLIENTS) <= clients.MAX_CLIENTS
    assert clients.agent_client(settings, urls[1], hosted=False) is second
    assert clients.agent_client(settings, urls[0], hosted=False) is not first  # dropped, made again
