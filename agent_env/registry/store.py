"""The registry over the shared stores: versions in the documents store (`keys.REGISTRY`), file bytes in the
objects store under their sha256 (`keys.registry_blob`), stored once whoever pushes them.

A label never moves to other content. A push writes the blobs first, then creates the version's document with
the stores' atomic `create`: of two pushes of different content under one label exactly one wins, and the
other is told of the conflict; a push of the same content finds its version and reuses it.
"""

from __future__ import annotations

import difflib
import getpass
import socket
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from agent_env import packing
from agent_env.errors import BadInput, NotFound
from agent_env.registry.bundle_items import read_bundle
from agent_env.registry.manifest import digest, file_sha256
from agent_env.registry.models import SINGULAR, Item, Kind, PushResult, Version
from agent_env.spec.evals import EvalSpec, eval_from, eval_toml
from agent_env.spec.times import iso
from agent_env.stores import keys
from agent_env.stores.backends import open_store
from agent_env.stores.base import DocumentStore, ObjectStore, check_object_key, version_order

Progress = Callable[[str], None]


class Registry:
    """The registry over a documents store (versions) and an objects store (file bytes): push, read and pull
    versions. `open_registry(settings)` opens the install's."""

    def __init__(self, documents: DocumentStore, objects: ObjectStore) -> None:
        self.documents = documents
        self.objects = objects

    def close(self) -> None:
        """Close both stores."""
        self.documents.close()
        self.objects.close()

    # --- push ---

    def push_bundle(self, folder: Path, progress: Progress | None = None) -> list[PushResult]:
        """Every item of a bundle, dependencies first. All records are validated, and every label checked
        against what is stored, before anything is written: a bundle with a conflict pushes nothing."""

        items = read_bundle(folder)
        conflicts = [
            str(conflict)
            for item in items
            if (stored := self.documents.get(keys.REGISTRY, keys.registry_version(item.kind, item.name, item.label)))
            and (conflict := _conflict(item, stored.get("digest"), _digest(item)))
        ]
        if conflicts:
            raise BadInput(
                f"{folder}: {len(conflicts)} conflict(s); nothing was pushed\n" + "\n".join(conflicts),
                "bump `version` in each record named, and push again: a version's content never changes",
            )
        results = []
        for n, item in enumerate(items, 1):
            if progress:
                progress(f"[{n}/{len(items)}] {item.ref} ({len(item.files)} files)")
            results.append(self.push(item))
        return results

    def push(self, item: Item, contents: Mapping[str, bytes] | None = None) -> PushResult:
        """Store `item` as a new version, or find it already stored; BadInput if its label holds other content.
        Its files' bytes are read from its folder, or given in `contents` (path -> bytes: a run's output)."""
        item_digest = _digest(item)
        key = keys.registry_version(item.kind, item.name, item.label)
        if (stored := self.documents.get(keys.REGISTRY, key)) is None:
            for entry in item.files:
                blob = keys.registry_blob(entry.sha256)
                if not self.objects.exists(blob):
                    data = _read_again(item, entry.path, entry.sha256) if contents is None else contents[entry.path]
                    self.objects.create(blob, data)  # False: a racer stored it
            version = Version(
                kind=item.kind,
                name=item.name,
                label=item.label,
                digest=item_digest,
                record=item.record,
                files=item.files,
                uses=item.uses,
                pushed_by=f"{getpass.getuser()}@{socket.gethostname()}",
                pushed_at=iso(datetime.now(UTC).replace(microsecond=0)),
            )
            if self.documents.create(keys.REGISTRY, key, version.model_dump(mode="json")):
                return PushResult(
                    kind=item.kind, name=item.name, label=item.label, digest=item_digest, outcome="pushed"
                )
            stored = self.documents.get(keys.REGISTRY, key) or {}
        if conflict := _conflict(item, stored.get("digest"), item_digest):
            raise conflict
        return PushResult(kind=item.kind, name=item.name, label=item.label, digest=item_digest, outcome="unchanged")

    # --- read ---

    def all_versions(self, kind: Kind) -> dict[str, list[Version]]:
        """Every item of a kind: name -> its versions, oldest label first."""
        found: dict[str, list[Version]] = {}
        for doc in self.documents.query(keys.REGISTRY, key_prefix=f"{kind}/"):
            version = Version.model_validate(doc)
            found.setdefault(version.name, []).append(version)
        return {name: _ordered(found[name]) for name in sorted(found)}

    def versions(self, kind: Kind, name: str) -> list[Version]:
        """An item's versions, oldest label first; NotFound naming close matches when there is none."""
        docs = self.documents.query(keys.REGISTRY, key_prefix=keys.registry_item(kind, name))
        if not docs:
            known = list(self.all_versions(kind))
            close = difflib.get_close_matches(name, known, n=3)
            raise NotFound(
                f"no {SINGULAR[kind]} {name!r} in the registry"
                + (f" (did you mean {' or '.join(close)}?)" if close else ""),
                f"list them with `agent-env registry list {kind}`, or push its bundle with `agent-env registry push`",
            )
        return _ordered([Version.model_validate(d) for d in docs])

    def version(self, kind: Kind, name: str, label: str | None = None) -> Version:
        """One version (the latest label when `label` is None)."""
        versions = self.versions(kind, name)
        if label is None:
            return versions[-1]
        for v in versions:
            if v.label == label:
                return v
        raise NotFound(
            f"{SINGULAR[kind]} {name} has no version {label!r}",
            f"use one of: {', '.join(v.label for v in versions)}",
        )

    def eval(self, name: str, label: str | None = None) -> EvalSpec:
        """The eval `name` names (its latest version, or `label`), checked against its digest."""
        v = self.version("evals", name, label)
        if digest(v.kind, v.name, v.record, v.files, v.uses) != v.digest:
            raise BadInput(
                f"the registry's record of {v.ref} does not match its digest {v.digest}: it was altered",
                "push the eval again from its bundle under a new version",
            )
        found = eval_from(v.record, v.name, f"the registry's {v.ref}")
        return found.model_copy(update={"source": "registry"})

    def snapshot(self, version: Version) -> list[Version]:
        """A version and what it uses (a task's envs, agents and artifacts, at the labels of push time)."""
        return [version] + [
            self.version(kind, name, label)  # type: ignore[arg-type]
            for kind, named in version.uses.items()
            for name, label in named.items()
        ]

    def runs_using(self, version: Version) -> list[dict]:
        """Run records whose pins name this version (tasks by `ID@VERSION`, envs and agents by `NAME@VERSION`)."""
        if version.kind in ("artifacts", "evals"):
            return []
        if version.kind == "tasks":
            wanted = f"{version.record.get('id', version.name)}@{version.label}"
            return [r for r in self._runs() if r.get("pins", {}).get("task") == wanted]
        wanted = f"{version.name}@{version.label}"
        return [
            r
            for r in self._runs()
            if any(str(pin).split(" ", 1)[0] == wanted for pin in (r.get("pins", {}).get(version.kind) or {}).values())
        ]

    def _runs(self) -> list[dict]:
        return self.documents.query(keys.RUNS, order_by="started_at", descending=True, limit=10_000)

    # --- pull ---

    def pull(self, version: Version, out: Path) -> list[Path]:
        """Write a version's files (and, for a task, those of what it uses) under `out` in the bundle layout,
        each checked against its digest first: nothing is written if any blob was tampered with. A file is never
        written through a link already in `out` (see `packing.write`)."""
        contents: dict[str, bytes] = {}
        for v in self.snapshot(version):
            if digest(v.kind, v.name, v.record, v.files, v.uses) != v.digest:
                raise BadInput(
                    f"the registry's record of {v.ref} does not match its digest {v.digest}: it was altered",
                    "push the item again from its original folder under a new version",
                )
            for entry in v.files:
                data = self.objects.get(keys.registry_blob(entry.sha256))
                if file_sha256(data) != entry.sha256:
                    raise BadInput(
                        f"{v.ref}: the stored bytes of {entry.path} do not match its digest sha256:{entry.sha256} "
                        "(the blob was altered or damaged); nothing was written",
                        "push the item again from its original folder, or ask whoever manages the object store",
                    )
                contents[_inside(entry.path)] = data
            if v.kind == "evals":  # an eval is its record: written as the file it was read from
                contents[_inside(f"evals/{v.name}.toml")] = eval_toml(eval_from(v.record, v.name, v.ref)).encode()
        return sorted(packing.write(out, path, data) for path, data in contents.items())


def _digest(item: Item) -> str:
    return digest(item.kind, item.name, item.record, item.files, item.uses)


def _conflict(item: Item, stored: str | None, yours: str) -> BadInput | None:
    """The error of a label already holding other content; None when it holds this content."""
    if stored == yours:
        return None
    return BadInput(
        f"{item.ref} is already in the registry with other content: stored {stored}, yours {yours}. "
        "A version never changes",
        f"bump `version` in the {SINGULAR[item.kind]}'s record (e.g. to {_next_label(item.label)!r}) and push again",
    )


def _read_again(item: Item, path: str, sha256: str) -> bytes:
    """A file of the item as it was read and digested (it may have changed, or become a link, since)."""
    data = packing.read(item.root, path)
    if file_sha256(data) != sha256:
        raise BadInput(f"{item.root / path} changed while {item.ref} was pushed", "push again once it is written")
    return data


def _inside(rel: str) -> str:
    """`rel`, refused if it could land outside the folder pulled into (records come from a shared store)."""
    try:
        check_object_key(rel)
    except BadInput:
        raise BadInput(f"the registry names a file {rel!r} outside the item's folder", "push it again") from None
    return rel


def _ordered(versions: list[Version]) -> list[Version]:
    return sorted(versions, key=lambda v: version_order(v.label))


def _next_label(label: str) -> str:
    head, _, last = label.rpartition(".")
    return (
        f"{head}.{int(last) + 1}"
        if head and last.isdigit()
        else str(int(label) + 1)
        if label.isdigit()
        else f"{label}.1"
    )


def open_registry(settings) -> Registry:
    """The registry of the stores this install's settings name (only documents and objects are opened)."""

    documents = open_store("documents", settings)
    try:
        return Registry(documents, open_store("objects", settings))
    except BaseException:
        documents.close()
        raise
