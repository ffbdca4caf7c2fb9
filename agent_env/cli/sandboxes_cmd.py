"""`agent-env sandboxes list|reap`: what this install's runs started on every usable provider, and removing what
leaked. Sandboxes of other installs (another state dir or Temporal sharing the Docker daemon or cloud account)
are neither listed nor removed."""

from __future__ import annotations

import json
import time

from agent_env.cli import aio
from agent_env.cli.output import console, notice
from agent_env.config import load_settings
from agent_env.errors import AgentEnvError


async def _client(settings):
    """Temporal, to ask whether runs are over; None (with a note) when it does not answer, in which case
    only sandboxes past their TTL are judged doomed."""
    from agent_env.temporal_client.client import connect

    try:
        return await connect(settings, start_server=False)
    except AgentEnvError as e:
        notice(f"Temporal did not answer ({e.problem}); only sandboxes past their TTL count as leftovers")
        return None


def _expires(at: float | None) -> str:
    if at is None:
        return "-"
    left = at - time.time()
    return "expired" if left <= 0 else f"in {left / 3600:.1f} h" if left >= 3600 else f"in {left / 60:.0f} min"


def _print(verdicts, json_out: bool, *, done: bool) -> None:
    if json_out:
        print(json.dumps([{**v.sandbox.model_dump(), "reap": v.reason} for v in verdicts], indent=2))
        return
    if not verdicts:
        console().print("no sandboxes")
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("provider", "id", "run", "owner", "status", "expires", "reaper"):
        table.add_column(col, overflow="fold")
    for v in verdicts:
        box = v.sandbox
        verdict = ("removed: " if done else "would remove: ") + v.reason if v.reason else "keeps (run in progress)"
        table.add_row(
            box.provider,
            escape(box.id),
            escape(box.run_id),
            escape(box.owner),
            box.status,
            _expires(box.expires_at),
            escape(verdict),
        )
    console().print(table)


def list_command(run_id: str | None, json_out: bool) -> int:
    async def go() -> int:
        from agent_env.providers.reaper import reap

        settings = load_settings()
        verdicts = await reap(settings, await _client(settings), dry_run=True)
        _print([v for v in verdicts if run_id is None or v.sandbox.run_id == run_id], json_out, done=False)
        return 0

    return aio.run(go())


def reap_command(dry_run: bool, everything: bool) -> int:
    async def go() -> int:
        from agent_env.providers.reaper import reap

        settings = load_settings()
        verdicts = await reap(
            settings, None if everything else await _client(settings), dry_run=dry_run, everything=everything
        )
        doomed = [v for v in verdicts if v.doomed]
        _print(doomed, False, done=not dry_run)
        kept = len(verdicts) - len(doomed)
        console().print(
            f"{'would remove' if dry_run else 'removed'} {len(doomed)} sandbox(es); "
            f"{kept} kept (their runs are in progress)"
        )
        return 0

    return aio.run(go())
