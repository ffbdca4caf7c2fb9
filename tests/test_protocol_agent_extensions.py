"""The agent extensions beyond configuring: peer-agents/v1, triggers/v1 (agent side), attribution-probe/v1 and
install/v1. Our SDK serves the ones an agent enables, declared as the reference framework declares them; runs use
them whenever a card declares them (deploy_agent sends peers and reads install/v1, register_agent_triggers
registers rules, prompt_agent lets a partner's rules answer for it), with an agent written with the reference
framework (in its side venv, as tests/test_protocol_agents.py runs one) and with ours; an agent that declares one
but does not serve it fails the step, naming the extension and the fix.
"""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import free_port
from starlette.applications import Starlette
from test_agents import serving
from test_protocol_agents import reference_agent, reference_python  # noqa: F401 - the fixture, by import

from agent_env.agents.client import AgentClient
from agent_env.agents.extension_ops import (
    INSTALL,
    PEER_AGENTS,
    TRIGGERS,
    DecideRequest,
    PeerAgent,
    decide,
    probe_attribution,
    register_triggers,
    set_peers,
)
from agent_env.agents.extensions import ExtensionRefused
from agent_env.agents.sdk import Agent, Answer, Turn, a2a_routes
from agent_env.spec.run import RunStatus
from agent_env.stores import open_stores

RULES = [
    {"id": "greet", "when": {"type": "step", "turn": 1}, "actions": [{"type": "say", "text": "I need a refund"}]},
    {
        "id": "bye",
        "when": {"type": "conversational", "where": {"message": {"regex": "(?i)refund issued"}}},
        "actions": [{"type": "say", "text": "thanks"}, {"type": "end"}],
    },
]
INSTALL_PARAMS = {"install_commands": ["docker cp {agent_ctx_tar} {container}:/agent"], "a2a_port": 8000}


class Delegating(Agent):
    """Enables every extension of this family; answers with its peers, and hands its model call an attribution."""

    name = "delegating"
    peer_agents = True
    triggers = True
    attribution_probe = True
    install = INSTALL_PARAMS  # type: ignore[assignment]  # validated as an InstallDeclaration

    async def answer(self, turn: Turn) -> Answer:
        turn.attribution()  # what a model call of this turn would carry
        return Answer(text=",".join(p["name"] for p in turn.peers) or "no peers")


class Helper(Agent):
    """Plays the agent in a conversation: asks, then says the refund is issued."""

    name = "helper"

    async def answer(self, turn: Turn) -> Answer:
        return Answer(text="How can I help?" if turn.number == 0 else "Refund issued.")


async def served_agent(agent: Agent, app: Starlette, url: str, *, drop: str | None = None):
    routes, handler = a2a_routes(agent, url + "/", extensions=True)
    app.router.routes.extend(r for r in routes if getattr(r, "path", None) != drop)
    return handler


async def test_our_sdk_agent_declares_and_serves_the_extensions_it_enables():
    from agentenv_protocol.a2a_agent import (
        ATTRIBUTION_PROBE_V1,
        PEER_AGENTS_V1,
        TRIGGERS_V1,
        PeerAgentsSetRequest,
        TriggerDecideRequest,
        TriggerRegisterRequest,
        card_request_accepts,
    )

    app = Starlette()
    async with serving(app) as url, httpx.AsyncClient() as http:
        handler = await served_agent(Delegating(), app, url)
        card = (await http.get(url + "/.well-known/agent-card.json")).json()
        declared = {e["uri"]: e["params"] for e in card["capabilities"]["extensions"]}
        for definition in (PEER_AGENTS_V1, TRIGGERS_V1, ATTRIBUTION_PROBE_V1):
            assert declared[definition.uri]["endpoint"] == definition.endpoint
            for name, operation in definition.operations.items():
                method = declared[definition.uri]["methods"][name]
                assert method["method"] == operation.method
                assert method.get("endpoint", definition.endpoint) == operation.path
        assert card_request_accepts(declared[PEER_AGENTS]["methods"]["set"]["request"], ["peers"])
        assert card_request_accepts(declared[TRIGGERS]["methods"]["decide"]["request"], ["turn", "solver_message"])
        assert declared[INSTALL]["install_commands"] == INSTALL_PARAMS["install_commands"]
        assert declared[INSTALL]["a2a_port"] == 8000 and isinstance(declared[INSTALL]["a2a_port"], int)

        # the reference's own request models, over HTTP
        peers = PeerAgentsSetRequest.model_validate({"peers": [{"name": "billing", "url": "http://127.0.0.1:1/"}]})
        assert (await http.post(url + PEER_AGENTS_V1.endpoint, json=peers.model_dump())).status_code == 200
        assert (await http.get(url + PEER_AGENTS_V1.endpoint)).json() == {
            "peers": [{"name": "billing", "url": "http://127.0.0.1:1/"}]
        }
        twice = {"peers": [{"name": "a", "url": "http://127.0.0.1:1/"}] * 2}
        assert (await http.post(url + PEER_AGENTS_V1.endpoint, json=twice)).status_code == 400

        # and a run's client: the peers reach the agent's turns, the attribution its probe
        agent = AgentClient(url, http)
        client = await agent.extensions()
        await set_peers(client, [PeerAgent(name="desk", url="http://127.0.0.1:2/", description="the desk")])
        reply = await agent.ask("who can help?", {"run_id": "run-7", "agent": "sam"}, context_id="c", deadline_s=20)
        assert reply.text == "desk"
        seen = await probe_attribution(client)
        assert seen.last_seen_attribution == {"run_id": "run-7", "agent": "sam"} and seen.last_seen_at_utc

        registered = TriggerRegisterRequest(triggers=RULES)
        answer = await http.post(url + TRIGGERS_V1.endpoint, json=registered.model_dump())
        assert answer.json()["added"] == ["greet", "bye"]
        assert await register_triggers(client, RULES) == ["greet", "bye"]  # the same rules again: a no-op
        first = TriggerDecideRequest(turn=1, solver_message="hello", context_id="x")
        decided = (await http.post(url + "/ext/triggers/decide", json=first.model_dump())).json()
        assert decided == {"parts": [{"kind": "text", "text": "I need a refund"}], "done": False, "fired": ["greet"]}
        again = await decide(client, DecideRequest(turn=1, solver_message="hello", context_id="x"))
        assert again.fired == ["greet"]  # a turn that does not move forward starts the conversation over
        ended = await decide(client, DecideRequest(turn=2, solver_message="Refund ISSUED.", context_id="x"))
        assert (ended.fired, ended.done, ended.text()) == (["bye"], True, "thanks")
        once = await decide(client, DecideRequest(turn=3, solver_message="refund issued", context_id="x"))
        assert once.fired == [] and not once.done  # once per conversation
        other = await decide(client, DecideRequest(turn=1, solver_message="", context_id="y"))
        assert other.fired == ["greet"]  # conversations are apart
        state = (await http.get(url + TRIGGERS_V1.endpoint)).json()
        fired = [(e["trigger_id"], e["context_id"]) for e in state["firing_log"] if e["kind"] == "fired"]
        assert fired == [("greet", "x"), ("greet", "x"), ("bye", "x"), ("greet", "y")]

        # hostile bodies: refused, naming what is wrong
        backtracking = {"triggers": [{"when": {"type": "conversational", "where": {"message": {"regex": "(a)\\1"}}}}]}
        backtracking["triggers"][0]["actions"] = [{"type": "end"}]
        refused = await http.post(url + TRIGGERS_V1.endpoint, json=backtracking)
        assert refused.status_code == 400 and "RE2" in refused.text
        taken = [{**RULES[0], "actions": [{"type": "end"}]}]
        assert (await http.post(url + TRIGGERS_V1.endpoint, json={"triggers": taken})).status_code == 409
        with pytest.raises(ExtensionRefused, match="refused urn:agentenv:triggers/v1 register"):
            await register_triggers(client, taken)
        huge = await http.post(url + TRIGGERS_V1.endpoint, content=b'{"triggers": ["' + b"x" * 1_100_000 + b'"]}')
        assert huge.status_code == 400 and "over" in huge.text
        unknown = {"triggers": [{"when": {"type": "someday"}, "actions": [{"type": "end"}]}]}
        assert (await http.post(url + TRIGGERS_V1.endpoint, json=unknown)).status_code == 400
        await handler.aclose()


def test_the_trigger_engine_forgets_the_least_recently_used_conversation_first():
    from agent_env.agents import agent_triggers
    from agent_env.agents.agent_triggers import AgentTrigger, TriggerEngine

    engine = TriggerEngine()
    engine.register([AgentTrigger.model_validate(RULES[0])])
    for i in range(agent_triggers.MAX_CONTEXTS + 10):
        engine.decide(DecideRequest(turn=1, context_id=f"c{i}"))
    assert len(engine.contexts) == agent_triggers.MAX_CONTEXTS and "c0" not in engine.contexts
    assert len(engine.log) == agent_triggers.MAX_LOG


REFERENCE_DELEGATOR = """
import sys

from agentenv_protocol.a2a_agent import (
    INSTALL_V1, PEER_AGENTS_V1, TRIGGERS_V1, AgentEnvAgent, AgentIdentity, TaskRequest, TaskResult, a2a_agent, enable,
)


@a2a_agent(
    identity=AgentIdentity(name="customer", description="plays a customer", version="1"),
    extensions=[
        PEER_AGENTS_V1,
        TRIGGERS_V1,
        enable(INSTALL_V1, install_commands=["docker cp {agent_ctx_tar} {container}:/agent"],
               required_params=["agent_ctx_tar", "container"], a2a_port=8000),
    ],
)
class Customer(AgentEnvAgent):
    async def run(self, request: TaskRequest) -> TaskResult:
        return TaskResult.text("the model was asked")


if __name__ == "__main__":
    Customer().serve(host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


async def test_a_reference_agent_gets_its_peers_and_its_rules_answer_a_conversation(
    run_task,
    settings,
    reference_python,  # noqa: F811 - the fixture imported above
    tmp_path,
    monkeypatch,
):
    import test_protocol_agents

    monkeypatch.setattr(test_protocol_agents, "REFERENCE_AGENT", REFERENCE_DELEGATOR)
    app = Starlette()
    with reference_agent(reference_python, tmp_path) as ref_url:
        async with serving(app) as helper_url:
            handler = await served_agent(Helper(), app, helper_url)
            state = await run_task(
                {
                    "id": "peers-and-rules",
                    "steps": [
                        {"id": "helper", "type": "deploy_agent", "config": {"record": a2a("helper", helper_url)}},
                        {
                            "id": "customer",
                            "type": "deploy_agent",
                            "depends_on": ["helper"],
                            "config": {"record": a2a("customer", ref_url), "peers": ["helper"]},
                        },
                        {
                            "id": "rules",
                            "type": "register_agent_triggers",
                            "depends_on": ["customer"],
                            "config": {"agent": "customer", "triggers": RULES},
                        },
                        {
                            "id": "talk",
                            "type": "prompt_agent",
                            "depends_on": ["rules", "helper"],
                            "config": {
                                "agent": "helper",
                                "prompt": "hello",
                                "conversation": {"partner": "customer", "max_turns": 5},
                            },
                        },
                    ],
                }
            )
            await handler.aclose()
        async with httpx.AsyncClient() as http:
            peers = (await http.get(ref_url + "ext/peer-agents")).json()["peers"]
            log = (await http.get(ref_url + "ext/triggers")).json()["firing_log"]
    assert state.status is RunStatus.PASSED, state.error or state
    customer = state.steps["customer"].outputs
    assert {PEER_AGENTS, TRIGGERS, INSTALL} <= set(customer["extensions"])
    assert customer["peers"] == ["helper"]
    assert customer["install"] == {
        "container": 1,
        "host": 0,
        "a2a_port": 8000,
        "required_params": ["agent_ctx_tar", "container"],
    }
    assert peers == [{"name": "helper", "url": helper_url + "/", "description": Helper.description}]  # received
    assert state.steps["rules"].outputs == {"agent": "customer", "added": ["greet", "bye"]}
    talk = state.steps["talk"].outputs
    assert talk["turns"] == 2 and talk["answer"] == "Refund issued."
    transcript = json.loads(open_stores(settings).objects.get(talk["transcript"]))
    said = [(m["side"], m["text"]) for m in transcript["messages"]]
    assert said == [
        ("partner", "hello"),
        ("agent", "How can I help?"),
        ("partner", "I need a refund"),  # its rule answered: its model was not asked
        ("agent", "Refund issued."),
        ("partner", "thanks"),  # and the next one ended the conversation
    ]
    assert [e["trigger_id"] for e in log if e["kind"] == "fired"] == ["greet", "bye"]


def a2a(name: str, url: str) -> dict:
    return {"name": name, "type": "a2a", "config": {"url": url if url.endswith("/") else url + "/"}}


async def test_an_agent_that_declares_an_extension_but_does_not_serve_it_fails_the_deploy(run_task):
    """A card is a contract: declaring peer-agents/v1 without serving it fails the step, naming both."""
    peers_app, rules_app = Starlette(), Starlette()
    async with serving(peers_app) as peers_url, serving(rules_app) as rules_url:
        handlers = [
            await served_agent(Helper(), peers_app, peers_url),
            await served_agent(Delegating(), rules_app, rules_url, drop="/ext/peer-agents"),
        ]
        state = await run_task(
            {
                "id": "unserved",
                "steps": [
                    {"id": "helper", "type": "deploy_agent", "config": {"record": a2a("helper", peers_url)}},
                    {
                        "id": "lying",
                        "type": "deploy_agent",
                        "depends_on": ["helper"],
                        "config": {"record": a2a("lying", rules_url), "peers": ["helper"]},
                    },
                ],
            }
        )
        for handler in handlers:
            await handler.aclose()
    assert state.status is RunStatus.ERROR
    error = state.steps["lying"].error or ""
    assert f"declares {PEER_AGENTS} on its card but does not serve its 'set' operation" in error
    assert "serve the extension at the path the card names, or remove it from the card" in error


async def test_peers_for_an_agent_that_does_not_declare_the_extension_fail_naming_the_fix(run_task):
    app, other = Starlette(), Starlette()
    async with serving(app) as url, serving(other) as other_url:
        handlers = [await served_agent(Helper(), app, url), await served_agent(Helper(), other, other_url)]
        state = await run_task(
            {
                "id": "undeclared",
                "steps": [
                    {"id": "a", "type": "deploy_agent", "config": {"record": a2a("a", url)}},
                    {
                        "id": "b",
                        "type": "deploy_agent",
                        "depends_on": ["a"],
                        "config": {"record": a2a("b", other_url), "peers": ["a"]},
                    },
                ],
            }
        )
        rules = await run_task(
            {
                "id": "undeclared-rules",
                "steps": [
                    {"id": "a", "type": "deploy_agent", "config": {"record": a2a("a", url)}},
                    {
                        "id": "rules",
                        "type": "register_agent_triggers",
                        "depends_on": ["a"],
                        "config": {"agent": "a", "triggers": RULES},
                    },
                ],
            }
        )
        for handler in handlers:
            await handler.aclose()
    assert state.status is RunStatus.ERROR
    assert f"its card declares no {PEER_AGENTS}" in (state.steps["b"].error or "")
    assert "`peer_agents = True`" in (state.steps["b"].error or "")
    assert f"declares no {TRIGGERS} on its card" in (rules.steps["rules"].error or "")
    assert "`triggers = True`" in (rules.steps["rules"].error or "")


def test_rules_are_checked_when_the_run_is_planned():
    from agent_env.planning.tasks import parse_task
    from agent_env.steps.builtin.register_agent_triggers import RegisterAgentTriggersConfig

    bad = {"agent": "a", "triggers": [{"when": {"type": "step", "turn": 0}, "actions": [{"type": "say", "text": "x"}]}]}
    with pytest.raises(ValueError, match="turn"):
        RegisterAgentTriggersConfig.model_validate(bad)
    with pytest.raises(Exception, match="not_upstream|does not depend"):
        parse_task(
            {
                "id": "t",
                "steps": [
                    {"id": "a", "type": "deploy_agent", "config": {"record": a2a("a", "http://127.0.0.1:1/")}},
                    {"id": "r", "type": "register_agent_triggers", "config": {"agent": "a", "triggers": RULES}},
                ],
            },
            "t",
        )


def test_our_trigger_engine_decides_as_the_reference_one_does():
    """The same rules and turns, through the reference framework's own engine and ours: the same decisions."""
    from agentenv_protocol.a2a_agent._triggers import TriggerEngine as ReferenceEngine

    from agent_env.agents.agent_triggers import AgentTrigger, TriggerEngine

    rules = RULES + [
        {
            "id": "escalate",
            "once": False,
            "when": {
                "type": "all",
                "of": [
                    {"type": "step", "turn": 2, "cmp": "gte"},
                    {
                        "type": "any",
                        "of": [
                            {"type": "conversational", "where": {"message": {"equals": "no"}}},
                            {"type": "env_trigger", "env_id": "desk", "trigger_id": "late"},
                        ],
                    },
                ],
            },
            "actions": [{"type": "say", "text": "let me talk to your manager"}],
        },
        {
            "id": "silent",
            "when": {"type": "conversational", "where": {"message": {"exists": False}}},
            "actions": [{"type": "end"}],
        },
    ]
    theirs, ours = ReferenceEngine(), TriggerEngine()
    assert theirs.register({"triggers": rules})["added"] == ours.register(
        [AgentTrigger.model_validate(r) for r in rules]
    )
    turns = [
        (1, "hello", "a", None),
        (2, "no", "a", None),
        (3, "no", "a", None),
        (4, "fine", "a", {"desk": {"late": "fired"}}),
        (5, "refund issued", "a", None),
        (2, "no", "a", None),  # back in time: the conversation starts over
        (1, "", "b", None),
        (2, "x", "b", {"desk": {"late": "pending"}}),
    ]
    for turn, said, context, envs in turns:
        expected = theirs.decide(turn=turn, solver_message=said, context_id=context, env_triggers=envs)
        got = ours.decide(DecideRequest(turn=turn, solver_message=said, context_id=context, env_triggers=envs))
        assert got == expected, (turn, said, context)
    assert [(e["kind"], e.get("trigger_id")) for e in ours.state()["firing_log"]] == [
        (e["kind"], e.get("trigger_id")) for e in theirs.state()["firing_log"]
    ]


def test_a_staging_declaration_reads_as_the_reference_declares_it():
    from agentenv_protocol.a2a_agent.staging import StagingStore

    from agent_env.agents.extension_ops import STAGING, StagingDeclaration

    declared = StagingStore(max_bytes=1024).card_extension()
    assert declared["uri"] == STAGING
    staging = StagingDeclaration.model_validate(declared["params"])
    assert staging.path("a" * 22, "skills/refunds/SKILL.md") == "/ext/staging/" + "a" * 22 + "/skills/refunds/SKILL.md"
    for staging_id, key in (("short", "x"), ("a" * 22, "../x"), ("a" * 22, "/etc/passwd")):
        with pytest.raises(ValueError):
            staging.path(staging_id, key)


async def test_two_agents_are_peered_both_ways_once_both_are_deployed(run_task):
    first, second = Starlette(), Starlette()
    async with serving(first) as first_url, serving(second) as second_url, httpx.AsyncClient() as http:
        handlers = [
            await served_agent(Delegating(), first, first_url),
            await served_agent(Delegating(), second, second_url),
        ]
        state = await run_task(
            {
                "id": "both-ways",
                "steps": [
                    {"id": "a", "type": "deploy_agent", "config": {"record": a2a("a", first_url)}},
                    {"id": "b", "type": "deploy_agent", "config": {"record": a2a("b", second_url)}},
                    {
                        "id": "a-b",
                        "type": "peer_agents",
                        "depends_on": ["a", "b"],
                        "config": {"agent": "a", "peers": ["b"]},
                    },
                    {
                        "id": "b-a",
                        "type": "peer_agents",
                        "depends_on": ["a", "b"],
                        "config": {"agent": "b", "peers": ["a"]},
                    },
                ],
            }
        )
        listed = {
            name: [p["name"] for p in (await http.get(url + "/ext/peer-agents")).json()["peers"]]
            for name, url in (("a", first_url), ("b", second_url))
        }
        for handler in handlers:
            await handler.aclose()
    assert state.status is RunStatus.PASSED, state.error
    assert state.steps["a-b"].outputs == {"agent": "a", "peers": ["b"]}
    assert listed == {"a": ["b"], "b": ["a"]}


async def test_one_step_peers_agents_by_name_as_the_frameworks_peerings_do(run_task):
    first, second = Starlette(), Starlette()
    async with serving(first) as first_url, serving(second) as second_url, httpx.AsyncClient() as http:
        handlers = [
            await served_agent(Delegating(), first, first_url),
            await served_agent(Delegating(), second, second_url),
        ]
        peerings = [
            {"source_agent_name": "alpha", "peer_agent_names": ["beta"]},
            {"source_agent_name": "beta", "peer_agent_names": ["alpha"]},
        ]
        state = await run_task(
            {
                "id": "peerings",
                "steps": [
                    {"id": "one", "type": "deploy_agent", "config": {"record": a2a("alpha", first_url)}},
                    {"id": "two", "type": "deploy_agent", "config": {"record": a2a("beta", second_url)}},
                    {
                        "id": "peer",
                        "type": "peer_agents",
                        "depends_on": ["one", "two"],
                        "config": {"peerings": peerings},
                    },
                ],
            }
        )
        listed = {
            name: [p["name"] for p in (await http.get(url + "/ext/peer-agents")).json()["peers"]]
            for name, url in (("alpha", first_url), ("beta", second_url))
        }
        for handler in handlers:
            await handler.aclose()
    assert state.status is RunStatus.PASSED, state.error
    assert state.steps["peer"].outputs == {
        "peerings": [{"agent": "alpha", "peers": ["beta"]}, {"agent": "beta", "peers": ["alpha"]}]
    }
    assert listed == {"alpha": ["beta"], "beta": ["alpha"]}


async def test_a_run_reads_the_card_of_the_agent_at_a_url_now_not_one_served_there_before(run_task):
    """The worker outlives the agents it talks to: an agent served at a URL where another was before (a port used
    again, an agent redeployed with other extensions) is known by its own card when a run brings it in."""
    port = free_port()
    earlier = Starlette()
    async with serving(earlier, port) as url:
        handler = await served_agent(Helper(), earlier, url)  # declares no extension
        state = await run_task({"id": "earlier", "steps": [{"id": "one", "type": "deploy_agent", "config": {
            "record": a2a("alpha", url)}}]})  # fmt: skip
        await handler.aclose()
    assert state.status is RunStatus.PASSED, state.error
    first, second = Starlette(), Starlette()
    async with serving(first, port) as first_url, serving(second) as second_url:
        handlers = [
            await served_agent(Delegating(), first, first_url),
            await served_agent(Delegating(), second, second_url),
        ]
        state = await run_task(
            {
                "id": "now",
                "steps": [
                    {"id": "one", "type": "deploy_agent", "config": {"record": a2a("alpha", first_url)}},
                    {"id": "two", "type": "deploy_agent", "config": {"record": a2a("beta", second_url)}},
                    {
                        "id": "peer",
                        "type": "peer_agents",
                        "depends_on": ["one", "two"],
                        "config": {"agent": "one", "peers": ["two"]},
                    },
                ],
            }
        )
        for handler in handlers:
            await handler.aclose()
    assert state.status is RunStatus.PASSED, state.error
    assert state.steps["peer"].outputs == {"agent": "alpha", "peers": ["beta"]}


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"peerings": [{"source_agent_name": "alpha", "peer_agent_names": ["alpha"]}]}, "lists itself as a peer"),
        ({"peerings": [{"source_agent_name": "alpha", "peer_agent_names": ["gamma"]}]}, "names no deploy_agent step"),
        ({"agent": "one", "peers": ["two"], "peerings": [{"source_agent_name": "alpha", "peer_agent_names": ["beta"]}]},
         "or `peerings`"),
    ],
)  # fmt: skip
def test_peerings_name_deployed_agents(settings, config, expected):
    from agent_env.planning.runs import plan
    from agent_env.planning.tasks import parse_task

    task = {
        "id": "t",
        "steps": [
            {"id": "one", "type": "deploy_agent", "config": {"record": a2a("alpha", "http://127.0.0.1:1/")}},
            {"id": "two", "type": "deploy_agent", "config": {"record": a2a("beta", "http://127.0.0.1:2/")}},
            {"id": "peer", "type": "peer_agents", "depends_on": ["one", "two"], "config": config},
        ],
    }
    with pytest.raises(Exception, match=expected):
        plan(parse_task(task, "t"), "r-1", settings)
