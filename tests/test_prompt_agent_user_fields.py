"""The framework's user-simulator and trajectory fields on prompt_agent, in real runs (the real Temporal dev server,
agents hosted by the real gateway, the fake model server): they hold a `conversation` of ours, with the partner
that plays the user named by its agent name or reached at an A2A URL the task did not deploy."""

from __future__ import annotations

import json

import pytest
from starlette.applications import Starlette
from test_agents import serving
from test_object_transfers import Notes, trusting  # noqa: F401 - the fixture

from agent_env.agents.sdk import Agent, Answer, Turn, a2a_routes
from agent_env.episodes import EpisodeSpec
from agent_env.errors import BadInput
from agent_env.planning.tasks import parse_task
from agent_env.spec.run import RunStatus
from agent_env.stores import open_stores

SUPPORT = {
    "name": "support",
    "type": "scripted",
    "config": {"turns": [[{"say": "Which order?"}], [{"say": "I refunded ORD-1001."}], [{"say": "Anything else?"}]]},
}


def dana(**config) -> dict:
    persona = {"brief": "Dana, charged twice for ORD-1001.", "default_reply": "Hello?", **config}
    return {"name": "dana", "type": "persona", "config": persona}


def talk(*, user: dict | None = None, **prompt) -> dict:
    """A task: support (agent name "support-bot") prompted by the framework's fields, dana deployed if `user`."""
    steps = [
        {"id": "support", "type": "deploy_agent", "config": {"record": SUPPORT, "as": "support-bot"}},
        {
            "id": "talk",
            "type": "prompt_agent",
            "depends_on": ["support"] + (["dana"] if user else []),
            "retries": 0,
            "config": {"agent_name": "support-bot", "prompt": "I was charged twice!", **prompt},
        },
    ]
    if user:
        steps.insert(0, {"id": "dana", "type": "deploy_agent", "config": {"record": user, "as": "dana-sim"}})
    return {"id": "user-fields", "steps": steps}


def transcript_of(state, settings) -> list[dict]:
    return json.loads(open_stores(settings).objects.get(state.steps["talk"].outputs["transcript"]))["messages"]


async def test_a_user_simulator_named_by_the_framework_answers_in_its_format_until_done(run_task, settings):
    """user_agent_name names the deployed simulator; its replies in the framework's format ({message, done}) are
    what it says, its other fields are kept, and `done` ends the conversation before max_conversation_turns.
    trajectory_output_prefix keeps a copy of the transcript in that folder of the run's."""
    replies = [
        {"contains": "which order", "say": '{"message": "ORD-1001, the skillet.", "done": false, "mood": "calm"}'},
        {"contains": "refunded", "say": '{"message": "Thanks, that settles it.", "done": true}'},
    ]
    state = await run_task(
        talk(
            user=dana(replies=replies),
            user_agent_name="dana-sim",
            max_conversation_turns=3,
            live_trajectory=True,
            trajectory_output_prefix="out/trajectories/",
        )
    )
    assert state.status is RunStatus.PASSED, state
    outputs = state.steps["talk"].outputs
    messages = transcript_of(state, settings)
    assert [(m["speaker"], m["text"]) for m in messages] == [
        ("dana-sim", "I was charged twice!"),
        ("support-bot", "Which order?"),
        ("dana-sim", "ORD-1001, the skillet."),
        ("support-bot", "I refunded ORD-1001."),
        ("dana-sim", "Thanks, that settles it."),
    ]
    assert messages[2]["fields"] == {"mood": "calm"} and messages[4]["done"] is True
    assert outputs["turns"] == 2 and outputs["answer"] == "I refunded ORD-1001."
    copy = outputs["transcript_copy"]
    assert copy == f"runs/{state.run_id}/out/trajectories/talk.json"
    assert json.loads(open_stores(settings).objects.get(copy))["messages"] == messages


async def test_user_model_is_the_model_the_simulator_answers_with(run_task, settings):
    """A model-driven persona answers with the model user_model names (here the fake's `seeded` script), on the
    endpoint it was deployed with; max_conversation_turns bounds the agent's turns."""
    state = await run_task(
        talk(user=dana(llm=True), user_agent_name="dana-sim", max_conversation_turns=2, user_model="seeded")
    )
    assert state.status is RunStatus.PASSED, state
    messages = transcript_of(state, settings)
    assert [m["speaker"] for m in messages] == ["dana-sim", "support-bot", "dana-sim", "support-bot"]
    assert messages[2]["text"].startswith("my seed is ")
    assert state.steps["talk"].outputs["turns"] == 2


async def test_a_simulator_past_its_own_deadline_ends_the_conversation(run_task, settings):
    """user_agent_timeout_seconds is the simulator's deadline: missing it ends the conversation, as the framework
    does (the user walked away); the step succeeds with the agent's last answer."""
    state = await run_task(
        talk(
            user=dana(llm=True),
            user_agent_name="dana-sim",
            max_conversation_turns=3,
            user_model="fake-slow-4",
            user_agent_timeout_seconds=1,
        )
    )
    assert state.status is RunStatus.PASSED, state
    messages = transcript_of(state, settings)
    assert [m["speaker"] for m in messages] == ["dana-sim", "support-bot", "dana-sim"]
    assert "did not answer within 1s" in messages[-1]["timed_out"]
    assert state.steps["talk"].outputs["answer"] == "Which order?"


class Human(Agent):
    """Plays the user from outside the run: says what it was told, and notes the turns it got."""

    name = "human"

    def __init__(self) -> None:
        self.turns: list[Turn] = []

    async def answer(self, turn: Turn) -> Answer:
        self.turns.append(turn)
        return Answer(text=f"You said: {turn.prompt}")


async def test_a_user_at_an_a2a_url_plays_the_user_and_gets_no_credential(run_task, settings):
    """user_a2a_url: an agent the task did not deploy plays the user; its turns carry no token, no MCP URL and no
    Authorization header (a credential goes only to its own origin), and no format is asked of it."""
    human, seen = Human(), []

    app = Starlette()

    async def recording(scope, receive, send):  # the headers of every request the user's agent gets
        if scope["type"] == "http":
            seen.append(dict(scope["headers"]).get(b"authorization"))
        await app(scope, receive, send)

    async with serving(recording) as url:
        routes, handler = a2a_routes(human, url + "/")
        app.router.routes.extend(routes)
        state = await run_task(talk(user_a2a_url=url + "/", max_conversation_turns=2))
        await handler.aclose()
    assert state.status is RunStatus.PASSED, state
    messages = transcript_of(state, settings)
    assert [(m["speaker"], m["text"]) for m in messages] == [
        ("user", "I was charged twice!"),
        ("support-bot", "Which order?"),
        ("user", "You said: Which order?"),
        ("support-bot", "I refunded ORD-1001."),
    ]
    (turn,) = human.turns
    assert turn.token is None and turn.mcp_url is None and turn.settings == {}
    assert seen and set(seen) == {None}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"user_a2a_url": "file:///etc/passwd"}, "is not an http(s) URL of an A2A agent"),
        ({"user_a2a_url": "http://me:pw@127.0.0.1:9/"}, "may not hold credentials"),
        ({"max_conversation_turns": 3}, "needs who plays the user: user_agent_name or user_a2a_url"),
        ({"trajectory_output_prefix": "out/../../other-run"}, "no '.' or '..' in it"),
        (
            {"user_agent_name": "nobody", "max_conversation_turns": 2},
            "user_agent_name: step 'talk': agent_name 'nobody' names no deploy_agent step",
        ),
        ({"snapshot_config": {"interval_seconds": 30}}, "snapshots on a timer (interval_seconds) are not taken here"),
        ({"snapshot_config": {"at_end": False}}, "no snapshot is ever taken"),
    ],
)
def test_what_the_fields_cannot_be_is_said_at_the_field(fields, expected):
    with pytest.raises(BadInput) as e:
        parse_task(talk(**fields), "test task")
    assert expected in e.value.problem


async def test_snapshot_config_saves_the_agents_state_per_turn_and_at_the_end(run_task, settings, trusting):  # noqa: F811
    """snapshot_config: the prompted agent (ours, serving snapshot/v1) saves its state of the prompt after each turn
    the user answers and when the prompt ends, as run snapshots the step's outputs list."""
    notes, app = Notes(), Starlette()
    async with serving(app) as url:
        routes, handler = a2a_routes(notes, url + "/", extensions=True)
        app.router.routes.extend(routes)
        task = talk(
            user=dana(), user_agent_name="dana-sim", max_conversation_turns=2, snapshot_config={"per_turn": True}
        )
        task["steps"][1]["config"]["record"] = {"name": "support", "type": "a2a", "config": {"url": url + "/"}}
        state = await run_task(task)
        await handler.aclose()
    assert state.status is RunStatus.PASSED, state.error or state
    shots = state.steps["talk"].outputs["snapshots"]
    prefix = f"runs/{state.run_id}/agent_snapshots/talk"
    assert [(s["at"], s["snapshot"]) for s in shots] == [("turn-1", f"{prefix}.turn-1/"), ("end", f"{prefix}.end/")]
    objects = open_stores(settings).objects
    kept = [json.loads(objects.get(s["objects"]["trajectory"])) for s in shots]
    assert kept == [["I was charged twice!"], ["I was charged twice!", "Hello?"]]


def test_a_prompt_a_trainer_plays_in_refuses_what_only_the_step_does():
    """An episode's run holds a prompt a trainer plays in itself: the fields only the prompt_agent step acts on are
    refused by name there, not ignored."""
    task = parse_task(talk(user=dana(), user_agent_name="dana-sim", max_conversation_turns=2, user_model="x"), "t")
    with pytest.raises(BadInput, match="step 'talk' sets user_model: a prompt a trainer plays in is held by the run"):
        EpisodeSpec.from_task(task, ["support"])
    plain = parse_task(talk(user=dana(), user_agent_name="dana-sim", max_conversation_turns=2), "t")
    assert EpisodeSpec.from_task(plain, ["support"]).trainer_agents == ["support"]
