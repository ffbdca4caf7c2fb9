"""The verifiers adapter (agent_env.trainers.verifiers), driven by verifiers' own evaluation loop with an OpenAI
client pointed at the fake model: rewards are the runs' scores, every episode ends, infrastructure failures are
verifiers errors and never a score."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import pytest

if os.environ.get("AGENT_ENV_REQUIRE_TRAINERS") != "1":
    pytest.importorskip("verifiers", reason="verifiers is not installed (pip install 'agentenv-framework[verifiers]')")

import verifiers as vf
from conftest import FAKE_MODEL_KEY
from openai import AsyncOpenAI

from agent_env.bundles import BUILTIN_ROOT
from agent_env.episodes import Episode, EpisodeInfrastructureError, Episodes
from agent_env.errors import BadInput
from agent_env.gateway.embedded import connect
from agent_env.spec.run import RunStatus
from agent_env.trainers.verifiers import EpisodeInfraError, VerifiersEnv, load_environment


@pytest.fixture
async def episodes(client, settings, worker):
    yield Episodes(client, settings)  # the session's worker runs the rest of each run


@pytest.fixture(autouse=True)
def keep_signal_handlers():
    """verifiers' Environment installs SIGINT/SIGTERM handlers when made: the test session keeps its own."""
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in kept.items():
        signal.signal(sig, handler)


@pytest.fixture
def model(fake_model):
    return vf.OpenAIChatCompletionsClient(AsyncOpenAI(base_url=fake_model, api_key=FAKE_MODEL_KEY, max_retries=0))


@pytest.fixture
async def admin(settings):
    gateway = connect(settings)
    yield gateway
    await gateway.aclose()


async def ended(episodes: Episodes, run_id: str):
    """The run's final state (it has ended: its rollout waited for it), errored or not."""
    episode = Episode(episodes, run_id)
    with contextlib.suppress(EpisodeInfrastructureError):
        await asyncio.wait_for(episode.outcome(), 60)
    return episode.state


async def open_instances(admin) -> int:
    """How many env instances the gateway has open (a run's end closes its own)."""
    return (await admin.busy())["instances"]


async def evaluate(env: VerifiersEnv, model, name: str, **kwargs):
    results = await env.evaluate(
        model, name, state_columns=["run_id"], on_progress=lambda *a: None, max_concurrent=4, **kwargs
    )
    return results["outputs"]


async def test_rewards_are_the_runs_scores_and_every_episode_ends(episodes, model, admin):
    env = vf.load_environment("agent_env.trainers.verifiers", task="refund", seeds=[7], episodes=episodes)
    before = await open_instances(admin)
    assert isinstance(env, VerifiersEnv) and len(env.get_eval_dataset()) == 1
    good = await evaluate(env, model, "refunds", rollouts_per_example=2)  # the task's scripted good answer
    bad = await evaluate(env, model, "fake-small")  # answers "ok" at once: does nothing
    assert [o["reward"] for o in good] == [1.0, 1.0] and [o["reward"] for o in bad] == [0.0]
    for output in good + bad:
        state = await ended(episodes, output["run_id"])
        assert output.get("error") is None and output["reward"] == state.score
        assert output["metrics"]["score/grade"] == state.steps["grade"].score.value
        assert state.pins["seed"] == 7
    first = good[0]
    assert first["stop_condition"] == "episode_over" and first["metrics"]["num_turns"] == 7, first
    assert {"get_ticket", "issue_refund", "set_status"} <= {t["name"] for t in first["tool_defs"]}, "the role's tools"
    assert first["prompt"][-1]["content"] == "Please handle ticket TCK-1004."
    assert [m["role"] for m in first["completion"]] == ["assistant", "tool"] * 6 + ["assistant"]
    rows = {k: v for k, v in first["metrics"].items() if k.startswith("check/grade/")}
    assert rows and set(rows.values()) == {1.0}, first["metrics"]
    assert {k: v for k, v in bad[0]["metrics"].items() if k.startswith("check/grade/")} != rows
    runs = {o["run_id"] for o in good + bad}
    assert len(runs) == 3, "an episode per rollout"
    assert await open_instances(admin) <= before, "each run closed its instances as it ended"


async def test_a_rollout_stopped_at_max_turns_abandons_its_episode(episodes, model, admin):
    env = load_environment(task="refund", max_turns=2, episodes=episodes)
    before = await open_instances(admin)
    [output] = await evaluate(env, model, "refunds")
    assert output["stop_condition"] == "max_turns_reached" and output["reward"] == 0.0
    state = await ended(episodes, output["run_id"])
    assert state.status is RunStatus.CANCELLED, state
    assert state.error == "abandoned by the trainer: the rollout stopped: max_turns_reached"
    assert await open_instances(admin) <= before


async def test_an_errored_run_is_a_verifiers_infra_error_not_a_score(episodes, model, admin):
    env = load_environment(task="refund", turn_timeout=1, episodes=episodes)
    before = await open_instances(admin)
    started: list[str] = []
    setup = env.setup_state

    async def noted(state):
        started.append("rollout")
        return await setup(state)

    env.setup_state = noted  # type: ignore[method-assign]
    # The model answers after the turn's deadline: the run errors; verifiers retries its InfraErrors.
    [output] = await evaluate(env, model, "fake-slow-2", max_retries=1)
    assert output["error"] is not None and "EpisodeInfraError" in output["error_chain"], output
    assert issubclass(EpisodeInfraError, vf.InfraError) and len(started) == 2, "retried once, as verifiers does"
    state = await ended(episodes, output["run_id"])
    assert state.status is RunStatus.ERROR and output["metrics"].get("score/grade") is None
    assert await open_instances(admin) <= before


async def test_a_cancelled_evaluation_abandons_its_episodes(episodes, model, admin):
    env = load_environment(task="refund", episodes=episodes)
    before = await open_instances(admin)
    started: list[str] = []
    setup = env.setup_state

    async def noted(state):
        state = await setup(state)
        started.append(state["run_id"])
        return state

    env.setup_state = noted  # type: ignore[method-assign]
    evaluation = asyncio.create_task(evaluate(env, model, "fake-slow-30", rollouts_per_example=2))
    while len(started) < 2:
        await asyncio.sleep(0.05)
    assert await open_instances(admin) >= before + 2, "the episodes' instances are open while their turns wait"
    evaluation.cancel()
    with pytest.raises(asyncio.CancelledError):
        await evaluation
    for run_id in started:
        state = await ended(episodes, run_id)  # the cancelled rollouts' cleanup waited for their runs' ends
        assert state.status is RunStatus.CANCELLED and state.error.startswith("abandoned by the trainer"), state
    assert await open_instances(admin) <= before


async def test_an_eval_is_its_tasks_and_a_bad_load_is_refused(episodes, tmp_path):
    bundle = tmp_path / "b"
    (bundle / "tasks").mkdir(parents=True)
    (bundle / "evals").mkdir()
    (bundle / "tasks" / "refund.toml").write_text((BUILTIN_ROOT / "refund" / "tasks" / "refund.toml").read_text())
    (bundle / "evals" / "smoke.toml").write_text('tasks = ["refund"]\n')
    env = load_environment(eval="smoke", bundle=str(bundle), seeds=[1, 2], episodes=episodes)
    rows = env.get_eval_dataset().to_list()
    assert [(r["info"]["task_id"], r["info"]["seed"], r["info"]["row"]) for r in rows] == [
        ("refund", 1, 0),
        ("refund", 2, 1),
    ]
    assert rows[0]["prompt"][-1]["content"] == "Please handle ticket TCK-1004."
    with pytest.raises(BadInput, match="give a task or an eval"):
        load_environment()


async def test_a_conversation_is_one_rollout_each_turn_a_user_message(episodes, model):
    env = load_environment(task="escalation", trainer_agents=["morgan"], episodes=episodes)
    [output] = await evaluate(env, model, "morgan")  # the customer's scripted part, turn by turn
    state = await ended(episodes, output["run_id"])
    assert output.get("error") is None and output["reward"] == state.score == 1.0, output
    roles = [m["role"] for m in output["completion"]]
    assert roles.count("user") >= 1 and roles[-1] == "assistant", roles
    assert output["completion"][roles.index("user")]["content"].startswith("Done: TCK-2001")
