"""`agent-env universe create|list|show` and `agent-env artifact push`: universes of environment artifacts, and new
versions of an artifact (from local files or a run's output, with its lineage), in the registry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_env import packing
from agent_env.cli.output import console
from agent_env.config import load_settings
from agent_env.errors import BadInput, NotFound
from agent_env.gateway_client.wire import JsonObject
from agent_env.registry.models import Version
from agent_env.registry.resolve import split_ref
from agent_env.registry.store import Registry, open_registry
from agent_env.registry.universes import create_universe, environment_data, push_new_version
from agent_env.spec.artifacts import DATA_FILE, UNIVERSE, ArtifactPin, Lineage, artifact_type
from agent_env.stores import keys
from agent_env.validators.universe import exported_by_app


def _open() -> Registry:
    return open_registry(load_settings())


def create_command(name: str, refs: list[str], description: str | None) -> int:
    registry = _open()
    try:
        pushed, record = create_universe(registry, name, refs, description=description)
    finally:
        registry.close()
    pins = ", ".join(str(p) for p in record.environment_artifact_refs)
    console().print(f"{pushed.outcome}: universe {name}@{pushed.label} of {pins}")
    return 0


def _universes(registry: Registry) -> list[tuple[Version, int]]:
    found = []
    for versions in registry.all_versions("artifacts").values():
        if artifact_type(versions[-1].record) == UNIVERSE:
            found.append((versions[-1], len(versions)))
    return found


def list_command(json_out: bool) -> int:
    registry = _open()
    try:
        rows: list[JsonObject] = [
            {
                "name": v.name,
                "latest": v.label,
                "versions": count,
                "environment_artifacts": [str(ArtifactPin(**p)) for p in v.record["environment_artifact_refs"]],
            }
            for v, count in _universes(registry)
        ]
    finally:
        registry.close()
    if json_out:
        for row in rows:
            print(json.dumps(row))
        return 0
    if not rows:
        console().print("no universes here — make one with `agent-env universe create NAME ENV_ARTIFACT...`")
        return 0
    from rich.table import Table

    table = Table("universe", "latest", "versions", "environment artifacts", box=None)
    for row in rows:
        table.add_row(row["name"], row["latest"], str(row["versions"]), ", ".join(row["environment_artifacts"]))
    console().print(table)
    return 0


def show_command(ref: str, json_out: bool) -> int:
    name, label = split_ref(ref)
    registry = _open()
    try:
        version = registry.version("artifacts", name, label)
        loaded = environment_data(registry, name, version.label)
    finally:
        registry.close()
    apps: dict[str, JsonObject] = {
        app: {"artifact": str(loaded.environments[app]), "tables": {t: _count(rows) for t, rows in data.items()}}
        for app, data in sorted(loaded.data.items())
        if isinstance(data, dict)
    }
    shown: JsonObject = {
        "name": name,
        "version": version.label,
        "type": artifact_type(version.record),
        "digest": version.digest,
        "pushed_by": version.pushed_by,
        "pushed_at": version.pushed_at,
        "environments": apps,
        "lineage": version.record.get("lineage"),
    }
    if json_out:
        print(json.dumps(shown))
        return 0
    from rich.markup import escape

    out = console()
    out.print(f"[bold]{escape(str(loaded.pin))}[/] ({shown['type']})  {version.digest}")
    out.print(f"  pushed by {escape(version.pushed_by)} at {version.pushed_at}")
    for app, about in apps.items():
        tables = ", ".join(f"{t} ({n})" for t, n in about["tables"].items())
        out.print(f"  {escape(app)}: {escape(about['artifact'])}  {escape(tables)}")
    if lineage := shown["lineage"]:
        parents = ", ".join(str(ArtifactPin(**p)) for p in lineage.get("parents") or [])
        out.print(
            f"  made by run {lineage.get('run_id')} step {lineage.get('step')}"
            + (f" from {parents}" if parents else "")
        )
    return 0


def _count(rows: Any) -> int:
    return len(rows) if isinstance(rows, list) else 1


def push_command(
    name: str,
    paths: list[Path],
    run_id: str | None,
    output: str,
    environment_name: str | None,
    parents: list[str],
    description: str | None,
) -> int:
    if bool(paths) == (run_id is not None):
        raise BadInput(
            "give the artifact's files, or --run (a run's output), not both", "e.g. `artifact push NAME data.json`"
        )
    registry = _open()
    try:
        files, source = _run_output(registry, run_id, output) if run_id else (_local(paths), None)
        pins = [_pin(registry, parent) for parent in parents]
        record: JsonObject = {"description": description} if description else {}
        if environment_name is not None:
            record |= {"type": "environment", "environment_name": environment_name}
            files = {DATA_FILE: _one_json(files, environment_name)}
        if run_id or pins:
            record["lineage"] = Lineage(run_id=run_id, source=source, parents=pins).model_dump(exclude_none=True)
        pushed = push_new_version(registry, name, record, files)
    finally:
        registry.close()
    console().print(f"{pushed.outcome}: artifact {name}@{pushed.label} ({len(files)} files) {pushed.digest[:19]}…")
    return 0


def _pin(registry: Registry, ref: str) -> ArtifactPin:
    parent, label = split_ref(ref)
    return ArtifactPin(id=parent, version=registry.version("artifacts", parent, label).label)


def _local(paths: list[Path]) -> dict[str, bytes]:
    """Each file (a folder: each file in it, by its path inside), read without following a link."""
    files: dict[str, bytes] = {}
    for path in paths:
        path = path.expanduser().resolve()
        if path.is_file():
            files[path.name] = packing.read(path.parent, path.name)
            continue
        if not path.is_dir():
            raise BadInput(f"no file or folder at {path}", "give the files of the artifact")
        for entry in packing.walk(path):
            if not entry.folder:
                files[entry.path] = packing.read(path, entry.path)
    return files


def _run_output(registry: Registry, run_id: str, output: str) -> tuple[dict[str, bytes], str]:
    """What run `run_id` kept under `output` (below its folder in the object store), by path inside it."""
    if registry.documents.get(keys.RUNS, run_id) is None:
        raise NotFound(f"no run {run_id!r} in this install's stores", "list runs with `agent-env runs list`")
    key = keys.run(run_id) + output.strip("/")
    if registry.objects.exists(key):  # one file
        return {key.rsplit("/", 1)[-1]: registry.objects.get(key)}, key
    prefix = key + "/"
    found = {key.removeprefix(prefix): registry.objects.get(key) for key in registry.objects.list(prefix)}
    if not found:
        raise BadInput(
            f"run {run_id} kept nothing under {prefix}",
            "name what it kept with --output (artifacts: collect_artifacts'; agent_snapshots/NAME: an agent's state)",
        )
    return found, prefix


def _one_json(files: dict[str, bytes], app: str) -> bytes:
    """An environment artifact's data: its one JSON file (an env's export, as collect_artifacts keeps it: the app's)."""
    if len(files) != 1:
        raise BadInput(
            f"an environment artifact is one JSON file of its app's data; {len(files)} were given",
            "give one file (--run: name the data file with --output)",
        )
    data = next(iter(files.values()))
    try:
        found = json.loads(data)
    except ValueError:
        raise BadInput("the environment artifact's file is not JSON", "give the app's data as JSON") from None
    if isinstance(found, dict) and isinstance(found.get("parts"), list):  # a data/get answer: the app's part
        exported = exported_by_app(found)
        if app not in exported:
            raise BadInput(
                f"the export holds no data of app {app!r} (it has: {', '.join(sorted(exported)) or 'none'})",
                "name one of its apps with --environment-name",
            )
        return json.dumps(exported[app], sort_keys=True, indent=1, ensure_ascii=False).encode()
    return data
