"""`env_outcome_verifier`, the framework's: run a bundle artifact's verifier script against a deployed
environment's MCP endpoint, and score what it returns.

The script defines `verify(mcp_url)` (async or not) returning rows `{"id", "result": bool, "description",
"score"?, "weight"?}`; `score_aggregator` (all_pass, any_pass, weighted_average) makes them one score. The task
names the environment by `env_id`, the env a deploy_env step of the task deploys: when the run is planned that
becomes a reference to the step's outputs, and the script's bytes are pinned in the object store.

The script is the bundle author's code, so it never runs in the worker: it runs in a sandbox of its own
(`sandbox_type`, default the configured provider for environments; `image` for providers that run images, which
must have Python and the MCP SDK), removed when the step ends. When the env's one sandboxed app is built from a
Dockerfile (the framework's env folders) and no `image` is given, the sandbox is built from that context too: the
script runs with the MCP SDK the env was written with (the framework's scripts use the SDK's 1.x client, which
agent-env's own Python does not have), as an image on Docker, a virtualenv on the local provider. It reaches the environment as one of its agents
(the first the deploy gave a role, or `agent`): through a forwarder in the sandbox that adds that agent's token,
so the script sees a bare MCP URL as in the framework and can do no more than that agent can.
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from agent_env.bundles import find_env
from agent_env.errors import AgentEnvError, BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.providers import apps, by_name
from agent_env.providers.apps import sandbox_name as unique_name
from agent_env.providers.base import SandboxSpec
from agent_env.spec.run import Criterion, PlannedConfig, Score
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, StepResult, step_type
from agent_env.steps.builtin.envs import deploying_env_step
from agent_env.steps.builtin.sandbox_steps import _artifact_files, _pin, heartbeating
from agent_env.steps.builtin.sandbox_verifier import DETAIL_CHARS, aggregate, row_score
from agent_env.stores import in_thread

RUNNER = Path(__file__).with_name("outcome_runner.py")
WORK = "/tmp/verifier"  # in the verifier's sandbox: writable by an image's own (non-root) user too
MAX_ROWS = 1000


class EnvOutcomeVerifierConfig(StepConfig):
    env_id: str = Field(min_length=1, description="the env a deploy_env step of this task deploys")
    file_artifact_id: str = Field(min_length=1, description="the artifact holding the verifier script")
    file_artifact_version: int | None = Field(None, description="its registry version (default: the bundle's)")
    score_aggregator: Literal["all_pass", "any_pass", "weighted_average"] = "all_pass"
    verifier_id: str | None = Field(None, description="the name its results are kept under (default: the step id)")
    prompt_id: str | None = Field(None, description="not supported yet: leave it out")
    agent: str | None = Field(None, description="the env's agent the script acts as (default: its first)")
    sandbox_type: str | None = Field(None, description="where the script runs (default: [sandboxes] envs)")
    image: str | None = Field(None, description="for providers that run images: one with Python and the MCP SDK")
    timeout_seconds: int = Field(300, gt=0, le=3600, description="how long the script may run")
    deployed: JsonObject | str | None = Field(None, description="filled in when the run is planned")
    script: str | None = Field(None, description="filled in when the run is planned: the script's object key")
    build: str | None = Field(None, description="filled in when the run is planned: the env's build context's key")

    @model_validator(mode="after")
    def _check(self) -> EnvOutcomeVerifierConfig:
        if self.prompt_id is not None:
            raise ValueError("`prompt_id`: giving the script the graded prompt's run is not supported yet")
        return self


def script_of(plan: PlanContext, ref: str) -> bytes:
    """The artifact's script: the artifact itself when it is one file, else its verify.py (or its one .py)."""
    files = dict(_artifact_files(plan, ref))
    if len(files) == 1:
        return next(iter(files.values()))
    chosen = "verify.py" if "verify.py" in files else None
    python = [name for name in files if name.endswith(".py")]
    if chosen is None and len(python) == 1:
        chosen = python[0]
    if chosen is None:
        raise BadInput(f"artifact {ref!r} holds {sorted(files)}: which is the verifier?", "name the script verify.py")
    return files[chosen]


def prepare_outcome(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    checked = EnvOutcomeVerifierConfig.model_validate(config)
    deploy = deploying_env_step(checked.env_id, plan)
    config["deployed"] = f"${{steps.{deploy}.outputs}}"
    if checked.image is None:
        config["build"] = _env_build(plan, deploy)
    version = checked.file_artifact_version
    ref = checked.file_artifact_id + ("" if version is None else f"@{version}")
    config["script"] = _pin(plan, script_of(plan, ref))
    return config


def _env_build(plan: PlanContext, deploy: str) -> str | None:
    """The build context of the deployed env's one sandboxed app, pinned (the same key its deploy pins), if it has
    one built from a folder of the bundle."""
    step = next(s for s in plan.task.steps if s.id == deploy) if plan.task else None
    if step is None or step.config.get("env_version") is not None:
        return None
    record, folder = find_env(plan.bundle, str(step.config["env_id"]))
    built = [app.sandbox.build for app in record.apps if app.sandbox is not None and app.sandbox.build]
    return apps.pin_build(plan.stores, folder, built[0]) if len(built) == 1 and folder is not None else None


def rows_of(outcome: object) -> list[JsonObject]:
    """The script's rows, checked: a list of objects, each with a boolean `result`."""
    if not isinstance(outcome, dict):
        raise StepFailed("the verifier wrote no result")
    if "error" in outcome:
        raise StepFailed(f"the verifier script failed: {outcome['error']}\n{outcome.get('traceback', '')}"[:4000])
    rows = outcome.get("results")
    if not isinstance(rows, list) or len(rows) > MAX_ROWS:
        raise StepFailed(f"verify() must return a list of at most {MAX_ROWS} rows, not {type(rows).__name__}")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("result"), bool):
            raise StepFailed(f"verify() row {i} must be an object with a boolean `result`: {str(row)[:200]}")
        weight = row.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise StepFailed(f"verify() row {i}: weight must be a number, not {weight!r}")
        score = row.get("score")
        if not isinstance(score, int | float) or isinstance(score, bool):
            row["score"] = 1.0 if row["result"] else 0.0
    return rows


async def run_script(ctx: StepContext, config: EnvOutcomeVerifierConfig, url: str, token: str) -> object:
    """Run the script in a sandbox of its own, removed after; what the runner wrote."""
    name = unique_name(f"{ctx.run_id}.{ctx.step_id}", "verifier")
    build = await in_thread(apps.unpack_build, ctx.settings, ctx.stores, config.build, name) if config.build else None
    spec = SandboxSpec(
        name=name,
        run_id=ctx.run_id,
        owner=f"{ctx.run_id}.{ctx.step_id}",
        image=config.image,
        build=str(build) if build else None,
        command=["sleep", str(config.timeout_seconds + 120)],  # idles: the script is exec'd into it
        ttl=float(config.timeout_seconds + 300),
    )
    try:
        provider, sandbox = await by_name.create(config.sandbox_type or ctx.settings.sandboxes.envs, spec, ctx.settings)
    except AgentEnvError as e:
        raise StepFailed(f"the verifier's sandbox: {e}") from None
    sandbox.secrets += (token,)
    paths = {name: posixpath.join(WORK, name) for name in ("runner.py", "verify.py", "token", "result.json")}
    try:
        await sandbox.put_file(paths["runner.py"], RUNNER.read_bytes())
        await sandbox.put_file(paths["verify.py"], await ctx.stores.aio.objects.get(str(config.script)))
        await sandbox.put_file(paths["token"], token.encode())
        argv = ["python3", *(sandbox.inside(paths[n]) for n in ("runner.py", "verify.py")), url]
        argv += [sandbox.inside(paths["token"]), sandbox.inside(paths["result.json"])]
        try:
            done = await heartbeating(ctx, sandbox.exec(argv, timeout=float(config.timeout_seconds)))
        except TimeoutError:
            raise StepFailed(f"the verifier script ran over timeout_seconds={config.timeout_seconds}") from None
        if done.exit_code != 0:
            raise StepFailed(f"the verifier's runner exited {done.exit_code}: {sandbox.redact(done.stderr)[-2000:]}")
        return json.loads(sandbox.redact((await sandbox.get_file(paths["result.json"])).decode()))
    except AgentEnvError as e:
        raise StepFailed(f"the verifier's sandbox: {e}") from None
    finally:
        await provider.remove(sandbox.info.id)


@step_type(
    "env_outcome_verifier",
    config=EnvOutcomeVerifierConfig,
    timeout="1h",
    prepare=prepare_outcome,
    sandboxes=lambda config: True,
)
async def env_outcome_verifier(ctx: StepContext, config: EnvOutcomeVerifierConfig) -> StepResult:
    """Run a bundle artifact's verify(mcp_url) script, in a sandbox, against a deployed env's MCP endpoint; score
    its rows."""
    deployed = config.deployed if isinstance(config.deployed, dict) else {}
    url, agents = (deployed.get("urls") or {}).get("mcp"), deployed.get("agents") or {}
    if not url or not agents:
        raise StepFailed(f"env {config.env_id!r} has no MCP endpoint or no agent to reach it as")
    agent = config.agent or next(iter(agents))
    if agent not in agents:
        raise StepFailed(f"env {config.env_id!r} has no agent {agent!r}; it has: {', '.join(agents)}")
    token = await (await ctx.gateway()).token(str(deployed["instance"]), agent)
    rows = rows_of(await run_script(ctx, config, str(url), token))
    value = aggregate(rows, config.score_aggregator)
    criteria = [
        Criterion(
            name=str(r.get("id") or r.get("criterion") or f"row {i}"),
            passed=r["result"],
            weight=float(r.get("weight", 1.0)),
            detail=str(r.get("description") or r.get("justification") or "")[:DETAIL_CHARS],
            score=row_score(r),
        )
        for i, r in enumerate(rows)
    ]
    return StepResult(
        outputs={"verifier_id": config.verifier_id or ctx.step_id, "results": rows, "score": value},
        score=Score(value=round(value, 6), criteria=criteria),
    )
