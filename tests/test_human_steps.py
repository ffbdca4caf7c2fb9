"""People in a run (issue 32): the framework's `deploy_human_agent` (a person plays an agent; its turns wait in the
people's inbox) and `review` (a person decides on the run's output there, by a deadline). Real Temporal dev server,
the real gateway over HTTP, and the real `agent-env agents answer` command."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from pathlib import Path

import httpx2
import pytest
from gateway_util import running_gateway
from test_cli import cli
from test_durability import cluster, finish, wait_until  # noqa: F401 - the durability tier's fixture

from agent_env.errors import BadInput
from agent_env.gateway import tokens
from agent_env.gateway.embedded import connect
from agent_env.gateway_client import GatewayRefused, GatewayUnavailable
from agent_env.planning.runs import plan
from agent_env.planning.tasks import load_task, parse_task
from agent_env.spec.run import RunStatus
from agent_env.temporal import launch
from agent_env.temporal_client.client import connect as temporal

SCRIPTED = {"name": "clerk", "type": "scripted", "config": {"turns": [[{"say": "Refund ORD-1 approved: 40 EUR."}]]}}
DEPLOY_CLERK = {"id": "clerk", "type": "deploy_agent", "config": {"record": SCRIPTED}}
PROMPT_CLERK = {
    "id": "ask",
    "type": "prompt_agent",
    "depends_on": ["clerk"],
    "config": {"agent": "clerk", "prompt": "Refund ORD-1"},
}


def reviewed(**config) -> dict:
    """A scripted clerk answers, then a person reviews its answer; `after` runs only past the review."""
    return {
        "id": "reviewed",
        "steps": [
            DEPLOY_CLERK,
            PROMPT_CLERK,
            {"id": "look", "type": "review", "depends_on": ["ask"], "config": {"poll_interval_seconds": 1, **config}},
            {"id": "after", "type": "sleep", "depends_on": ["look"], "config": {"seconds": 0}},
        ],
    }


async def waiting_for(settings, turn_id: str, timeout: float = 60) -> dict:
    """The waiting turn whose id is or starts with `turn_id`, once the inbox holds it."""
    async with connect(settings, start_daemon=False) as gateway:
        for _ in range(int(timeout / 0.1)):
            with contextlib.suppress(GatewayUnavailable):  # (the run's first step starts the gateway)
                for turn in await gateway.human_turns():
                    if turn["id"].startswith(turn_id):
                        return turn
            await asyncio.sleep(0.1)
    raise AssertionError(f"no turn {turn_id!r} came to the inbox")


async def start(client, settings, task: dict):
    return await launch.start_run(client, settings, parse_task(task, "test task"))


def admin_headers(settings) -> dict[str, str]:
    key = tokens.load_or_create_key(settings.state_dir / "gateway" / "key")
    return {"authorization": f"Bearer {tokens.admin_token(key)}"}


def test_steps_list_shows_them():
    done = cli("steps", "list")
    assert done.returncode == 0, done.stderr
    assert "deploy_human_agent" in done.stdout and "review" in done.stdout


# -- deploy_human_agent --


async def test_a_person_answers_the_human_agents_turn_with_the_cli(client, settings, worker, tmp_path):
    """The framework's JSON task: its flat fields, its default name; a prompt_agent step asks the person."""
    (tmp_path / "tasks").mkdir()
    steps = [
        {"id": "person", "type": "deploy_human_agent"},
        {"id": "ask", "type": "prompt_agent", "agent": "person", "prompt": "May I refund ORD-1001?"},
    ]
    (tmp_path / "tasks" / "ask_a_person.json").write_text(json.dumps(steps))
    handle = await launch.start_run(client, settings, load_task(tmp_path / "tasks" / "ask_a_person.json"))
    turn = await waiting_for(settings, f"{handle.id}.person/")
    assert turn["agent"] == "human_agent" and turn["prompt"] == "May I refund ORD-1001?"

    pending = await asyncio.to_thread(cli, "agents", "pending")
    assert pending.returncode == 0 and "May I refund ORD-1001?" in pending.stdout, pending.stderr
    refused = await asyncio.to_thread(cli, "agents", "answer", turn["id"], "yes", "--score", "1")
    assert refused.returncode == 2 and "a verdict and a score are for reviews" in refused.stderr
    answered = await asyncio.to_thread(cli, "agents", "answer", turn["id"], "Yes, refund it.")
    assert answered.returncode == 0 and f"answered turn {turn['id']}" in answered.stdout, answered.stderr

    state = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert state.status is RunStatus.PASSED, state.error
    assert state.steps["ask"].outputs["answer"] == "Yes, refund it."
    person = state.steps["person"].outputs
    assert (person["agent"], person["type"], person["hosted"]) == ("human_agent", "human", True)
    assert state.pins["agents"]["person"] == "human_agent@1 (human)"


def test_a_task_takes_one_human_agent(settings):
    task = parse_task(
        {
            "id": "two",
            "steps": [
                {"id": "a", "type": "deploy_human_agent", "config": {"agent_name": "ann"}},
                {"id": "b", "type": "deploy_human_agent", "config": {"agent_name": "bob"}},
            ],
        },
        "t",
    )
    with pytest.raises(BadInput, match="a task has at most one"):
        plan(task, "run-two", settings)


def test_the_person_at_an_a2a_url_is_an_a2a_agent(settings):
    task = parse_task(
        {"id": "own", "steps": [{"id": "p", "type": "deploy_human_agent", "config": {"a2a_url": "http://h.example/"}}]},
        "t",
    )
    record = plan(task, "run-own", settings).steps[0].config["record"]
    assert (record["name"], record["type"], record["config"]) == ("human_agent", "a2a", {"url": "http://h.example/"})


# -- review --


async def test_a_review_answered_over_http_records_the_score(client, settings, worker):
    handle = await start(client, settings, reviewed(label="Is the refund right?", pass_threshold=0.5))
    turn = await waiting_for(settings, f"{handle.id}.look/review")
    assert turn["kind"] == "review" and turn["prompt"] == "Is the refund right?"
    assert turn["upstream"]["ask"]["answer"] == "Refund ORD-1 approved: 40 EUR.", "the agent's answer is shown"
    pending = await asyncio.to_thread(cli, "agents", "pending")
    assert "Refund ORD-1 approved" in pending.stdout and "--score" in pending.stdout, pending.stdout

    base = f"http://127.0.0.1:{settings.gateway.port}"
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        url = f"/admin/human/{turn['id']}"
        assert (await http.post(url, json={"answer": "ok"})).status_code == 401, "the admin token is needed"
        wrong = await http.post(url, json={"answer": "ok", "score": 2}, headers=admin_headers(settings))
        assert wrong.status_code == 400 and "score" in wrong.text
        body = {"answer": "Right amount.", "score": 0.8, "by": "dana"}
        done = await http.post(url, json=body, headers=admin_headers(settings))
        assert done.status_code == 200, done.text
        assert (done.json()["state"], done.json()["verdict"]) == ("answered", "continue")
        again = await http.post(url, json={"answer": "No!"}, headers=admin_headers(settings))
        assert again.status_code == 409, "decided once"

    state = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert state.status is RunStatus.PASSED, state.error
    look = state.steps["look"]
    assert look.score is not None and (look.score.value, look.score.threshold) == (0.8, 0.5)
    assert look.outputs["decision"] == "continue" and look.outputs["comment"] == "Right amount."
    assert look.outputs["decided_by"] == "dana" and look.outputs["shown"] == ["ask"]
    assert state.steps["after"].status == "succeeded"


async def test_a_review_nobody_decides_fails_at_its_deadline(client, settings, worker):
    handle = await start(client, settings, reviewed(timeout_seconds=2))
    turn = await waiting_for(settings, f"{handle.id}.look/review")
    state = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert state.status is RunStatus.ERROR
    look = state.steps["look"]
    assert look.status == "failed" and "no decision by its deadline" in (look.error or "")
    assert state.steps["after"].status != "succeeded", "nothing after the review ran"
    late = await asyncio.to_thread(cli, "agents", "answer", turn["id"], "too late")
    assert late.returncode == 2 and "is expired" in late.stderr


async def test_a_review_aborted_with_the_cli_stops_the_run(client, settings, worker):
    handle = await start(client, settings, reviewed())
    turn = await waiting_for(settings, f"{handle.id}.look/review")
    aborted = await asyncio.to_thread(cli, "agents", "answer", turn["id"], "Wrong amount.", "--abort", "--score", "0.1")
    assert aborted.returncode == 0 and "decided review" in aborted.stdout and "abort" in aborted.stdout
    state = await asyncio.wait_for(launch.wait_result(handle), 60)
    look = state.steps["look"]
    assert state.status is RunStatus.ERROR
    assert look.status == "failed" and "aborted by" in (look.error or "") and "Wrong amount." in (look.error or "")
    assert state.steps["after"].status != "succeeded"


async def test_a_reviewers_low_score_fails_the_run(client, settings, worker):
    handle = await start(client, settings, reviewed(pass_threshold=0.7))
    turn = await waiting_for(settings, f"{handle.id}.look/review")
    low = await asyncio.to_thread(cli, "agents", "answer", "review", "Barely.", "--score", "0.6")  # the only review
    assert low.returncode == 0 and f"decided review {turn['id']}: continue (score 0.6)" in low.stdout, low.stderr
    state = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert state.status is RunStatus.FAILED and state.steps["look"].score.value == 0.6


@pytest.mark.durability
async def test_a_review_outlives_its_worker(cluster: object) -> None:  # noqa: F811 - the fixture
    """SIGKILL the worker while the review waits: the retried step waits on for the same review (its deadline
    kept), and the person's decision after the restart ends it."""
    settings, env = cluster.settings, cluster.env  # type: ignore[attr-defined]
    client = await temporal(settings)
    handle = await start(client, settings, reviewed(timeout_seconds=600))
    turn = await waiting_for(settings, f"{handle.id}.look/review")
    cluster.workers[-1].send_signal(signal.SIGKILL)  # type: ignore[attr-defined]
    cluster.workers[-1].wait()  # type: ignore[attr-defined]
    cluster.start_worker()  # type: ignore[attr-defined]

    async def retried() -> bool:  # (asked of Temporal: a query would wait for a worker)
        pending = (await handle.describe()).raw_description.pending_activities
        return any(a.attempt >= 2 for a in pending)

    await wait_until(retried, timeout=60, what="the review step to run again on the new worker")
    again = await waiting_for(settings, turn["id"])
    assert again["deadline"] == turn["deadline"], "the deadline is the first opening's"
    answered = await asyncio.to_thread(cli, "agents", "answer", turn["id"], "Fine.", "--score", "1", env=env)
    assert answered.returncode == 0, answered.stderr
    state = await finish(cluster, client, handle.id)
    assert state.status is RunStatus.PASSED and state.steps["look"].score.value == 1.0
    assert state.steps["look"].attempts == 2


async def test_the_gateway_keeps_a_review_once_with_its_first_deadline(tmp_path):
    """Opened again (a retried step), a review is the same one; a long poll ends at its decision; the run's end
    expires what still waits; a body naming another review is refused."""
    async with running_gateway(tmp_path / "gw") as (_, _, admin):
        request = {"id": "r-1.look/review", "run_id": "r-1", "step": "look", "upstream": {}, "timeout_s": 300}
        first = await admin.open_review(request)
        again = await admin.open_review({**request, "timeout_s": 1})
        assert again["deadline"] == first["deadline"] and again["state"] == "waiting"
        assert (await admin.human_turn(first["id"], 0.2))["state"] == "waiting", "no decision within the wait"

        polling = asyncio.create_task(admin.human_turn(first["id"], 30))
        await asyncio.sleep(0.3)
        await admin.answer_human_turn(first["id"], "fine", score=0.9)
        decided = await asyncio.wait_for(polling, 10)
        assert (decided["state"], decided["verdict"], decided["score"]) == ("answered", "continue", 0.9)
        assert (await admin.open_review(request))["score"] == 0.9, "a retried step finds the decision"

        await admin.open_review({**request, "id": "r-1.other/review", "step": "other"})
        await admin.end_run("r-1")
        assert (await admin.human_turn("r-1.other/review"))["state"] == "expired"
        with pytest.raises(GatewayRefused) as refused:
            await admin._object("PUT", "/admin/human/r-2.x/review", json={**request, "id": "r-1.look/review"})
        assert refused.value.status == 400
        with pytest.raises(GatewayRefused) as missing:
            await admin.human_turn("nobody/review")
        assert missing.value.status == 404


def test_the_review_step_is_documented():
    page = (Path(__file__).parent.parent / "docs" / "agents" / "human-agents.md").read_text()
    assert "`review`" in page and "`deploy_human_agent`" in page
