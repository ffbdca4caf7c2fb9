"""`agent-env task check`: the checks of `agent_env.task_check` (oracle, null agent, seed), run through the
background worker as `agent-env run`'s runs are, and their table."""

from __future__ import annotations

from typing import Annotated

import typer

task_app = typer.Typer(help="Tasks: check one is fit to ship.", no_args_is_help=True)


@task_app.command("check")
def task_check(
    target: Annotated[str, typer.Argument(help="Bundle (name or folder) or task file.")],
    task: Annotated[str | None, typer.Option("--task", "-t", help="Which task of a bundle with several.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="The runs' seed (default: the task's own).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
) -> None:
    """Check a task before it ships: its oracle (a scripted agent, the task's [oracle.STEP]) must score 1.0, an
    agent that does nothing must fail, and two runs with one seed must end alike (scores and worlds).

    The runs go at once, through the background worker (as `agent-env run`'s). Exit 0 when every check passes,
    1 when one fails (a task that prompts an agent and has no oracle fails the oracle check), 2 for bad input.
    """
    raise typer.Exit(check_command(target, task, seed=seed, json_out=json_out))


def check_command(target: str, task: str | None, *, seed: int | None, json_out: bool) -> int:
    from agent_env.cli import aio
    from agent_env.config import load_settings
    from agent_env.task_check import plan_check
    from agent_env.task_lookup import resolve_target

    settings = load_settings()
    check = plan_check(settings, resolve_target(target, task), seed)
    return aio.run(_check(settings, check, json_out))


async def _check(settings, check, json_out: bool) -> int:
    from rich.markup import escape

    from agent_env.cli.output import console, notice
    from agent_env.task_check import MASKED, run_check
    from agent_env.temporal import follow

    out = console()
    first = next(iter(check.runs.values()))
    client = await follow.prepare(settings, first, install=settings, note=notice)
    if not json_out:
        out.print(
            f"[bold]{escape(check.task.id)}[/] v{escape(check.task.version)} · seed {check.seed} · "
            f"{len(check.runs)} runs at once"
        )
    result = await run_check(
        client,
        settings,
        check,
        on_done=None if json_out else lambda role, s: out.print(f"  [dim]{role} run {s.run_id}: {s.status.value}[/]"),
    )
    if json_out:
        print(result.model_dump_json(indent=2))
        return 0 if result.ok else 1
    width = max(len(c.name) for c in result.checks)
    for c in result.checks:
        mark = "[green]pass[/]" if c.ok else "[dim]n/a[/] " if c.ok is None else "[red]FAIL[/]"
        took = f" [dim]({c.seconds:g}s)[/]" if c.seconds else ""
        out.print(f"  {mark}  {c.name.ljust(width)}  {escape(c.why)}{took}")
    out.print(f"[dim]the seed check masks {'; '.join(MASKED)}[/]")
    verdict = "[green]ready to ship[/]" if result.ok else "[red]not ready[/]"
    out.print(f"{verdict} · {result.seconds:g}s")
    return 0 if result.ok else 1
