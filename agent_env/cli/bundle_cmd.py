"""`agent-env bundle export|import`: tasks and what they use, carried in one file to another install's registry."""

from __future__ import annotations

import json
from pathlib import Path

from agent_env.cli.output import console, err_console
from agent_env.config import load_settings
from agent_env.registry.bundle_file import export_bundle, import_bundle
from agent_env.registry.store import open_registry


def _progress(line: str) -> None:
    from rich.markup import escape

    err_console().print(f"[dim]{escape(line)}[/]")


def export_command(tasks: list[str], out: Path, force: bool, json_out: bool, evals: list[str] | None = None) -> int:
    registry = open_registry(load_settings())
    try:
        summary = export_bundle(
            registry, tasks, out, overwrite=force, progress=_progress if len(tasks) > 1 else None, evals=evals
        )
    finally:
        registry.close()
    if json_out:
        print(summary.model_dump_json())
        return 0
    console().print(
        f"wrote {summary.path}: {len(summary.versions)} versions, {summary.blobs} distinct blobs "
        f"({summary.blob_bytes} bytes), {summary.file_bytes} bytes compressed"
    )
    return 0


def import_command(source: Path, json_out: bool) -> int:
    settings = load_settings()
    registry = open_registry(settings)
    try:
        results = import_bundle(registry, source, settings.state_dir, progress=None if json_out else _progress)
    finally:
        registry.close()
    if json_out:
        for r in results:
            print(json.dumps(r.model_dump(mode="json")))
        return 0
    from rich.markup import escape

    for r in results:
        style = "green" if r.outcome == "imported" else "dim"
        console().print(f"[{style}]{escape(str(r))}[/]")
    imported = sum(r.outcome == "imported" for r in results)
    console().print(f"{imported} imported, {len(results) - imported} unchanged")
    return 0
