"""`run_code`, the framework's: run a Python script of a bundle artifact in a sandbox and keep its JSON result.

The script defines `run(input)` (or `entrypoint`), given `{"args", "results"}`: the step's `args` and the
results of the run_code steps before it, by their `result_id`; it returns JSON, the step's `result` output.
Where it runs: `sandbox_name`, a deploy_sandbox sandbox of the task; or `env_id`, the sandbox of the env's app
(an env deployed by a deploy_env step, with one sandboxed app), beside its server. `agent_name` (an agent's
container) is not supported yet. The artifact is one file (staged as script.py) or a folder whose .py files are
staged side by side (`script_file` names the entry; default its only .py, else run.py). Its files are pinned when
the run is planned. The script runs under our runner (`run_code_runner.py`, standard library only), so the
sandbox needs python3 and nothing else.
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path

from pydantic import Field, model_validator

from agent_env.errors import AgentEnvError, BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.providers.base import Sandbox
from agent_env.spec.run import PlannedConfig
from agent_env.spec.task import upstream
from agent_env.steps import PlanContext, StepContext, StepFailed, step_type
from agent_env.steps.builtin.bare_sandboxes import InSandbox, prepare_in_sandbox, sandbox_of
from agent_env.steps.builtin.envs import deploying_env_step
from agent_env.steps.builtin.sandbox_steps import SandboxStep, _artifact_files, _pin, attach, heartbeating

RUNNER = Path(__file__).with_name("run_code_runner.py")
RUN_DIR = "/tmp/agent_env_run_code"  # the framework's; a folder per step under it
RESERVED = frozenset({"runner.py", "input.json", "output.json"})
MAX_SCRIPT_BYTES = 5 * 1024 * 1024
MAX_OUTPUT_BYTES = 50 * 1024 * 1024


class RunCodeConfig(InSandbox):
    script_artifact_id: str = Field(min_length=1, description="the artifact: one .py file, or a folder of them")
    script_artifact_version: int | None = Field(None, description="its registry version (default: the bundle's)")
    script_file: str | None = Field(None, description="the entry of a folder artifact (default: its only .py, run.py)")
    entrypoint: str = Field("run", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="the function called")
    args: JsonObject = Field(default_factory=dict, description="given to the script as input['args']")
    result_id: str | None = Field(None, description="what later run_code steps find the result by (default: step id)")
    timeout_seconds: int = Field(600, gt=0, le=24 * 3600, description="how long the script may run")
    env_id: str | None = Field(None, description="run in the sandbox of this env's app (a deploy_env step's env)")
    agent_name: str | None = Field(None, description="not supported yet: give sandbox_name or env_id")
    env_step: str | None = Field(None, description="filled in when the run is planned: env_id's deploy_env step")
    staged: dict[str, str] = Field(default_factory=dict, description="filled in when planned: file -> object key")
    entry: str | None = Field(None, description="filled in when the run is planned: the staged entry file")
    results: JsonObject | str = Field(default_factory=dict, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _target(self) -> RunCodeConfig:
        if self.agent_name:
            raise ValueError("`agent_name`: running in an agent's container is not supported yet; give sandbox_name")
        if bool(self.sandbox_name) == bool(self.env_id):
            raise ValueError("give exactly one of `sandbox_name` (a deploy_sandbox sandbox) or `env_id`")
        return self


def staged_files(files: dict[str, bytes], script_file: str | None, artifact: str) -> tuple[str, dict[str, bytes]]:
    """(the entry, the files staged): a one-file artifact as script.py; a folder's .py files as they lie."""
    if list(files) == [""]:
        if script_file:
            raise BadInput(f"script_file {script_file!r} is set but {artifact!r} is one file", "remove script_file")
        return "script.py", {"script.py": files[""]}
    python = {name: data for name, data in files.items() if name.endswith(".py")}
    clash = sorted(set(python) & RESERVED)
    if clash:
        raise BadInput(f"artifact {artifact!r} has {clash}, the names run_code stages its own files as", "rename them")
    if sum(map(len, python.values())) > MAX_SCRIPT_BYTES:
        raise BadInput(f"artifact {artifact!r}: its .py files are over {MAX_SCRIPT_BYTES} bytes", "make them smaller")
    if script_file is not None:
        if script_file not in python:
            raise BadInput(f"script_file {script_file!r} is not a .py file of {artifact!r}", f"one of {sorted(python)}")
        return script_file, python
    runs = [n for n in python if posixpath.basename(n) == "run.py"]
    if len(python) == 1 or len(runs) == 1:
        return (next(iter(python)) if len(python) == 1 else runs[0]), python
    raise BadInput(f"artifact {artifact!r} has .py files {sorted(python)} and no one run.py", "set script_file")


def earlier_results(plan: PlanContext) -> dict[str, str]:
    """{result_id: a reference to its result} for each run_code step this one comes after."""
    task = plan.task
    if task is None or plan.step_id is None:
        return {}
    before = upstream(plan.step_id, {s.id: s.depends_on for s in task.steps})
    return {
        str(s.config.get("result_id") or s.id): f"${{steps.{s.id}.outputs.result}}"
        for s in task.steps
        if s.type == "run_code" and s.id in before
    }


def prepare_run_code(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    checked = RunCodeConfig.model_validate(config)
    if checked.sandbox_name:
        config = prepare_in_sandbox("run_code")(config, plan)
    else:
        step = deploying_env_step(str(checked.env_id), plan)
        config["env_step"], config["deployed"] = step, f"${{steps.{step}.outputs}}"
    ref = checked.script_artifact_id + (
        "" if checked.script_artifact_version is None else f"@{checked.script_artifact_version}"
    )
    entry, files = staged_files(dict(_artifact_files(plan, ref)), checked.script_file, ref)
    config["entry"], config["staged"] = entry, {name: _pin(plan, data) for name, data in files.items()}
    config["results"] = earlier_results(plan)
    return config


async def target(ctx: StepContext, config: RunCodeConfig) -> Sandbox:
    if config.sandbox_name:
        return await sandbox_of(ctx, config)
    return await attach(ctx, SandboxStep(sandbox=str(config.env_step), deployed=config.deployed))


@step_type("run_code", config=RunCodeConfig, timeout="25h", prepare=prepare_run_code)
async def run_code(ctx: StepContext, config: RunCodeConfig) -> JsonObject:
    """Run a bundle artifact's Python script (run(input) -> JSON) in a deploy_sandbox sandbox or an env's sandbox;
    keep its result."""
    sandbox = await target(ctx, config)
    run_dir = f"{RUN_DIR}/{ctx.step_id}"
    given = {"args": config.args, "results": config.results if isinstance(config.results, dict) else {}}
    try:
        await sandbox.exec(["rm", "-rf", sandbox.inside(run_dir)], timeout=60)  # a retry's stale output is not ours
        for name, key in sorted(config.staged.items()):
            await sandbox.put_file(f"{run_dir}/{name}", await ctx.stores.aio.objects.get(key))
        await sandbox.put_file(f"{run_dir}/input.json", json.dumps(given).encode())
        await sandbox.put_file(f"{run_dir}/runner.py", RUNNER.read_bytes())
        argv = ["python3", sandbox.inside(f"{run_dir}/runner.py"), sandbox.inside(run_dir), config.entrypoint]
        try:
            done = await heartbeating(ctx, sandbox.exec([*argv, str(config.entry)], timeout=config.timeout_seconds))
        except TimeoutError:
            raise StepFailed(f"run_code: the script timed out after timeout_seconds={config.timeout_seconds}") from None
        if done.exit_code != 0:
            raise StepFailed(f"run_code: the script exited {done.exit_code}: {sandbox.redact(done.stderr)[-4000:]}")
        output = await sandbox.get_file(f"{run_dir}/output.json")
    except AgentEnvError as e:
        raise StepFailed(f"run_code: {e}") from None
    if len(output) > MAX_OUTPUT_BYTES:
        raise StepFailed(f"run_code: the result is {len(output)} bytes; at most {MAX_OUTPUT_BYTES}")
    try:
        result = json.loads(sandbox.redact(output.decode()))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StepFailed(f"run_code: the result is not JSON: {e}") from None
    return {"result_id": config.result_id or ctx.step_id, "result": result}
