"""Agents built with the open protocol's reference framework (`agentenv_protocol.a2a_agent`) work unchanged:
a run reaches one at the relative interface URL its card names, configures it through the `urn:agentenv:*`
extensions it declares (the env's MCP server with its role token, its config, its skills), and grades it from
the trajectory it tells through `trajectory/v1`.

The framework pins a2a-sdk<0.4 and mcp<2 (ours: 1.x and 2.x), so the agent runs as the framework's users run
it: in its own virtualenv (built once per framework version, cached), as a real server on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import httpx
import pytest
from reference_venv import (  # noqa: F401 - fixtures (imported here too)
    A2A_CARD,
    framework_python,
    reference_python,
    run_to_end,
    side_script,
    started,
)

from agent_env.spec.run import RunStatus
from agent_env.stores import open_stores

DESK = {"id": "desk", "type": "deploy_env", "config": {"env_id": "support-desk"}}
SKILL_MD = "---\nname: refunds\ndescription: How refunds are handled\n---\nSupport never refunds; billing does.\n"

# An agent as the framework's docs write one: its config, skills and MCP servers come from the extensions.
REFERENCE_AGENT = """
import sys

from agentenv_protocol.a2a_agent import (
    MCP_CONFIG_V1, SKILL_CONFIG_V1, TRAJECTORY_V1, AgentConfig, AgentEnvAgent, AgentIdentity, BundleSkillRequest,
    InlineSkillRequest, TaskRequest, TaskResult, a2a_agent, extension,
)
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


class Config(AgentConfig):
    ticket: str = "TCK-0000"


@a2a_agent(
    identity=AgentIdentity(name="reference", description="a reference-framework agent", version="1"),
    extensions=[MCP_CONFIG_V1, SKILL_CONFIG_V1, TRAJECTORY_V1],
    config=Config,
)
class Reference(AgentEnvAgent):
    @extension(SKILL_CONFIG_V1.add.inline)
    async def add_skill(self, request: InlineSkillRequest):
        return {"name": request.name}

    @extension(SKILL_CONFIG_V1.add.bundle)
    async def add_bundle(self, request: BundleSkillRequest):
        return {"name": request.name}

    async def run(self, request: TaskRequest[Config]) -> TaskResult:
        log = request.trajectory
        log.set_format("reference-events/1")
        log.append({"event": "prompt", "ticket": request.config.ticket, "skills": [s["name"] for s in request.skills]})
        calls = [
            ("get_ticket", {"ticket_id": request.config.ticket}),
            ("issue_refund", {"order_id": "ORD-1001", "charge_id": "CH-5002", "amount_cents": 1, "reason": "x"}),
        ]
        for name, server in request.mcp_servers.items():
            async with streamablehttp_client(server["url"], headers=server.get("headers")) as (read, write, _):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    for tool, arguments in calls:
                        try:
                            failed = (await session.call_tool(tool, arguments)).isError
                        except Exception:
                            failed = True
                        log.append({"event": "tool", "server": name, "tool": tool, "error": bool(failed)})
        return TaskResult.text(f"handled {request.config.ticket}")


if __name__ == "__main__":
    Reference().serve(host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


@contextlib.contextmanager
def reference_agent(python: Path, folder: Path):
    """The reference agent served on a free port (for tests with no `side_script`); yields its base URL."""
    with started(python, folder, "reference_agent", REFERENCE_AGENT, A2A_CARD) as url:
        yield url + "/"


async def test_a_reference_framework_agent_is_configured_through_its_extensions_and_graded_from_its_trajectory(
    run_task,
    settings,
    side_script,  # noqa: F811 - the fixture imported above
):
    with side_script("reference_agent", REFERENCE_AGENT, ready=A2A_CARD) as base:
        url = base + "/"
        record = {
            "name": "ref",
            "type": "a2a",
            "role": "support",
            "config": {
                "url": url,
                "agent_config": {"ticket": "TCK-1004"},
                "skills": [{"name": "refunds", "description": "How refunds are handled", "skill_md": SKILL_MD}],
            },
        }
        state = await run_task(
            {
                "id": "reference-agent",
                "steps": [
                    DESK,
                    {
                        "id": "ref",
                        "type": "deploy_agent",
                        "depends_on": ["desk"],
                        "config": {"record": record, "env": "desk"},
                    },
                    {
                        "id": "ask",
                        "type": "prompt_agent",
                        "depends_on": ["ref"],
                        "config": {"agent": "ref", "prompt": "Handle the ticket you were given"},
                    },
                    {
                        "id": "grade",
                        "type": "check_response",
                        "depends_on": ["ask"],
                        "config": {
                            "response": "${steps.ask.outputs.trajectory}",
                            "checks": [
                                {"name": "was given its config", "path": "0.ticket", "equals": "TCK-1004"},
                                {"name": "was given its skill", "path": "0.skills.0", "equals": "refunds"},
                                {"name": "read the ticket", "path": "1.tool", "equals": "get_ticket"},
                                {"name": "its role let it", "path": "1.error", "equals": False},
                                {"name": "tried to refund", "path": "2.tool", "equals": "issue_refund"},
                                {"name": "refused outside its role", "path": "2.error", "equals": True},
                            ],
                        },
                    },
                ],
            }
        )
        async with httpx.AsyncClient() as http:  # what it was configured with, as it reports it
            servers = (await http.get(url + "ext/mcp-config")).json()["mcp_servers"]
            skills = (await http.get(url + "ext/skill-config")).json()["skills"]
            config = (await http.get(url + "ext/agent-config")).json()["config"]
    assert state.status is RunStatus.PASSED, state
    deployed = state.steps["ref"].outputs
    assert deployed["extensions"] == [
        "urn:agentenv:mcp-config/v1",
        "urn:agentenv:agent-config/v1",
        "urn:agentenv:skill-config/v1",
        "urn:agentenv:trajectory/v1",
    ]
    assert [s["url"] for s in servers.values()] == [deployed["mcp_url"]] and all(
        s["has_headers"] for s in servers.values()
    )
    assert "refunds" in skills and config == {"ticket": "TCK-1004"}
    asked = state.steps["ask"].outputs
    assert asked["answer"] == "handled TCK-1004"
    assert (asked["tool_calls"], asked["refused"]) == (2, 1)  # the gateway saw both calls, as this agent
    assert state.steps["grade"].score.value == 1.0
    transcript = json.loads(open_stores(settings).objects.get(asked["transcript"]))
    assert [c["tool"] for c in transcript["tool_calls"]] == ["get_ticket", "issue_refund"]
    assert {c["agent"] for c in transcript["tool_calls"]} == {"ref"}
    assert transcript["messages"][-1]["trajectory"][2] == {
        "event": "tool",
        "server": f"agentenv-{deployed['env']}",
        "tool": "issue_refund",
        "error": True,
    }
    assert "aet_" not in state.model_dump_json()  # its role token went to the agent, never into the run's history


async def test_an_interface_on_another_origin_is_refused_and_a_relative_one_resolved(tmp_path):
    """The card's URL relative to where it was fetched is the agent's; one naming another origin gets no turn."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from test_agents import serving

    from agent_env.agents.client import AgentClient, AgentReplyInvalid

    card = {
        "name": "x",
        "description": "x",
        "version": "1",
        "protocolVersion": "0.3.0",
        "preferredTransport": "JSONRPC",
        "capabilities": {},
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": [],
    }
    where = {"url": "/a2a"}

    async def served(request):
        return JSONResponse({**card, **where})

    app = Starlette(routes=[Route("/.well-known/agent-card.json", served)])
    async with serving(app) as base, httpx.AsyncClient() as http:
        relative = await AgentClient(base, http).card()
        assert [i.url for i in relative.supported_interfaces] == [f"{base}/a2a"]
        where["url"] = "http://127.0.0.2:1/a2a"
        with pytest.raises(AgentReplyInvalid, match="another origin"):
            await AgentClient(base, http).card()


async def test_an_agent_written_with_our_sdk_is_configured_as_the_reference_framework_defines_it(tmp_path):
    """Ours declares the same extensions on its card and takes the reference's own request models."""
    from agentenv_protocol.a2a_agent import (
        AGENT_CONFIG_V1,
        MCP_CONFIG_V1,
        SKILL_CONFIG_V1,
        TRAJECTORY_V1,
        InlineSkillRequest,
        McpAddRequest,
        TaskTrajectoryRequest,
        card_request_accepts,
    )
    from gateway_util import running_gateway, support_data, support_spec
    from starlette.applications import Starlette
    from test_agents import serving

    from agent_env.agents.client import AgentClient
    from agent_env.agents.sdk import Agent, Answer, Turn, a2a_routes

    class Configurable(Agent):
        name = "configurable"

        async def answer(self, turn: Turn) -> Answer:
            async with turn.tools() as tools:
                ticket = await tools.call("get_ticket", {"ticket_id": turn.config["ticket"]})
            return Answer(text=ticket["id"], data={"skills": [s["name"] for s in turn.skills]})

    app = Starlette()  # served first: its URL is the card's
    async with running_gateway(tmp_path / "gw") as (gw, base, admin), serving(app) as url:
        await admin.put_instance(support_spec())
        await admin.load("desk-1", [{"kind": "data", "data": support_data()}])
        token = await admin.token("desk-1", "sam")
        served, handler = a2a_routes(Configurable(), url + "/", extensions=True)
        app.router.routes.extend(served)
        async with httpx.AsyncClient(base_url=url) as http:
            card = (await http.get("/.well-known/agent-card.json")).json()
            declared = {e["uri"]: e["params"] for e in card["capabilities"]["extensions"]}
            for definition in (MCP_CONFIG_V1, AGENT_CONFIG_V1, SKILL_CONFIG_V1, TRAJECTORY_V1):
                assert declared[definition.uri]["endpoint"] == definition.endpoint
            assert card_request_accepts(declared[MCP_CONFIG_V1.uri]["methods"]["add"]["request"], ["url", "headers"])
            mcp = McpAddRequest(url=f"{base}/envs/desk-1/mcp", headers={"authorization": f"Bearer {token}"})
            skill = InlineSkillRequest(name="refunds", description="How refunds are handled", skill_md=SKILL_MD)
            added = await http.post(MCP_CONFIG_V1.endpoint, json=mcp.model_dump(exclude_none=True))
            assert added.status_code == 200 and added.json()["url"] == mcp.url
            again = await http.post(MCP_CONFIG_V1.endpoint, json=mcp.model_dump(exclude_none=True))
            assert again.status_code == 409
            assert (await http.post(AGENT_CONFIG_V1.endpoint, json={"ticket": "TCK-1004"})).status_code == 200
            assert (await http.post(SKILL_CONFIG_V1.endpoint, json=skill.model_dump())).json() == {"name": "refunds"}
            listed = (await http.get(MCP_CONFIG_V1.endpoint)).json()["mcp_servers"]
            assert token not in json.dumps(listed) and [s["has_headers"] for s in listed.values()] == [True]
            assert (await http.post(SKILL_CONFIG_V1.endpoint, json={"name": "x"})).status_code == 400

            reply = await AgentClient(url, http).ask("go", {}, context_id="c1", deadline_s=20)  # nothing in the turn
            assert (reply.text, reply.data, reply.failed) == ("TCK-1004", {"skills": ["refunds"]}, False)
            got = await http.post(
                TRAJECTORY_V1.endpoint, json=TaskTrajectoryRequest(task_id=reply.task_id).model_dump()
            )
            events = got.json()["trajectory"]
            assert [e["event"] for e in events] == ["prompt", "tool", "answer"] and events[1]["tool"] == "get_ticket"
            missing = await http.post(TRAJECTORY_V1.endpoint, json={"task_id": "nope"})
            assert missing.status_code == 404
        calls = await admin.trajectory("desk-1", 0)
        assert [(c["agent"], c["tool"]) for c in calls] == [("sam", "get_ticket")]  # as the token's agent
        await handler.aclose()


async def test_skill_artifacts_reach_an_agent_at_a_url_through_skill_config(client, settings, worker, tmp_path):
    """A record's `skills` (artifact folders) go to an a2a agent with no sandbox as skill-config/v1 skills,
    their SKILL.md whole; an agent whose card lacks the extension fails its deploy, saying why."""
    import asyncio

    from starlette.applications import Starlette
    from test_agents import serving

    from agent_env.agents.sdk import Agent, Answer, Turn, a2a_routes
    from agent_env.planning.tasks import load_task
    from agent_env.temporal import launch

    class Skilled(Agent):
        name = "skilled"

        async def answer(self, turn: Turn) -> Answer:
            return Answer(text="; ".join(f"{s['name']}: {s['description']}" for s in turn.skills))

    bundle = tmp_path / "bundle"
    (bundle / "artifacts" / "triage").mkdir(parents=True)
    (bundle / "artifacts" / "triage" / "SKILL.md").write_text(
        "---\nname: triage\ndescription: Sort tickets by urgency\n---\n# Triage\nUrgent first.\n"
    )
    (bundle / "tasks").mkdir()
    states = {}
    for extensions in (True, False):
        app = Starlette()
        async with serving(app) as url:
            served, handler = a2a_routes(Skilled(), url + "/", extensions=extensions)
            app.router.routes.extend(served)
            (bundle / "tasks" / "t.toml").write_text(
                f'id = "skills"\n\n[[steps]]\nid = "agent"\ntype = "deploy_agent"\n[steps.config.record]\n'
                f'name = "skilled"\ntype = "a2a"\nskills = ["triage"]\nconfig = {{ url = "{url}/" }}\n\n'
                '[[steps]]\nid = "ask"\ntype = "prompt_agent"\ndepends_on = ["agent"]\n'
                'config = { agent = "agent", prompt = "What can you do?" }\n'
            )
            spec = load_task(bundle / "tasks" / "t.toml")
            handle = await launch.start_run(client, settings, spec)
            states[extensions] = await asyncio.wait_for(launch.wait_result(handle), 60)
            await handler.aclose()
    served_it, lacks_it = states[True], states[False]
    assert served_it.status is RunStatus.PASSED, served_it.error
    assert served_it.steps["ask"].outputs["answer"] == "triage: Sort tickets by urgency"
    assert lacks_it.status is RunStatus.ERROR
    assert "declares no urn:agentenv:skill-config/v1" in (lacks_it.steps["agent"].error or "")


async def test_a_hostile_agents_huge_trajectory_is_not_read_whole(tmp_path):
    """An agent answering its trajectory with a huge body: the worker reads a bounded prefix and keeps only a
    note that it was clipped."""
    import asyncio
    from types import SimpleNamespace

    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route
    from test_agents import serving

    from agent_env.agents.extensions import ENDPOINTS, MAX_TRAJECTORY_BYTES, TRAJECTORY, ExtensionClient

    sent = []

    async def endless(request):
        async def body():
            for _ in range(4096):  # 256 MiB: far more than the limit, if nobody stops reading
                sent.append(1)
                yield b"x" * 65536
                await asyncio.sleep(0)

        return StreamingResponse(body(), media_type="application/json")

    app = Starlette(routes=[Route(ENDPOINTS[TRAJECTORY], endless, methods=["POST"])])
    extension = SimpleNamespace(uri=TRAJECTORY, params={"endpoint": ENDPOINTS[TRAJECTORY]})
    card = SimpleNamespace(capabilities=SimpleNamespace(extensions=[extension]))
    async with serving(app) as url, httpx.AsyncClient() as http:
        client = ExtensionClient(http, url + "/", card)
        assert await client.trajectory("t1") == {"clipped": True, "bytes": f"over {MAX_TRAJECTORY_BYTES}"}
    assert len(sent) < 4096, "the reply was not read to its end"


async def test_agent_config_gives_our_sdk_agent_its_system_prompt_and_its_name(tmp_path):
    """What a run sets through agent-config/v1: `system_prompt` reaches every turn (a turn's own wins), and a `name`
    or `description` renames the agent on its served card, at both card paths; an empty name is refused."""
    from starlette.applications import Starlette
    from test_agents import serving

    from agent_env.agents.client import AgentClient
    from agent_env.agents.sdk import Agent, Turn, a2a_routes

    class Prompted(Agent):
        name = "prompted"
        description = "its own description"

        async def answer(self, turn: Turn) -> str:
            return turn.system_prompt

    app = Starlette()
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        served, handler = a2a_routes(Prompted(), url + "/", extensions=True)
        app.router.routes.extend(served)
        card = (await http.get("/.well-known/agent-card.json")).json()
        config = {e["uri"]: e["params"] for e in card["capabilities"]["extensions"]}["urn:agentenv:agent-config/v1"]
        assert {"name", "description", "role", "system_prompt"} <= set(config["methods"]["set"]["request"]["supported"])
        assert (await http.post("/ext/agent-config", json={"name": "  "})).status_code == 400
        assert (await http.post("/ext/agent-config", json={"description": 7})).status_code == 400
        set_it = {"system_prompt": "You are the billing desk.", "name": "billing", "description": "Bills people"}
        assert (await http.post("/ext/agent-config", json=set_it)).status_code == 200
        for path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
            card = (await http.get(path)).json()
            assert (card["name"], card["description"]) == ("billing", "Bills people")
        client = AgentClient(url, http)
        assert (
            await client.ask("who are you?", {}, context_id="c1", deadline_s=20)
        ).text == "You are the billing desk."
        own = await client.ask("and now?", {"system_prompt": "You are support."}, context_id="c2", deadline_s=20)
        assert own.text == "You are support."
        await handler.aclose()


# The reference framework's own steps (its `agent_env`, run in its side venv) deploy, peer, prompt and read an agent
# written with our SDK. Only the sandbox its deploy_agent provisions is stood in for: our agent already runs.
REFERENCE_STEPS = """
import asyncio, json, sys
from unittest import mock

import httpx
from agent_env.a2a_agent import A2AAgent, DeployedA2AAgent
from agent_env.config import get_config
from agent_env.env.env import DeployedEnv
from agent_env.task_step.context import TaskStepContext
from agent_env.task_step.task_steps.deploy_agent import DeployAgentTaskStep
from agent_env.task_step.task_steps.deploy_human_agent import DeployHumanAgentTaskStep
from agent_env.task_step.task_steps.install_agent import _build_param_resolvers
from agent_env.task_step.task_steps.peer_agents import AgentPeers, PeerAgentsTaskStep
from agent_env.task_step.task_steps.prompt_agent import PromptAgentTaskStep
from agent_env.task_step.task_steps.register_agent_triggers import RegisterAgentTriggersStep

URL, MCP_URL, SKILL_MD = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
RULES = [{"id": "bye", "when": {"type": "conversational", "where": {"message": {"regex": "(?i)all done"}}},
          "actions": [{"type": "say", "text": "thanks, bye"}, {"type": "end"}]}]


class AlreadyServed:
    id, version, metadata = "ours", 1, {}

    async def deploy(self, **_):
        card = await A2AAgent._wait_for_agent_card(self, URL)  # as its deploy waits for a sandboxed agent's card
        return DeployedA2AAgent(agent_id=self.id, agent_version=1, a2a_url=URL, sandbox_id="none", agent_card=card)

    async def close(self):
        pass


async def main():
    seen = {}
    context = TaskStepContext(instance_id="run-1", metadata={"seed": {"ticket": "TCK-7"}})
    card = {"name": "desk"}
    context.deployed_envs.append(DeployedEnv(env_id="desk", env_version=1, mcp_url=MCP_URL, environment_card=card))
    deploy = DeployAgentTaskStep(
        "deploy", None, env_ids=["desk"], a2a_agent_id="ours", agent_name="solver", role="support",
        agent_description="Solves support tickets", system_prompt="You handle ticket <ticket>.",
        skills=[{"name": "refunds", "description": "How refunds go", "skill_md": SKILL_MD}],
    )
    with (
        mock.patch.object(A2AAgent, "get", lambda *args, **kwargs: AlreadyServed()),
        mock.patch("agent_env.a2a_agent.a2a_agent.AGENT_CARD_TIMEOUT", 20),  # it is served already: no 5 minutes
    ):
        context = await deploy.execute(context)
    async with httpx.AsyncClient(base_url=URL) as http:
        card = (await http.get("/.well-known/agent.json")).json()
        seen["card"] = [card["name"], card["description"]]
        seen["mcp"] = list((await http.get("/ext/mcp-config")).json()["mcp_servers"].values())

    context = await DeployHumanAgentTaskStep("helper", None, agent_name="helper", a2a_url=URL).execute(context)
    context = await PeerAgentsTaskStep("peers", None, peerings=[AgentPeers("solver", ["helper"])]).execute(context)
    context = await RegisterAgentTriggersStep("rules", None, agent_name="solver", triggers=RULES).execute(context)
    seen["rules"] = context.metadata["agent_trigger_registrations"][0]["added"]

    ask = PromptAgentTaskStep("ask", None, prompt="Handle it", agent_name="solver", poll_interval_seconds=1)
    context = await ask.execute(context)
    answer = context.prompt_responses[-1]
    seen["answer"] = answer.response
    seen["trajectory"] = json.loads(get_config().get_object_store().get(answer.agent_trajectory_object_url))

    _, decide_path = A2AAgent.operation(A2AAgent.find_extension(card, A2AAgent.EXT_TRIGGERS), "decide")
    seen["decided"] = await ask._decide(URL + decide_path, 1, "all done here", "c1", {})

    install = A2AAgent.find_extension(card, A2AAgent.EXT_INSTALL)["params"]
    resolvers = _build_param_resolvers(container_name="box", work_dir="/work", agent_ctx_tar="/ctx.tar",
                                       a2a_port=install["a2a_port"], config=get_config(), agent_name="solver")
    resolved = {name: resolvers[name]() for name in install["required_params"]}
    seen["install"] = [command.format(**resolved) for command in install["install_commands"]]
    print("SEEN " + json.dumps(seen))


asyncio.run(main())
"""


async def test_our_sdk_agent_is_deployed_peered_and_prompted_by_the_reference_frameworks_own_steps(
    framework_python,  # noqa: F811 - the fixture imported above
    tmp_path,
):
    """deploy_agent (MCP server, skills, system prompt, identity and role, each as its card negotiates them),
    peer_agents, register_agent_triggers, prompt_agent (A2A 0.3 at /a2a, and the trajectory it keeps), the
    triggers' decide and install/v1's commands: the reference framework's own code, against our SDK's agent."""
    from starlette.applications import Starlette
    from test_agents import serving

    from agent_env.agents.sdk import Agent, Answer, Turn, a2a_routes

    class Ours(Agent):
        name = "ours"
        description = "an agent written with our SDK"
        peer_agents = True
        triggers = True
        install = {
            "install_commands": ["tar -xf {agent_ctx_tar} -C {work_dir} && serve {agent_name} {a2a_port}"],
            "required_params": ["agent_ctx_tar", "work_dir", "agent_name", "a2a_port"],
            "a2a_port": 8000,
        }

        async def answer(self, turn: Turn) -> Answer:
            seen = [turn.system_prompt, turn.role, [s["name"] for s in turn.skills]]
            return Answer(text=json.dumps(seen + [[p["name"] for p in turn.peers]]))

    app = Starlette()
    async with serving(app) as url:
        served, handler = a2a_routes(Ours(), url + "/", extensions=True)
        app.router.routes.extend(served)
        mcp_url = "http://127.0.0.1:9/envs/desk/mcp"  # registered only: this agent calls no tools
        output = await run_to_end(
            framework_python, tmp_path, "reference_steps", REFERENCE_STEPS, url, mcp_url, SKILL_MD
        )
        await handler.aclose()
    seen = json.loads(next(line for line in output.splitlines() if line.startswith("SEEN "))[5:])
    assert seen["card"] == ["solver", "Solves support tickets"]  # deploy_agent stamped its identity
    assert seen["mcp"] == [{"url": mcp_url, "has_headers": True}]  # with the role header its card takes
    system_prompt, role, skills, peers = json.loads(seen["answer"])
    assert (system_prompt, role, skills, peers) == ("You handle ticket TCK-7.", "support", ["refunds"], ["helper"])
    assert [e["event"] for e in seen["trajectory"]] == ["prompt", "answer"]
    assert seen["rules"] == ["bye"] and seen["decided"]["fired"] == ["bye"] and seen["decided"]["done"] is True
    assert seen["install"] == ["tar -xf /ctx.tar -C /work && serve solver 8000"]
