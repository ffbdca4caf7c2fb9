"""bench/grpo_curve.py's task (bench/bundles/note-color): it runs as `agent-env run` runs it, its scripted agent
scores 1, and a trainer's partial answers earn the partial credit GRPO learns from."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from agent_env.episodes import Episodes, EpisodeSpec
from agent_env.planning.tasks import load_task
from agent_env.spec.run import RunStatus

TASK = Path(__file__).parent.parent / "bench" / "bundles" / "note-color" / "tasks" / "note-color.toml"


async def test_its_scripted_agent_scores_one(run_task):
    state = await run_task(tomllib.loads(TASK.read_text()))
    assert state.status is RunStatus.PASSED and state.score == 1.0, state
    assert state.steps["grade"].outputs["values"]["it says blue"] == "blue"


@pytest.mark.parametrize(
    ("calls", "score"),
    [
        ([], 0.0),
        ([{"key": "todo", "text": "blue"}], 0.25),
        ([{"key": "color", "text": "red"}], 0.5),
        ([{"key": "name", "text": "red"}, {"key": "color", "text": "blue"}], 1.0),
    ],
)
async def test_a_trainer_earns_partial_credit(client, settings, worker, calls, score):
    episodes = Episodes(client, settings)
    episode = await EpisodeSpec.from_task(load_task(TASK), turn_timeout=60).start(episodes)
    turn = await episode.next_turn()
    assert turn.prompt == "Write the note `color` saying blue."
    async with turn.tools() as tools:
        for arguments in calls:
            await tools.call("write_note", arguments)
    await turn.end("Done.")
    assert await episode.result() == {"grade": score}
