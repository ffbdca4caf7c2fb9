"""Sandbox steps in real runs: `put_files`, `sandbox_exec` and `collect_files` in a deployed app's sandbox and a
sandboxed agent's, on the `local` provider (real processes) and on `docker` (the Docker tier: skipped naming
what is missing, failing instead under AGENT_ENV_REQUIRE_DOCKER=1)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError
from test_agent_sandboxes import write_agent_bundle
from test_docker import docker_client  # noqa: F401 - the Docker tier's fixture

from agent_env.bundles import BUILTIN_ROOT
from agent_env.errors import AgentEnvError
from agent_env.planning.tasks import load_task, parse_task
from agent_env.providers import by_name
from agent_env.spec.run import RunStatus
from agent_env.steps.builtin.sandbox_steps import (
    CollectFilesConfig,
    PutFilesConfig,
    SandboxExecConfig,
    located,
    shell_pattern,
)
from agent_env.stores import open_stores
from agent_env.temporal import launch

ECHO_SERVER = BUILTIN_ROOT / "echo-mcp" / "envs" / "echo" / "server"
SECRET = "s3cr3t-value-4711"


def write_box_bundle(root: Path, steps: str, *, provider: str = "local") -> Path:
    """A bundle with env `box`: the echo MCP server in a sandbox (a local process, or a container), an
    artifact folder `guide`, and a bundle file."""
    server = root / "envs" / "box" / "server"
    shutil.copytree(ECHO_SERVER, server)
    command = f'command = ["{sys.executable}", "server.py"]' if provider == "local" else ""
    (root / "envs" / "box" / "env.toml").write_text(
        textwrap.dedent(f"""
        name = "box"
        [[apps]]
        name = "echo"
        [apps.sandbox]
        build = "server"
        {command}
        port = 8000
        provider = "{provider}"
        env = {{ GREETING = "hi-plain", SERVICE_TOKEN = "{SECRET}" }}
        [roles.agent]
        tools = ["*"]
        """)
    )
    (root / "artifacts" / "guide" / "data").mkdir(parents=True)
    (root / "artifacts" / "guide" / "SKILL.md").write_text("# Guide\nRead the notes.\n")
    (root / "artifacts" / "guide" / "data" / "facts.txt").write_text("water is wet\n")
    (root / "files").mkdir()
    (root / "files" / "notes.txt").write_text("a note from the bundle\n")
    (root / "tasks").mkdir()
    (root / "tasks" / "t.toml").write_text(textwrap.dedent(steps))
    return root


async def run(client, settings, bundle: Path, timeout: float = 90):
    task = load_task(bundle / "tasks" / "t.toml")
    return await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, task)), timeout)


def stored(settings, key: str) -> bytes:
    stores = open_stores(settings)
    try:
        return stores.objects.get(key)
    finally:
        stores.close()


# Paths in commands are relative to `cwd`: a local sandbox's commands see the host's filesystem, so its
# absolute paths (as put_files and collect_files take them) are folders of its own, not the host's.
PUT_EXEC_COLLECT = """
    id = "box"
    [[steps]]
    id = "env"
    type = "deploy_env"
    config = { env_id = "box" }

    [[steps]]
    id = "put"
    type = "put_files"
    depends_on = ["env"]
    [steps.config]
    sandbox = "env"
    into = "/in"
    [steps.config.files]
    "hello.txt" = { text = "hello ${run.id}" }
    "/in/notes.txt" = { file = "files/notes.txt" }
    "guide" = { artifact = "guide" }

    [[steps]]
    id = "work"
    type = "sandbox_exec"
    depends_on = ["put"]
    [steps.config]
    sandbox = "env"
    cwd = "/in"
    env = { EXTRA = "x y; $(nothing runs)" }
    command = "mkdir -p ../out && cat hello.txt notes.txt guide/SKILL.md > ../out/all.txt && echo \\"$GREETING $EXTRA\\" && echo \\"token=$SERVICE_TOKEN\\""

    [[steps]]
    id = "list"
    type = "sandbox_exec"
    depends_on = ["put"]
    config = { sandbox = "env", app = "echo", command = ["ls", "guide/data"], cwd = "/in" }

    [[steps]]
    id = "collect"
    type = "collect_files"
    depends_on = ["work"]
    config = { sandbox = "env", paths = ["/out/*.txt", "/in/guide/data/facts.txt"] }
"""


async def test_put_exec_and_collect_in_a_local_app_sandbox(client, settings, worker, tmp_path):
    state = await run(client, settings, write_box_bundle(tmp_path / "b", PUT_EXEC_COLLECT))
    assert state.status is RunStatus.PASSED, state.error or {k: s.error for k, s in state.steps.items()}
    put = state.steps["put"].outputs["files"]
    assert [f["path"] for f in put] == [
        "/in/guide/SKILL.md",
        "/in/guide/data/facts.txt",
        "/in/hello.txt",
        "/in/notes.txt",
    ], "a folder artifact is put as its files, under the path it was given"
    work = state.steps["work"].outputs
    assert work["exit_code"] == 0
    assert "hi-plain x y; $(nothing runs)" in work["stdout"], "env values reach the command, never parsed by sh"
    assert SECRET not in work["stdout"] and "token=[secret]" in work["stdout"], "secret-named values are redacted"
    assert SECRET not in stored(settings, work["stdout_key"]).decode()
    assert state.steps["list"].outputs["stdout"].split() == ["facts.txt"]

    files = {f["path"]: f for f in state.steps["collect"].outputs["files"]}
    assert sorted(files) == ["/in/guide/data/facts.txt", "/out/all.txt"]
    everything = stored(settings, files["/out/all.txt"]["key"])
    assert everything == f"hello {state.run_id}a note from the bundle\n# Guide\nRead the notes.\n".encode()
    assert files["/out/all.txt"]["sha256"] == hashlib.sha256(everything).hexdigest()
    assert files["/out/all.txt"]["key"] == f"runs/{state.run_id}/artifacts/collect/out/all.txt"
    assert state.pins["artifacts"], "bundle files and artifacts are pinned in the run as content-addressed objects"
    assert await by_name.load("local", settings).list(state.run_id) == []


FAILURES = """
    id = "failures"
    [[steps]]
    id = "env"
    type = "deploy_env"
    config = { env_id = "box" }

    [[steps]]
    id = "fails"
    type = "sandbox_exec"
    depends_on = ["env"]
    on_failure = "continue"
    config = { sandbox = "env", command = "echo about to fail >&2; exit 3" }

    [[steps]]
    id = "any_exit"
    type = "sandbox_exec"
    depends_on = ["env"]
    on_failure = "continue"
    config = { sandbox = "env", command = ["sh", "-c", "exit 4"], expect_exit = 4 }

    [[steps]]
    id = "loud"
    type = "sandbox_exec"
    depends_on = ["env"]
    on_failure = "continue"
    config = { sandbox = "env", command = "head -c 100000 /dev/zero | tr '\\\\0' 'a'; echo; echo END" }

    [[steps]]
    id = "missing"
    type = "collect_files"
    depends_on = ["env"]
    on_failure = "continue"
    config = { sandbox = "env", paths = ["/nowhere/result.json"] }

    [[steps]]
    id = "maybe"
    type = "collect_files"
    depends_on = ["env"]
    on_failure = "continue"
    config = { sandbox = "env", paths = ["/nowhere/*.json"], optional = true }

    [[steps]]
    id = "big"
    type = "collect_files"
    depends_on = ["env"]
    on_failure = "continue"
    config = { sandbox = "env", paths = ["/server.py"], max_bytes = 10 }

    [[steps]]
    id = "slow"
    type = "sandbox_exec"
    depends_on = ["env"]
    on_failure = "continue"
    config = { sandbox = "env", command = ["sleep", "30"], timeout = 0.5 }
"""


async def test_failures_say_what_happened_and_output_is_bounded(client, settings, worker, tmp_path):
    state = await run(client, settings, write_box_bundle(tmp_path / "b", FAILURES))
    steps = state.steps
    assert steps["fails"].status.value == "failed"
    assert "exited with 3 (expected 0)" in steps["fails"].error and "about to fail" in steps["fails"].error
    assert steps["any_exit"].outputs["exit_code"] == 4

    loud = steps["loud"].outputs
    assert len(loud["stdout"].encode()) <= 2100 and loud["stdout"].endswith("END\n"), "outputs keep a bounded tail"
    assert loud["stdout_bytes"] == 100_005 and len(stored(settings, loud["stdout_key"])) == 100_005

    assert "no file in the sandbox at /nowhere/result.json" in steps["missing"].error
    assert steps["maybe"].outputs == {"files": [], "missing": ["/nowhere/*.json"]}
    assert "more than max_bytes (10)" in steps["big"].error
    assert "did not finish within 0.5s" in steps["slow"].error


AGENT_STEPS = """
    id = "agent-box"
    [[steps]]
    id = "agent"
    type = "deploy_agent"
    config = { agent = "shout" }

    [[steps]]
    id = "put"
    type = "put_files"
    depends_on = ["agent"]
    config = { sandbox = "agent", files = { "/task/brief.md" = { text = "shout this" } } }

    [[steps]]
    id = "work"
    type = "sandbox_exec"
    depends_on = ["put"]
    config = { sandbox = "agent", command = "tr a-z A-Z < brief.md > answer.txt", cwd = "/task", once = true }

    [[steps]]
    id = "collect"
    type = "collect_files"
    depends_on = ["work"]
    config = { sandbox = "agent", paths = ["/task/answer.txt"] }

    [[steps]]
    id = "skills"
    type = "collect_files"
    depends_on = ["agent"]
    config = { sandbox = "agent", paths = ["/skills/guide/*", "/skills/guide/data/*"] }

    [[steps]]
    id = "wrong_app"
    type = "sandbox_exec"
    depends_on = ["agent"]
    on_failure = "continue"
    config = { sandbox = "agent", app = "echo", command = ["true"] }
"""


def with_skill(bundle: Path, skill_md: bool = True) -> Path:
    """The bundle's agent `shout` with skill `guide` (an artifact folder)."""
    guide = bundle / "artifacts" / "guide"
    (guide / "data").mkdir(parents=True)
    if skill_md:
        (guide / "SKILL.md").write_text("# Guide\nShout.\n")
    (guide / "data" / "words.txt").write_text("LOUD\n")
    record = bundle / "agents" / "shout" / "agent.toml"
    record.write_text('skills = ["guide"]\n' + record.read_text())
    return bundle


async def test_a_sandboxed_agent_gets_files_skills_runs_commands_and_gives_files_back(
    client, settings, worker, tmp_path
):
    state = await run(client, settings, with_skill(write_agent_bundle(tmp_path / "b", AGENT_STEPS)))
    assert state.steps["collect"].status.value == "succeeded", state.steps["collect"].error or state.error
    (answer,) = state.steps["collect"].outputs["files"]
    assert stored(settings, answer["key"]) == b"SHOUT THIS"
    skills = {f["path"]: stored(settings, f["key"]) for f in state.steps["skills"].outputs["files"]}
    assert skills == {"/skills/guide/SKILL.md": b"# Guide\nShout.\n", "/skills/guide/data/words.txt": b"LOUD\n"}
    assert "deployed an agent, which has one sandbox: remove `app`" in state.steps["wrong_app"].error


# -- retries --


@pytest.mark.processes
async def test_once_returns_the_first_result_when_a_step_is_retried(settings, tmp_path):
    """A retry of the same step (same idempotency key) finds the marker and does not run the command again."""
    from agent_env.providers.base import SandboxSpec
    from agent_env.steps import StepContext
    from agent_env.steps.builtin.sandbox_steps import sandbox_exec

    provider, box = await by_name.create(
        "local",
        SandboxSpec(name="once-box", run_id="once-run", command=["sleep", "60"]),
        settings,
    )
    try:
        deployed = {"sandboxes": [{"app": "a", "provider": "local", "id": box.info.id, "url": None}]}
        config = SandboxExecConfig(
            sandbox="env", deployed=deployed, command="echo run >> count; wc -l < count", once=True
        )
        ctx = StepContext(run_id="once-run", task_id="t", step_id="work", attempt=1, settings=settings)
        first = await sandbox_exec(ctx, config)
        again = await sandbox_exec(dataclasses.replace(ctx, attempt=2), config)
        assert first.outputs["stdout"].strip() == again.outputs["stdout"].strip() == "1"
        assert (await box.get_file("/count")) == b"run\n", "the command ran once"
        plain = config.model_copy(update={"once": False})
        assert (await sandbox_exec(ctx, plain)).outputs["stdout"].strip() == "2", "without once, it runs again"
        elsewhere = StepContext(run_id="another-run", task_id="t", step_id="work", attempt=1, settings=settings)
        with pytest.raises(Exception, match="is not this run's"):
            await sandbox_exec(elsewhere, config)
    finally:
        await provider.remove(box.info.id)


# -- bad input --


@pytest.mark.parametrize(
    ("model", "config", "message"),
    [
        (PutFilesConfig, {"files": {"notes.txt": {"text": "x"}}}, "is relative: give `into`"),
        (PutFilesConfig, {"files": {"/a/../etc/passwd": {"text": "x"}}}, "not a normalised path"),
        (PutFilesConfig, {"files": {"x": {"text": "x"}}, "into": "tmp"}, "paths in a sandbox are absolute"),
        (PutFilesConfig, {"files": {"/a/*": {"text": "x"}}}, "only collect_files takes patterns"),
        (PutFilesConfig, {"files": {"/a": {"text": "x", "file": "y"}}}, "exactly one of `text`"),
        (CollectFilesConfig, {"paths": ["out/*.txt"]}, "paths in a sandbox are absolute"),
        (CollectFilesConfig, {"paths": ["/out/../../etc/shadow"]}, "not a normalised path"),
        (SandboxExecConfig, {"command": []}, "give a command"),
        (SandboxExecConfig, {"command": "true", "cwd": "work"}, "paths in a sandbox are absolute"),
        (SandboxExecConfig, {"command": "true", "env": {"A B": "x"}}, "not an environment variable name"),
    ],
)
def test_paths_and_configs_are_checked(model, config, message):
    with pytest.raises(ValidationError, match=message):
        model.model_validate({"sandbox": "env", **config})


def test_the_sandbox_step_must_be_an_upstream_step():
    task = {"id": "t", "steps": [{"id": "run", "type": "sandbox_exec", "config": {"sandbox": "nope", "command": "x"}}]}
    with pytest.raises(AgentEnvError, match="'nope' is not a step of this task"):
        parse_task(task, "t")


def test_a_step_without_a_sandbox_is_named():
    env_without = SandboxExecConfig(sandbox="env", command="x", deployed={"instance": "i", "apps": []})
    with pytest.raises(Exception, match="started no sandbox"):
        located(env_without)
    two = {"sandboxes": [{"app": a, "provider": "local", "id": a} for a in ("db", "web")]}
    with pytest.raises(Exception, match="apps db, web: choose one with `app`"):
        located(SandboxExecConfig(sandbox="env", command="x", deployed=two))
    with pytest.raises(Exception, match="no sandboxed app 'cache'"):
        located(SandboxExecConfig(sandbox="env", command="x", deployed=two, app="cache"))
    assert located(SandboxExecConfig(sandbox="env", command="x", deployed=two, app="web")) == ("local", "web")


def test_patterns_are_quoted_except_their_wildcards():
    assert shell_pattern("/out/my file*.txt") == "'/out/my file'*.txt"
    assert shell_pattern("/x/$(reboot)?;`id`") == "'/x/$(reboot)'?';`id`'"


def test_an_unknown_artifact_fails_the_plan(settings, tmp_path):
    bundle = write_box_bundle(
        tmp_path / "b",
        """
        id = "t"
        [[steps]]
        id = "env"
        type = "deploy_env"
        config = { env_id = "box" }
        [[steps]]
        id = "put"
        type = "put_files"
        depends_on = ["env"]
        config = { sandbox = "env", files = { "/in/x" = { artifact = "nothing-here" } } }
        """,
    )
    with pytest.raises(
        AgentEnvError, match="artifact 'nothing-here' is in neither the bundle's artifacts/ nor the registry"
    ):
        launch.plan(load_task(bundle / "tasks" / "t.toml"), "plan-x", settings)


def test_skills_are_artifact_folders_with_a_skill_md(settings, tmp_path):
    bundle = with_skill(write_agent_bundle(tmp_path / "b", AGENT_STEPS), skill_md=False)
    with pytest.raises(AgentEnvError, match="skill 'guide' has no SKILL.md"):
        launch.plan(load_task(bundle / "tasks" / "t.toml"), "plan-s", settings)
    person = {"name": "a", "type": "human", "skills": ["guide"]}
    task = {"id": "t", "steps": [{"id": "a", "type": "deploy_agent", "config": {"record": person}}]}
    with pytest.raises(AgentEnvError, match="skills go to agents that run a model"):
        launch.plan(parse_task(task, "t"), "plan-h", settings)


# -- Docker --


DOCKER_STEPS = """
    id = "box-docker"
    [[steps]]
    id = "env"
    type = "deploy_env"
    config = { env_id = "box" }

    [[steps]]
    id = "put"
    type = "put_files"
    depends_on = ["env"]
    config = { sandbox = "env", into = "/work", files = { "in.txt" = { text = "from the run" }, "guide" = { artifact = "guide" } } }

    [[steps]]
    id = "work"
    type = "sandbox_exec"
    depends_on = ["put"]
    config = { sandbox = "env", command = "mkdir -p /out && wc -c < /work/in.txt > /out/size.txt && cp /work/guide/SKILL.md /out/ && cat /etc/os-release | head -1 && echo $SERVICE_TOKEN" }

    [[steps]]
    id = "collect"
    type = "collect_files"
    depends_on = ["work"]
    config = { sandbox = "env", paths = ["/out/*"] }

    [[steps]]
    id = "fails"
    type = "sandbox_exec"
    depends_on = ["put"]
    on_failure = "continue"
    config = { sandbox = "env", command = ["cat", "/work/missing"] }
"""


async def test_put_exec_and_collect_in_a_container(docker_client, client, settings, worker, tmp_path):  # noqa: F811
    state = await run(client, settings, write_box_bundle(tmp_path / "b", DOCKER_STEPS, provider="docker"), timeout=180)
    errors = state.error or {k: s.error for k, s in state.steps.items()}
    assert state.steps["collect"].status.value == "succeeded", errors
    assert state.steps["env"].outputs["sandboxes"][0]["provider"] == "docker"
    work = state.steps["work"].outputs
    assert "Debian" in work["stdout"] and "[secret]" in work["stdout"] and SECRET not in json.dumps(work)
    files = {f["path"]: stored(settings, f["key"]) for f in state.steps["collect"].outputs["files"]}
    assert files == {"/out/SKILL.md": b"# Guide\nRead the notes.\n", "/out/size.txt": b"12\n"}
    assert "exited with 1" in state.steps["fails"].error and "No such file" in state.steps["fails"].error
    containers = docker_client.containers.list(all=True, filters={"label": f"agentenv.run={state.run_id}"})
    assert containers == [], "the run's end removes its container"
