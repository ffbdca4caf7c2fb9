"""SQLite files made per instance (an app's database, a trajectory): opened one way, and created from a
template built once per process. A trainer makes one instance per episode: writing a prepared file costs a
tenth of creating the schema (and switching to WAL) in every new file."""

from __future__ import annotations

import functools
import os
import sqlite3
import tempfile
from pathlib import Path


def connect(path: Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """Autocommit, WAL, `synchronous=NORMAL`: a commit is safe from a killed process once in the
    write-ahead log (only an OS crash could lose the last ones), without an fsync on every commit."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=check_same_thread, timeout=30)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
    except BaseException:
        db.close()  # a damaged file or a full disk: no half-set-up connection left open
        raise
    return db


def create(path: Path, schema: str) -> None:
    """Make `path` a new database with `schema`, whole or not at all (a crash never leaves half a schema)."""
    part = path.with_name(f".{path.name}.part")
    part.write_bytes(_template(schema))
    os.replace(part, path)


@functools.lru_cache(maxsize=64)
def _template(schema: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="agentenv-sqlite-") as tmp:
        path = Path(tmp) / "template.sqlite"
        db = connect(path)
        try:
            db.executescript(schema)
        finally:
            db.close()  # checkpoints: the whole database is in the main file
        return path.read_bytes()
