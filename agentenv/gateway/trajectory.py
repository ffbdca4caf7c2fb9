"""The trajectory: every call to an instance (who, role, tool, arguments, result or error, virtual
time, real duration), appended to a SQLite file of the instance by a background writer.

Writing never blocks a tool call: entries are queued and committed in small batches (within ~20 ms).
"""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
from pathlib import Path
from typing import Any

MAX_FIELD_BYTES = 64 * 1024
SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    entry TEXT NOT NULL
);
"""


def _clip(value: Any) -> Any:
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= MAX_FIELD_BYTES:
        return value
    return {"truncated": True, "bytes": len(text), "head": text[:1024]}


class TrajectoryWriter:
    """One writer thread for all instances of a gateway."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Path, dict[str, Any]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="trajectory-writer", daemon=True)
        self._thread.start()
        self._lock = threading.Lock()

    def record(self, path: Path, entry: dict[str, Any]) -> None:
        """Queue an entry; serialising and clipping happen on the writer thread, off the call's path."""
        self._queue.put((path, entry))

    def flush(self) -> None:
        """Wait until everything recorded so far is on disk."""
        done = threading.Event()
        self._queue.put((Path(), {"__flush__": done}))
        done.wait(10)

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._thread.join(5)

    def _run(self) -> None:
        connections: dict[Path, sqlite3.Connection] = {}
        while True:
            item = self._queue.get()
            batch = [item]
            try:  # what queued up meanwhile goes in the same transaction; nothing waits for more
                while len(batch) < 500:
                    batch.append(self._queue.get_nowait())
            except queue.Empty:
                pass
            flushes = []
            rows: dict[Path, list[tuple[str]]] = {}
            stop = False
            for it in batch:
                if it is None:
                    stop = True
                    continue
                path, entry = it
                if "__flush__" in entry:
                    flushes.append(entry["__flush__"])
                    continue
                for key in ("arguments", "result"):
                    if key in entry:
                        entry[key] = _clip(entry[key])
                rows.setdefault(path, []).append((json.dumps(entry, ensure_ascii=False, default=str),))
            for path, values in rows.items():
                db = connections.get(path)
                if db is None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    db = connections[path] = sqlite3.connect(path, isolation_level=None)
                    db.execute("PRAGMA journal_mode=WAL")
                    db.executescript(SCHEMA)
                with db:
                    db.executemany("INSERT INTO calls (entry) VALUES (?)", values)
            for event in flushes:
                event.set()
            if stop:
                for db in connections.values():
                    db.close()
                return


def read(path: Path, after: int = 0, limit: int = 10_000, *, last: bool = False) -> list[dict[str, Any]]:
    """Entries after `after` in order; with `last`, only the latest one (where a reader should start)."""
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if last:
            rows = db.execute("SELECT seq, entry FROM calls ORDER BY seq DESC LIMIT 1").fetchall()
        else:
            rows = db.execute("SELECT seq, entry FROM calls WHERE seq > ? ORDER BY seq LIMIT ?",
                              (after, limit)).fetchall()
    finally:
        db.close()
    return [{"seq": seq, **json.loads(entry)} for seq, entry in rows]
