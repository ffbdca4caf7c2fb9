"""`agent-env run BUNDLE` for a bundle with evals, and `agent-env run [BUNDLE] --eval NAME`: each eval's tasks run
as task runs (Temporal workflows), a few at a time (`temporal/eval_runs.py`); then the eval's table: each
task's status and score, the mean score and the pass rate. Exit 0 when every task of every eval passed."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from agent_env.cli import aio
from agent_env.cli.output import console, notice
from agent_env.config import Settings
from agent_env.errors import BadInput
from agent_env.spec.evals import EvalRun, EvalSpec, EvalTable
from agent_env.spec.run import RunInput, RunState

if TYPE_CHECKING:
    from temporalio.client import Client


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
) -> int:
    from agent_env.task_lookup import bundle_folder, eval_tasks
    from agent_env.temporal.eval_runs import plan_eval

    if detach:
        raise BadInput(
            "--detach starts one run and returns; an eval's runs are followed to the end to make its table",
            "leave out --detach (an interrupted eval leaves its runs going), or run one task with --task NAME",
        )
    bundle = bundle_folder(target)
    planned = [plan_eval(settings, spec, eval_tasks(spec, bundle)) for spec in specs]
    if dry:
        return _show_plans(specs, planned, json_out)
    return aio.run(_run_all(settings, install, specs, planned, json_out=json_out, concurrency=concurrency))


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
) -> int:
    from agent_env.temporal import follow

    inputs = [inp for _, group in planned for inp in group]
    first = next((inp for inp in inputs if any(s.deploys_env for s in inp.steps)), inputs[0])
    client = await follow.prepare(settings, first, install=install, note=notice)
    code = 0
    for spec, (record, group) in zip(specs, planned, strict=True):
        table = await _run_one(client, settings, spec, record, group, json_out=json_out, concurrency=concurrency)
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
    mean = "—" if table.mean is None else f"{table.mean:.2f}"
    out.print(
        f"[bold]mean {mean} · pass rate {table.pass_rate:.2f}[/] ({table.passed}/{len(table.rows)} passed) · "
        f"{seconds:.1f}s · eval run {escape(table.eval_run_id)}"
    )
