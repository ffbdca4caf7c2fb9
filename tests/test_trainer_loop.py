"""The trainer loop as the framework's README writes it, verbatim: `agent_env.task`, `EpisodeSpec.from_task` with
the task's only prompted agent played by default and each prompt's own turn deadline, `Task.get(id, version)`
across bundles and the registry, over the real Temporal dev server and gateway."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from test_episodes import REFUND_SCRIPT

from agent_env.bundles import BUILTIN_ROOT
from agent_env.episodes import Episodes
from agent_env.errors import BadInput, NotFound
from agent_env.spec.run import RunStatus, StepStatus


@pytest.fixture
async def played_here(client, settings, worker, monkeypatch):
    """`spec.start()` with no connection given uses this one: the session's server, and its worker runs the rest."""
    episodes = Episodes(client, settings)
    monkeypatch.setattr(Episodes, "_default", episodes)
    yield episodes
    await episodes.close()


async def test_the_readme_trainer_loop_runs_verbatim(played_here):
    from agent_env.task import EpisodeSpec, Task

    spec = EpisodeSpec.from_task(Task.get("refund"), turn_timeout=900)
    episode = await spec.start()
    while (turn := await episode.next_turn()) is not None:
        async with turn.tools() as tools:  # the agent's env tools, called as its role
            ...  # your model reads turn.system_prompt and turn.prompt, and acts with tools.list() and tools.call()
        await turn.end(response="Done.")
    scores = await episode.result()  # every score the run recorded, by step id

    assert tools.list() and all(
        {"name", "inputSchema"} <= set(t) for t in tools.list()
    )  # (the last turn's: the env's tools, as its agent)
    assert scores == {"grade": pytest.approx(0.0)}, "the agent did nothing: the judge's rubric scores 0"
    assert spec.trainer_agents == ["agent"], "the task's only prompted agent is played"
    assert episode.state.status is RunStatus.FAILED and episode.state.steps["work"].status is StepStatus.SUCCEEDED
    assert episode.state.pins["agents"]["agent"] == "refunds@1 (trainer)"
    assert episode.state.steps["work"].outputs["transcript"], "the trainer's answer was recorded"


async def test_the_readme_loop_with_a_model_acting_scores_full_marks(played_here):
    from agent_env.task import EpisodeSpec, Task, Turn

    spec = EpisodeSpec.from_task(Task.get("refund"))
    episode = await spec.start()
    turns: list[Turn] = []
    while (turn := await episode.next_turn()) is not None:
        turns.append(turn)
        async with turn.tools() as tools:
            listed = tools.list()
            results = [await tools.call(name, arguments) for name, arguments in REFUND_SCRIPT]
        await turn.end(response="Refunded CH-5002 and solved TCK-1004.")
    scores = await episode.result()

    assert scores == {"grade": 1.0} and episode.state.status is RunStatus.PASSED, episode.state
    assert [t.prompt for t in turns] == ["Please handle ticket TCK-1004."] and turns[0].role == "billing_lead"
    assert turns[0].offer.deadline_s == 300, "the prompt's own turn_deadline (5m), not 900"
    names = {tool["name"] for tool in listed}
    assert {"issue_refund", "verify_order"} <= names and all({"description", "inputSchema"} <= t.keys() for t in listed)
    assert (results[3]["id"], results[3]["charge_id"]) == ("RF-0001", "CH-5002"), "call gives the tool's JSON result"


async def test_abandoning_an_episode_cancels_its_run(played_here):
    from agent_env.task import EpisodeSpec, Task

    episode = await EpisodeSpec.from_task(Task.get("refund")).start()
    assert (await episode.next_turn()).agent == "refunds"
    await episode.abandon("the trainer was preempted")
    scores = await episode.result()
    assert scores == {} and episode.state.status is RunStatus.CANCELLED
    assert episode.state.error == "abandoned by the trainer: the trainer was preempted"
    assert await episode.next_turn() is None


def test_a_task_that_prompts_two_agents_needs_them_named():
    from agent_env.task import EpisodeSpec, Task

    with pytest.raises(BadInput) as several:
        EpisodeSpec.from_task(Task.get("escalation"), turn_timeout=900)
    message = str(several.value)
    assert "task 'escalation' prompts 2 agents: support (escalations, as sam), customer (morgan)" in message
    assert "trainer_agents=['support']" in message and "'support', 'customer'" in message
    assert EpisodeSpec.from_task(Task.get("escalation"), trainer_agents=["morgan"]).trainer_agents == ["morgan"]

    with pytest.raises(BadInput, match="task 'hello' prompts no agent") as none:
        EpisodeSpec.from_task(Task.get("hello"))
    assert "prompt_agent step" in str(none.value)
    with pytest.raises(BadInput, match=r"trainer_agents must be a list(?s:.*)trainer_agents=\['refunds'\]"):
        EpisodeSpec.from_task(Task.get("refund"), "refunds")  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="turn_timeout must be a number of seconds above 0, not 0"):
        EpisodeSpec.from_task(Task.get("refund"), turn_timeout=0)


def test_turn_timeout_defaults_to_each_prompts_own_deadline(settings):
    from agent_env.task import EpisodeSpec, Task

    def planned(spec: EpisodeSpec, step: str):
        return next(s for s in spec.planned(settings, f"plan-{uuid.uuid4().hex[:8]}").steps if s.id == step)

    own = planned(EpisodeSpec.from_task(Task.get("refund")), "work")  # turn_deadline = "5m"
    assert own.config["turn_deadline"] == "5m" and own.timeout == timedelta(seconds=300 + 600)
    given = planned(EpisodeSpec.from_task(Task.get("refund"), turn_timeout=60), "work")
    assert given.config["turn_deadline"] == "60s" and given.timeout == timedelta(seconds=60 + 600)
    # A conversation: every turn of both sides may use the whole deadline (6 turns each).
    talk = planned(EpisodeSpec.from_task(Task.get("escalation"), ["customer"]), "talk")
    assert talk.config["turn_deadline"] == "5m" and talk.timeout == timedelta(seconds=300 * 12 + 600)
    # A prompt that sets no deadline has prompt_agent's default (5 minutes).
    task = Task.get("refund").model_dump(mode="json", exclude_none=True)
    del task["steps"][3]["config"]["turn_deadline"]
    from agent_env.planning.tasks import parse_task

    bare = planned(EpisodeSpec.from_task(parse_task(task, "t", BUILTIN_ROOT / "refund")), "work")
    assert "turn_deadline" not in bare.config and bare.timeout == timedelta(seconds=300 + 600)
    # A deadline the run resolves (a ${...} reference) is not known yet: the episode must be given one.
    task["steps"][3]["config"]["turn_deadline"] = "${steps.case.outputs.deadline}"
    with pytest.raises(BadInput, match=r"step 'work' sets its turn_deadline only when the run starts"):
        EpisodeSpec.from_task(parse_task(task, "t", BUILTIN_ROOT / "refund"))
    given = planned(EpisodeSpec.from_task(parse_task(task, "t", BUILTIN_ROOT / "refund"), turn_timeout=30), "work")
    assert given.config["turn_deadline"] == "30s" and given.timeout == timedelta(seconds=30 + 600)


def test_task_get_finds_bundles_installed_tasks_and_registered_versions(tmp_path, monkeypatch):
    from agent_env.config import load_settings
    from agent_env.registry.store import open_registry
    from agent_env.task import Task

    assert Task.get("refund").bundle == BUILTIN_ROOT / "refund"  # a built-in bundle's name, as before
    assert Task.get("escalation-model-judged").id == "escalation-model-judged"  # any built-in task, by id

    name = f"greet-{uuid.uuid4().hex[:6]}"
    work = tmp_path / "work"
    task_file = work / "greetings" / "tasks" / f"{name}.toml"
    task_file.parent.mkdir(parents=True)
    hello = (BUILTIN_ROOT / "hello" / "tasks" / "hello.toml").read_text()
    task_file.write_text(hello.replace('id = "hello"', f'id = "{name}"').replace('version = "2"', 'version = "1"'))
    registry = open_registry(load_settings())
    try:
        registry.push_bundle(task_file.parents[1])
        task_file.write_text(task_file.read_text().replace('version = "1"', 'version = "2"', 1))
        registry.push_bundle(task_file.parents[1])
    finally:
        registry.close()

    monkeypatch.chdir(work)  # a bundle in the working directory: what `agent-env run` lists
    here = Task.get(name)
    assert (here.version, here.bundle) == ("2", work / "greetings")
    older = Task.get(name, version="1")  # not here at that version: the registry's
    assert older.version == "1" and older.bundle != work / "greetings" and older.bundle is not None
    assert "registry" in older.bundle.parts

    shutil.rmtree(work / "greetings")
    latest = Task.get(name)
    assert latest.version == "2" and "registry" in latest.bundle.parts
    assert Task.get(name, 1).version == "1"
    with pytest.raises(NotFound) as missing:
        Task.get(name, version="3")
    assert f"no task {name!r} version '3'" in str(missing.value) and "use one of: 1, 2" in str(missing.value)
    with pytest.raises(NotFound) as nowhere:
        Task.get("no-such-task-anywhere")
    problem = str(nowhere.value)
    assert "in the built-in bundles, the bundles in" in problem and "or the registry" in problem
    assert "agent-env registry push FOLDER" in nowhere.value.fix and "agent-env run" in nowhere.value.fix


def test_a_task_id_in_two_bundles_here_is_named_with_both(tmp_path, monkeypatch):
    from agent_env.task import Task

    hello = (BUILTIN_ROOT / "hello" / "tasks" / "hello.toml").read_text().replace('id = "hello"', 'id = "twin"')
    for folder in ("a", "b"):
        (tmp_path / folder / "tasks").mkdir(parents=True)
        (tmp_path / folder / "tasks" / "twin.toml").write_text(hello)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput, match=r"task 'twin' is in 2 bundles: .*a/tasks/twin.toml, .*b/tasks/twin.toml"):
        Task.get("twin")
    assert Task.get(str(Path("a/tasks/twin.toml"))).id == "twin"


@pytest.mark.processes
def test_help_does_not_import_the_trainer_api():
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('LOADED', sorted(m for m in sys.modules if m.startswith('agent_env'))))\n"
        "sys.argv = ['agent-env', '--help']\n"
        "from agent_env.cli import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30)
    loaded = out.stdout.rsplit("LOADED", 1)[1]
    assert "agent_env.cli" in loaded
    assert "agent_env.task'" not in loaded and "agent_env.episodes" not in loaded, loaded
