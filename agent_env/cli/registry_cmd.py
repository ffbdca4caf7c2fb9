"""`agent-env registry push|list|show|pull`: versioned envs, tasks, agents and artifacts in the shared stores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_env.cli.output import console, err_console
from agent_env.config import load_settings
from agent_env.registry.bundle_items import kind_of
from agent_env.registry.models import KINDS, SINGULAR
from agent_env.registry.resolve import split_ref
from agent_env.registry.store import Registry, open_registry


def _open() -> Registry:
    return open_registry(load_settings())


def push_command(folder: Path) -> int:
    from rich.markup import escape

    registry = _open()
    try:
        results = registry.push_bundle(folder, progress=lambda line: err_console().print(f"[dim]{escape(line)}[/]"))
    finally:
        registry.close()
    for r in results:
        style = "green" if r.outcome == "pushed" else "dim"
        console().print(f"[{style}]{escape(str(r))}[/]")
    pushed = sum(r.outcome == "pushed" for r in results)
    console().print(f"{pushed} pushed, {len(results) - pushed} unchanged")
    return 0


def list_command(kind: str | None, json_out: bool) -> int:
    registry = _open()
    try:
        kinds = [kind_of(kind)] if kind else list(KINDS)
        rows: list[dict[str, Any]] = [
            {"kind": k, "name": name, "latest": versions[-1].label, "versions": len(versions)}
            for k in kinds
            for name, versions in registry.all_versions(k).items()  # type: ignore[arg-type]
        ]
    finally:
        registry.close()
    if json_out:
        for row in rows:
            print(json.dumps(row))
        return 0
    if not rows:
        console().print("the registry is empty here — push a bundle with `agent-env registry push FOLDER`")
        return 0
    from rich.table import Table

    table = Table("kind", "name", "latest", "versions", box=None)
    for row in rows:
        table.add_row(SINGULAR[row["kind"]], row["name"], row["latest"], str(row["versions"]))
    console().print(table)
    return 0


def show_command(kind: str, ref: str, json_out: bool) -> int:
    name, label = split_ref(ref)
    registry = _open()
    try:
        item_kind = kind_of(kind)
        versions = registry.versions(item_kind, name)
        shown = [registry.version(item_kind, name, label)] if label else versions
        used = {v.label: registry.runs_using(v) for v in shown}
    finally:
        registry.close()
    if json_out:
        for v in shown:
            runs = [{"run_id": r.get("run_id"), "status": r.get("status")} for r in used[v.label]]
            print(json.dumps({**v.model_dump(mode="json"), "runs": runs}))
        return 0
    from rich.markup import escape

    out = console()
    out.print(f"[bold]{SINGULAR[item_kind]} {escape(name)}[/]: {len(versions)} version(s)")
    for v in shown:
        out.print(f"\n[bold]@{escape(v.label)}[/]  {v.digest}")
        out.print(f"  pushed by {escape(v.pushed_by)} at {v.pushed_at}")
        if description := v.record.get("description"):
            out.print(f"  {escape(str(description))}")
        if refs := v.record.get("tasks") if v.kind == "evals" else None:
            out.print("  tasks: " + ", ".join(escape(f"{r.get('task')}@{r.get('version', 'latest')}") for r in refs))
        for dep_kind, named in v.uses.items():
            out.print(f"  uses {dep_kind}: " + ", ".join(f"{n}@{lbl}" for n, lbl in named.items()))
        out.print(f"  files ({len(v.files)}):")
        for f in v.files:
            out.print(f"    {escape(f.path)}  [dim]{f.size} B  sha256:{f.sha256[:12]}…[/]")
        runs = used[v.label]
        out.print(f"  runs ({len(runs)}):" if runs else "  runs: none yet")
        for r in runs[:20]:
            out.print(f"    {r.get('run_id')}  {r.get('status')}  {r.get('started_at', '')}")
        if len(runs) > 20:
            out.print(f"    … and {len(runs) - 20} more")
    return 0


def pull_command(kind: str, ref: str, out_dir: Path) -> int:
    name, label = split_ref(ref)
    registry = _open()
    try:
        version = registry.version(kind_of(kind), name, label)
        written = registry.pull(version, out_dir)
    finally:
        registry.close()
    console().print(f"pulled {version.ref} {version.digest} into {out_dir}: {len(written)} files, each verified")
    return 0
