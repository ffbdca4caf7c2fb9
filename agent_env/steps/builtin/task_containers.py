"""The framework's task containers: `run_docker_container` builds a bundle artifact's Docker context and runs it
as a container of the run, and `run_container_unit_tests_verifier` runs a test command in it and scores it.

In the framework the container runs under Docker inside a VM sandbox (`sandbox_name`). Here it runs on our
`docker` provider as a sandbox of the run beside that one (a container cannot hold a Docker daemon without
privileges we do not give): `sandbox_name` must still name a deploy_sandbox step of the task, before this one,
and a verifier names the container by both `sandbox_name` and `container_name`, as in the framework. The
container is removed when the run ends (or by `teardown_sandboxes`). Fields the framework has for Docker options
we do not give a task (privileged, devices, cap_add, volumes, networks, ...) are refused by name.

The verifier's score: the number in `reward_path` if given, else 1 when the command exits 0; `result_paths` are
read back (parsed as JSON when they are). Setup commands must exit 0, else the step fails. The reward file is
removed before the setup commands run (one left there earlier, by an agent, is never read as the score), and a
reward that is no number in 0..1 (none written, NaN, infinite, 1.5) fails the step: never a score.
"""

from __future__ import annotations

import json
import math
import shlex

from pydantic import Field, model_validator

from agent_env.errors import AgentEnvError, BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.providers import apps
from agent_env.providers.base import Sandbox
from agent_env.spec.env import SandboxRun
from agent_env.spec.run import Criterion, PlannedConfig, Score
from agent_env.spec.task import upstream
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, StepResult, step_type
from agent_env.steps.builtin.bare_sandboxes import deploying_step
from agent_env.steps.builtin.sandbox_steps import SandboxStep, attach, heartbeating

CONTEXT_FOLDER = "context"  # where a docker context artifact is unpacked
MAX_RESULT_BYTES = 1024 * 1024

_NOT_YET = {
    "docker_context_url": "a context from a URL",
    "image_tag": "naming the image",
    "build_args": "build arguments",
    "keep_alive_with_base_command": "keeping a container alive past its command",
    "network": "a Docker network",
    "extra_networks": "Docker networks",
    "ready_command": "a readiness command",
    "devices": "devices",
    "cap_add": "added capabilities",
    "volumes": "volumes",
    "shm_size": "a shared-memory size",
}


class RunDockerContainerConfig(StepConfig):
    sandbox_name: str = Field(min_length=1, description="the deploy_sandbox sandbox it runs beside")
    docker_context_artifact_id: str | None = Field(None, description="the artifact: a folder with a Dockerfile")
    docker_context_artifact_version: int | None = Field(None, description="not supported yet: the bundle's")
    dockerfile_path: str = Field("Dockerfile", description="only Dockerfile, at the context's top, for now")
    container_name: str = Field("task-container", pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")
    ports: list[int] | None = Field(None, description="one port the container serves on (exposed to the host)")
    env_vars: dict[str, str] | None = None
    command_override: str | None = Field(None, description="run this (sh -c) instead of the image's command")
    privileged: bool = Field(False, description="refused: a task's container is never privileged")
    docker_context_url: str | None = None
    image_tag: str | None = None
    build_args: dict[str, str] | None = None
    keep_alive_with_base_command: bool = False
    network: str | None = None
    extra_networks: list[str] | None = None
    ready_command: str | None = None
    devices: list[str] | None = None
    cap_add: list[str] | None = None
    volumes: list[str] | None = None
    shm_size: str | None = None
    build: str | None = Field(None, description="filled in when the run is planned: the context's object key")

    @model_validator(mode="after")
    def _check(self) -> RunDockerContainerConfig:
        if self.privileged:
            raise ValueError("`privileged`: a task's container is never privileged here; remove it")
        for field, what in _NOT_YET.items():
            if getattr(self, field) not in (None, False):
                raise ValueError(f"`{field}`: {what} is not supported yet; remove it")
        if self.docker_context_artifact_id is None:
            raise ValueError("give `docker_context_artifact_id`: the bundle's artifact with the Dockerfile")
        if self.docker_context_artifact_version is not None:
            raise ValueError("`docker_context_artifact_version`: only the bundle's own artifacts/ID, for now")
        if self.dockerfile_path != "Dockerfile":
            raise ValueError("`dockerfile_path`: only a Dockerfile at the context's top, for now")
        if self.ports is not None and len(self.ports) > 1:
            raise ValueError("`ports`: one port, for now")
        return self


def prepare_container(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    checked = RunDockerContainerConfig.model_validate(config)
    deploying_step(config, plan, "run_docker_container")  # the sandbox it runs beside exists, and comes before
    if plan.bundle is None:
        raise BadInput("run_docker_container: the context is a bundle's artifact", "run the task from its bundle")
    folder = plan.bundle / "artifacts"
    config["build"] = apps.pin_build(plan.stores, folder, str(checked.docker_context_artifact_id))
    return config


@step_type(
    "run_docker_container",
    config=RunDockerContainerConfig,
    timeout="30m",
    prepare=prepare_container,
    sandboxes=lambda config: True,
)
async def run_docker_container(ctx: StepContext, config: RunDockerContainerConfig) -> JsonObject:
    """Build a bundle artifact's Docker context and run it as a container of the run (on the docker provider)."""
    box = SandboxRun(
        build=CONTEXT_FOLDER,
        command=["sh", "-c", config.command_override] if config.command_override else None,
        port=(config.ports or [8000])[0],
        env=dict(config.env_vars or {}),
        provider="docker",
    )
    owner = f"{ctx.run_id}.{ctx.step_id}"
    provider, sandbox = await apps.start(
        ctx.settings,
        ctx.stores,
        run_id=ctx.run_id,
        owner=owner,
        name=config.container_name,
        box=box,
        build_key=config.build,
        chain="docker",
        label=f"container {config.container_name!r}",
    )
    return {
        "container": {
            "provider": provider.name,
            "id": sandbox.info.id,
            "container_name": config.container_name,
            "sandbox_name": config.sandbox_name,
            "url": sandbox.url,
        }
    }


class UnitTestsVerifierConfig(StepConfig):
    sandbox_name: str = Field(min_length=1, description="the sandbox the container runs beside")
    container_name: str = Field(min_length=1, description="a run_docker_container step's container_name")
    command: str = Field(min_length=1, description="the tests, run with sh -c in the container")
    verifier_id: str | None = None
    setup_commands: list[str] = Field(default_factory=list, description="each must exit 0, before the tests")
    user: str = Field("root", description="only the container's own user, for now")
    timeout_sec: int = Field(300, gt=0, le=24 * 3600)
    env_vars: dict[str, str] = Field(default_factory=dict)
    result_paths: list[str] = Field(default_factory=list, description="files read back after the tests")
    reward_path: str | None = Field(None, description="a file holding the score, a number in 0..1")
    container_step: str | None = Field(None, description="filled in when the run is planned")
    deployed: JsonObject | str | None = Field(None, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _check(self) -> UnitTestsVerifierConfig:
        if self.user != "root":
            raise ValueError("`user`: running as another user is not supported yet; remove it")
        return self


def prepare_verifier(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    task, name, box = plan.task, config.get("container_name"), config.get("sandbox_name")
    if task is None:
        raise BadInput("run_container_unit_tests_verifier: planned within a task", "plan it as part of a task")
    found = [
        s.id
        for s in task.steps
        if s.type == "run_docker_container"
        and s.config.get("container_name", "task-container") == name
        and s.config.get("sandbox_name") == box
    ]
    before = upstream(str(plan.step_id), {s.id: s.depends_on for s in task.steps})
    if len(found) != 1 or found[0] not in before:
        raise BadInput(
            f"step {plan.step_id!r}: container {name!r} on sandbox {box!r} is run by {len(found)} earlier "
            "run_docker_container steps",
            "run it with one run_docker_container step before this one (same container_name and sandbox_name)",
        )
    config["container_step"], config["deployed"] = found[0], f"${{steps.{found[0]}.outputs.container}}"
    return config


async def _sh(ctx: StepContext, sandbox: Sandbox, command: str, env: dict[str, str], timeout: float) -> tuple[int, str]:
    argv = ["env", *(f"{k}={v}" for k, v in env.items()), "sh", "-c", command]
    try:
        done = await heartbeating(ctx, sandbox.exec(argv, timeout=timeout))
    except TimeoutError:
        return 124, f"timed out after {timeout:g}s"
    return done.exit_code, sandbox.redact(done.stdout + done.stderr)[-4000:]


async def _read(sandbox: Sandbox, path: str) -> object:
    """A file of the container (its first MAX_RESULT_BYTES), as JSON when it parses; None when unreadable."""
    done = await sandbox.exec(["head", "-c", str(MAX_RESULT_BYTES), sandbox.inside(path)], timeout=60)
    if done.exit_code != 0:
        return None
    text = sandbox.redact(done.stdout)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def reward_of(path: str, reward: object) -> float:
    """The score a reward file holds: a finite number in 0..1; anything else fails the step (it is no grade)."""
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        raise StepFailed(f"reward_path {path!r} holds no number: {str(reward)[:100]!r}")
    if not math.isfinite(reward) or not 0 <= reward <= 1:
        raise StepFailed(f"reward_path {path!r} holds {reward!r}, not a score in 0..1")
    return float(reward)


@step_type(
    "run_container_unit_tests_verifier",
    config=UnitTestsVerifierConfig,
    timeout="25h",
    prepare=prepare_verifier,
)
async def run_container_unit_tests_verifier(ctx: StepContext, config: UnitTestsVerifierConfig) -> StepResult:
    """Run a test command in a run_docker_container container and score it (its exit, or a reward file)."""
    deployed = {"sandbox": config.deployed} if isinstance(config.deployed, dict) else None
    sandbox = await attach(ctx, SandboxStep(sandbox=str(config.container_step), deployed=deployed))
    sandbox.secrets += tuple(v for v in config.env_vars.values() if len(v) >= 6)
    try:
        if config.reward_path:  # whatever was there before the tests (an agent's file) is not their reward
            code, out = await _sh(ctx, sandbox, f"rm -f -- {shlex.quote(config.reward_path)}", {}, 60)
            if code != 0:
                raise StepFailed(f"reward_path {config.reward_path!r} could not be cleared before the tests: {out}")
        for i, setup in enumerate(config.setup_commands):
            code, out = await _sh(ctx, sandbox, setup, config.env_vars, config.timeout_sec)
            if code != 0:
                raise StepFailed(f"setup_commands[{i}] ({shlex.quote(setup)[:100]}) exited {code}: {out}")
        code, out = await _sh(ctx, sandbox, config.command, config.env_vars, config.timeout_sec)
        files = {path: await _read(sandbox, path) for path in config.result_paths}
        reward = await _read(sandbox, config.reward_path) if config.reward_path else None
    except AgentEnvError as e:
        raise StepFailed(f"container {config.container_name!r}: {e}") from None
    if config.reward_path:
        value = reward_of(config.reward_path, reward)
    else:
        value = 1.0 if code == 0 else 0.0
    passed = code == 0 and value > 0
    criterion = Criterion(name=config.verifier_id or ctx.step_id, passed=passed, detail=f"exit={code}; {out[-200:]}")
    return StepResult(
        outputs={
            "verifier_id": config.verifier_id or ctx.step_id,
            "exit_code": code,
            "output": out,
            "extracted_files": files,
            "score": value,
        },
        score=Score(value=round(value, 6), criteria=[criterion]),
    )
