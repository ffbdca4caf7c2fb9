"""bench/grpo_curve.py's task (bench/bundles/say-o): it runs as `agent-env run` runs it, its scripted agent scores
1, and a trainer's answers earn an eighth per letter o, up to eight (the partial credit GRPO climbs)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from agent_env.episodes import Episodes, EpisodeSpec
from agent_env.planning.tasks import load_task
from agent_env.spec.run import RunStatus

TASK = Path(__file__).parent.parent / "bench" / "bundles" / "say-o" / "tasks" / "say-o.toml"


async def test_its_scripted_agent_scores_one(run_task):
    state = await run_task(tomllib.loads(TASK.read_text()))
    assert state.status is RunStatus.PASSED and state.score == 1.0, state


@pytest.mark.parametrize(
    ("answer", "score"),
    [("", 0.0), ("yes", 0.0), ("no", 0.125), ("foo bar", 0.25), ("one, two, o o o", 0.625), ("o" * 20, 1.0)],
)
async def test_a_trainer_earns_an_eighth_per_o(client, settings, worker, answer, score):
    episode = await EpisodeSpec.from_task(load_task(TASK), turn_timeout=60).start(Episodes(client, settings))
    turn = await episode.next_turn()
    assert turn.prompt == "Say the letter o as many times as you can."
    await turn.end(answer)
    assert await episode.result() == {"grade": score}
