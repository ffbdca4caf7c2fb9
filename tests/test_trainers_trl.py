"""The TRL adapter (agent_env.trainers.trl) driven by TRL's own GRPOTrainer, with the tiny model made here."""

from __future__ import annotations

import asyncio
import gc
import inspect
import os

import pytest

from agent_env.planning.tasks import parse_task

REASON = "trl is not installed (pip install torch==2.13.0 && pip install '.[trl]')"
if os.environ.get("AGENT_ENV_REQUIRE_TRAINERS") != "1":
    pytest.importorskip("trl", reason=REASON)

from transformers.utils import get_json_schema  # noqa: E402  (after the skip)

from agent_env.agents.sdk import ToolFailed  # noqa: E402
from agent_env.episodes import EpisodeInfrastructureError, EpisodeSpec  # noqa: E402
from agent_env.gateway.embedded import connect  # noqa: E402
from agent_env.spec.run import RunState, RunStatus  # noqa: E402
from agent_env.temporal import launch  # noqa: E402
from agent_env.trainers.tiny_model import make_tiny_model  # noqa: E402
from agent_env.trainers.trl import EpisodeEnvironment, answers, environment_factory  # noqa: E402

TASK_ID = "trl-notes"
# Its score is the mean of two steps': the note the model wrote with a tool, and rows on the text it answered.
NOTES_TASK = {
    "id": TASK_ID,
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
            "config": {"agent": "writer", "prompt": "Write the note `greeting` saying hello, then say done."},
        },
        {
            "id": "note",
            "type": "check_state",
            "depends_on": ["write"],
            "config": {
                "env": "pad",
                "checks": [{"name": "a greeting", "tool": "list_notes", "path": "count", "equals": 1}],
            },
        },
        {
            "id": "said",
            "type": "check_response",
            "depends_on": ["write"],
            "config": {
                "response": "${steps.write.outputs.answer}",
                "checks": [{"name": f"says {c}", "contains": c} for c in ("e", "o", "a", "t")],
            },
        },
    ],
}


def notes_spec(**kwargs) -> EpisodeSpec:
    return EpisodeSpec.from_task(parse_task(NOTES_TASK, "t"), ["writer"], **kwargs)


async def run_state(client, run_id: str) -> RunState:
    return await launch.wait_result(client.get_workflow_handle(run_id, result_type=RunState))


async def running_runs(client) -> list[str]:
    return [w.id async for w in client.list_workflows("ExecutionStatus='Running'") if w.id.startswith(TASK_ID)]


async def test_the_role_s_tools_are_methods_trl_reads_and_calls(settings, worker, client):
    Env = await asyncio.to_thread(environment_factory, notes_spec(turn_timeout=60), settings=settings, worker=False)
    assert Env.__name__ == TASK_ID and issubclass(Env, EpisodeEnvironment)
    schema = get_json_schema(Env.write_note)["function"]
    assert schema["name"] == "write_note" and schema["description"]
    assert set(schema["parameters"]["required"]) >= {"key", "text"}
    public = [n for n, _ in inspect.getmembers(Env, inspect.isfunction) if not n.startswith("_")]
    tools = sorted(set(public) - {"reset", "get_reward"})
    assert {"write_note", "read_note", "list_notes"} <= set(tools), tools
    assert [get_json_schema(getattr(Env(), n))["function"]["name"] for n in tools] == tools, "TRL reads each one"

    env = Env()
    observation = await asyncio.to_thread(env.reset, seed=3, prompt=[{"role": "user", "content": ""}])
    assert observation.endswith("Write the note `greeting` saying hello, then say done.")
    assert await asyncio.to_thread(env.write_note, key="greeting", text="hello") is not None
    with pytest.raises(ToolFailed):
        await asyncio.to_thread(env.read_note, key="nobody")
    env._response = "done: a note to greet"
    assert await asyncio.to_thread(env.get_reward) == 1.0
    state = await run_state(client, env.run_id)
    assert state.status is RunStatus.PASSED and state.pins["seed"] == 3 and state.score == 1.0

    # reset() with an episode open abandons it; so does leaving a `with` block
    first = await asyncio.to_thread(env.reset)
    abandoned = env.run_id
    await asyncio.to_thread(env.reset)
    assert first and (await run_state(client, abandoned)).status is RunStatus.CANCELLED
    await asyncio.to_thread(env.__exit__, None, None, None)
    assert (await run_state(client, env.run_id)).status is RunStatus.CANCELLED
    assert await running_runs(client) == []


async def test_a_run_that_errs_is_no_reward(settings, worker, client):
    Env = await asyncio.to_thread(environment_factory, notes_spec(turn_timeout=1), settings=settings, worker=False)
    env = Env()
    await asyncio.to_thread(env.reset)
    await asyncio.sleep(2)  # the turn's deadline passes: the run ends in error, not with a score
    with pytest.raises(EpisodeInfrastructureError, match="did not answer within 1s"):
        await asyncio.to_thread(env.get_reward)
    Dropping = await asyncio.to_thread(
        environment_factory, notes_spec(turn_timeout=1), settings=settings, worker=False, on_infrastructure_error="drop"
    )
    dropping = Dropping()
    await asyncio.to_thread(dropping.reset)
    await asyncio.sleep(2)
    assert await asyncio.to_thread(dropping.get_reward) is None


async def test_episodes_end_however_the_trainer_stops(settings, worker, client):
    Env = await asyncio.to_thread(environment_factory, notes_spec(turn_timeout=60), settings=settings, worker=False)
    dropped, kept = Env(), Env()
    await asyncio.to_thread(dropped.reset)
    await asyncio.to_thread(kept.reset)
    runs = [dropped.run_id, kept.run_id]
    del dropped
    gc.collect()
    await asyncio.to_thread(Env.close_all)
    for run_id in runs:
        state = await run_state(client, run_id)
        assert state.status is RunStatus.CANCELLED and "abandoned by the trainer" in (state.error or ""), state.error
    assert await running_runs(client) == []


async def test_grpo_trainer_trains_on_episodes_and_logs_the_runs_scores(settings, worker, client, tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model = await asyncio.to_thread(make_tiny_model, tmp_path / "tiny", 0)
    Env = await asyncio.to_thread(environment_factory, notes_spec(turn_timeout=120), settings=settings, worker=False)
    played: list[tuple[str, float]] = []

    class Recorded(Env):  # what TRL was given, run by run
        def get_reward(self):
            reward = super().get_reward()
            played.append((self.run_id, reward))
            return reward

    Recorded.__name__ = TASK_ID
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=24,
        use_cpu=True,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
    )
    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": ""}], "seed": n} for n in range(4)])
    trainer = GRPOTrainer(
        model=str(model), args=args, train_dataset=rows, reward_funcs=[answers], environment_factory=Recorded
    )
    await asyncio.to_thread(trainer.train)

    logged = [h for h in trainer.state.log_history if f"rewards/{TASK_ID}/mean" in h]
    assert len(logged) == 2 and len(played) == 4, (trainer.state.log_history, played)
    for step, entry in enumerate(logged):
        runs = played[2 * step : 2 * step + 2]
        states = [await run_state(client, run_id) for run_id, _ in runs]
        assert [s.score for s in states] == [reward for _, reward in runs], "get_reward gave TRL each run's score"
        assert all(s.status in (RunStatus.PASSED, RunStatus.FAILED) for s in states)
        mean = sum(s.score for s in states) / 2
        # the task's column, and the reward TRL trained on (the `answers` column scores nothing)
        assert entry[f"rewards/{TASK_ID}/mean"] == pytest.approx(mean, abs=1e-6), (entry, played)
        assert entry["reward"] == pytest.approx(mean, abs=1e-6), entry
    assert await running_runs(client) == [], "every episode of the trainer ended"
    admin = connect(settings)
    try:
        ours = [i for i in await admin.list_instances() if str(i.get("run_id", "")).startswith(TASK_ID)]
    finally:
        await admin.aclose()
    assert len(ours) >= 5, "the four rollouts' and the tool listing's"
    assert [i["id"] for i in ours if i.get("ended_at") is None] == [], "every run's end released its instance"
