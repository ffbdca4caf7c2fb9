"""Printing for the CLI: its consoles, errors and notices (how a run looks: `agent_env.temporal.run_view`). Uses
rich when writing to a terminal."""

from __future__ import annotations

import sys
from functools import cache

from agent_env.errors import AgentEnvError


@cache
def console():
    from rich.console import Console

    # Off a terminal (logs, pipes) rich assumes 80 columns and would truncate tables.
    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


@cache
def err_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_error(e: AgentEnvError) -> None:
    from rich.markup import escape

    err_console().print(f"[bold red]error:[/] {escape(e.problem)}")
    if e.fix:
        err_console().print(f"  [bold]fix:[/] {escape(e.fix)}")


def notice(message: str) -> None:
    from rich.markup import escape

    err_console().print(f"[yellow]note:[/] {escape(message)}")


def not_running_line(stale_pidfile: bool, how_to_start: str) -> str:
    """What `agent-env server|gateway|worker status` says of a daemon that is not running."""
    stale = " (stale pidfile; the next start removes it)" if stale_pidfile else ""
    return f"not running{stale} — {how_to_start}"
