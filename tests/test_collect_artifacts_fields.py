"""`collect_artifacts` with the framework's fields, in real runs on the local provider: files out of a deploy_sandbox
sandbox (`sandbox_name`: every file under `base_path`, or `artifact_paths`), out of a deployed agent's (`agent_name`,
with a prompt's manifest: `manifest_step_id`), bounded, never out of the sandbox, kept in the run's artifacts and as a
universe in the registry."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from test_agent_sandboxes import write_agent_bundle
from test_docker import docker_client  # noqa: F401 - the Docker tier's fixture
from test_framework_steps import CONTAINER, container_bundle

from agent_env.errors import BadInput
from agent_env.planning.runs import plan
from agent_env.planning.tasks import load_task
from agent_env.registry.store import Registry
from agent_env.stores import open_stores
from agent_env.temporal import launch

BOX = {"id": "box", "type": "deploy_sandbox", "sandbox_name": "work", "sandbox_mode": "vm", "sandbox_type": "local"}
PUT = {
    "id": "put",
    "type": "put_files",
    "sandbox": "box",
    "into": "/app/artifact",
    "files": {"report.md": {"text": "# done"}, "sub/data.csv": {"text": "a,b\n1,2\n"}, ".DS_Store": {"text": "x"}},
}
# a link to a file of the host, planted by a command in the sandbox (a local sandbox's commands see the host)
LINK = {
    "id": "link",
    "type": "sandbox_exec",
    "sandbox": "box",
    "cwd": "/app/artifact",
    "command": "ln -s /etc/hosts leak",
}


def write_task(bundle: Path, steps: list[dict]) -> Path:
    (bundle / "tasks").mkdir(parents=True, exist_ok=True)
    path = bundle / "tasks" / "t.json"
    path.write_text(json.dumps(steps))
    return path


async def run(client, settings, path: Path, timeout: float = 120):
    task = load_task(path)
    return await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, task)), timeout)


def stored(settings, key: str) -> bytes:
    stores = open_stores(settings)
    try:
        return stores.objects.get(key)
    finally:
        stores.close()


async def test_files_come_out_of_a_bare_sandbox_into_the_runs_artifacts_and_a_universe(
    client, settings, worker, tmp_path
):
    steps = [
        BOX,
        PUT,
        LINK,
        {"id": "all", "type": "collect_artifacts", "sandbox_name": "work", "exclude_basenames": [".DS_Store"],
         "universe_id_suffix": "-files"},
        {"id": "named", "type": "collect_artifacts", "sandbox_name": "work",
         "artifact_paths": ["report.md", "/app/artifact/sub/data.csv", "gone.txt", "https://example.com/gold.pdf"]},
        {"id": "escape", "type": "collect_artifacts", "sandbox_name": "work", "artifact_paths": ["leak"],
         "fail_task_on_error": False},
        {"id": "few", "type": "collect_artifacts", "sandbox_name": "work", "max_files": 1, "fail_task_on_error": False},
        {"id": "small", "type": "collect_artifacts", "sandbox_name": "work", "max_total_bytes": 10,
         "fail_task_on_error": False},
    ]  # fmt: skip
    state = await run(client, settings, write_task(tmp_path / "b", steps))
    assert state.steps["all"].status.value == "succeeded", {k: s.error for k, s in state.steps.items()}

    everything = state.steps["all"].outputs
    files = {f["name"]: f for f in everything["files"]}
    assert set(files) == {"report.md", "sub/data.csv"}, "the excluded name and the link are not taken"
    assert stored(settings, files["sub/data.csv"]["key"]) == b"a,b\n1,2\n"
    assert files["report.md"]["key"] == f"runs/{state.run_id}/artifacts/all/app/artifact/report.md"
    assert files["report.md"]["key"] in everything["artifacts"]
    manifest = json.loads(stored(settings, everything["manifest"]))
    assert sorted(f["path"] for f in manifest["collected"]["files"]) == [
        "/app/artifact/report.md",
        "/app/artifact/sub/data.csv",
    ]

    universe = everything["universe"]
    assert universe == {"id": f"{state.run_id}-files", "version": "1"}
    stores = open_stores(settings)
    try:
        version = Registry(stores.documents, stores.objects).version("artifacts", universe["id"], "1")
    finally:
        stores.close()
    assert version.record["type"] == "file_artifact_universe"
    assert version.record["lineage"]["step"] == "all"
    assert {f.path for f in version.files} == {
        f"artifacts/{universe['id']}/app/artifact/report.md",
        f"artifacts/{universe['id']}/app/artifact/sub/data.csv",
    }

    named = state.steps["named"].outputs
    assert [f["name"] for f in named["files"]] == ["report.md", "/app/artifact/sub/data.csv"]
    assert named["missing"] == ["/app/artifact/gone.txt"], "a file that is not there is listed, not a failure"
    assert named["links"] == ["https://example.com/gold.pdf"]
    assert named["universe"]["id"] == state.run_id

    assert state.steps["escape"].status.value == "failed"
    assert "escapes the sandbox" in state.steps["escape"].error, state.steps["escape"].error
    assert "more than 1 files" in state.steps["few"].error
    assert "max_total_bytes (10)" in state.steps["small"].error


ECHO = """
import os

from agent_env.agents.sdk import Agent, serve


class Echo(Agent):
    name = "shout"

    async def answer(self, turn):
        return turn.prompt


serve(Echo(), os.environ["HOST"], int(os.environ["PORT"]))
"""


async def test_an_agents_files_are_collected_by_its_name_as_its_answer_lists_them(client, settings, worker, tmp_path):
    bundle = write_agent_bundle(tmp_path / "b", "")
    (bundle / "agents" / "shout" / "app" / "agent.py").write_text(ECHO)
    (bundle / "tasks" / "t.toml").unlink()
    listing = json.dumps({"artifacts": {"report": "/task/out.md", "notes": "notes.txt"}})
    steps = [
        {"id": "agent", "type": "deploy_agent", "a2a_agent_id": "shout", "agent_name": "solver"},
        {"id": "put", "type": "put_files", "sandbox": "agent",
         "files": {"/task/out.md": {"text": "the report"}, "/app/artifact/notes.txt": {"text": "notes"}}},
        {"id": "ask", "type": "prompt_agent", "agent_name": "solver", "prompt": listing, "prompt_id": "p",
         "timeout_seconds": 60},
        {"id": "collect", "type": "collect_artifacts", "agent_name": "solver", "manifest_step_id": "p"},
        {"id": "bounded", "type": "collect_artifacts", "agent_name": "solver", "manifest_step_id": "p",
         "max_files": 1, "fail_task_on_error": False},
    ]  # fmt: skip
    path = write_task(bundle, steps)
    config = next(s.config for s in load_task(path).steps if s.id == "collect")
    assert config == {"sandbox": "agent", "manifest": "ask"}
    state = await run(client, settings, path)
    assert state.steps["collect"].status.value == "succeeded", {k: s.error for k, s in state.steps.items()}
    files = {f["name"]: stored(settings, f["key"]) for f in state.steps["collect"].outputs["files"]}
    assert files == {"report": b"the report", "notes": b"notes"}
    assert "2 files named, more than max_files (1)" in state.steps["bounded"].error, "an agent's list is bounded"


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ({"sandbox_name": "work", "artifact_paths": ["../../etc/passwd"]}, "is not a normalised path"),
        ({"sandbox_name": "work", "base_path": "/app/../etc"}, "is not a normalised path"),
        ({"artifact_paths": ["a.txt"]}, "files are collected from a sandbox: name it"),
        ({"container_name": "c"}, "`container_name` needs `sandbox_name`"),
        ({"sandbox_name": "nope"}, "sandbox_name 'nope' is given by no deploy_sandbox step"),
        ({"env_id": "mail"}, "env_id 'mail' names no deploy_env step"),
        ({"sandbox_name": "work", "universe_id_suffix": "/x"}, "universe_id_suffix"),
        ({"sandbox_name": "work", "artifacts_key": "k"}, "no seed row"),
    ],
)
def test_a_wrong_collect_is_refused_when_the_run_is_planned(settings, tmp_path, step, expected):
    path = write_task(tmp_path / "b", [BOX, {"id": "c", "type": "collect_artifacts", **step}])
    with pytest.raises(BadInput) as e:
        plan(load_task(path), "r-1", settings)
    assert expected in str(e.value)


def test_a_containers_files_are_named_by_its_sandbox_and_container(settings, tmp_path):
    """sandbox_name and container_name: the run_docker_container step of that pair (planned, not run: Docker)."""
    bundle = container_bundle(tmp_path)
    collect = {"id": "c", "type": "collect_artifacts", "sandbox_name": "work", "container_name": "task-container",
               "artifact_paths": ["/app/ok"]}  # fmt: skip
    planned = {s.id: s for s in plan(load_task(write_task(bundle, [BOX, CONTAINER, collect])), "r-1", settings).steps}
    assert planned["c"].config["deployed"] == {"sandbox": "${steps.task.outputs.container}"}
    wrong = {**collect, "container_name": "other"}
    with pytest.raises(BadInput, match="container 'other' on sandbox 'work'"):
        plan(load_task(write_task(bundle, [BOX, CONTAINER, wrong])), "r-1", settings)


async def test_a_containers_files_are_collected_in_a_run(docker_client, client, settings, worker, tmp_path):  # noqa: F811
    """The Docker tier: the run_docker_container step's container, named by its sandbox and container name."""
    bundle = container_bundle(tmp_path)
    collect = {"id": "c", "type": "collect_artifacts", "sandbox_name": "work", "container_name": "task-container",
               "base_path": "/app", "artifact_paths": ["ok"]}  # fmt: skip
    state = await run(client, settings, write_task(bundle, [BOX, CONTAINER, collect]), timeout=300)
    assert state.steps["c"].status.value == "succeeded", {k: s.error for k, s in state.steps.items()}
    files = state.steps["c"].outputs["files"]
    assert [f["name"] for f in files] == ["ok"]
    assert stored(settings, files[0]["key"]) == b"ready\n"
    assert docker_client.containers.list(all=True, filters={"label": f"agentenv.run={state.run_id}"}) == []
