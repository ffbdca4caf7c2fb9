"""`agent-env plugin list|check|add|remove`: what is plugged into agent-env, whether it works, and installing or
removing plugin packages in the environment this `agent-env` runs from (its `sys.executable`), with pip."""

from __future__ import annotations

import difflib
import importlib
import json
import subprocess
import sys
from importlib.metadata import distributions

from agent_env import plugins
from agent_env.cli.output import console, notice
from agent_env.errors import AgentEnvError, BadInput, NotFound
from agent_env.plugins import Plugin

MARKS = {"ok": ("✓", "green"), "error": ("✗", "red"), "ignored": ("✗", "red"), "needs extra": ("-", "yellow")}


def list_command(json_out: bool) -> int:
    found = plugins.inspect_all()
    if json_out:
        print(json.dumps([p.model_dump() for p in found], indent=2))
        return 0
    from rich.markup import escape
    from rich.table import Table

    for group, what in plugins.GROUPS.items():
        table = Table(box=None, pad_edge=False, title=f"{group}  ({what})", title_justify="left")
        for col in ("name", "from", "distribution", "status"):
            table.add_column(col, overflow="fold")
        for p in (p for p in found if p.group == group):
            table.add_row(
                escape(p.name),
                "built-in" if p.builtin else "plugin",
                escape(f"{p.distribution} {p.version or ''}".strip()),
                _status(p),
            )
        console().print(table)
        console().print()
    return 0


def check_command(names: list[str]) -> int:
    """Load each plugin (or the named ones: entry-point names or distributions); 1 when any is broken."""
    chosen = _select(plugins.inspect_all(load=False), names)
    from rich.markup import escape

    broken = 0
    for p in chosen:
        if p.status == "ok":
            plugins.check(p)
        broken += p.broken
        mark, color = MARKS[p.status]
        console().print(f"[{color}]{mark}[/] {escape(p.group)} {escape(p.name)}  [dim]({escape(p.distribution)})[/]")
        if p.status != "ok":
            console().print(f"    [{color}]{escape(f'{p.status}: {p.error}')}[/]")
            console().print(f"    [bold]fix:[/] {escape(p.fix or '')}")
    if broken:
        console().print(f"[bold red]{broken} of {len(chosen)} broken[/]")
        return 1
    console().print(f"[green]{len(chosen)} ok[/]" if len(chosen) != 1 else "[green]ok[/]")
    return 0


def add_command(spec: str) -> int:
    before = _installed()
    _pip("install", spec)
    importlib.invalidate_caches()
    after = _installed()
    changed = sorted(name for name, version in after.items() if before.get(name) != version)
    if not changed:
        notice(f"pip changed nothing: {spec} is already installed")
        return 0
    providing = {}
    for name in changed:
        dist = plugins.find_distribution(name)
        points = plugins.plugin_entry_points(dist) if dist else []
        if points:
            providing[name] = points
            adds = ", ".join(f"{ep.name} ({ep.group.removeprefix('agent_env.')})" for ep in points)
            console().print(f"{name} {dist.version if dist else ''} adds: {adds}")
    if not providing:
        notice(f"installed {', '.join(changed)}, but none of it plugs into agent-env (no entry points in its groups)")
        return 0
    # A fresh process sees exactly what the next `agent-env` will (new .pth files, no stale imports).
    return subprocess.run([sys.executable, "-m", "agent_env", "plugin", "check", *providing]).returncode


def remove_command(dist_name: str) -> int:
    if plugins.normalize(dist_name) == plugins.SELF:
        raise BadInput(
            f"refusing to remove {plugins.SELF}: it is what `agent-env` runs from",
            "uninstall it with pip if you mean it",
        )
    dist = plugins.find_distribution(dist_name)
    if dist is None:
        raise NotFound(
            f"no distribution {dist_name!r} is installed in {sys.prefix}",
            "`agent-env plugin list` shows which distributions provide plugins",
        )
    points = plugins.plugin_entry_points(dist)
    if not points:
        raise BadInput(
            f"refusing to remove {dist.metadata['Name']}: it provides no agent-env plugins (other packages may need it)",
            f"uninstall it with pip if you mean it: {sys.executable} -m pip uninstall {dist.metadata['Name']}",
        )
    console().print(f"removing {dist.metadata['Name']} {dist.version}: {', '.join(ep.name for ep in points)}")
    _pip("uninstall", "--yes", dist.metadata["Name"])
    return 0


def _select(found: list[Plugin], names: list[str]) -> list[Plugin]:
    if not names:
        return found
    wanted = {plugins.normalize(n) for n in names}
    chosen = [p for p in found if plugins.normalize(p.name) in wanted or plugins.normalize(p.distribution) in wanted]
    unknown = wanted - {plugins.normalize(p.name) for p in chosen} - {plugins.normalize(p.distribution) for p in chosen}
    if unknown:
        known = sorted({p.name for p in found} | {p.distribution for p in found})
        close = [c for n in sorted(unknown) for c in difflib.get_close_matches(n, known, n=2)]
        raise NotFound(
            f"no plugin or distribution named {', '.join(sorted(unknown))}"
            + (f" (did you mean {', '.join(close)}?)" if close else ""),
            "`agent-env plugin list` shows every plugin and the distribution providing it",
        )
    return chosen


def _status(p: Plugin) -> str:
    from rich.markup import escape

    mark, color = MARKS[p.status]
    text = p.status if p.status == "ok" else f"{p.status}: {p.error}"
    return f"[{color}]{mark} {escape(text)}[/]"


def _installed() -> dict[str, str]:
    return {plugins.normalize(d.metadata["Name"] or ""): d.version for d in distributions()}


def _pip(*args: str) -> None:
    """pip for this interpreter, its progress shown as it goes."""
    command = [sys.executable, "-m", "pip", *args]
    done = subprocess.run(command)
    if done.returncode != 0:
        raise AgentEnvError(
            f"pip {args[0]} failed (exit {done.returncode})",
            f"see pip's output above; the command was {' '.join(command)}",
        )
