"""`agent-env run BUNDLE` for a bundle with evals, `agent-env run [BUNDLE] --eval NAME` and `agent-env eval run`:
each eval's tasks run as task runs (Temporal workflows), a few at a time (`temporal/eval_runs.py`); then the
eval's table: each run's status and score, each task's mean and pass@k, the mean score and the pass rate. Exit 0
when every run of every eval passed. `agent-env eval create|add-tasks`: new eval versions in the registry."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent_env.cli import aio
from agent_env.cli.output import console, notice
from agent_env.config import Settings
from agent_env.errors import BadInput
from agent_env.spec.evals import EvalRun, EvalSpec, EvalTable
from agent_env.spec.run import RunInput, RunState

if TYPE_CHECKING:
    from collections.abc import Callable

    from temporalio.client import Client

    from agent_env.registry.models import PushResult
    from agent_env.registry.store import Registry
    from agent_env.spec.evals import TaskRef


def run_evals(
    settings: Settings,
    install: Settings,
    target: str | None,
    specs: list[EvalSpec],
    *,
    json_out: bool,
    detach: bool,
    dry: bool,
    concurrency: int,
    k: int = 1,
    output_dir: Path | None = None,
    agent: tuple[str, int] | None = None,
) -> int:
    from agent_env.task_lookup import bundle_folder, eval_tasks
    from agent_env.temporal.eval_runs import plan_eval

    if detach:
        raise BadInput(
            "--detach starts one run and returns; an eval's runs are followed to the end to make its table",
            "leave out --detach (an interrupted eval leaves its runs going), or run one task with --task NAME",
        )
    bundle = bundle_folder(target)
    planned = [plan_eval(settings, spec, eval_tasks(spec, bundle), k, agent) for spec in specs]
    if dry:
        return _show_plans(specs, planned, json_out)
    return aio.run(
        _run_all(settings, install, specs, planned, json_out=json_out, concurrency=concurrency, output_dir=output_dir)
    )


def _show_plans(specs: list[EvalSpec], planned: list[tuple[EvalRun, list[RunInput]]], json_out: bool) -> int:
    out = console()
    for spec, (record, _) in zip(specs, planned, strict=True):
        if json_out:
            print(record.model_dump_json(exclude={"eval_run_id", "started_at"}))
            continue
        out.print(
            f"[bold]eval {spec.id}[/] v{spec.version} · {len(record.tasks)} tasks · planned, not started (--dry-run)"
        )
        for t in record.tasks:
            out.print(f"  {t.task} v{t.version}  [dim]{t.ref}[/]")
    return 0


async def _run_all(
    settings: Settings,
    install: Settings,
    specs: list[EvalSpec],
    planned: list[tuple[EvalRun, list[RunInput]]],
    *,
    json_out: bool,
    concurrency: int,
    output_dir: Path | None,
) -> int:
    from agent_env.temporal import follow

    inputs = [inp for _, group in planned for inp in group]
    first = next((inp for inp in inputs if any(s.deploys_env for s in inp.steps)), inputs[0])
    client = await follow.prepare(settings, first, install=install, note=notice)
    code = 0
    for spec, (record, group) in zip(specs, planned, strict=True):
        table = await _run_one(
            client, settings, spec, record, group, json_out=json_out, concurrency=concurrency, output_dir=output_dir
        )
        if table is None:
            return 130
        code = code or (0 if table.passed == len(table.rows) else 1)
    return code


async def _run_one(
    client: Client,
    settings: Settings,
    spec: EvalSpec,
    record: EvalRun,
    group: list[RunInput],
    *,
    json_out: bool,
    concurrency: int,
    output_dir: Path | None,
) -> EvalTable | None:
    """One eval's runs, then its table (None when interrupted: its runs go on)."""
    from agent_env.temporal.eval_runs import run_eval

    out = console()
    if not json_out:
        out.print(
            f"[bold]eval {spec.id}[/] v{spec.version} · {len(group)} tasks, {concurrency} at a time · "
            f"eval run [bold]{record.eval_run_id}[/]"
        )
    done = 0
    wall = time.monotonic()

    def heard(state: RunState | None, inp: RunInput, error: BaseException | None) -> None:
        nonlocal done
        done += 1
        if output_dir is not None and state is not None:
            written = _write_result(output_dir, state)
            if not json_out:
                out.print(f"  [dim]wrote {written}[/]")
        if json_out:
            return
        what = f"{state.status.value}{_score(state.score)}" if state else f"error: {error}"
        out.print(f"  [{done}/{len(group)}] {inp.task_id} v{inp.task_version}  {what}  [dim]{inp.run_id}[/]")

    try:
        table = await run_eval(client, settings, record, group, concurrency=concurrency, on_done=heard)
    except asyncio.CancelledError:
        out.print(
            f"interrupted: the eval's runs go on (`agent-env runs list`); the explorer shows eval run "
            f"{record.eval_run_id}"
        )
        return None
    if json_out:
        print(table.model_dump_json())
    else:
        _print_table(table, time.monotonic() - wall)
    return table


def _write_result(output_dir: Path, state: RunState) -> Path:
    """The run's final state as `TASK_RUNID.json` in `output_dir`: a name of safe characters only, written
    never through a link (`packing.write`), so neither a task's id nor the folder's links lead it elsewhere."""
    from agent_env import packing

    name = re.sub(r"[^A-Za-z0-9._-]", "_", f"{state.task_id}_{state.run_id}")[:200].lstrip(".") or "run"
    return packing.write(output_dir, f"{name}.json", state.model_dump_json(indent=2).encode())


def _score(score: float | None) -> str:
    return "" if score is None else f" · score {score:.2f}"


def _print_table(table: EvalTable, seconds: float) -> None:
    from rich.markup import escape
    from rich.table import Table

    colors = {"passed": "green", "failed": "red", "error": "red", "cancelled": "yellow"}
    grid = Table(
        "task",
        "version",
        "status",
        "score",
        "run",
        box=None,
        title=f"eval {escape(table.eval)} v{escape(table.version)}",
    )
    for row in table.rows:
        color = colors.get(row.status, "dim")
        score = "—" if row.score is None else f"{row.score:.2f}"
        grid.add_row(escape(row.task), escape(row.version), f"[{color}]{row.status}[/]", score, escape(row.run_id))
    out = console()
    out.print(grid)
    if table.k > 1:
        per_task = Table("task", "version", "passed", "mean", f"pass@{table.k}", box=None, title="per task")
        for t in table.tasks:
            mean = "—" if t.mean is None else f"{t.mean:.2f}"
            hit = "[green]yes[/]" if t.pass_at_k else "[red]no[/]"
            per_task.add_row(escape(t.task), escape(t.version), f"{t.passed}/{t.runs}", mean, hit)
        out.print(per_task)
        out.print(f"[bold]pass@{table.k} {table.pass_at_k:.2f}[/] (tasks with a passing run)")
    mean = "—" if table.mean is None else f"{table.mean:.2f}"
    out.print(
        f"[bold]mean {mean} · pass rate {table.pass_rate:.2f}[/] ({table.passed}/{len(table.rows)} passed) · "
        f"{seconds:.1f}s · eval run {escape(table.eval_run_id)}"
    )


# -- `agent-env eval create|add-tasks|run`: evals in the registry --


def create_command(filepath: Path, eval_id: str) -> int:
    from agent_env.registry.eval_versions import create_eval

    return _new_version(lambda registry, refs: create_eval(registry, eval_id, refs), filepath)


def add_tasks_command(filepath: Path, eval_id: str, version: int | None) -> int:
    from agent_env.registry.eval_versions import add_tasks

    base = None if version is None else str(version)
    return _new_version(lambda registry, refs: add_tasks(registry, eval_id, refs, base), filepath)


def _new_version(make: Callable[[Registry, list[TaskRef]], PushResult], filepath: Path) -> int:
    from agent_env.config import load_settings
    from agent_env.registry.store import open_registry
    from agent_env.spec.eval_refs import read_task_refs

    refs = read_task_refs(filepath)
    registry = open_registry(load_settings())
    try:
        result = make(registry, refs)
        spec = registry.eval(result.name, result.label)
    finally:
        registry.close()
    verb = "made" if result.outcome == "pushed" else "already stored as"
    console().print(f"eval {spec.id}: {verb} version {spec.version} · {len(spec.tasks)} task(s)")
    for ref in spec.tasks:
        console().print(f"  {ref}")
    return 0


@dataclass(frozen=True)
class EvalRunOptions:
    eval_id: str
    version: int | None
    k: int
    concurrency: int
    output_dir: Path | None
    models: dict[str, str | None]  # purpose (agent, persona, judge) -> model name for these runs
    agent_artifact_id: str | None
    json_out: bool


def run_registry_eval(opts: EvalRunOptions) -> int:
    """`agent-env eval run`: the registry's eval, through the same runner as `agent-env run --eval`."""
    from agent_env.config import load_settings
    from agent_env.registry.store import open_registry

    settings = load_settings()
    install = settings
    overrides = [f"{purpose}={name}" for purpose, name in opts.models.items() if name]
    if overrides:
        from agent_env.cli.models_cmd import apply_overrides, parse_overrides

        install = settings.model_copy(deep=True)  # the background worker keeps the install's; runs pin these
        apply_overrides(settings, parse_overrides(overrides, []))
    registry = open_registry(settings)
    try:
        spec = registry.eval(opts.eval_id, None if opts.version is None else str(opts.version))
    finally:
        registry.close()
    agent = None if opts.agent_artifact_id is None else agent_artifact(settings, opts.agent_artifact_id)
    return run_evals(
        settings,
        install,
        None,
        [spec],
        json_out=opts.json_out,
        detach=False,
        dry=False,
        concurrency=opts.concurrency,
        k=opts.k,
        output_dir=opts.output_dir,
        agent=agent,
    )


def agent_artifact(settings: Settings, ref: str) -> tuple[str, int]:
    """`--agent-artifact-id NAME[@VERSION]` (`eval run`, `run`): the registry agent (its latest version by default)
    that every deploy_agent step deploys instead of its own — its record holds the agent's image (sandbox, build,
    command). Its name and version, for `planning/agent_override.py`."""
    from agent_env.errors import AgentEnvError
    from agent_env.registry.store import open_registry

    name, _, label = ref.partition("@")
    registry = open_registry(settings)
    try:
        found = registry.version("agents", name, label or None)
    except AgentEnvError as e:
        raise BadInput(f"--agent-artifact-id {ref!r}: {e.problem}", e.fix) from None
    finally:
        registry.close()
    if not found.label.isdigit():
        raise BadInput(
            f"--agent-artifact-id {ref!r}: version {found.label!r} is not a number",
            "name a numbered version (`agent-env registry list agents`)",
        )
    return found.name, int(found.label)
