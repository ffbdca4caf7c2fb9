"""Environment artifacts and universes in the registry (`agent_env.spec.artifacts` says what they are), and new
versions of an artifact made from what a run produced.

- `push_new_version`: an artifact's next version (label: the latest number + 1) from bytes in hand, with its
  lineage; a version made by the same run's step is found, not pushed again (a retried step pushes once).
- `create_universe`: a universe over environment artifacts, each pinned to a version (the latest when none is
  named); one app each.
- `environment_data`: an environment artifact or a universe as the data a composed environment loads
  (`{app: {table: [rows]}}`), every file checked against its digest.
- `push_universe`: data exported from an environment (one app or many) back as environment artifacts and a
  universe pinning them: the universe it was loaded from gets new versions of its own artifacts.
- `pin_environment_data`: what a step does when the run is planned: the data stored content-addressed in the
  object store, so the run loads exactly the version it was planned with, on any worker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent_env.errors import BadInput, NotFound
from agent_env.gateway_client.wire import JsonObject
from agent_env.registry.bundle_items import NAME
from agent_env.registry.manifest import digest, file_sha256
from agent_env.registry.models import FileEntry, Item, PushResult, Version
from agent_env.registry.store import Registry
from agent_env.spec.artifacts import (
    DATA_FILE,
    ENVIRONMENT,
    UNIVERSE,
    ArtifactPin,
    EnvironmentArtifactRecord,
    Lineage,
    UniverseRecord,
    artifact_type,
)
from agent_env.stores import keys
from agent_env.stores.base import DocumentStore, ObjectStore, version_order

MAX_LABEL_RACES = 5  # pushes that lose the next label to another writer before one gives up


@dataclass
class EnvironmentData:
    """What an environment artifact or a universe holds, as a composed environment loads it."""

    pin: ArtifactPin  # the artifact, at the version read
    data: dict[str, JsonObject]  # app -> its tables
    environments: dict[str, ArtifactPin] = field(default_factory=dict)  # app -> its environment artifact


def _checked_name(name: str) -> str:
    if not NAME.match(name):
        raise BadInput(f"artifact name {name!r} is not valid", "use letters, digits, '.', '_' and '-' (max 128)")
    return name


def _labels(registry: Registry, name: str) -> list[str]:
    docs = registry.documents.query(keys.REGISTRY, key_prefix=keys.registry_item("artifacts", name))
    return sorted((str(d.get("label")) for d in docs), key=version_order)


def next_label(registry: Registry, name: str) -> str:
    """The label after an artifact's latest: one more than its largest number ("1" for a new artifact)."""
    numbers = [int(label) for label in _labels(registry, name) if label.isdigit()]
    return str(max(numbers, default=0) + 1)


def made_by(registry: Registry, name: str, lineage: Lineage) -> Version | None:
    """The version of `name` the run's step already made (its lineage names both), if any."""
    if lineage.run_id is None or lineage.step is None:
        return None
    for doc in registry.documents.query(keys.REGISTRY, key_prefix=keys.registry_item("artifacts", name)):
        made = (doc.get("record") or {}).get("lineage") or {}
        if made.get("run_id") == lineage.run_id and made.get("step") == lineage.step:
            return Version.model_validate(doc)
    return None


def push_new_version(
    registry: Registry, name: str, record: Mapping[str, Any], files: Mapping[str, bytes] | None = None
) -> PushResult:
    """Push `record` and `files` (path in the artifact -> bytes) as the next version of artifact `name`. When
    the record's lineage names a run's step that already made a version, that version is the answer."""
    _checked_name(name)
    lineage = Lineage.model_validate(record["lineage"]) if record.get("lineage") else None
    if lineage is not None and (found := made_by(registry, name, lineage)) is not None:
        return PushResult(kind="artifacts", name=name, label=found.label, digest=found.digest, outcome="unchanged")
    contents = {f"artifacts/{name}/{path}": data for path, data in (files or {}).items()}
    entries = [FileEntry(path=path, sha256=file_sha256(data), size=len(data)) for path, data in contents.items()]
    for _ in range(MAX_LABEL_RACES):
        label = next_label(registry, name)
        item = Item(
            kind="artifacts", name=name, record={**record, "name": name, "version": label}, files=entries, root=Path()
        )
        try:
            return registry.push(item, contents)
        except BadInput:  # another writer took this label first: take the next
            continue
    raise BadInput(
        f"artifact {name}: {MAX_LABEL_RACES} other pushes took the next version first", "push again in a moment"
    )


def _verified(registry: Registry, version: Version) -> dict[str, bytes]:
    """A version's files (path in the artifact -> bytes), each checked against its digest."""
    if digest(version.kind, version.name, version.record, version.files, version.uses) != version.digest:
        raise BadInput(
            f"the registry's record of {version.ref} does not match its digest: it was altered", "push it again"
        )
    found = {}
    for entry in version.files:
        data = registry.objects.get(keys.registry_blob(entry.sha256))
        if file_sha256(data) != entry.sha256:
            raise BadInput(
                f"{version.ref}: the stored bytes of {entry.path} do not match their digest", "push it again"
            )
        found[entry.path.removeprefix(f"artifacts/{version.name}/")] = data
    return found


def _environment(registry: Registry, version: Version) -> tuple[str, Any]:
    """An environment artifact's app and data."""
    try:
        record = EnvironmentArtifactRecord.model_validate(version.record)
    except ValidationError as e:
        raise BadInput(
            f"{version.ref} is not an environment artifact: {e.errors()[0]['msg']}",
            'an environment artifact\'s artifact.toml says type = "environment" and environment_name = "APP"',
        ) from None
    files = {path: data for path, data in _verified(registry, version).items() if path != "artifact.toml"}
    path = DATA_FILE if DATA_FILE in files else next(iter(files), None) if len(files) == 1 else None
    if path is None:
        raise BadInput(
            f"{version.ref} holds {len(files)} files and no {DATA_FILE}",
            f"an environment artifact is one JSON file of its app's data ({DATA_FILE})",
        )
    try:
        return record.environment_name, json.loads(files[path])
    except ValueError:
        raise BadInput(f"{version.ref}: {path} is not JSON", "an environment artifact's data is a JSON file") from None


def environment_data(registry: Registry, name: str, label: str | None = None) -> EnvironmentData:
    """The data an environment artifact or a universe (at `label`, else its latest) gives a composed env."""
    version = registry.version("artifacts", name, label)
    pin = ArtifactPin(id=name, version=version.label)
    kind = artifact_type(version.record)
    if kind == ENVIRONMENT:
        app, data = _environment(registry, version)
        return EnvironmentData(pin=pin, data={app: data}, environments={app: pin})
    if kind != UNIVERSE:
        raise BadInput(
            f"artifact {pin} is {'a ' + repr(kind) if kind else 'plain files'}, not an environment's data",
            f'name an artifact of type "{ENVIRONMENT}" or "{UNIVERSE}"',
        )
    universe = UniverseRecord.model_validate(version.record)
    found = EnvironmentData(pin=pin, data={})
    for ref in universe.environment_artifact_refs:
        app, data = _environment(registry, registry.version("artifacts", ref.id, ref.version))
        if app in found.data:
            raise BadInput(
                f"universe {pin} gives app {app!r} twice ({found.environments[app]} and {ref})",
                "a universe holds one environment artifact per app",
            )
        found.data[app], found.environments[app] = data, ref
    return found


def create_universe(
    registry: Registry, name: str, refs: list[str], *, description: str | None = None, lineage: Lineage | None = None
) -> tuple[PushResult, UniverseRecord]:
    """A new version of universe `name` over the environment artifacts `refs` names (`NAME[@VERSION]`)."""
    pins = []
    for ref in refs:
        artifact, _, label = ref.partition("@")
        version = registry.version("artifacts", artifact, label or None)
        if artifact_type(version.record) != ENVIRONMENT:
            raise BadInput(
                f"artifact {version.ref} is not an environment artifact",
                "a universe is made of environment artifacts (push one with `agent-env artifact push "
                "--environment-name APP`)",
            )
        pins.append(ArtifactPin(id=artifact, version=version.label))
    try:
        record = UniverseRecord(environment_artifact_refs=pins, description=description, lineage=lineage)
    except ValidationError as e:
        raise BadInput(f"universe {name}: {e.errors()[0]['msg']}", "name each environment artifact once") from None
    apps = [_environment(registry, registry.version("artifacts", p.id, p.version))[0] for p in pins]
    if len(set(apps)) != len(apps):
        raise BadInput(
            f"universe {name}: two environment artifacts seed the same app ({', '.join(sorted(apps))})",
            "a universe holds one environment artifact per app",
        )
    result = push_new_version(registry, name, record.model_dump(mode="json", exclude_none=True))
    return result, record


def push_environment(registry: Registry, name: str, app: str, data: Any, lineage: Lineage | None) -> ArtifactPin:
    """A new version of environment artifact `name`: `app`'s data."""
    record = EnvironmentArtifactRecord(environment_name=app, lineage=lineage)
    blob = json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False, default=str).encode()
    pushed = push_new_version(registry, name, record.model_dump(mode="json", exclude_none=True), {DATA_FILE: blob})
    return ArtifactPin(id=name, version=pushed.label)


def push_universe(
    registry: Registry, name: str, data: Mapping[str, Any], lineage: Lineage, parent: str | None = None
) -> ArtifactPin:
    """Data exported from an environment (`{app: tables}`) as environment artifacts and a universe `name`
    pinning them. Pushed as a new version of `parent` (a universe, `NAME@VERSION`), each app's data is a new
    version of the artifact that universe gave it; otherwise app APP's artifact is `NAME.APP`."""
    own: dict[str, str] = {}
    if parent is not None:
        parent_name, _, parent_label = parent.partition("@")
        loaded = environment_data(registry, parent_name, parent_label or None)
        lineage = lineage.model_copy(update={"parents": [*lineage.parents, loaded.pin]})
        if parent_name == name:
            own = {app: pin.id for app, pin in loaded.environments.items()}
    pins = [push_environment(registry, own.get(app, f"{name}.{app}"), app, data[app], lineage) for app in sorted(data)]
    if not pins:
        raise BadInput(f"universe {name}: the environment exported no app's data", "export an environment with data")
    record = UniverseRecord(environment_artifact_refs=pins, lineage=lineage)
    pushed = push_new_version(registry, name, record.model_dump(mode="json", exclude_none=True))
    return ArtifactPin(id=name, version=pushed.label)


def pin_environment_data(
    documents: DocumentStore, objects: ObjectStore, artifact_id: str, version: str | int | None = None
) -> tuple[str, EnvironmentData]:
    """An environment artifact or universe of the registry, read when a run is planned: its data stored under
    its content's key in the object store (the key is what the run loads), and what it was."""
    registry = Registry(documents, objects)
    try:
        loaded = environment_data(registry, artifact_id, None if version is None else str(version))
    except NotFound as e:
        raise BadInput(f"artifact {artifact_id!r}: {e.problem}", e.fix) from None
    blob = json.dumps(loaded.data, sort_keys=True, ensure_ascii=False, default=str).encode()
    key = keys.content(blob, "json")
    if not objects.exists(key):
        objects.put(key, blob)
    return key, loaded


def registry_environment_data(
    documents: DocumentStore, objects: ObjectStore, artifact_id: str, version: str | int | None = None
) -> str | None:
    """For a step that takes any artifact as an env's data (deploy_env's `artifact_id`): the object key of the
    data of the registry's environment artifact or universe `artifact_id` (pinned as `pin_environment_data` does),
    or None when the registry holds no such version or it is another kind of artifact (plain JSON files)."""
    registry = Registry(documents, objects)
    try:
        found = registry.version("artifacts", artifact_id, None if version is None else str(version))
    except NotFound:
        return None
    if artifact_type(found.record) not in (ENVIRONMENT, UNIVERSE):
        return None
    return pin_environment_data(documents, objects, artifact_id, found.label)[0]
