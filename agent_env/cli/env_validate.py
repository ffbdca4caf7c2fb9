"""`agent-env env validate TARGET`: run protocol v1's environment validators as a run, and print their reports.

TARGET is an env server's base URL (checked where it is, sent no credential), or an environment by name: one of
the bundle's (`--bundle`, else the working directory's), a built-in one or app, else the registry's (`NAME[@VERSION]`,
pulled once into the state directory). A named environment is deployed by the run first, then checked through
the gateway. The exit code is 0 only if every required check passed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from agent_env.cli import aio
from agent_env.cli.output import console, notice
from agent_env.config import Settings, load_settings
from agent_env.gateway_client.wire import JsonObject

VALIDATORS = ("verify_env_card", "verify_env_core_protocol", "verify_mcp_tool_schema", "verify_spec_conformance")
GATE = "validation_gate_aggregator"
REQUIRED_GATES = ["card", "protocol", "tools"]  # spec conformance is advisory: most envs serve no OpenAPI document
STEP_IDS = dict(zip(VALIDATORS, ["card", "protocol", "tools", "spec"], strict=True))


def validation_task(target: str, *, read_only: bool = False) -> JsonObject:
    """The task: deploy the environment (unless TARGET is a URL), run the validators, gate their verdicts."""
    is_url = target.startswith(("http://", "https://"))
    where: JsonObject = {"url": target.rstrip("/")} if is_url else {"env": "deploy"}
    steps: list[JsonObject] = []
    if not is_url:
        steps.append({"id": "deploy", "type": "deploy_env", "config": {"env": target}})
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


def _bundle_for(settings: Settings, target: str, bundle: Path | None) -> Path | None:
    """The bundle folder whose environment TARGET names: the given one, the working directory's, or the registry's
    pulled copy (None: a built-in environment or app, which `deploy_env` finds itself)."""
    from agent_env.bundles import find_env
    from agent_env.errors import NotFound

    name = target.partition("@")[0]
    for folder in [bundle] if bundle else [Path.cwd()]:
        if (folder / "envs" / name / "env.toml").is_file():
            return folder
    try:
        find_env(None, name)
        return None
    except NotFound as missing:
        pulled = _from_registry(settings, target)
        if pulled is None:
            raise missing from None
        return pulled


def _from_registry(settings: Settings, target: str) -> Path | None:
    from agent_env.errors import NotFound
    from agent_env.registry.resolve import _pull_atomically, split_ref  # (whole or absent, as `run NAME` pulls)
    from agent_env.registry.store import open_registry

    name, label = split_ref(target)
    registry = open_registry(settings)
    try:
        try:
            version = registry.version("envs", name, label)
        except NotFound:
            return None
        folder = settings.state_dir / "registry" / version.digest.removeprefix("sha256:")
        if not (folder / "envs" / name / "env.toml").is_file():
            _pull_atomically(registry, version, folder)
    finally:
        registry.close()
    return folder


def validate_command(target: str, *, json_out: bool, read_only: bool, bundle: str | None) -> int:
    from agent_env.planning.tasks import parse_task
    from agent_env.temporal import launch

    settings = load_settings()
    is_url = target.startswith(("http://", "https://"))
    folder = None if is_url else _bundle_for(settings, target, Path(bundle) if bundle else None)
    task = validation_task(target.partition("@")[0] if not is_url else target, read_only=read_only)
    spec = parse_task(task, "env validate", bundle=folder)
    inp = launch.plan(spec, launch.new_run_id(spec.id), settings)
    return aio.run(_run(settings, inp, target, json_out=json_out))


async def _run(settings: Settings, inp: Any, target: str, *, json_out: bool) -> int:
    from agent_env.spec.run import RunState
    from agent_env.temporal import follow, launch

    started = time.monotonic()
    client = await follow.prepare(settings, inp, install=settings, note=notice)
    handle = await launch.start(client, settings, inp)
    state: RunState = await launch.wait_result(handle)
    reports = [s.outputs["report"] for sid, s in state.steps.items() if sid != "gate" and "report" in s.outputs]
    errors = {sid: s.error for sid, s in state.steps.items() if s.error}
    gate = state.steps.get("gate")
    passed = bool(gate and gate.outputs.get("passed")) and not errors
    if json_out:
        print(
            json.dumps(
                {"target": target, "run": inp.run_id, "passed": passed, "reports": reports, "errors": errors}, indent=2
            )
        )
        return 0 if passed else 1
    from agent_env.validators.report import ValidationReport

    out = console()
    for raw in reports:
        out.print(ValidationReport.model_validate(raw).report(), markup=False, highlight=False)
    for sid, error in errors.items():
        out.print(f"✗ step {sid} failed: {error}", markup=False, highlight=False)
    verdict = "[green]passed[/]" if passed else "[red]FAILED[/]"
    out.print(f"{target}: {verdict} (run {inp.run_id}, {time.monotonic() - started:.1f}s)")
    return 0 if passed else 1
