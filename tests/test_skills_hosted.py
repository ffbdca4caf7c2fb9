"""Skills reach the agents the gateway hosts: an llm (or persona) agent's model gets each SKILL.md of the record's
skill artifacts in its system prompt. deploy_agent reads the texts from the object store in its activity and sends
them with the deploy request, so they never enter the run's Temporal history.

The model here is the fake model server behind a small ASGI wrapper that keeps each request's body: the fake cannot
read, so the test reads what the agent sent it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from test_agents import serving

from agent_env.agents.builtin import SKILLS_HEADING, with_skills
from agent_env.agents.fake_model import create_app
from agent_env.agents.host import MAX_SKILLS, HostedAgentSpec
from agent_env.errors import AgentEnvError
from agent_env.planning.tasks import load_task, parse_task
from agent_env.spec.agent import AgentRecord, InlineSkill
from agent_env.spec.run import RunStatus
from agent_env.temporal import launch

TRIAGE_MD = '---\nname: triage\ndescription: Sort tickets by "urgency"\n---\n# Triage\nUrgent-first-7f3a9c.\n'
TONE_MD = "# Be brief\nThree sentences at most, tone-marker-51e0b2.\n"
MARKERS = ("Urgent-first-7f3a9c", "tone-marker-51e0b2")  # found nowhere but in the SKILL.md files


def recording(app, bodies: list[dict[str, Any]]):
    """`app`, keeping the JSON body of each request it serves."""

    async def wrapped(scope, receive, send) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body:
            bodies.append(json.loads(body))
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return wrapped


@contextlib.asynccontextmanager
async def recorded_model(scripts: dict[str, list[dict[str, Any]]]) -> AsyncIterator[tuple[str, list]]:
    """A fake model server of its own (no key: a bundle's endpoint gets none) and the bodies it received."""
    bodies: list[dict[str, Any]] = []
    async with serving(recording(create_app(scripts), bodies)) as url:
        yield url + "/v1", bodies


def skilled_bundle(root: Path, steps: str) -> Path:
    """A bundle with the skill artifacts `triage` and `tone` and one task, `t`, of these steps."""
    for name, text in (("triage", TRIAGE_MD), ("tone", TONE_MD)):
        (root / "artifacts" / name / "data").mkdir(parents=True)
        (root / "artifacts" / name / "SKILL.md").write_text(text)
        (root / "artifacts" / name / "data" / "extra.txt").write_text("only sandboxed agents get this file\n")
    (root / "tasks").mkdir()
    (root / "tasks" / "t.toml").write_text('id = "skills-hosted"\n' + steps)
    return root


def system_prompts(bodies: list[dict[str, Any]], model: str) -> list[str]:
    return [b["messages"][0]["content"] for b in bodies if b.get("model") == model]


async def test_an_llm_agents_model_gets_its_skills_in_the_system_prompt_and_history_never_holds_them(
    client, settings, worker, tmp_path
):
    async with recorded_model({"skilled": [{"say": "Sorted."}]}) as (url, bodies):
        bundle = skilled_bundle(
            tmp_path / "b",
            f"""
[[steps]]
id = "agent"
type = "deploy_agent"
[steps.config.record]
name = "sorter"
type = "llm"
skills = ["triage", "tone"]
config = {{ system_prompt = "You sort tickets.", model = {{ base_url = "{url}", model = "skilled" }} }}

[[steps]]
id = "ask"
type = "prompt_agent"
depends_on = ["agent"]
config = {{ agent = "agent", prompt = "Sort TCK-1 and TCK-2." }}
""",
        )
        handle = await launch.start_run(client, settings, load_task(bundle / "tasks" / "t.toml"))
        state = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert state.status is RunStatus.PASSED, state.error or state.steps["agent"].error
    assert state.steps["ask"].outputs["answer"] == "Sorted."
    (prompt,) = system_prompts(bodies, "skilled")
    assert prompt == (
        "You sort tickets.\n\n"
        f"{SKILLS_HEADING}\n\n"
        f'<skill name="tone" description="Be brief">\n{TONE_MD.strip()}\n</skill>\n\n'
        f'<skill name="triage" description="Sort tickets by &quot;urgency&quot;">\n{TRIAGE_MD.strip()}\n</skill>'
    ), "its own system prompt first, then each skill whole, between its own tags, in name order"

    history = await client.get_workflow_handle(state.run_id).fetch_history()
    raw = b"".join(event.SerializeToString() for event in history.events)
    assert b"You sort tickets." in raw, "the record is in history (so the search below looks in the right place)"
    for marker in MARKERS:
        assert marker.encode() not in raw, "a SKILL.md's text entered the run's history"


async def test_a_persona_gets_skills_and_a_scripted_agent_plays_its_script_without_them(
    client, settings, worker, tmp_path
):
    async with recorded_model({"person": [{"say": "Fine, thanks."}]}) as (url, bodies):
        bundle = skilled_bundle(
            tmp_path / "b",
            f"""
[[steps]]
id = "persona"
type = "deploy_agent"
[steps.config.record]
name = "pat"
type = "persona"
skills = ["tone"]
config = {{ llm = true, brief = "Pat, a customer.", model = {{ base_url = "{url}", model = "person" }} }}

[[steps]]
id = "scripted"
type = "deploy_agent"
[steps.config.record]
name = "robot"
type = "scripted"
skills = ["tone"]
config = {{ turns = [[{{ say = "As scripted." }}]] }}

[[steps]]
id = "ask_persona"
type = "prompt_agent"
depends_on = ["persona"]
config = {{ agent = "persona", prompt = "How are you?" }}

[[steps]]
id = "ask_scripted"
type = "prompt_agent"
depends_on = ["scripted"]
config = {{ agent = "scripted", prompt = "Anything?" }}
""",
        )
        handle = await launch.start_run(client, settings, load_task(bundle / "tasks" / "t.toml"))
        state = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert state.status is RunStatus.PASSED, state.error
    assert state.steps["ask_persona"].outputs["answer"] == "Fine, thanks."
    (prompt,) = system_prompts(bodies, "person")
    assert prompt.startswith("You are playing this person. Stay in character.\n\nPat, a customer.\n\n# Skills")
    assert prompt.endswith(f'<skill name="tone" description="Be brief">\n{TONE_MD.strip()}\n</skill>')
    assert state.steps["ask_scripted"].outputs["answer"] == "As scripted."


@pytest.mark.parametrize(
    ("kind", "config", "fix"),
    [("human", {}, "put what they need in `instructions`"), ("trainer", {}, "give them to the trainer's model")],
)
def test_human_and_trainer_agents_refuse_skills_when_the_run_is_planned(settings, kind, config, fix):
    record = {"name": "a", "type": kind, "skills": ["tone"], "config": config}
    task = {"id": "t", "steps": [{"id": "a", "type": "deploy_agent", "config": {"record": record}}]}
    with pytest.raises(AgentEnvError, match="skills go to agents that run a model") as refused:
        launch.plan(parse_task(task, "t"), f"plan-{kind}", settings)
    assert fix in str(refused.value)


def test_a_hosted_agent_takes_a_bounded_number_of_skills(settings):
    too_many = [f"skill{i}" for i in range(MAX_SKILLS + 1)]
    record = {"name": "a", "type": "llm", "skills": too_many}
    task = {"id": "t", "steps": [{"id": "a", "type": "deploy_agent", "config": {"record": record}}]}
    with pytest.raises(AgentEnvError, match=f"has {MAX_SKILLS + 1} skills; a hosted agent takes at most {MAX_SKILLS}"):
        launch.plan(parse_task(task, "t"), "plan-many", settings)
    skill = InlineSkill(name="s", description="d", skill_md="x")
    with pytest.raises(ValidationError, match=f"at most {MAX_SKILLS} items"):  # the gateway's bound, whoever asks
        HostedAgentSpec(id="a", record=AgentRecord.model_validate(record), skills=[skill] * (MAX_SKILLS + 1))


def test_without_skills_the_system_prompt_is_as_written():
    assert with_skills("You sort tickets.", []) == "You sort tickets."
    assert with_skills("", [InlineSkill(name="s", description="d", skill_md="Do x.")]).startswith(SKILLS_HEADING)


async def test_a_skill_too_long_for_a_system_prompt_fails_the_deploy_saying_so(client, settings, worker, tmp_path):
    bundle = skilled_bundle(
        tmp_path / "b",
        """
[[steps]]
id = "agent"
type = "deploy_agent"
[steps.config.record]
name = "sorter"
type = "llm"
skills = ["triage"]
""",
    )
    (bundle / "artifacts" / "triage" / "SKILL.md").write_text("# Triage\n" + "x" * 100_000)
    handle = await launch.start_run(client, settings, load_task(bundle / "tasks" / "t.toml"))
    state = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert state.status is RunStatus.ERROR
    assert "one of its skills (triage) cannot be given to it" in (state.steps["agent"].error or ""), state.error
