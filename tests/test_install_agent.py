"""`install_agent` (the framework's step): an A2A agent of the bundle is installed into a running sandbox by the
commands its card declares in urn:agentenv:install/v1, started there, prompted, and gone with the sandbox;
what we cannot install is refused by field when the run is planned."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

import pytest
from test_docker import docker_client  # noqa: F401 - the Docker tier's fixture
from test_framework_steps import run, write_task

from agent_env.config import Settings
from agent_env.errors import BadInput
from agent_env.planning.runs import plan
from agent_env.planning.tasks import load_task
from agent_env.providers import by_name
from agent_env.providers.base import SandboxSpec
from agent_env.spec.run import RunStatus

AGENT = """
import os

from agent_env.agents.extension_ops import InstallDeclaration
from agent_env.agents.sdk import Agent, serve

UNPACK = "mkdir -p {work_dir}/agent && tar -xzf {agent_ctx_tar} -C {work_dir}/agent"


class Helper(Agent):
    name = "helper"
    description = "Says where it was installed."
    install = InstallDeclaration(
        install_commands_host=[
            UNPACK,
            "cd {work_dir}/agent && INSTALLED_AS={agent_name} PORT={a2a_port} nohup python3 agent.py > log 2>&1 &",
        ],
        required_params_host=["work_dir", "agent_ctx_tar", "a2a_port", "agent_name"],
        install_commands=[
            "docker cp {agent_ctx_tar} {container}:/tmp/agent.tar.gz",
            "docker exec {container} sh -c 'mkdir -p /opt/helper && tar -xzf /tmp/agent.tar.gz -C /opt/helper'",
            "docker exec -d -e INSTALLED_AS={agent_name} -e HOST=0.0.0.0 -e PORT={a2a_port} -w /opt/helper "
            "{container} python3 agent.py",
        ],
        required_params=["container", "agent_ctx_tar", "a2a_port", "agent_name"],
        a2a_port=8000,
    )

    async def answer(self, turn):
        return f"{os.environ.get('INSTALLED_AS')} installed: {turn.prompt}"


if __name__ == "__main__":
    serve(Helper(), host=os.environ.get("HOST", "127.0.0.1"), port=int(os.environ.get("PORT", "8000")))
"""

RECORD = """
name = "helper"
type = "a2a"
description = "An agent installed into a sandbox by its install/v1 commands."
[config.sandbox]
build = "src"
command = ["python3", "agent.py"]
port = 8000
"""

BOX = {"id": "box", "type": "deploy_sandbox", "sandbox_name": "work", "sandbox_mode": "vm", "sandbox_type": "local"}
INSTALL = {
    "id": "install",
    "type": "install_agent",
    "sandbox_name": "work",
    "a2a_agent_id": "helper",
    "agent_name": "helper-1",
}
ASK = {"id": "ask", "type": "prompt_agent", "agent": "install", "prompt": "hello", "turn_deadline": "1m"}


def agent_bundle(tmp_path: Path, agent: str = AGENT) -> Path:
    bundle = tmp_path / "b"
    src = bundle / "agents" / "helper" / "src"
    src.mkdir(parents=True)
    (bundle / "agents" / "helper" / "agent.toml").write_text(RECORD)
    (src / "agent.py").write_text(agent)
    (src / "Dockerfile").write_text(
        'FROM agentenv/base:bookworm\nCOPY agent.py /app/agent.py\nCMD ["python3", "agent.py"]\n'
    )
    return bundle


def answers(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_an_agent_is_installed_on_a_local_sandbox_prompted_and_gone_with_it(client, settings, worker, tmp_path):
    bundle = agent_bundle(tmp_path)
    state = await run(client, settings, write_task(bundle, [BOX, INSTALL, ASK]))
    assert state.status is RunStatus.PASSED, state.error or {k: s.error for k, s in state.steps.items()}
    installed = state.steps["install"].outputs
    assert installed["name"] == "helper-1" and installed["agent"] == "helper" and installed["hosted"] is False
    assert installed["installed"]["mode"] == "host" and installed["installed"]["commands"] == 2
    assert state.steps["ask"].outputs["answer"] == "helper-1 installed: hello"
    assert state.pins["agents"]["install"].startswith("helper@"), "the run records the agent it installed"
    assert not answers(installed["installed"]["a2a_port"]), "the agent stopped with its sandbox"
    assert await by_name.load("local", settings).list(state.run_id) == []


async def test_an_agent_declaring_no_install_fails_the_step_naming_the_extension(client, settings, worker, tmp_path):
    bundle = agent_bundle(tmp_path, AGENT.replace("    install = InstallDeclaration(", "    _unused = dict("))
    state = await run(client, settings, write_task(bundle, [BOX, INSTALL]))
    assert state.status is RunStatus.ERROR
    assert "declares no urn:agentenv:install/v1 on its card" in (state.steps["install"].error or "")


async def test_a_local_sandbox_stops_what_its_commands_left_running(settings: Settings, tmp_path):
    provider = by_name.load("local", settings)
    spec = SandboxSpec(name="left-behind", run_id="r-left", command=["sleep", "300"])
    sandbox = await provider.create(spec)
    done = await sandbox.exec(["sh", "-c", "sleep 300 > /dev/null 2>&1 & echo $!"])
    pid = int(done.stdout.strip())
    assert os.path.exists(f"/proc/{pid}")
    assert await provider.remove(sandbox.info.id)
    for _ in range(100):  # killed by the removal; reaped by init
        if not os.path.exists(f"/proc/{pid}") or " Z " in Path(f"/proc/{pid}/stat").read_text():
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail(f"process {pid}, started by a command in the sandbox, outlived it")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"a2a_agent_version": 2}, "`a2a_agent_version`"),
        ({"a2a_agent_id": None}, "give `a2a_agent_id`"),
        ({"sandbox_name": "other"}, "sandbox_name 'other' is given by no deploy_sandbox step"),
        ({"container_name": "task-container"}, "container_name 'task-container' on sandbox 'work'"),
    ],
)
def test_what_cannot_be_installed_is_refused_by_field(settings, tmp_path, change, expected):
    bundle = agent_bundle(tmp_path)
    with pytest.raises(BadInput) as e:
        plan(load_task(write_task(bundle, [BOX, {**INSTALL, **change}])), "r-1", settings)
    assert expected in str(e.value)


@pytest.mark.parametrize(
    ("box", "expected"),
    [
        ({"sandbox_type": "docker"}, "sandbox_type = 'local'"),
        ({"sandbox_mode": "container", "image": "x", "port": 80}, "sandbox_mode = 'vm'"),
    ],
)
def test_the_sandbox_must_be_a_local_vm(settings, tmp_path, box, expected):
    bundle = agent_bundle(tmp_path)
    with pytest.raises(BadInput) as e:
        plan(load_task(write_task(bundle, [{**BOX, **box}, INSTALL])), "r-1", settings)
    assert expected in str(e.value)


def test_an_agent_without_files_or_a_python_entry_point_is_refused(settings, tmp_path):
    bundle = agent_bundle(tmp_path)
    record = bundle / "agents" / "helper" / "agent.toml"
    record.write_text(RECORD.replace('command = ["python3", "agent.py"]', 'command = ["node", "agent.js"]'))
    with pytest.raises(BadInput) as e:
        plan(load_task(write_task(bundle, [BOX, INSTALL])), "r-1", settings)
    assert "Python entry point" in str(e.value)
    record.write_text('name = "helper"\ntype = "a2a"\n[config]\nurl = "http://127.0.0.1:9/"\n')
    with pytest.raises(BadInput) as e:
        plan(load_task(write_task(bundle, [BOX, INSTALL])), "r-1", settings)
    assert "without a sandbox `build`" in str(e.value)


def test_the_plan_pins_the_agent_and_its_files(settings, tmp_path):
    bundle = agent_bundle(tmp_path)
    planned = plan(load_task(write_task(bundle, [BOX, INSTALL, ASK])), "r-1", settings)
    config = next(s for s in planned.steps if s.id == "install").config
    assert config["record"]["name"] == "helper" and config["build"].endswith(".tar")
    assert config["deployed"] == "${steps.box.outputs}"


# -- into a container beside the sandbox (the Docker tier) --

TASK_IMAGE = """FROM agentenv/base:bookworm
COPY agent-env-wheels /tmp/agent-env-wheels
RUN python3 -m venv /venv \\
 && /venv/bin/pip install --quiet --no-index --no-deps --disable-pip-version-check /tmp/agent-env-wheels/*.whl \\
 && rm -rf /tmp/agent-env-wheels
ENV PATH=/venv/bin:$PATH
CMD ["sleep", "3600"]
"""


async def test_an_agent_is_installed_into_a_task_container(docker_client, client, settings, worker, tmp_path):  # noqa: F811
    bundle = agent_bundle(tmp_path)
    context = bundle / "artifacts" / "task_image"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(TASK_IMAGE)
    container = {
        "id": "task",
        "type": "run_docker_container",
        "sandbox_name": "work",
        "docker_context_artifact_id": "task_image",
        "ports": [8000],
    }
    steps = [BOX, container, {**INSTALL, "container_name": "task-container"}, ASK]
    state = await run(client, settings, write_task(bundle, steps), timeout=600)
    assert state.status is RunStatus.PASSED, state.error or {k: s.error for k, s in state.steps.items()}
    assert state.steps["install"].outputs["installed"]["mode"] == "container"
    assert state.steps["ask"].outputs["answer"] == "helper-1 installed: hello"
    assert docker_client.containers.list(all=True, filters={"label": f"agentenv.run={state.run_id}"}) == []
    assert json.dumps(state.steps["install"].outputs).count("agent-ctx") == 0, "no sandbox paths in the outputs"
