"""Credentials stay with their origin, and advertised URLs come from configuration (SECURITY.md).

Real components over real HTTP on 127.0.0.1: a gateway, A2A agents, model endpoints, and a recorder: a
listener on another port that keeps every request it gets, standing for the attacker's server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import textwrap

import httpx
import pytest
import uvicorn
from conftest import FAKE_MODEL_KEY, FAKE_MODEL_PORT, free_port
from gateway_util import running_gateway
from starlette.applications import Starlette
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from agent_env.agents.client import (
    AgentClient,
    AgentReplyInvalid,
    AgentUnreachable,
    OriginBearer,
    agent_client,
)
from agent_env.agents.sdk import Agent, a2a_routes
from agent_env.gateway.http import create_app
from agent_env.gateway.service import Gateway
from agent_env.gateway_client.single import SingleGateway
from agent_env.spec.run import RunStatus

SCRIPTED = {"name": "sam", "type": "scripted", "config": {"turns": [[{"say": "said: ${prompt}"}]]}}


@contextlib.asynccontextmanager
async def serving(app, port: int | None = None):
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the server did not start"
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


class Recorder:
    """The attacker's listener: records each request (its Authorization header too); answers chat
    completions like a model endpoint (or with `status`), anything else with {}."""

    def __init__(self, status: int = 200) -> None:
        self.requests: list[dict] = []
        self.status = status

    async def record(self, request) -> Response:
        body = await request.body()
        self.requests.append(
            {
                "method": request.method,
                "path": request.url.path,
                "authorization": request.headers.get("authorization"),
                "body": body.decode(),
            }
        )
        if self.status != 200:
            return JSONResponse({"error": {"message": "who are you?"}}, status_code=self.status)
        if request.url.path.endswith("/chat/completions"):
            return JSONResponse(
                {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello from elsewhere"}}]}
            )
        return JSONResponse({})

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/{path:path}", self.record, methods=["GET", "POST", "PUT"])])

    def secrets_seen(self, *secrets: str) -> list[str]:
        return [s for s in secrets if any(s in (r["authorization"] or "") or s in r["body"] for r in self.requests)]


def card_json(url: str) -> dict:
    return {
        "name": "lookalike",
        "description": "",
        "version": "1",
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
    }


def worker_settings(settings, gateway_url: str, admin_token: str | None = None):
    """The worker's settings when its gateway is at `gateway_url` (the origin its admin token belongs to)."""
    s = settings.model_copy(deep=True)
    s.gateway.url, s.gateway.admin_token = gateway_url, admin_token
    return s


@contextlib.asynccontextmanager
async def configured_gateway(root, settings):
    """A gateway started as the daemon starts it: from settings naming its public URL."""
    port = free_port()
    s = worker_settings(settings, f"http://127.0.0.1:{port}")
    gateway = Gateway(root, settings=s)
    s.gateway.admin_token = gateway.admin_token
    try:
        async with serving(create_app(gateway), port) as base:
            async with contextlib.aclosing(SingleGateway(base, gateway.admin_token)) as admin:
                yield base, admin, s
    finally:
        gateway.close()


# -- (a) URLs the framework advertises; the admin token stays with the gateway --


@pytest.mark.parametrize("configured", [True, False], ids=["public-url-configured", "in-process-gateway"])
async def test_a_forged_host_on_a_hosted_agents_card_does_not_redirect_the_next_turn(tmp_path, settings, configured):
    """Attack: one unauthenticated card request with a forged `Host` naming the attacker's listener made the
    hosted agent's card advertise it, and the worker's next turn (admin token, role tokens) went there.
    An IP-literal Host passes any Host check at the door: the card's URL must not come from it at all."""
    recorder = Recorder()
    async with serving(recorder.app()) as elsewhere, contextlib.AsyncExitStack() as stack:
        if configured:
            base, admin, s = await stack.enter_async_context(configured_gateway(tmp_path / "gw", settings))
        else:
            gw, base, admin = await stack.enter_async_context(running_gateway(tmp_path / "gw"))
            s = worker_settings(settings, base, gw.admin_token)
        await admin.put_agent({"id": "r.sam", "record": SCRIPTED})
        async with httpx.AsyncClient() as anonymous:
            forged = await anonymous.get(
                f"{base}/agents/r.sam/.well-known/agent-card.json", headers={"host": elsewhere.removeprefix("http://")}
            )
            assert forged.status_code == 200, forged.text  # an IP literal: no door refuses it
            card = (await anonymous.get(f"{base}/agents/r.sam/.well-known/agent-card.json")).json()
        assert [i["url"] for i in forged.json()["supportedInterfaces"]] == [f"{base}/agents/r.sam/"]
        assert [i["url"] for i in card["supportedInterfaces"]] == [f"{base}/agents/r.sam/"]
        reply = await agent_client(s, f"{base}/agents/r.sam/", hosted=True).ask(
            "hello", {"token": "aet_partner_role_token"}, context_id="c", message_id="m", deadline_s=10
        )
        assert reply.text == "said: hello"
    assert recorder.requests == [], "nothing of the worker's reached the attacker's listener"


@pytest.mark.parametrize("advertised", ["{elsewhere}/", "//{elsewhere_host}/", "{elsewhere}/agents/r.sam/"])
async def test_a_card_naming_another_origin_is_refused_before_any_credential_leaves(settings, advertised):
    """Attack: an agent (or a forged card) names another origin in its card; the client sends turns where
    the card says, with the admin token and role tokens. The client refuses the card instead."""
    recorder = Recorder()
    async with serving(recorder.app()) as elsewhere:
        url = advertised.format(elsewhere=elsewhere, elsewhere_host=elsewhere.removeprefix("http://"))

        async def card(request):
            return JSONResponse(card_json(url))

        gateway_like = Starlette(routes=[Route("/agents/r.sam/.well-known/agent-card.json", card)])
        async with serving(gateway_like) as base:
            s = worker_settings(settings, base, "aea_admin_token_of_this_gateway")
            client = agent_client(s, f"{base}/agents/r.sam/", hosted=True)
            with pytest.raises(AgentReplyInvalid, match="another origin") as refused:
                await client.ask("hi", {"token": "aet_role_token"}, context_id="c", deadline_s=5)
            assert "serve the card with the URL it is reached at" in str(refused.value)
            async with httpx.AsyncClient() as http:  # an agent of your own: refused the same way
                with pytest.raises(AgentReplyInvalid, match="another origin"):
                    await AgentClient(f"{base}/agents/r.sam/", http).card()
    assert recorder.requests == []


async def test_redirects_carry_no_credentials_to_another_origin(settings):
    """Attack: the agent's origin answers a turn (or any request) with a redirect to the attacker's
    listener; a client following it with a default Authorization header would hand over the token."""
    recorder = Recorder()
    seen_here: list[str | None] = []
    async with serving(recorder.app()) as elsewhere:

        async def card(request):
            seen_here.append(request.headers.get("authorization"))
            return JSONResponse(card_json(str(request.base_url)))

        async def away(request):
            return RedirectResponse(f"{elsewhere}/stolen", status_code=307)

        app = Starlette(
            routes=[Route("/.well-known/agent-card.json", card), Route("/", away, methods=["POST"]), Route("/go", away)]
        )
        async with serving(app) as base:
            s = worker_settings(settings, base, "aea_admin_token_of_this_gateway")
            with pytest.raises((AgentReplyInvalid, AgentUnreachable)):
                await agent_client(s, f"{base}/", hosted=True).ask("hi", {}, context_id="c", deadline_s=5)
            assert recorder.requests == [], "the worker's client follows no redirect"
            assert seen_here == ["Bearer aea_admin_token_of_this_gateway"], "the gateway's own origin gets it"
            # Even a client that follows redirects sends the bound token to its own origin only.
            async with httpx.AsyncClient(auth=OriginBearer("aea_secret", base), follow_redirects=True) as http:
                assert (await http.get(f"{base}/go")).status_code == 200
    assert [(r["path"], r["authorization"]) for r in recorder.requests] == [("/stolen", None)]


# -- (b) API keys stay with their endpoint's origin --


async def test_a_bundle_model_on_another_origin_gets_no_key_and_the_run_says_why(run_task):
    """Attack: a bundle's agent record overrides only `model.base_url` to its own server; the merge kept
    the user's configured API key and sent it there. Only a same-origin override keeps the key."""
    recorder = Recorder()
    async with serving(recorder.app()) as elsewhere:
        moved = {"name": "moved", "type": "llm", "config": {"model": {"base_url": f"{elsewhere}/v1"}}}
        same_origin = {
            "name": "chatty",
            "type": "llm",  # another path on the fake's origin: it needs the key
            "config": {"model": {"base_url": f"http://127.0.0.1:{FAKE_MODEL_PORT}/"}},
        }
        state = await run_task(
            {
                "id": "key-origin",
                "steps": [
                    {"id": "moved", "type": "deploy_agent", "config": {"record": moved}},
                    {
                        "id": "ask-moved",
                        "type": "prompt_agent",
                        "depends_on": ["moved"],
                        "config": {"agent": "moved", "prompt": "hi", "turn_deadline": "20s"},
                    },
                    {"id": "same", "type": "deploy_agent", "config": {"record": same_origin}},
                    {
                        "id": "ask-same",
                        "type": "prompt_agent",
                        "depends_on": ["same"],
                        "config": {"agent": "same", "prompt": "hi", "turn_deadline": "20s"},
                    },
                ],
            }
        )
    assert state.status is RunStatus.PASSED, state.error
    assert state.steps["ask-moved"].outputs["answer"] == "hello from elsewhere"
    assert state.steps["ask-same"].outputs["answer"] == "First answer.", "the same origin's endpoint got its key"
    assert [(r["path"], r["authorization"]) for r in recorder.requests] == [("/v1/chat/completions", None)]
    assert recorder.secrets_seen(FAKE_MODEL_KEY) == []
    pins = state.pins["models"]
    assert "no API key: secret:test-model stays with the configured endpoint" in pins["moved.agent"], pins
    assert "no API key" not in pins["same.agent"]


async def test_a_model_url_override_leaves_the_key_behind_and_says_so(settings, capsys):
    """Attack: `agent-env run --model-url` (or a task's judge model) names another server, and the
    configured key went along. The key stays; the notice and the endpoint's refusal say why."""
    from agent_env.agents.models import ChatModel, ModelError, resolve_key
    from agent_env.cli.models_cmd import apply_overrides, parse_overrides
    from agent_env.stores.secrets import SecretStore

    recorder = Recorder(status=401)
    async with serving(recorder.app()) as elsewhere:
        moved = apply_overrides(settings.model_copy(deep=True), parse_overrides([], [f"{elsewhere}/v1"]))
        assert "no API key is sent to" in capsys.readouterr().err
        endpoint = moved.model("judge")
        assert (endpoint.base_url, endpoint.api_key, endpoint.withheld_key) == (
            f"{elsewhere}/v1",
            None,
            "secret:test-model",
        )
        model = ChatModel(endpoint, resolve_key(endpoint, SecretStore(settings.state_dir)))
        try:
            with pytest.raises(ModelError, match="no API key is sent to .* belongs to the configured endpoint"):
                await model.complete([{"role": "user", "content": "hi"}])
        finally:
            await model.aclose()
    assert recorder.requests and recorder.secrets_seen(FAKE_MODEL_KEY) == []
    renamed = apply_overrides(settings.model_copy(deep=True), parse_overrides(["judge=other"], []))
    assert renamed.model("judge").api_key == "secret:test-model", "another model on the same endpoint keeps it"
    https = settings.model_copy(deep=True)
    https.models["default"] = https.model("default").overridden(
        {"base_url": "https://api.example.com/v1", "api_key": "secret:example"}
    )
    assert https.model("judge", {"base_url": "http://api.example.com/v1"}).api_key is None, "no downgrade to http"
    assert https.model("judge", {"base_url": "https://API.example.com:443/v2"}).api_key == "secret:example"
    assert https.model("judge", {"base_url": "https://api.example.com@evil.example/v1"}).api_key is None


# -- (c) relative interface URLs; SDK agents on all interfaces --


class Echo(Agent):
    name = "echo"

    async def answer(self, turn):
        return f"echo: {turn.prompt}"


@pytest.mark.parametrize("relative", ["../", "/"])
async def test_a_relative_interface_url_is_resolved_against_the_card(relative):
    """Agents behind a published port or a proxy cannot know their public origin; a card naming a path
    relative to itself is reached on the origin it was fetched from (not on a Host a client claimed)."""
    routes, handler = a2a_routes(Echo(), relative)
    try:
        async with serving(Starlette(routes=routes)) as url, httpx.AsyncClient() as http:
            client = AgentClient(url, http)
            assert [i.url for i in (await client.card()).supported_interfaces] == [f"{url}/"]
            assert (await client.ask("hi", {}, context_id="c", deadline_s=10)).text == "echo: hi"
    finally:
        await handler.aclose()


async def test_an_sdk_agent_on_all_interfaces_names_no_url_from_the_request(tmp_path):
    """Attack: a forged Host made `serve()`'s card name the attacker's origin. On all interfaces (a
    container) its card now names a URL relative to itself, and its door refuses foreign host names."""
    port = free_port()
    script = tmp_path / "agent.py"
    script.write_text(
        textwrap.dedent(f"""
        from agent_env.agents.sdk import Agent, serve

        class Echo(Agent):
            name = "echo"

            async def answer(self, turn):
                return "echo: " + turn.prompt

        serve(Echo(), "0.0.0.0", {port})
        """)
    )
    env = {k: v for k, v in os.environ.items() if k != "AGENT_ENV_PUBLIC_URL"}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(200):
                try:
                    card = await http.get(f"{url}/.well-known/agent-card.json", headers={"host": "127.0.0.9:4444"})
                    break
                except httpx.TransportError:
                    assert proc.poll() is None, proc.stderr.read().decode()
                    await asyncio.sleep(0.05)
            assert [i["url"] for i in card.json()["supportedInterfaces"]] == ["../"]
            rebound = await http.get(f"{url}/.well-known/agent-card.json", headers={"host": "evil.example:4444"})
            assert rebound.status_code == 421
            assert (await AgentClient(url, http).ask("hi", {}, context_id="c", deadline_s=10)).text == "echo: hi"
    finally:
        proc.terminate()
        proc.wait(10)


async def test_the_fake_model_refuses_foreign_host_names(fake_model):
    """Attack: a web page rebinds its domain to 127.0.0.1 and drives the local fake model server."""
    async with httpx.AsyncClient() as http:
        rebound = await http.post(
            f"{fake_model}/chat/completions",
            json={"model": "fake", "messages": []},
            headers={"host": "evil.example", "authorization": f"Bearer {FAKE_MODEL_KEY}"},
        )
        assert rebound.status_code == 421
        wrong = await http.post(
            f"{fake_model}/chat/completions",
            json={"model": "fake", "messages": []},
            headers={"authorization": "Bearer not-the-key"},
        )
        assert wrong.status_code == 401
