"""What a run kept in the object store, to download: snapshots, kept trajectories, transcripts, collected
artifacts, placements (the layout is `agent_env.stores.keys`). Only keys under the run's own prefix are
served, and always as an attachment: a file an agent wrote never renders as a page of the explorer.
"""

from __future__ import annotations

from typing import TypedDict

from agent_env.errors import NotFound
from agent_env.stores import Stores, keys


class Artifact(TypedDict):
    """A file the run kept: its store key, its path under the run, and its kind (the path's first part)."""

    key: str
    path: str
    kind: str


def listing(stores: Stores, run_id: str) -> list[Artifact]:
    prefix = keys.run(run_id)
    return [
        {"key": key, "path": key.removeprefix(prefix), "kind": key.removeprefix(prefix).split("/", 1)[0]}
        for key in sorted(stores.objects.list(prefix))
    ]


def read(stores: Stores, run_id: str, path: str) -> tuple[str, bytes]:
    """The file's name and bytes; NotFound for anything not kept under the run's prefix."""
    key = keys.run(run_id) + path
    if not path or ".." in path.split("/") or not stores.objects.exists(key):
        raise NotFound(f"run {run_id} kept no file {path!r}", "the run's page lists what it kept")
    return path.rsplit("/", 1)[-1], stores.objects.get(key)
