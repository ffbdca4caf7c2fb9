"""A tiny notes store in one SQLite file per run: the test stand-in environment for durability tests.

It keeps real state on disk and makes every write idempotent by an effect id, which is what lets a
retried step (after a worker crash) take effect exactly once.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (key TEXT PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS effects (effect_id TEXT PRIMARY KEY, key TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS attempts (n INTEGER PRIMARY KEY AUTOINCREMENT, effect_id TEXT NOT NULL);
"""


class Scratchpad:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = sqlite3.connect(path, timeout=10, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)

    @classmethod
    def in_folder(cls, folder: Path) -> Scratchpad:
        return cls(folder / "scratchpad.sqlite")

    def close(self) -> None:
        self._db.close()

    def write(self, key: str, text: str, *, effect_id: str) -> bool:
        """Store `text` under `key` once per effect id. True if this call wrote it."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("INSERT INTO attempts (effect_id) VALUES (?)", (effect_id,))
            if self._db.execute("SELECT 1 FROM effects WHERE effect_id = ?", (effect_id,)).fetchone():
                return False
            self._db.execute("INSERT INTO effects VALUES (?, ?)", (effect_id, key))
            self._db.execute(
                "INSERT INTO notes VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET text = excluded.text", (key, text)
            )
            return True

    def read(self, keys: list[str] | None = None) -> dict[str, str]:
        rows = self._db.execute("SELECT key, text FROM notes ORDER BY key").fetchall()
        return {k: t for k, t in rows if keys is None or k in keys}

    def effects(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT effect_id FROM effects ORDER BY effect_id")]

    def attempts(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT effect_id FROM attempts ORDER BY n")]
