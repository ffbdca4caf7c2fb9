"""`agent-env env validate TARGET` and `agent-env a2a-agent validate URL` as runs: the task each plans, and the
report each prints. The commands (`cli/env_validate.py`, `cli/a2a_agent_cmd.py`) run them themselves, or, warm,
the background worker does (`control.py`, as it does `agent-env run`): both through `plan` and `report` here, so
the two print the same.

- env: protocol v1's environment validators of an env server's URL (checked where it is, sent no credential), or
  of an environment by name (the bundle's, built-in, or the registry's, pulled once), deployed by the run and
  checked through the gateway; a gate aggregates the verdicts.
- a2a-agent: every A2A validator installed, beside a mail environment whose MCP server `verify_a2a_agent_mcp`
  hands the agent. A validator not installed (or wanting more config than a URL) is skipped with a note.

Exit 0 only if every required check passed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console

from agent_env.bundles import find_env
from agent_env.config import Settings
from agent_env.errors import BadInput, NotFound
from agent_env.gateway_client.wire import JsonObject
from agent_env.planning.tasks import parse_task
from agent_env.registry.resolve import pull_atomically, split_ref  # (whole or absent, as `run NAME` pulls)
from agent_env.registry.store import open_registry
from agent_env.spec.run import RunInput, RunState
from agent_env.step_types import catalog
from agent_env.temporal import launch
from agent_env.temporal.control_client import ValidateOptions
from agent_env.validators.report import ValidationReport

# -- env validate --

ENV_VALIDATORS = ("verify_env_card", "verify_env_core_protocol", "verify_mcp_tool_schema", "verify_spec_conformance")
GATE = "validation_gate_aggregator"
REQUIRED_GATES = ["card", "protocol", "tools"]  # spec conformance is advisory: most envs serve no OpenAPI document
STEP_IDS = dict(zip(ENV_VALIDATORS, ["card", "protocol", "tools", "spec"], strict=True))


def env_validation_task(target: str, *, read_only: bool = False) -> JsonObject:
    """The task: deploy the environment (unless TARGET is a URL), run the validators, gate their verdicts."""
    is_url = target.startswith(("http://", "https://"))
    where: JsonObject = {"url": target.rstrip("/")} if is_url else {"env": "deploy"}
    steps: list[JsonObject] = []
    if not is_url:
        steps.append({"id": "deploy", "type": "deploy_env", "config": {"env_id": target}})
    for kind, step in STEP_IDS.items():
        config = dict(where)
        if kind == "verify_env_core_protocol" and read_only:
            config["mutating"] = False
        steps.append(
            {
                "id": step,
                "type": kind,
                "depends_on": [] if is_url else ["deploy"],
                "config": config,
                "on_failure": "continue",
            }
        )
    steps.append(
        {
            "id": "gate",
            "type": GATE,
            "depends_on": list(STEP_IDS.values()),
            "config": {"inputs": list(STEP_IDS.values()), "required": REQUIRED_GATES},
        }
    )
    return {"id": "env-validate", "description": f"protocol v1 validators of {target}", "steps": steps}


def _bundle_for(settings: Settings, target: str, bundle: Path) -> Path | None:
    """The bundle folder whose environment TARGET names: `bundle` (the given one, or the command's working
    directory), or the registry's pulled copy (None: a built-in environment or app, which `deploy_env` finds)."""
    name = target.partition("@")[0]
    if (bundle / "envs" / name / "env.toml").is_file():
        return bundle
    try:
        find_env(None, name)
        return None
    except NotFound as missing:
        pulled = _from_registry(settings, target)
        if pulled is None:
            raise missing from None
        return pulled


def _from_registry(settings: Settings, target: str) -> Path | None:
    name, label = split_ref(target)
    registry = open_registry(settings)
    try:
        try:
            version = registry.version("envs", name, label)
        except NotFound:
            return None
        folder = settings.state_dir / "registry" / version.digest.removeprefix("sha256:")
        if not (folder / "envs" / name / "env.toml").is_file():
            pull_atomically(registry, version, folder)
    finally:
        registry.close()
    return folder


# -- a2a-agent validate --

ENV_STEP = "mail"
FIRST = "verify_a2a_agent_mcp"  # hands the agent its MCP server: the others then talk to an agent with its tools
# Every validator of an A2A agent, by step type, in the order reports are printed.
AGENT_VALIDATORS = (
    "verify_a2a_agent_card",
    "verify_a2a_core_protocol",
    "verify_a2a_agent_config_identity",
    "verify_a2a_role",
    "verify_a2a_system_prompt",
    "verify_a2a_modalities",
    FIRST,
    "verify_a2a_peer_agents",
    "verify_a2a_install",
    "verify_a2a_skill_config",
    "verify_a2a_snapshot",
    "verify_a2a_trajectory",
)
OFFERED = {"url", "env", "timeout_seconds"}  # what a validator's config may be given, if its model has the field


def agent_validation_task(url: str, timeout_s: float) -> tuple[JsonObject, list[str]]:
    """The task (as a task file would say it) and the notes on validators left out."""
    steps: list[JsonObject] = [{"id": ENV_STEP, "type": "deploy_env", "config": {"env_id": "mail"}}]
    notes = []
    installed = set(catalog.names())
    for name in AGENT_VALIDATORS:
        if name not in installed:
            notes.append(f"{name} is not installed: skipped")
            continue
        model = catalog.get(name).config
        offered = {"url": url, "env": ENV_STEP, "timeout_seconds": timeout_s}
        config = {k: v for k, v in offered.items() if k in model.model_fields and k in OFFERED}
        try:
            model.model_validate(config)
        except ValidationError as e:
            missing = ", ".join(".".join(map(str, err["loc"])) for err in e.errors())
            notes.append(f"{name} needs more than a URL and an environment ({missing}): skipped")
            continue
        after = [ENV_STEP] if name == FIRST else [FIRST if FIRST in installed else ENV_STEP]
        # a validator that errs is reported; the others still run
        steps.append({"id": name, "type": name, "depends_on": after, "config": config, "on_failure": "continue"})
    return {"id": "a2a-agent-validate", "description": f"validate the A2A agent at {url}", "steps": steps}, notes


# -- both --


def plan(settings: Settings, options: ValidateOptions) -> tuple[RunInput, list[str]]:
    """The run that validates `options.target`, and notes for the user (validators skipped)."""
    target = options.target
    if options.kind == "a2a-agent":
        if not target.startswith(("http://", "https://")):
            raise BadInput(
                f"{target!r} is not an http(s) URL", "give the agent's base URL, e.g. http://127.0.0.1:9000/"
            )
        data, notes = agent_validation_task(target, options.timeout_s)
        spec = parse_task(data, "agent-env a2a-agent validate")
    else:
        is_url = target.startswith(("http://", "https://"))
        folder = None if is_url else _bundle_for(settings, target, Path(options.bundle or Path.cwd()))
        data, notes = (
            env_validation_task(target if is_url else target.partition("@")[0], read_only=options.read_only),
            [],
        )
        spec = parse_task(data, "env validate", bundle=folder)
    return launch.plan(spec, launch.new_run_id(spec.id), settings), notes


def report(
    options: ValidateOptions,
    state: RunState,
    notes: list[str],
    out: Console,
    emit: Callable[[str], None],
    seconds: float,
) -> int:
    """Print what the run found (`emit`: a raw line, for --json), and the exit code."""
    if options.kind == "a2a-agent":
        return _agent_report(options, state, notes, out, emit)
    reports = [s.outputs["report"] for sid, s in state.steps.items() if sid != "gate" and "report" in s.outputs]
    errors = {sid: s.error for sid, s in state.steps.items() if s.error}
    gate = state.steps.get("gate")
    passed = bool(gate and gate.outputs.get("passed")) and not errors
    if options.json_out:
        summary = {"target": options.target, "run": state.run_id, "passed": passed, "reports": reports}
        emit(json.dumps(summary | {"errors": errors}, indent=2))
        return 0 if passed else 1
    for raw in reports:
        out.print(ValidationReport.model_validate(raw).report(), markup=False, highlight=False)
    for sid, error in errors.items():
        out.print(f"✗ step {sid} failed: {error}", markup=False, highlight=False)
    verdict = "[green]passed[/]" if passed else "[red]FAILED[/]"
    out.print(f"{options.target}: {verdict} (run {state.run_id}, {seconds:.1f}s)")
    return 0 if passed else 1


def _agent_report(
    options: ValidateOptions, state: RunState, notes: list[str], out: Console, emit: Callable[[str], None]
) -> int:
    url = options.target
    reports: JsonObject = {}
    passed = state.steps[ENV_STEP].status.value == "succeeded"
    lines = [] if passed else [f"the mail environment could not be deployed: {state.steps[ENV_STEP].error}"]
    for name, step in state.steps.items():
        if name == ENV_STEP:
            continue
        raw = step.outputs.get("report")
        if isinstance(raw, dict):
            found = ValidationReport.model_validate(raw)
            reports[name] = found.model_dump(mode="json") | {"passed": found.passed}
            passed = passed and found.passed
            lines.append(found.report())
        else:  # the step itself failed: it is no report, and the agent is not validated
            reports[name] = {"validator": name, "passed": False, "error": step.error or step.status.value}
            passed = False
            lines.append(f"{name} {url}: ERROR {step.error or step.status.value}")
    if options.json_out:
        ended = state.finished_at or state.started_at
        summary = {"url": url, "passed": passed, "run_id": state.run_id, "notes": notes}
        summary["run_seconds"] = round((ended - state.started_at).total_seconds(), 3)
        emit(json.dumps(summary | {"validators": reports}))
    else:
        for line in lines:
            out.print(line, markup=False)
        out.print(f"{'PASSED' if passed else 'FAILED'}: the A2A agent at {url} (run {state.run_id})", markup=False)
    return 0 if passed else 1
