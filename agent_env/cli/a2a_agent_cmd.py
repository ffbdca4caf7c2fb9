"""`agent-env a2a-agent validate URL`: check that an A2A agent speaks protocol v1's agent side.

The validators run as a task, as the framework runs them: a mail environment of our own is deployed beside the
checks, so `verify_a2a_agent_mcp` has a real MCP server to hand the agent and the gateway's trajectory to read.
The validators are step types found by name in the installed catalog: one that is not installed is skipped, with
a note. Exit 0 only if every required check of every validator passed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from agent_env.cli import aio
from agent_env.cli.output import console, notice
from agent_env.errors import BadInput

if TYPE_CHECKING:
    from agent_env.gateway_client.wire import JsonObject
    from agent_env.spec.run import RunState

ENV_STEP = "mail"
FIRST = "verify_a2a_agent_mcp"  # hands the agent its MCP server: the others then talk to an agent with its tools
# Every validator of an A2A agent, by step type, in the order reports are printed.
VALIDATORS = (
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
# What a validator's config may be given, if its model has the field (each takes what it declares).
OFFERED = {"url", "env", "timeout_seconds"}


def validation_task(url: str, timeout_s: float) -> tuple[JsonObject, list[str]]:
    """The task (as a task file would say it) and the notes on validators left out."""
    from pydantic import ValidationError

    from agent_env.step_types import catalog

    steps: list[JsonObject] = [{"id": ENV_STEP, "type": "deploy_env", "config": {"env": "mail"}}]
    notes = []
    installed = set(catalog.names())
    for name in VALIDATORS:
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


a2a_agent_app = typer.Typer(help="A2A agents: check one speaks agentenv protocol v1.", no_args_is_help=True)


@a2a_agent_app.command("validate")
def validate(
    url: Annotated[str, typer.Argument(help="The agent's A2A URL (its card is at URL/.well-known/agent-card.json).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the reports as one JSON object.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds one task of the agent may take.", min=1)] = 60.0,
) -> None:
    """Validate the A2A agent at URL: its card and the extensions it declares, A2A's core protocol, agent-config,
    modalities, and that it calls an MCP server it is given (a mail environment deployed for the check).
    Prints each validator's report; exit 0 only if every required check passed."""
    raise typer.Exit(validate_command(url, json_out=json_out, timeout_s=timeout))


def validate_command(url: str, *, json_out: bool, timeout_s: float) -> int:
    if not url.startswith(("http://", "https://")):
        raise BadInput(f"{url!r} is not an http(s) URL", "give the agent's base URL, e.g. http://127.0.0.1:9000/")
    from agent_env.config import load_settings
    from agent_env.planning.tasks import parse_task

    settings = load_settings()
    data, notes = validation_task(url, timeout_s)
    spec = parse_task(data, "agent-env a2a-agent validate")
    if not json_out:
        for line in notes:
            notice(line)
    state = aio.run(_run(settings, spec))
    return _print(url, state, notes, json_out)


async def _run(settings, spec):
    from agent_env.temporal import follow, launch

    inp = launch.plan(spec, launch.new_run_id(spec.id), settings)
    client = await follow.prepare(settings, inp, install=settings, note=notice)
    handle = await launch.start(client, settings, inp)
    return await launch.wait_result(handle)


def _print(url: str, state: RunState, notes: list[str], json_out: bool) -> int:
    from agent_env.validators.report import ValidationReport

    reports: JsonObject = {}
    passed = state.steps[ENV_STEP].status.value == "succeeded"
    lines = [] if passed else [f"the mail environment could not be deployed: {state.steps[ENV_STEP].error}"]
    for name, step in state.steps.items():
        if name == ENV_STEP:
            continue
        raw = step.outputs.get("report")
        if isinstance(raw, dict):
            report = ValidationReport.model_validate(raw)
            reports[name] = report.model_dump(mode="json") | {"passed": report.passed}
            passed = passed and report.passed
            lines.append(report.report())
        else:  # the step itself failed: it is no report, and the agent is not validated
            reports[name] = {"validator": name, "passed": False, "error": step.error or step.status.value}
            passed = False
            lines.append(f"{name} {url}: ERROR {step.error or step.status.value}")
    if json_out:
        ended = state.finished_at or state.started_at
        summary = {"url": url, "passed": passed, "run_id": state.run_id, "notes": notes}
        summary["run_seconds"] = round((ended - state.started_at).total_seconds(), 3)
        print(json.dumps(summary | {"validators": reports}))
    else:
        out = console()
        for line in lines:
            out.print(line, markup=False)
        out.print(f"{'PASSED' if passed else 'FAILED'}: the A2A agent at {url} (run {state.run_id})", markup=False)
    return 0 if passed else 1
