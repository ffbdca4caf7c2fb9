"""What the registry stores and says: a version (record, files, dependencies, digest, who pushed it and when),
the item a bundle offers for pushing, and the outcome of a push. An eval's version is its record alone (the
references it pins), with no files."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

KINDS = ("envs", "tasks", "agents", "artifacts", "evals")
Kind = Literal["envs", "tasks", "agents", "artifacts", "evals"]
SINGULAR = {"envs": "env", "tasks": "task", "agents": "agent", "artifacts": "artifact", "evals": "eval"}


class FileEntry(BaseModel):
    """One file of a version: its path in the bundle layout (`envs/desk/data.json`) and its bytes' digest."""

    path: str
    sha256: str
    size: int


class Item(BaseModel):
    """An env, task, agent, artifact or eval as read from a bundle, before it is pushed."""

    kind: Kind
    name: str
    record: dict[str, Any]
    files: list[FileEntry]
    uses: dict[str, dict[str, str]] = Field(default_factory=dict)  # kind -> name -> label (tasks only)
    root: Path = Field(exclude=True)  # the bundle folder the files' paths are relative to

    @property
    def label(self) -> str:
        return str(self.record.get("version") or "1")

    @property
    def ref(self) -> str:
        return f"{SINGULAR[self.kind]} {self.name}@{self.label}"


class Version(BaseModel):
    """An immutable version, as stored in the documents store (`keys.REGISTRY`)."""

    kind: Kind
    name: str
    label: str
    digest: str  # "sha256:HEX" of the manifest
    record: dict[str, Any]
    files: list[FileEntry]
    uses: dict[str, dict[str, str]] = Field(default_factory=dict)
    pushed_by: str
    pushed_at: str  # ISO 8601, UTC

    @property
    def ref(self) -> str:
        return f"{SINGULAR[self.kind]} {self.name}@{self.label}"


class PushResult(BaseModel):
    """What a push (or a bundle file's import) did with one item: `pushed` (`imported`) a new version, or found
    it `unchanged`."""

    kind: Kind
    name: str
    label: str
    digest: str
    outcome: Literal["pushed", "imported", "unchanged"]

    def __str__(self) -> str:
        return f"{self.outcome}: {SINGULAR[self.kind]} {self.name}@{self.label} {self.digest[:19]}…"
