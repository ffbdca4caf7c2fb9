"""Trainer episodes: a trainer's loop plays agents of real tasks; the rest runs as `agent-env run` runs it."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent_env.episodes import EpisodeError, EpisodeInfrastructureError, Episodes, EpisodeSpec
from agent_env.errors import AgentEnvError, BadInput
from agent_env.spec.run import RunStatus, StepStatus
from agent_env.stores import open_stores

REFUND_SCRIPT = [
    ("get_ticket", {"ticket_id": "TCK-1004"}),
    ("get_order", {"order_id": "ORD-1001"}),
    ("verify_order", {"order_id": "ORD-1001", "verified_by": "refunds@acme.example"}),
    ("issue_refund", {"order_id": "ORD-1001", "charge_id": "CH-5002", "amount_cents": 4900, "reason": "duplicate"}),
    (
        "add_comment",
        {
            "ticket_id": "TCK-1004",
            "author": "refunds@acme.example",
            "body": "Refunded the duplicate charge; expect it in 5-10 business days.",
        },
    ),
    ("set_status", {"ticket_id": "TCK-1004", "status": "solved"}),
]


@pytest.fixture
async def episodes(client, settings, worker):
    yield Episodes(client, settings)  # the session's worker runs the rest of each run


async def play(turn, script):
    async with turn.tools() as tools:
        for name, arguments in script:
            await tools.call(name, arguments)


async def test_refund_episode_rewards_are_the_task_scores(episodes, settings):
    spec = EpisodeSpec.from_task("refund", ["refunds"], turn_timeout=60, seed=7)
    episode = await spec.start(episodes)
    turn = await episode.next_turn()
    assert (turn.agent, turn.role, turn.prompt) == ("refunds", "billing_lead", "Please handle ticket TCK-1004.")
    assert turn.id == "work/agent/0" and turn.offer.env.endswith(".desk")
    again = await episode.next_turn()
    assert again.id == turn.id, "asking again gives the same waiting turn"
    await play(turn, REFUND_SCRIPT)
    await turn.end("Refunded CH-5002 and solved TCK-1004.")
    await turn.end("Refunded CH-5002 and solved TCK-1004.")  # a retried call counts once
    assert await episode.next_turn() is None
    assert await updates_taken(episode.handle) == ["next_turn", "next_turn", "answer"]
    scores = await episode.result()
    state = episode.state
    assert state.status is RunStatus.PASSED and scores == {"grade": 1.0}, state
    outcome = await episode.outcome()
    assert (outcome.total, outcome.passed, outcome.scores) == (state.score, True, scores)
    rows = [(c.step, c.name, c.score, c.passed, c.weight, c.in_total) for c in outcome.components]
    assert rows == [("grade", c.name, 1.0, True, c.weight, True) for c in state.steps["grade"].score.criteria]
    assert len(rows) >= 2
    assert state.steps["work"].outputs["tool_calls"] == 6
    assert state.pins["seed"] == 7 and state.pins["agents"]["agent"] == "refunds@1 (trainer)"
    transcript = json.loads(open_stores(settings).objects.get(state.steps["work"].outputs["transcript"]))
    assert [m["speaker"] for m in transcript["messages"]] == ["run", "refunds"]


async def test_a_trainer_that_does_nothing_scores_what_the_task_says(episodes):
    episode = await EpisodeSpec.from_task("refund", ["agent"], turn_timeout=60).start(episodes)
    turn = await episode.next_turn()
    await turn.end("I looked but did nothing.")
    scores = await episode.result()
    assert episode.state.status is RunStatus.FAILED and scores["grade"] == pytest.approx(0.0)
    outcome = await episode.outcome()  # the agent failed its checks: a score (0), not an error
    assert (outcome.total, outcome.passed) == (pytest.approx(0.0), False)
    assert outcome.components and not any(c.passed for c in outcome.components)


async def test_trainer_plays_the_customer_against_a_hosted_support_agent(episodes, settings):
    episode = await EpisodeSpec.from_task("escalation", ["morgan"], turn_timeout=60).start(episodes)
    said = []
    while (turn := await episode.next_turn()) is not None:
        said.append(turn.prompt)
        assert turn.agent == "morgan" and turn.role == "customer"
        reply = (
            "Yes, the second one, CH-9002. How long will it take?"
            if len(said) == 1
            else "Thank you, that's what I needed. [resolved]"
        )
        await turn.end(reply)
    scores = await episode.result()
    assert episode.state.status is RunStatus.PASSED, episode.state
    assert scores == {"grade": 1.0, "owner": 1.0, "verdict": 1.0}
    assert said[0].startswith("Morgan, I'm sorry about this.") and said[1].startswith("Done: TCK-2001")
    # Each answer asked for the next turn too: the run took one update per turn, not two.
    assert await updates_taken(episode.handle) == ["next_turn", "answer", "answer"]


async def updates_taken(run) -> list[str]:
    """The names of the updates the run (a workflow handle) accepted, in order (from its history)."""
    history = await run.fetch_history()
    return [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        for e in history.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]


async def test_what_a_trainer_cannot_play_is_refused_by_name():
    with pytest.raises(BadInput, match="step 'decisions' has 'auditor' judge the others"):
        EpisodeSpec.from_task("invoice-queue", ["auditor"])
    with pytest.raises(BadInput, match=r"(?s)deploys no agent 'nobody'.*clerk \(ap-clerk\)"):
        EpisodeSpec.from_task("invoice-queue", ["nobody"])


async def test_turn_deadline_abandon_and_refused_answers(episodes):
    late = await EpisodeSpec.from_task("refund", ["refunds"], turn_timeout=1).start(episodes)
    turn = await late.next_turn()
    await asyncio.sleep(1.5)
    with pytest.raises(EpisodeInfrastructureError, match="step 'work' of run .* refunds did not answer") as failed:
        await late.result()  # a run that ended in error is never a score
    assert (failed.value.step, failed.value.status) == ("work", "error")
    assert isinstance(failed.value, AgentEnvError) and not isinstance(failed.value, EpisodeError)
    with pytest.raises(EpisodeInfrastructureError):
        await late.outcome()
    with pytest.raises(EpisodeError, match="is over: turn 'work/agent/0' was not taken"):
        await turn.end("too late")
    assert late.state.status is RunStatus.ERROR
    assert late.state.steps["work"].error == "refunds did not answer within 1s"

    gone = await EpisodeSpec.from_task("refund", ["refunds"], turn_timeout=60).start(episodes)
    await gone.next_turn()
    with pytest.raises(EpisodeError, match="no turn 'work/agent/9' is waiting"):
        await gone.end_turn("work/agent/9", "not asked")
    await gone.abandon("the trainer was preempted")
    abandoned = await gone.outcome()  # the trainer gave it up: no reward, and no error either
    assert (abandoned.status, abandoned.total, abandoned.passed) == (RunStatus.CANCELLED, None, False)
    assert gone.state.status is RunStatus.CANCELLED
    assert gone.state.error == "abandoned by the trainer: the trainer was preempted"
    assert gone.state.steps["work"].status is StepStatus.CANCELLED
    assert await gone.next_turn() is None


NOTES_TASK = {
    "id": "notes-episode",
    "steps": [
        {"id": "pad", "type": "deploy_env", "config": {"env_id": "notes"}},
        {
            "id": "writer",
            "type": "deploy_agent",
            "depends_on": ["pad"],
            "config": {
                "env": "pad",
                "record": {
                    "name": "writer",
                    "type": "scripted",
                    "role": "agent",
                    "config": {"turns": [[{"say": "unused"}]]},
                },
            },
        },
        {
            "id": "write",
            "type": "prompt_agent",
            "depends_on": ["writer"],
            "config": {"agent": "writer", "prompt": "Write the note `greeting` saying hello."},
        },
        {
            "id": "check",
            "type": "check_state",
            "depends_on": ["write"],
            "config": {
                "env": "pad",
                "checks": [
                    {
                        "name": "the note says hello",
                        "tool": "read_note",
                        "arguments": {"key": "greeting"},
                        "path": "text",
                        "equals": "hello",
                    }
                ],
            },
        },
    ],
}


async def test_fifty_concurrent_episodes(episodes):
    from agent_env.planning.tasks import parse_task

    spec = EpisodeSpec.from_task(parse_task(NOTES_TASK, "t"), ["writer"], turn_timeout=120)

    async def one(n: int) -> dict[str, float]:
        episode = await spec.start(episodes)
        while (turn := await episode.next_turn()) is not None:
            async with turn.tools() as tools:
                await tools.call("write_note", {"key": "greeting", "text": "hello" if n % 10 else "hi"})
            await turn.end("written")
        return await episode.result()

    results = await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(50))), 240)
    assert [r["check"] for r in results] == [0.0 if n % 10 == 0 else 1.0 for n in range(50)]


async def test_long_episodes_continue_as_new_transparently(episodes, client, settings):
    from agent_env.episodes.client import Episode
    from agent_env.planning.tasks import parse_task
    from agent_env.temporal import launch

    task = json.loads(json.dumps(NOTES_TASK))
    task["steps"].insert(
        2,
        {
            "id": "boss",
            "type": "deploy_agent",
            "config": {
                "record": {"name": "boss", "type": "scripted", "config": {"turns": [[{"say": "Again, please."}]]}}
            },
        },
    )
    task["steps"][3]["depends_on"] = ["writer", "boss"]
    task["steps"][3]["config"]["conversation"] = {"partner": "boss", "max_turns": 25}
    spec = EpisodeSpec.from_task(parse_task(task, "t"), ["writer"], turn_timeout=60)
    inp = launch.plan(spec.task, launch.new_run_id("long-episode"), settings, search_attributes=False)
    inp.continue_as_new_at = 40
    first = await client.start_workflow(launch.WORKFLOW, inp, id=inp.run_id, task_queue=settings.temporal.task_queue)
    episode = Episode(episodes, inp.run_id)
    prompts = []
    while (turn := await episode.next_turn()) is not None:
        prompts.append(turn.prompt)
        assert len(turn.conversation) == 2 * (len(prompts) - 1), "the conversation so far travels with each turn"
        if len(prompts) == 25:
            async with turn.tools() as tools:
                await tools.call("write_note", {"key": "greeting", "text": "hello"})
        await turn.end(f"answer {len(prompts)}")
    scores = await episode.result()
    assert scores == {"check": 1.0} and episode.state.status is RunStatus.PASSED, episode.state
    assert prompts == ["Write the note `greeting` saying hello."] + ["Again, please."] * 24
    latest = await client.get_workflow_handle(inp.run_id).describe()
    assert latest.run_id != first.first_execution_run_id, "the episode continued as new"
    transcript = json.loads(open_stores(settings).objects.get(episode.state.steps["write"].outputs["transcript"]))
    assert [m["text"] for m in transcript["messages"] if m["side"] == "agent"] == [f"answer {i}" for i in range(1, 26)]


async def test_the_turn_loop_over_http(settings, client, worker):
    import httpx
    import uvicorn
    from conftest import free_port

    from agent_env.episodes.http import create_app
    from agent_env.gateway.embedded import admin_token, connect

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings, worker=False), host="127.0.0.1", port=port, log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    admin = connect(settings)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as anonymous:
            assert (await anonymous.post("/episodes", json={})).status_code == 401
        auth = {"authorization": f"Bearer {admin_token(settings)}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=auth, timeout=60) as http:
            bad = await http.post("/episodes", json={"task": "escalation"})  # it prompts two agents: name them
            assert bad.status_code == 400 and "support (escalations, as sam), customer (morgan)" in bad.json()["error"]
            assert "trainer_agents" in bad.json()["error"]
            # refund prompts one agent: it is the one played, each turn with its prompt's own deadline (5m)
            started = await http.post("/episodes", json={"task": "refund", "seed": 3})
            assert started.status_code == 201, started.text
            episode = started.json()["episode"]
            turn = (await http.post(f"/episodes/{episode}/next-turn", json={})).json()["turn"]
            assert turn["prompt"] == "Please handle ticket TCK-1004." and turn["token"].startswith("aet_")
            assert (turn["agent"], turn["deadline_s"]) == ("refunds", 300)
            as_agent = {"authorization": f"Bearer {turn['token']}"}
            for name, arguments in REFUND_SCRIPT:  # straight to the gateway, as the agent
                done = await http.post(f"{turn['tools_url']}/{name}", json=arguments, headers=as_agent)
                assert done.status_code == 200, done.text
            ended = await http.post(f"/episodes/{episode}/turns/{turn['id']}/end", json={"response": "Done."})
            assert ended.json() == {"ended": turn["id"]}
            assert (await http.post(f"/episodes/{episode}/next-turn", json={})).json() == {"turn": None}
            result = (await http.get(f"/episodes/{episode}/result")).json()
            rows = result.pop("components")
            assert result == {
                "status": "passed",
                "total": 1.0,
                "score": 1.0,
                "passed": True,
                "scores": {"grade": 1.0},
                "error": None,
            }
            assert rows and all(r["step"] == "grade" and r["passed"] and r["score"] == 1.0 for r in rows)
            # The server kept what the start and the answer asked: no update of its own for either next-turn.
            assert await updates_taken(client.get_workflow_handle(episode)) == ["next_turn", "answer"]
            # A run that cannot grade the policy (its turn not answered in time) is no score: a 502 saying why.
            late = (await http.post("/episodes", json={"task": "refund", "turn_timeout": 1})).json()["episode"]
            await http.post(f"/episodes/{late}/next-turn", json={})
            await asyncio.sleep(1.5)
            failed = await http.get(f"/episodes/{late}/result")
            assert failed.status_code == 502, failed.text
            assert failed.json()["infrastructure"] == {
                "episode": late,
                "step": "work",
                "cause": "step 'work' failed: refunds did not answer within 1s",
                "status": "error",
            }
    finally:
        await admin.aclose()
        server.should_exit = True
        await serving


async def test_gymnasium_style_adapter(settings, worker):
    from agent_env.episodes.gym import EpisodeEnv

    env = EpisodeEnv(EpisodeSpec.from_task("refund", ["refunds"], turn_timeout=60), settings=settings, worker=False)
    try:
        observation, info = await asyncio.to_thread(env.reset, seed=11)
        assert observation["turn"]["prompt"] == "Please handle ticket TCK-1004."
        assert "issue_refund" in {t["name"] for t in observation["tools"]}
        for name, arguments in REFUND_SCRIPT:
            observation, reward, terminated, truncated, _ = await asyncio.to_thread(
                env.step, {"tool": name, "arguments": arguments}
            )
            assert "tool_result" in observation and reward == 0 and not terminated
        observation, reward, terminated, truncated, _ = await asyncio.to_thread(
            env.step, {"tool": "issue_refund", "arguments": REFUND_SCRIPT[3][1]}
        )
        assert "already fully refunded" in observation["tool_error"]
        observation, reward, terminated, truncated, info = await asyncio.to_thread(env.step, {"response": "Done."})
        assert terminated and not truncated and reward == 1.0 and info["scores"] == {"grade": 1.0}
        assert observation == {"turn": None}
        assert info["outcome"].total == 1.0 and info["outcome"].components[0].step == "grade"
        # An episode whose run cannot grade the policy raises, never rewards: the trainer drops or retries it.
        late = EpisodeEnv(EpisodeSpec.from_task("refund", ["refunds"], turn_timeout=1), settings=settings, worker=False)
        try:
            await asyncio.to_thread(late.reset)
            await asyncio.sleep(1.5)
            with pytest.raises(EpisodeInfrastructureError, match="refunds did not answer within 1s"):
                await asyncio.to_thread(late.step, {"response": "too late"})
        finally:
            await asyncio.to_thread(late.close)
    finally:
        await asyncio.to_thread(env.close)


def test_the_readme_names_import_lazily():
    import subprocess
    import sys

    code = (
        "import sys, agent_env; assert 'agent_env.episodes' not in sys.modules; "
        "from agent_env import EpisodeSpec, Task; print(Task.get('refund').id, EpisodeSpec.__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["refund", "EpisodeSpec"], done.stderr
