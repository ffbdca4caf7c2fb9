"""The framework's step types that had no counterpart of ours (issue 32), under its names and fields:
`env_outcome_verifier` (a bundle's verifier script, run in a sandbox against a deployed env's MCP endpoint) and
`teardown_sandboxes`; and the framework's env folder that holds only a Dockerfile, read as an env on Docker."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from test_cli import cli
from test_docker import docker_client  # noqa: F401 - the Docker tier's fixture

from agent_env.bundles import BUILTIN_ROOT, find_env
from agent_env.errors import BadInput
from agent_env.planning.runs import plan
from agent_env.planning.tasks import load_task
from agent_env.providers import by_name
from agent_env.spec.run import RunStatus
from agent_env.stores import open_stores
from agent_env.temporal import launch

EXAMPLES = Path(__file__).parent / "fixtures" / "framework_bundles"
CHECK_ECHO = EXAMPLES / "echo-mcp" / "artifacts" / "check_echo"  # the framework's script, unchanged
# The framework's check_echo in our terms: the MCP SDK 2.x's client (agent-env's Python, which a local sandbox
# runs) yields two streams, not three, and names the error flag is_error; our echo server answers {"text": ...}
# (and our gateway answers any tool's result as JSON text). The rest (verify(mcp_url), its rows) is the framework's.
CHECK_ECHO_OURS = (
    (CHECK_ECHO / "verify.py")
    .read_text()
    .replace("as (read, write, _):", "as (read, write):")
    .replace("isError", "is_error")
    .replace("text == SENT", 'json.loads(text) == {"text": SENT}')
    .replace("from mcp import", "import json\nfrom mcp import")
)
OUR_ECHO = BUILTIN_ROOT / "echo-mcp" / "envs" / "echo"  # our echo MCP server: a local process, or Docker


def echo_bundle(tmp_path: Path, script: str | None = None) -> Path:
    """A bundle with our echo env and a verifier artifact: the framework's check_echo in our terms, or `script`."""
    bundle = tmp_path / "b"
    shutil.copytree(OUR_ECHO, bundle / "envs" / "echo")
    check = bundle / "artifacts" / "check_echo"
    check.mkdir(parents=True)
    (check / "verify.py").write_text(script or CHECK_ECHO_OURS)
    return bundle


def write_task(bundle: Path, steps: list[dict], name: str = "t") -> Path:
    (bundle / "tasks").mkdir(exist_ok=True)
    path = bundle / "tasks" / f"{name}.json"
    path.write_text(json.dumps(steps))
    return path


DEPLOY_ECHO = {"id": "env", "type": "deploy_env", "env_id": "echo", "sandbox_type": "local"}
VERIFY_ECHO = {"id": "echoes", "type": "env_outcome_verifier", "env_id": "echo", "file_artifact_id": "check_echo"}


async def run(client, settings, path: Path, timeout: float = 120):
    task = load_task(path)
    return await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, task)), timeout)


def test_steps_list_shows_them():
    done = cli("steps", "list")
    assert done.returncode == 0, done.stderr
    for name in (
        "env_outcome_verifier",
        "teardown_sandboxes",
        "run_code",
        "add_skills",
        "run_docker_container",
        "run_container_unit_tests_verifier",
    ):
        assert name in done.stdout


# -- env_outcome_verifier --


async def test_the_framework_echo_check_passes_against_our_echo_env(client, settings, worker, tmp_path):
    bundle = echo_bundle(tmp_path)
    state = await run(client, settings, write_task(bundle, [DEPLOY_ECHO, {**VERIFY_ECHO, "verifier_id": "echoes"}]))
    step = state.steps["echoes"]
    assert state.status is RunStatus.PASSED, step.outputs
    assert step.score is not None and step.score.value == 1.0
    assert [(c.name, c.passed) for c in step.score.criteria] == [("echoes", True)]
    assert "hello from agent-env" in step.score.criteria[0].detail
    assert step.outputs["verifier_id"] == "echoes" and step.outputs["results"][0]["result"] is True
    assert await by_name.load("local", settings).list(state.run_id) == [], "its sandbox and the env's are gone"


FAILING = """
async def verify(mcp_url):
    return [{"id": "a", "result": True, "weight": 3}, {"id": "b", "result": False, "description": "no"}]
"""


@pytest.mark.parametrize(("aggregator", "value"), [("all_pass", 0.0), ("any_pass", 1.0), ("weighted_average", 0.75)])
async def test_rows_are_aggregated_as_told(client, settings, worker, tmp_path, aggregator, value):
    bundle = echo_bundle(tmp_path, FAILING)
    task = write_task(bundle, [DEPLOY_ECHO, {**VERIFY_ECHO, "score_aggregator": aggregator}])
    state = await run(client, settings, task)
    score = state.steps["echoes"].score
    assert score is not None and score.value == value
    assert [(c.name, c.passed, c.weight) for c in score.criteria] == [("a", True, 3.0), ("b", False, 1.0)]
    assert state.status is (RunStatus.FAILED if value < 1 else RunStatus.PASSED)


SNOOPING = """
import os, sys

def verify(mcp_url):
    # an outsider's script: what it can see of the token the forwarder uses
    token_file = sys.argv[3]
    seen = {"url": mcp_url, "token_file_left": os.path.exists(token_file), "argv": sys.argv}
    return [{"id": "snoop", "result": mcp_url.startswith("http://127.0.0.1:"), "description": repr(seen)}]
"""


async def test_the_script_gets_a_bare_url_and_never_the_token(client, settings, worker, tmp_path):
    bundle = echo_bundle(tmp_path, SNOOPING)
    state = await run(client, settings, write_task(bundle, [DEPLOY_ECHO, VERIFY_ECHO]))
    assert state.status is RunStatus.PASSED, state.error or {k: s.error for k, s in state.steps.items()}
    detail = state.steps["echoes"].score.criteria[0].detail
    assert "'token_file_left': False" in detail, "the token file is deleted before the script runs"


RAISING = """
def verify(mcp_url):
    raise RuntimeError("the mailbox is empty")
"""


async def test_a_script_that_raises_fails_the_step_with_its_error(client, settings, worker, tmp_path):
    bundle = echo_bundle(tmp_path, RAISING)
    state = await run(client, settings, write_task(bundle, [DEPLOY_ECHO, VERIFY_ECHO]))
    assert state.status is RunStatus.ERROR
    assert "RuntimeError: the mailbox is empty" in (state.steps["echoes"].error or "")


def test_env_id_must_be_deployed_by_an_earlier_step(settings, tmp_path):
    bundle = echo_bundle(tmp_path)
    with pytest.raises(BadInput) as e:
        plan(load_task(write_task(bundle, [DEPLOY_ECHO, {**VERIFY_ECHO, "env_id": "mail"}])), "r-1", settings)
    assert "env_id 'mail' is deployed by no deploy_env step" in str(e.value)
    later = [{**VERIFY_ECHO, "depends_on": []}, {**DEPLOY_ECHO, "depends_on": []}]
    with pytest.raises(BadInput) as e:
        plan(load_task(write_task(bundle, later)), "r-1", settings)
    assert "which it does not come after" in str(e.value) and "depends_on" in str(e.value)


def test_the_script_is_the_artifacts_verify_py_pinned_at_plan_time(settings, tmp_path):
    bundle = echo_bundle(tmp_path)
    (bundle / "artifacts" / "check_echo" / "helper.py").write_text("x = 1\n")
    planned = plan(load_task(write_task(bundle, [DEPLOY_ECHO, VERIFY_ECHO])), "r-1", settings)
    config = next(s for s in planned.steps if s.id == "echoes").config
    assert config["deployed"] == "${steps.env.outputs}"
    pinned = open_stores(settings).objects.get(config["script"])
    assert pinned == (bundle / "artifacts" / "check_echo" / "verify.py").read_bytes(), "verify.py, not helper.py"
    (bundle / "artifacts" / "check_echo" / "verify.py").unlink()
    (bundle / "artifacts" / "check_echo" / "other.py").write_text("x = 2\n")
    with pytest.raises(BadInput) as e:
        plan(load_task(write_task(bundle, [DEPLOY_ECHO, VERIFY_ECHO])), "r-1", settings)
    assert "which is the verifier?" in str(e.value) and "verify.py" in str(e.value)


def test_prompt_id_is_named_as_not_supported(tmp_path):
    bundle = echo_bundle(tmp_path)
    with pytest.raises(BadInput) as e:
        load_task(write_task(bundle, [DEPLOY_ECHO, {**VERIFY_ECHO, "prompt_id": "p"}]))
    assert "prompt_id" in str(e.value) and "not supported yet" in str(e.value)


# -- teardown_sandboxes --

BOX = {"id": "box", "type": "deploy_sandbox", "sandbox_name": "work", "sandbox_mode": "vm", "sandbox_type": "local"}


async def test_teardown_sandboxes_removes_a_bare_sandbox_mid_run(client, settings, worker, tmp_path):
    bundle = tmp_path / "b"
    bundle.mkdir()
    steps = [
        BOX,
        {"id": "down", "type": "teardown_sandboxes", "sandbox_names": ["work"]},
        {"id": "again", "type": "teardown_sandboxes", "sandbox_names": ["work"]},
    ]
    state = await run(client, settings, write_task(bundle, steps))
    assert state.status is RunStatus.PASSED, state.error or {k: s.error for k, s in state.steps.items()}
    box_id = state.steps["box"].outputs["sandbox"]["id"]
    assert state.steps["down"].outputs == {"torn_down_sandbox_ids": [box_id], "already_gone": [], "failed": []}
    assert state.steps["again"].outputs["already_gone"] == [box_id], "it was gone before the run ended"


async def test_teardown_sandboxes_removes_an_envs_sandboxes(client, settings, worker, tmp_path):
    bundle = echo_bundle(tmp_path)
    steps = [DEPLOY_ECHO, {"id": "down", "type": "teardown_sandboxes", "env_ids": ["echo"]}]
    state = await run(client, settings, write_task(bundle, steps))
    assert state.status is RunStatus.PASSED, state.error or {k: s.error for k, s in state.steps.items()}
    echo_box = state.steps["env"].outputs["sandboxes"][0]["id"]
    assert state.steps["down"].outputs["torn_down_sandbox_ids"] == [echo_box]


def test_teardown_sandboxes_finds_each_name_by_what_its_step_deploys(settings, tmp_path):
    bundle = echo_bundle(tmp_path)
    agent = {
        "id": "agent",
        "type": "deploy_agent",
        "record": {"name": "helper", "type": "a2a", "config": {"url": "http://127.0.0.1:9/"}},
    }
    down = {
        "id": "down",
        "type": "teardown_sandboxes",
        "sandbox_names": ["work"],
        "env_ids": ["echo"],
        "agent_names": ["helper"],
    }
    planned = plan(load_task(write_task(bundle, [BOX, DEPLOY_ECHO, agent, down])), "r-1", settings)
    targets = next(s for s in planned.steps if s.id == "down").config["targets"]
    assert [(t["kind"], t["name"], t["deployed"]) for t in targets] == [
        ("sandbox_names", "work", "${steps.box.outputs}"),
        ("env_ids", "echo", "${steps.env.outputs}"),
        ("agent_names", "helper", "${steps.agent.outputs}"),
    ]


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ({"sandbox_names": ["nope"]}, "sandbox_names names 'nope', which no deploy_sandbox step"),
        ({"env_ids": ["echo"]}, "env_ids names 'echo', which no deploy_env step"),
        ({}, "give at least one of agent_names, env_ids, sandbox_names"),
    ],
)
def test_teardown_sandboxes_names_what_it_cannot_find(settings, tmp_path, step, expected):
    bundle = tmp_path / "b"
    bundle.mkdir()
    with pytest.raises(BadInput) as e:
        plan(
            load_task(write_task(bundle, [BOX, {"id": "down", "type": "teardown_sandboxes", **step}])), "r-1", settings
        )
    assert expected in str(e.value)


# -- run_code --

SCORER = """
from helper import double

def run(input):
    return {"doubled": double(input["args"]["n"]), "seen": sorted(input["results"])}
"""


def code_bundle(tmp_path: Path) -> Path:
    bundle = echo_bundle(tmp_path)
    scorer = bundle / "artifacts" / "scorer"
    scorer.mkdir()
    (scorer / "run.py").write_text(SCORER)
    (scorer / "helper.py").write_text("def double(n):\n    return 2 * n\n")
    (scorer / "notes.txt").write_text("not staged")
    (bundle / "artifacts" / "one.py").write_text("async def main(input):\n    return input['results']['first']\n")
    return bundle


async def test_run_code_runs_a_script_in_a_sandbox_and_passes_results_on(client, settings, worker, tmp_path):
    bundle = code_bundle(tmp_path)
    steps = [
        BOX,
        {"id": "first", "type": "run_code", "sandbox_name": "work", "script_artifact_id": "scorer", "args": {"n": 21}},
        {
            "id": "second",
            "type": "run_code",
            "sandbox_name": "work",
            "script_artifact_id": "one.py",
            "entrypoint": "main",
            "result_id": "again",
        },
        DEPLOY_ECHO,
        {"id": "beside", "type": "run_code", "env_id": "echo", "script_artifact_id": "scorer", "args": {"n": 1}},
    ]
    state = await run(client, settings, write_task(bundle, steps))
    assert state.status is RunStatus.PASSED, state.error or {k: s.error for k, s in state.steps.items()}
    assert state.steps["first"].outputs == {"result_id": "first", "result": {"doubled": 42, "seen": []}}
    assert state.steps["second"].outputs == {"result_id": "again", "result": {"doubled": 42, "seen": []}}
    assert state.steps["beside"].outputs["result"] == {"doubled": 2, "seen": ["again", "first"]}


async def test_run_code_fails_with_the_scripts_error(client, settings, worker, tmp_path):
    bundle = code_bundle(tmp_path)
    (bundle / "artifacts" / "scorer" / "run.py").write_text("def run(input):\n    raise ValueError('no such row')\n")
    steps = [BOX, {"id": "first", "type": "run_code", "sandbox_name": "work", "script_artifact_id": "scorer"}]
    state = await run(client, settings, write_task(bundle, steps))
    assert state.status is RunStatus.ERROR
    assert "ValueError: no such row" in (state.steps["first"].error or "")


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ({"agent_name": "a"}, "agent_name"),
        ({"sandbox_name": None}, "give exactly one of `sandbox_name`"),
        ({"env_id": "echo"}, "give exactly one of `sandbox_name`"),
        ({"script_file": "nope.py"}, "script_file 'nope.py' is not a .py file of 'scorer'"),
    ],
)
def test_run_code_names_a_wrong_config(settings, tmp_path, step, expected):
    bundle = code_bundle(tmp_path)
    code = {"id": "c", "type": "run_code", "sandbox_name": "work", "script_artifact_id": "scorer", **step}
    with pytest.raises(BadInput) as e:
        plan(load_task(write_task(bundle, [BOX, DEPLOY_ECHO, code])), "r-1", settings)
    assert expected in str(e.value)


# -- add_skills --


async def test_add_skills_gives_an_a2a_agent_a_skill_mid_run(client, settings, worker, tmp_path):
    from starlette.applications import Starlette
    from test_agents import serving

    from agent_env.agents.sdk import Agent, Answer, Turn, a2a_routes

    class Skilled(Agent):
        name = "skilled"

        async def answer(self, turn: Turn) -> Answer:
            return Answer(text="; ".join(f"{s['name']}: {s['skill_md']}" for s in turn.skills))

    bundle = tmp_path / "b"
    bundle.mkdir()
    app = Starlette()
    async with serving(app) as url:
        served, handler = a2a_routes(Skilled(), url + "/", extensions=True)
        app.router.routes.extend(served)
        skill = {"name": "triage", "description": "Sort tickets", "body": "Urgent first.", "license": "MIT"}
        steps = [
            {
                "id": "agent",
                "type": "deploy_agent",
                "record": {"name": "skilled", "type": "a2a", "config": {"url": url + "/"}},
            },
            {"id": "give", "type": "add_skills", "agent_name": "skilled", "skills": [skill]},
            {"id": "ask", "type": "prompt_agent", "agent": "agent", "prompt": "What can you do?"},
        ]
        state = await run(client, settings, write_task(bundle, steps))
        await handler.aclose()
    assert state.status is RunStatus.PASSED, state.error or {k: s.error for k, s in state.steps.items()}
    assert state.steps["give"].outputs == {"agent_name": "skilled", "added": ["triage"]}
    answer = state.steps["ask"].outputs["answer"]
    assert answer.startswith("triage: ---\n") and 'license: "MIT"' in answer and answer.endswith("---\nUrgent first.")


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ({"skills": [{"name": "s", "description": "d", "object_url": "s3://x"}]}, "`object_url`"),
        ({"skills": [], "cli_artifact_ids": ["c"]}, "`cli_artifact_ids`"),
        ({"skills": []}, "give at least one skill"),
    ],
)
def test_add_skills_refuses_what_it_does_not_support_by_field(tmp_path, step, expected):
    bundle = tmp_path / "b"
    bundle.mkdir()
    with pytest.raises(BadInput) as e:
        load_task(write_task(bundle, [{"id": "give", "type": "add_skills", "agent_name": "a", **step}]))
    assert expected in str(e.value)


# -- task containers: run_docker_container, run_container_unit_tests_verifier --


def container_bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "b"
    context = bundle / "artifacts" / "task_image"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text('FROM agentenv/base:bookworm\nCOPY ok /app/ok\nCMD ["sleep", "600"]\n')
    (context / "ok").write_text("ready\n")
    return bundle


CONTAINER = {
    "id": "task",
    "type": "run_docker_container",
    "sandbox_name": "work",
    "docker_context_artifact_id": "task_image",
}
TESTS = {
    "id": "tests",
    "type": "run_container_unit_tests_verifier",
    "sandbox_name": "work",
    "container_name": "task-container",
    "setup_commands": ["test -f /app/ok"],
    "command": "echo $SHARE > /tmp/reward",
    "env_vars": {"SHARE": "0.5"},
    "reward_path": "/tmp/reward",
    "result_paths": ["/app/ok"],
}


def test_task_containers_are_planned_with_their_context_pinned(settings, tmp_path):
    bundle = container_bundle(tmp_path)
    planned = plan(load_task(write_task(bundle, [BOX, CONTAINER, TESTS])), "r-1", settings)
    by_id = {s.id: s.config for s in planned.steps}
    assert by_id["task"]["build"] and open_stores(settings).objects.exists(by_id["task"]["build"])
    assert by_id["tests"]["deployed"] == "${steps.task.outputs.container}"


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([BOX, {**CONTAINER, "privileged": True}], "`privileged`"),
        ([BOX, {**CONTAINER, "volumes": ["/:/host"]}], "`volumes`: volumes is not supported yet"),
        ([CONTAINER], "sandbox_name 'work' is given by no deploy_sandbox step"),
        ([BOX, CONTAINER, {**TESTS, "container_name": "other"}], "container 'other' on sandbox 'work'"),
        ([BOX, CONTAINER, {**TESTS, "user": "nobody"}], "`user`"),
    ],
)
def test_task_containers_name_a_wrong_config(settings, tmp_path, steps, expected):
    bundle = container_bundle(tmp_path)
    with pytest.raises(BadInput) as e:
        plan(load_task(write_task(bundle, steps)), "r-1", settings)
    assert expected in str(e.value)


async def test_a_task_container_is_built_run_and_tested(docker_client, client, settings, worker, tmp_path):  # noqa: F811
    bundle = container_bundle(tmp_path)
    failing = {**TESTS, "id": "fails", "command": "exit 3", "reward_path": None, "depends_on": ["tests"]}
    state = await run(client, settings, write_task(bundle, [BOX, CONTAINER, TESTS, failing]), timeout=300)
    tests = state.steps["tests"]
    assert tests.score is not None and tests.score.value == 0.5, {k: s.error for k, s in state.steps.items()}
    assert tests.outputs["extracted_files"] == {"/app/ok": "ready\n"}
    assert state.steps["fails"].outputs["exit_code"] == 3 and state.steps["fails"].score.value == 0.0
    assert state.steps["task"].outputs["container"]["provider"] == "docker"
    assert docker_client.containers.list(all=True, filters={"label": f"agentenv.run={state.run_id}"}) == []


async def test_a_reward_file_left_before_the_tests_is_never_their_score(
    docker_client,  # noqa: F811
    client,
    settings,
    worker,
    tmp_path,
):
    """Attack: the agent leaves a perfect reward where the tests will write theirs, and the tests write none. The
    verifier clears the file before the tests, so it reads nothing: the step fails (no grade), never 1.0."""
    bundle = container_bundle(tmp_path)
    dockerfile = bundle / "artifacts" / "task_image" / "Dockerfile"
    dockerfile.write_text(
        dockerfile.read_text().replace("COPY ok /app/ok\n", "COPY ok /app/ok\nRUN echo 1.0 > /tmp/reward\n")
    )
    quiet = {**TESTS, "command": "test -f /tmp/reward || echo cleared"}
    state = await run(client, settings, write_task(bundle, [BOX, CONTAINER, quiet]), timeout=300)
    tests = state.steps["tests"]
    assert state.status is RunStatus.ERROR and tests.score is None, {k: s.error for k, s in state.steps.items()}
    assert "reward_path '/tmp/reward' holds no number" in tests.error


# -- an env folder with only a Dockerfile --


def test_a_dockerfile_only_env_is_an_env_on_docker():
    record, folder = find_env(EXAMPLES / "echo-mcp", "echo")
    assert folder == EXAMPLES / "echo-mcp" / "envs" / "echo"
    [app] = record.apps
    assert app.sandbox is not None
    assert (app.sandbox.build, app.sandbox.port, app.sandbox.path, app.sandbox.provider) == (
        ".",
        8000,
        "/mcp",
        "docker",
    )
    assert list(record.roles) == ["agent"]
    mail, _ = find_env(EXAMPLES / "mail-mcp", "mail")  # (named through its aliases.toml too)
    assert mail.name == "mail"


def test_an_env_toml_still_wins_over_a_dockerfile(tmp_path):
    bundle = tmp_path / "b"
    shutil.copytree(OUR_ECHO, bundle / "envs" / "echo")
    shutil.copy(OUR_ECHO / "server" / "Dockerfile", bundle / "envs" / "echo" / "Dockerfile")
    record, _ = find_env(bundle, "echo")
    assert record.apps[0].sandbox is not None and record.apps[0].sandbox.build == "server"


async def test_a_dockerfile_only_env_runs_on_docker_and_is_verified(docker_client, client, settings, worker, tmp_path):  # noqa: F811
    bundle = tmp_path / "b"
    shutil.copytree(OUR_ECHO / "server", bundle / "envs" / "echo")  # a Dockerfile and server.py, no env.toml
    (bundle / "artifacts" / "check_echo").mkdir(parents=True)
    (bundle / "artifacts" / "check_echo" / "verify.py").write_text(CHECK_ECHO_OURS)
    steps = [{"id": "env", "type": "deploy_env", "env_id": "echo"}, {**VERIFY_ECHO, "sandbox_type": "local"}]
    state = await run(client, settings, write_task(bundle, steps), timeout=300)
    assert state.status is RunStatus.PASSED, state.error or {k: s.error for k, s in state.steps.items()}
    assert state.steps["env"].outputs["sandboxes"][0]["provider"] == "docker"
    assert docker_client.containers.list(all=True, filters={"label": f"agentenv.run={state.run_id}"}) == []


# -- deploy_env: the framework's fields --


def deploy_bundle(tmp_path: Path, **fields) -> Path:
    """A bundle whose one task deploys the built-in `notes` app with `fields`, then reads note `a`."""
    bundle = tmp_path / "b"
    bundle.mkdir(exist_ok=True)
    read = {"id": "read", "type": "call_tool", "env": "env", "tool": "read_note", "arguments": {"key": "a"}}
    return write_task(bundle, [{"id": "env", "type": "deploy_env", "env_id": "notes", **fields}, read])


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"sandbox_type": "lcoal"}, "sandbox_type 'lcoal' is no sandbox provider: use one of .*local"),
        ({"sandbox_type": "docker,nope"}, "sandbox_type 'nope' is no sandbox provider"),
        ({"gateway_mode": "eventual"}, r"gateway_mode: Input should be 'performance' or 'consistent'"),
        ({"env_state_type": "postgres"}, "`env_state_type`: an external env state backend is not supported"),
        ({"env_state_instance_id": "db-1"}, "`env_state_instance_id`: an external env state backend"),
        ({"artifact_version": 2}, "`artifact_version` without `artifact_id`"),
        ({"artifact_id": "seed", "load_data": False}, "`artifact_id` is the data to load, and `load_data` is false"),
        ({"ttl_seconds": 0}, "ttl_seconds: Input should be greater than 0"),
        ({"env": "notes"}, r"steps\[0\] \(id 'env'\)\.env: unknown"),
    ],
)
def test_deploy_env_refuses_what_it_cannot_do_by_field(tmp_path, fields, expected):
    with pytest.raises(BadInput, match=expected):
        load_task(deploy_bundle(tmp_path, **fields))


def test_deploy_env_names_a_wrong_artifact_or_env_version_when_planned(settings, tmp_path):
    path = deploy_bundle(tmp_path, artifact_id="seed")
    with pytest.raises(BadInput, match="artifact 'seed' is in neither the bundle's artifacts/ nor the registry"):
        plan(load_task(path), "r-1", settings)
    (path.parent.parent / "artifacts" / "seed").mkdir(parents=True)
    (path.parent.parent / "artifacts" / "seed" / "notes.csv").write_text("a,b\n")
    with pytest.raises(BadInput, match="deploy_env artifact_id 'seed': 'notes.csv' is no JSON data"):
        plan(load_task(path), "r-1", settings)
    with pytest.raises(BadInput, match="deploy_env env_version 3 of env 'notes': no env 'notes' in the registry"):
        plan(load_task(deploy_bundle(tmp_path, env_version=3)), "r-1", settings)


def test_env_version_deploys_the_registrys_version(settings, tmp_path):
    from agent_env.registry.store import open_registry

    bundle = tmp_path / "pushed"
    (bundle / "envs" / "pad").mkdir(parents=True)
    (bundle / "envs" / "pad" / "env.toml").write_text('name = "pad"\nversion = "1"\n[[apps]]\napp = "notes"\n')
    registry = open_registry(settings)
    try:
        registry.push_bundle(bundle)
    finally:
        registry.close()
    here = tmp_path / "b"
    (here / "envs" / "pad").mkdir(parents=True)  # the bundle's own pad, changed since: not the one deployed
    (here / "envs" / "pad" / "env.toml").write_text('name = "pad"\nversion = "2"\n[[apps]]\napp = "chat"\n')
    task = load_task(write_task(here, [{"id": "env", "type": "deploy_env", "env_id": "pad", "env_version": 1}]))
    [step] = plan(task, "r-1", settings).steps
    assert [app["app"] for app in step.config["record"]["apps"]] == ["notes"]
    unversioned = load_task(write_task(here, [{"id": "env", "type": "deploy_env", "env_id": "pad"}], "u"))
    assert [app["app"] for app in plan(unversioned, "r-2", settings).steps[0].config["record"]["apps"]] == ["chat"]


async def test_deploy_env_loads_an_artifact_as_data_and_records_what_it_was_asked(client, settings, worker, tmp_path):
    from agent_env.gateway.embedded import connect

    row = {"key": "a", "text": "from the artifact", "author": "seed", "updated_at": "2026-01-01T00:00:00Z"}
    fields = {
        "artifact_id": "seed",
        "gateway_mode": "consistent",
        "ttl_seconds": 3600,
        "cpu": 1,
        "memory_mb": 256,
        "disk_size_gb": 5,
        "metadata": {"purpose": "a test"},
        "sandbox_type": "local",
    }
    path = deploy_bundle(tmp_path, **fields)
    (path.parent.parent / "artifacts" / "seed").mkdir(parents=True)
    (path.parent.parent / "artifacts" / "seed" / "notes.json").write_text(json.dumps({"notes": {"notes": [row]}}))
    state = await run(client, settings, path)
    assert state.status is RunStatus.PASSED, state.error or {k: s.error for k, s in state.steps.items()}
    assert state.steps["read"].outputs["result"]["text"] == "from the artifact"
    outputs = state.steps["env"].outputs
    assert outputs["metadata"] == {"purpose": "a test"}
    assert outputs["requested"] == {
        "gateway_mode": "consistent",
        "ttl_seconds": 3600,
        "cpu": 1.0,
        "memory_mb": 256,
        "disk_size_gb": 5.0,
        "resources_applied": False,  # notes runs in the gateway: no sandbox to limit
    }
    async with connect(settings) as gateway:
        [stored] = [s for s in await gateway.list_instances() if s["id"] == outputs["instance"]]
    assert stored["gateway_mode"] == "consistent" and stored["expires_at"]
