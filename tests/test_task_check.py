"""`agent-env task check`: every built-in task passes it; a task that anyone passes, that its oracle cannot pass,
that has no oracle, or whose runs differ under one seed fails it, naming why."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_env.bundles import runnables
from agent_env.errors import BadInput
from agent_env.planning.tasks import parse_task
from agent_env.task_check import masked, plan_check, run_check, world_differences
from agent_env.task_lookup import resolve_target

# Built-in tasks whose check needs Docker (an environment in a container): skipped without a daemon, naming it,
# unless AGENT_ENV_REQUIRE_DOCKER=1 (then they fail).
NEEDS_DOCKER = {("blender", "blender"): "the studio runs Blender in a container (agentenv/blender:bookworm)"}
BUILTIN = [(r.name, t) for r in runnables() if r.builtin for t in r.tasks]


async def checked(settings, client, task, seed=None):
    return await asyncio.wait_for(run_check(client, settings, plan_check(settings, task, seed)), 300)


def rows(result) -> dict:
    return {c.name: c for c in result.checks}


@pytest.mark.parametrize(("bundle", "task"), BUILTIN, ids=[f"{b}:{t}" for b, t in BUILTIN])
async def test_every_builtin_task_passes_its_check(client, settings, worker, bundle, task):
    if (bundle, task) in NEEDS_DOCKER and not os.environ.get("AGENT_ENV_REQUIRE_DOCKER"):
        from test_docker import _docker_problem

        if problem := _docker_problem():
            pytest.skip(f"{NEEDS_DOCKER[bundle, task]}; no Docker here: {problem}")
    spec = resolve_target(bundle, task)
    result = await checked(settings, client, spec)
    assert result.ok, result.model_dump_json(indent=2)
    found = rows(result)
    assert found["oracle"].ok and found["seed"].ok
    assert len(set(found["seed"].runs)) == 2 and found["oracle"].runs[0] in found["seed"].runs
    if any(s.type == "prompt_agent" for s in spec.steps):
        assert spec.oracle, f"{bundle}:{task} prompts an agent: it ships with an oracle"
        assert found["null"].ok, found["null"].why
    else:  # no agent to replace: the task is its own oracle
        assert found["null"].ok is None and not spec.oracle


def helper_task(check: dict, oracle: list | None, *, seed: int = 0) -> dict:
    """A task whose scripted helper answers a prompt and a check of its answer grades it."""
    task = {
        "id": "helper",
        "seed": seed,
        "steps": [
            {"id": "notes", "type": "deploy_env", "config": {"env_id": "notes"}},
            {
                "id": "helper",
                "type": "deploy_agent",
                "depends_on": ["notes"],
                "config": {
                    "env": "notes",
                    "record": {
                        "name": "helper",
                        "type": "scripted",
                        "role": "agent",
                        "config": {"turns": [[{"say": "hi"}]]},
                    },
                },
            },
            {
                "id": "ask",
                "type": "prompt_agent",
                "depends_on": ["helper"],
                "config": {"agent": "helper", "prompt": "hi"},
            },
            {
                "id": "grade",
                "type": "check_response",
                "depends_on": ["ask"],
                "config": {"response": "${steps.ask.outputs.answer}", "checks": [{"name": "the answer", **check}]},
            },
        ],
    }
    if oracle is not None:
        task["oracle"] = {"helper": oracle}
    return task


async def test_a_task_anyone_passes_fails_the_null_check(client, settings, worker):
    lenient = parse_task(helper_task({"matches": ".*"}, [{"say": "hello"}]), "test")
    found = rows(await checked(settings, client, lenient))
    assert found["oracle"].ok and found["seed"].ok
    assert found["null"].ok is False and "the task tests nothing" in found["null"].why


async def test_an_oracle_below_one_and_a_missing_oracle_fail_the_oracle_check(client, settings, worker):
    strict = helper_task({"equals": "hello"}, [{"tool": "list_notes"}, {"say": "goodbye"}])
    wrong, missing = await asyncio.gather(
        checked(settings, client, parse_task(strict, "test")),
        checked(settings, client, parse_task(helper_task({"equals": "hello"}, None), "test")),
    )
    assert not wrong.ok and rows(wrong)["oracle"].ok is False
    assert "the oracle scored 0, not 1.0" in rows(wrong)["oracle"].why
    assert rows(wrong)["null"].ok and rows(wrong)["seed"].ok
    assert not missing.ok and rows(missing)["oracle"].ok is False and "no oracle" in rows(missing)["oracle"].why
    assert "the null agent" in rows(missing)["seed"].why and rows(missing)["seed"].ok  # its null agent, twice


def test_the_seed_is_every_runs_seed(settings):
    task = parse_task(helper_task({"equals": "hi"}, [{"say": "hi"}], seed=3), "test")
    check = plan_check(settings, task, seed=7)
    assert set(check.runs) == {"oracle", "again", "null"}
    assert {inp.pins["seed"] for inp in check.runs.values()} == {7}
    assert plan_check(settings, task).seed == 3


def test_an_oracle_names_a_deploy_agent_step():
    with pytest.raises(BadInput, match="oracle names 'nobody', not a deploy_agent step"):
        parse_task({**helper_task({"equals": "x"}, None), "oracle": {"nobody": [{"say": "x"}]}}, "test")


def test_worlds_are_compared_with_run_ids_and_times_masked():
    one = masked({"desk": {"state": {"note": "run r-1 at 2026-12-04T18:00:01Z", "n": 2}}}, "r-1")
    two = masked({"desk": {"state": {"note": "run r-2 at 2026-12-04T18:00:09.5+00:00", "n": 2}}}, "r-2")
    assert one != two  # a time inside a longer string is the world's, not a stamp
    stamps = [masked({"at": f"2026-12-04T18:00:0{i}Z", "by": f"r-{i}.desk"}, f"r-{i}") for i in (1, 2)]
    assert stamps[0] == stamps[1] == {"at": "<time>", "by": "<run>.desk"}
    assert world_differences({"desk": {"state": {"n": 2}}}, {"desk": {"state": {"n": 3}}}) == ["desk.state.n"]
    assert world_differences({"desk": {"calls": [1, 2]}}, {"desk": {"calls": [1]}}) == ["desk.calls"]


# helper_task as a task file: its check and the step its oracle names are filled in.
HELPER_TOML = """
id = "helper"
[[steps]]
id = "notes"
type = "deploy_env"
config = {{ env_id = "notes" }}
[[steps]]
id = "helper"
type = "deploy_agent"
depends_on = ["notes"]
config = {{ env = "notes", record = {{ name = "helper", type = "scripted", role = "agent", config = {{ turns = [[{{ say = "hi" }}]] }} }} }}
[[steps]]
id = "ask"
type = "prompt_agent"
depends_on = ["helper"]
config = {{ agent = "helper", prompt = "hi" }}
[[steps]]
id = "grade"
type = "check_response"
depends_on = ["ask"]
config = {{ response = "${{steps.ask.outputs.answer}}", checks = [{{ name = "the answer", {check} }}] }}
[[oracle.{oracle}]]
say = "hello"
"""
AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
CLI_QUEUE = {"AGENT_ENV_TASK_QUEUE": "agentenv-cli-tests"}  # (as test_cli: the CLI's background worker runs them)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [AGENT_ENV, *args], capture_output=True, text=True, env={**os.environ, **CLI_QUEUE}, timeout=180
    )


@pytest.mark.processes
def test_the_command_prints_each_check_and_exits_by_them(server, tmp_path):
    done = cli("task", "check", "hello")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pass  oracle" in done.stdout and "n/a   null" in done.stdout and "ready to ship" in done.stdout

    lenient = tmp_path / "lenient.toml"
    lenient.write_text(HELPER_TOML.format(check='matches = ".*"', oracle="helper"))
    done = cli("task", "check", str(lenient), "--seed", "5", "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["seed"] == 5 and [c["ok"] for c in report["checks"]] == [True, False, True]

    bad = tmp_path / "bad.toml"
    bad.write_text(HELPER_TOML.format(check='equals = "x"', oracle="nobody"))
    done = cli("task", "check", str(bad))
    assert done.returncode == 2 and "oracle names 'nobody'" in done.stderr and "Traceback" not in done.stderr


async def test_runs_of_one_seed_whose_worlds_differ_fail_the_seed_check(client, settings, worker):
    """A note that carries the host's time inside its text (not a time on its own, which is masked) differs."""
    stamped = {
        "id": "stamped",
        "steps": [
            {"id": "notes", "type": "deploy_env", "config": {"env_id": "notes"}},
            {
                "id": "first",
                "type": "call_tool",
                "depends_on": ["notes"],
                "config": {"env": "notes", "tool": "write_note", "arguments": {"key": "a", "text": "x"}},
            },
            {
                "id": "second",
                "type": "call_tool",
                "depends_on": ["first"],
                "config": {
                    "env": "notes",
                    "tool": "write_note",
                    "arguments": {"key": "b", "text": "after ${steps.first.outputs.result.updated_at}"},
                },
            },
            {
                "id": "verify",
                "type": "check_state",
                "depends_on": ["second"],
                "config": {
                    "env": "notes",
                    "checks": [{"name": "two", "tool": "list_notes", "path": "count", "equals": 2}],
                },
            },
        ],
    }
    found = rows(await checked(settings, client, parse_task(stamped, "test")))
    assert found["oracle"].ok and found["null"].ok is None
    assert found["seed"].ok is False, found["seed"].why
    assert "the world at notes.state.parts.0.data.notes.1.text" in found["seed"].why  # note b's text
    assert "the outcome" not in found["seed"].why  # both passed with score 1: only the world differs
