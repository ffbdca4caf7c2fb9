"""The framework's bundle format: tasks as JSON lists of flat steps (`tasks/NAME.json`), read into the same task
model as TOML ones; its bare-sandbox steps (deploy_sandbox, load_artifact, verify_sandbox) on our providers;
`aliases.toml`. The framework's own `hello` example (tests/fixtures/framework_bundles/hello, copied unchanged)
runs through `agent-env run` and passes."""

from __future__ import annotations

import asyncio
import json
import shutil
import textwrap
from pathlib import Path

import pytest
from test_cli import cli, fresh_env  # noqa: F401 - a state dir of its own
from test_docker import docker_client  # noqa: F401 - the Docker tier's fixture

from agent_env.bundles import find_agent, find_env, is_bundle, task_files
from agent_env.bundles.aliases import read_aliases
from agent_env.errors import BadInput, NotFound
from agent_env.planning.runs import plan
from agent_env.planning.tasks import load_task, parse_task
from agent_env.providers import by_name
from agent_env.providers.docker_images import BASE_IMAGE
from agent_env.spec.json_tasks import read_json_task
from agent_env.spec.run import RunStatus
from agent_env.step_types import catalog
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch

EXAMPLES = Path(__file__).parent / "fixtures" / "framework_bundles"
HELLO = EXAMPLES / "hello"


def copy_hello(tmp_path: Path) -> Path:
    bundle = tmp_path / "hello"
    shutil.copytree(HELLO, bundle)
    return bundle


def write_json_task(bundle: Path, steps, name: str = "t") -> Path:
    (bundle / "tasks").mkdir(parents=True, exist_ok=True)
    path = bundle / "tasks" / f"{name}.json"
    path.write_text(steps if isinstance(steps, str) else json.dumps(steps))
    return path


async def run_bundle_task(client, settings, path: Path, timeout: float = 90):
    task = load_task(path)
    return await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, task)), timeout)


# -- reading: one model, two readers --


def test_the_fixture_is_the_framework_example_unchanged():
    assert json.loads((HELLO / "tasks" / "hello.json").read_text())[0]["type"] == "deploy_sandbox"
    notice = (HELLO.parent / "NOTICE").read_text()
    assert "Apache License, Version 2.0" in notice and "Copyright 2026 Scale AI" in notice


def test_a_json_task_is_read_into_our_task_model():
    assert is_bundle(HELLO) and task_files(HELLO) == {"hello": HELLO / "tasks" / "hello.json"}
    task = resolve_target(str(HELLO))
    assert task.id == "hello" and task.bundle == HELLO
    assert [(s.id, s.type, s.depends_on) for s in task.steps] == [
        ("box", "deploy_sandbox", []),
        ("load", "load_artifact", ["box"]),
        ("hello", "verify_sandbox", ["box", "load"]),
    ], "a step without depends_on follows every earlier step (the framework's rule)"
    assert task.steps[1].config == {
        "sandbox_name": "box",
        "artifact_id": "greeting",
        "destination_path": "/app/greeting",
    }


def test_the_same_task_in_toml_plans_the_same(settings, tmp_path):
    """One model: the JSON list and a TOML task with the same steps give the same plan."""
    bundle = copy_hello(tmp_path)
    from_json = load_task(bundle / "tasks" / "hello.json")
    as_toml = parse_task(from_json.model_dump(mode="json"), "hello.toml", bundle)
    steps = [plan(t, "r-1", settings).steps for t in (from_json, as_toml)]
    assert steps[0] == steps[1]
    load = steps[0][1]
    assert load.config["deployed"] == "${steps.box.outputs}", "sandbox_name resolves to the deploying step"
    assert sorted(load.config["pinned"]) == ["/app/greeting/check.sh", "/app/greeting/hello.txt"]
    assert steps[0][0].sandboxes, "the run removes the sandbox when it ends"


def test_the_three_step_types_are_in_the_catalog():
    for name in ("deploy_sandbox", "load_artifact", "verify_sandbox"):
        assert catalog.get(name).name == name


def test_explicit_depends_on_and_fail_task_on_error(tmp_path):
    path = write_json_task(
        tmp_path / "b",
        [
            {"id": "a", "type": "sleep", "seconds": 0},
            {"id": "b", "type": "sleep", "seconds": 0, "depends_on": []},
            {
                "id": "c",
                "type": "sleep",
                "seconds": 0,
                "depends_on": [{"task_step_id": "a"}],
                "fail_task_on_error": False,
            },
        ],
    )
    task = load_task(path)
    assert [s.depends_on for s in task.steps] == [[], [], ["a"]]
    assert task.steps[2].on_failure == "continue"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"id": "a"}', "a JSON task is a non-empty list of steps, not an object"),
        ("[]", "not an empty one"),
        ("[1]", "steps[0] is int, not an object"),
        ('[{"id": "a", "type": "check"}, {"id": "b"}]', "steps[1]: field 'type' is missing"),
        ('[{"id": "a", "type": "check", "depends_on": "z"}]', "steps[0] (id 'a'): field 'depends_on' is a list"),
        ('[{"id": "a", "type": "check", "depends_on": [3]}]', "steps[0] (id 'a'): field 'depends_on': an entry"),
        (
            '[{"id": "a", "type": "check", "retry_config": {}}]',
            "steps[0] (id 'a'): field 'retry_config' is not supported",
        ),
        ('[{"id": "a", "type": "check", "id": "b"}]', "key 'id' is given twice"),
        ("[{", "is not valid JSON"),
    ],
)
def test_a_malformed_json_task_names_the_file_the_step_and_the_field(tmp_path, content, expected):
    path = write_json_task(tmp_path / "b", content)
    with pytest.raises(BadInput) as e:
        load_task(path)
    assert str(path) in str(e.value) and expected in str(e.value)


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ({"sandbox_name": "box"}, "steps[0] (id 'box').sandbox_mode: required field is missing"),
        (
            {"sandbox_name": "box", "sandbox_mode": "vm", "sandbox_typo": "local"},
            "steps[0] (id 'box').sandbox_typo: unknown",
        ),
        ({"sandbox_name": "box", "sandbox_mode": "pod"}, "steps[0] (id 'box').sandbox_mode: Input should be 'vm' or"),
        ({"sandbox_name": "box", "sandbox_mode": "container"}, "needs `image` and `port`"),
    ],
)
def test_a_step_config_problem_names_the_step_index_and_the_flat_field(tmp_path, step, expected):
    path = write_json_task(tmp_path / "b", [{"id": "box", "type": "deploy_sandbox", **step}])
    with pytest.raises(BadInput) as e:
        load_task(path)
    assert str(path) in str(e.value) and expected in str(e.value)
    assert ".config." not in str(e.value), "a JSON step has no config level"


def test_an_unknown_step_type_is_named_with_its_index(tmp_path):
    path = write_json_task(tmp_path / "b", [{"id": "x", "type": "deploy_sandbx"}])
    with pytest.raises(
        BadInput, match=r"steps\[0\] \(id 'x'\)\.type: unknown step type 'deploy_sandbx' — did you mean"
    ):
        load_task(path)


def test_load_artifact_refuses_what_it_does_not_support_by_field(tmp_path):
    path = write_json_task(
        tmp_path / "b",
        [
            {"id": "box", "type": "deploy_sandbox", "sandbox_name": "box", "sandbox_mode": "vm"},
            {"id": "load", "type": "load_artifact", "sandbox_name": "box", "urls": ["http://169.254.169.254/"]},
        ],
    )
    with pytest.raises(BadInput, match=r"steps\[1\] \(id 'load'\): `urls`: downloading URLs is not"):
        load_task(path)


def test_verify_sandbox_needs_a_sandbox_name(tmp_path):
    path = write_json_task(tmp_path / "b", [{"id": "v", "type": "verify_sandbox", "agent_name": "default-agent"}])
    with pytest.raises(BadInput, match=r"steps\[0\] \(id 'v'\): `agent_name`: verifying an agent's sandbox is not"):
        load_task(path)
    path = write_json_task(tmp_path / "b", [{"id": "v", "type": "verify_sandbox", "criteria": []}])
    with pytest.raises(BadInput, match=r"steps\[0\] \(id 'v'\): give `sandbox_name`"):
        load_task(path)


def test_sandbox_name_must_be_deployed_by_an_earlier_step(settings, tmp_path):
    bundle = copy_hello(tmp_path)
    steps = json.loads((bundle / "tasks" / "hello.json").read_text())
    steps[1]["sandbox_name"] = "nobox"
    with pytest.raises(BadInput, match="(?s)sandbox_name 'nobox' is given by no deploy_sandbox step.*use one of: box"):
        plan(load_task(write_json_task(bundle, steps, "wrong")), "r-1", settings)
    steps[1]["sandbox_name"] = "box"
    steps[1]["depends_on"] = []
    with pytest.raises(BadInput, match="(?s)step 'load': it works in sandbox 'box'.*does not come after it"):
        plan(load_task(write_json_task(bundle, steps, "unordered")), "r-1", settings)


def test_a_missing_artifact_is_named_when_planned(settings, tmp_path):
    bundle = copy_hello(tmp_path)
    steps = json.loads((bundle / "tasks" / "hello.json").read_text())
    steps[1]["artifact_id"] = "greetings"
    with pytest.raises(BadInput, match="artifact 'greetings' is in neither the bundle's artifacts/ nor the registry"):
        plan(load_task(write_json_task(bundle, steps, "missing")), "r-1", settings)


def test_the_framework_docker_examples_are_read(tmp_path):
    """echo-mcp and mail-mcp are bundles to us: their tasks read into steps, mail-mcp's aliases.toml is valid."""
    echo = read_json_task(EXAMPLES / "echo-mcp" / "tasks" / "smoke.json")
    assert [(s["id"], s["type"]) for s in echo["steps"]] == [("env", "deploy_env"), ("echoes", "env_outcome_verifier")]
    assert echo["steps"][0]["config"] == {"env_id": "echo", "sandbox_type": "local"}
    assert is_bundle(EXAMPLES / "mail-mcp")
    assert read_aliases(EXAMPLES / "mail-mcp") == {"envs": {"mail": "mail"}, "agents": {}}


def test_the_registry_refuses_a_json_task_instead_of_leaving_it_out():
    from agent_env.registry.bundle_items import read_bundle

    with pytest.raises(
        BadInput, match=r"(?s)nothing was pushed.*hello\.json: the registry holds TOML tasks only for now"
    ):
        read_bundle(HELLO)


# -- running --


def test_dry_run_plans_and_starts_nothing(fresh_env):  # noqa: F811
    done = cli("run", str(HELLO), "--dry-run", env=fresh_env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "planned, not started" in done.stdout and "load_artifact  after box" in done.stdout
    assert "2 pinned file(s)" in done.stdout
    assert cli("server", "status", env=fresh_env).returncode != 0, "no server was started"
    planned = json.loads(cli("run", str(HELLO), "--dry-run", "--json", env=fresh_env).stdout)
    assert [s["type"] for s in planned["steps"]] == ["deploy_sandbox", "load_artifact", "verify_sandbox"]
    echo = cli("run", str(EXAMPLES / "echo-mcp"), "--dry-run", env=fresh_env)
    assert echo.returncode == 0 and "env_outcome_verifier  after env" in echo.stdout, echo.stdout + echo.stderr


def test_agent_env_run_runs_the_framework_hello_and_passes(server):
    done = cli("run", str(HELLO), timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    for step in ("box", "load", "hello"):
        assert step in done.stdout
    assert "score 1.00 (2/2)" in done.stdout and "PASSED · score 1.00" in done.stdout


def test_agent_env_run_runs_the_framework_echo_mcp_on_the_local_provider_and_passes(server, settings):
    """Its env folder is a Dockerfile only and its task says sandbox_type local: the local provider installs what
    the Dockerfile's pip installs (the framework's env SDK, mcp 1.x) into a virtualenv and runs its CMD; the
    verifier script runs with the same SDK, and the gateway passes the echo's plain text through."""
    done = cli("run", str(EXAMPLES / "echo-mcp"), timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASSED · score 1.00" in done.stdout, done.stdout
    assert (Path(settings.state_dir) / "sandboxes" / "local-venvs").is_dir(), "the virtualenv is kept for the next"


async def test_verify_sandbox_fails_a_wrong_greeting_and_the_sandbox_goes(client, settings, worker, tmp_path):
    bundle = copy_hello(tmp_path)
    (bundle / "artifacts" / "greeting" / "hello.txt").write_text("goodbye\n")
    state = await run_bundle_task(client, settings, bundle / "tasks" / "hello.json")
    assert state.status is RunStatus.FAILED
    score = state.steps["hello"].score
    assert score is not None and score.value == 0.0
    assert [(c.name, c.passed) for c in score.criteria] == [("greets", False), ("check passes", False)]
    assert "does not contain 'hello'" in score.criteria[0].detail
    assert await by_name.load("local", settings).list(state.run_id) == [], "the run's end removes its sandbox"


async def test_verify_sandbox_rows_and_aggregators(client, settings, worker, tmp_path):
    bundle = copy_hello(tmp_path)
    steps = json.loads((bundle / "tasks" / "hello.json").read_text())
    steps[2].update(
        score_aggregator="weighted_average",
        criteria=[
            {"type": "probe_file_exists", "criterion": "both files", "paths": ["hello.txt", "/app/greeting/check.sh"]},
            {"type": "probe_dir_exists", "criterion": "no such dir", "paths": ["nowhere"], "weight": 3},
            {"type": "probe_file_contains", "criterion": "a regex", "paths": ["hello.txt"], "expected": "^hel+o$"},
            {"type": "bash_cmd_succeeds", "criterion": "in base_dir", "bash_cmd": "test -f check.sh && pwd"},
            {"type": "rubric", "criterion": "another verifier's"},
        ],
    )
    state = await run_bundle_task(client, settings, write_json_task(bundle, steps, "rows"))
    out = state.steps["hello"].outputs
    assert [r["result"] for r in out["results"][:4]] == [True, False, True, True]
    assert out["results"][4]["skipped"] is True and "result" not in out["results"][4]
    assert out["score"] == pytest.approx(3 / 6) and state.status is RunStatus.FAILED


# -- aliases.toml --


def write_aliased_bundle(root: Path, aliases: str) -> Path:
    (root / "envs" / "desk").mkdir(parents=True)
    (root / "envs" / "desk" / "env.toml").write_text('name = "desk"\n[[apps]]\napp = "notes"\n')
    (root / "agents" / "helper").mkdir(parents=True)
    (root / "agents" / "helper" / "agent.toml").write_text('type = "llm"\nrole = "agent"\n')
    (root / "aliases.toml").write_text(textwrap.dedent(aliases))
    write_json_task(root, [{"id": "env", "type": "deploy_env", "env_id": "frontdesk"}])
    return root


def test_aliases_name_the_bundles_envs_and_agents(tmp_path):
    bundle = write_aliased_bundle(
        tmp_path / "b", '[envs]\ndesk = ["frontdesk", "fd"]\n[agents]\nhelper = ["assistant"]\n'
    )
    record, folder = find_env(bundle, "frontdesk")
    assert record.name == "desk" and folder == bundle / "envs" / "desk"
    assert find_env(bundle, "fd")[1] == folder
    assert find_agent(bundle, "assistant").name == "helper"
    assert load_task(bundle / "tasks" / "t.json").steps[0].config["env_id"] == "frontdesk", "a task names it by alias"
    assert find_env(bundle, "notes")[1] is None, "a built-in app of the name wins over an alias"
    (bundle / "aliases.toml").write_text('[envs]\ndesk = ["helpdesk"]\n')
    assert find_env(bundle, "helpdesk")[1] is None, "(helpdesk is a built-in app)"
    with pytest.raises(NotFound):
        find_env(bundle, "desk-2")


@pytest.mark.parametrize(
    ("aliases", "expected"),
    [
        ('[tools]\nx = ["y"]\n', "[tools] is not a table it takes"),
        ('[envs]\nnope = ["x"]\n', "envs.nope: the bundle has no env folder envs/nope"),
        ('[envs]\ndesk = "frontdesk"\n', "envs.desk must be a non-empty list of aliases"),
        ('[envs]\ndesk = ["Help Desk"]\n', "envs.desk: 'Help Desk' is not an alias"),
        ("[envs]\ndesk = [\n", "is not valid TOML"),
    ],
)
def test_a_broken_aliases_file_is_named(tmp_path, aliases, expected):
    bundle = write_aliased_bundle(tmp_path / "b", aliases)
    with pytest.raises(BadInput) as e:
        find_env(bundle, "frontdesk")
    assert "aliases.toml" in str(e.value) and expected in str(e.value)


# -- the Docker tier --


async def test_deploy_sandbox_on_docker(docker_client, client, settings, worker, tmp_path):  # noqa: F811
    bundle = copy_hello(tmp_path)
    steps = json.loads((bundle / "tasks" / "hello.json").read_text())
    steps[0].update(sandbox_type="docker", image=BASE_IMAGE)
    state = await run_bundle_task(client, settings, write_json_task(bundle, steps, "docker"))
    assert state.status is RunStatus.PASSED, state.error or {k: s.error for k, s in state.steps.items()}
    assert state.steps["box"].outputs["sandbox"]["provider"] == "docker"
    assert docker_client.containers.list(all=True, filters={"label": f"agentenv.run={state.run_id}"}) == []


def test_the_framework_mail_mcp_passes_on_the_local_provider(server, tmp_path):
    """mail-mcp with one field added (sandbox_type local on its deploy_env): its server and verifier run here
    without Docker or the internet. (Unchanged it runs on Docker, whose build pulls its FROM image from
    public.ecr.aws and pip installs from PyPI inside the build: out of reach on these machines, so untested.)"""
    bundle = tmp_path / "mail-mcp"
    shutil.copytree(EXAMPLES / "mail-mcp", bundle)
    steps = json.loads((bundle / "tasks" / "smoke.json").read_text())
    steps[0]["sandbox_type"] = "local"
    write_json_task(bundle, steps, "smoke")
    done = cli("run", str(bundle), timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASSED · score 1.00" in done.stdout, done.stdout
