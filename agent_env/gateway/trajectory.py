"""The trajectory: every call to an instance (who, role, tool, arguments, result or error, virtual
time, real duration), appended to a SQLite file of the instance by a background writer.

Writing never blocks a tool call: entries are queued and committed in small batches (within ~20 ms).
A value nested deeper than `json_depth.MAX_DEPTH` levels is recorded as a note that it was, and an entry
that cannot be read back (nested too deeply by an older gateway, corrupt) is flagged in its page, never
failing the read: graders, teardown and the explorer read every page of a run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_env import json_depth, sqlite_files

log = logging.getLogger("agent_env.gateway.trajectory")

MAX_FIELD_BYTES = 64 * 1024
ENTRY_DEPTH = json_depth.MAX_DEPTH + 1  # an entry is an object holding values of up to MAX_DEPTH levels
PAGE = 10_000  # entries a read returns at most; a full page means there may be more
SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    entry TEXT NOT NULL
);
"""


def _clip(value: Any) -> Any:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (RecursionError, ValueError) as e:  # too deep for json itself, or a cycle
        return {"unrecorded": f"{type(e).__name__}: {str(e)[:200]}"}
    if not json_depth.depth_ok(text):  # it would make every later read of the trajectory fail
        return {"too_deep": True, "limit": json_depth.MAX_DEPTH, "bytes": len(text), "head": text[:200]}
    if len(text) <= MAX_FIELD_BYTES:
        return value
    return {"truncated": True, "bytes": len(text), "head": text[:1024]}


class TrajectoryWriter:
    """One writer thread for all instances of a gateway. It holds at most `max_open` SQLite connections
    (least recently written closed first) and closes an instance's when the instance closes, so a gateway
    serving thousands of runs holds no more files than it serves instances.

    A write that fails (disk full, a file gone) never ends the thread: the failure is kept in `failure`
    (with the count of entries lost), which the gateway's /ready reports, and the writer keeps serving."""

    def __init__(self, max_open: int = 64) -> None:
        self.max_open = max_open
        self.failure: str | None = None
        self.lost = 0
        self._queue: queue.Queue[tuple[Path, Mapping[str, Any]] | None] = queue.Queue()
        self._connections: OrderedDict[Path, sqlite3.Connection] = OrderedDict()  # the writer thread's only
        self._thread = threading.Thread(target=self._run, name="trajectory-writer", daemon=True)
        self._thread.start()

    def record(self, path: Path, entry: Mapping[str, Any]) -> None:
        """Queue an entry; serialising and clipping happen on the writer thread, off the call's path."""
        self._queue.put((path, entry))

    def flush(self) -> None:
        """Wait until everything recorded so far is on disk."""
        done = threading.Event()
        self._queue.put((Path(), {"__flush__": done}))
        done.wait(10)

    def release(self, path: Path) -> None:
        """Close the connection to `path` once what was recorded for it is written (its instance closed)."""
        self._queue.put((path, {"__release__": True}))

    @property
    def open_files(self) -> int:
        return len(self._connections)

    def health(self) -> dict[str, Any] | None:
        """None while every entry was written; else what failed and how many entries were lost."""
        return None if self.failure is None else {"error": self.failure, "lost_entries": self.lost}

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._thread.join(5)

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            try:  # what queued up meanwhile goes in the same transaction; nothing waits for more
                while len(batch) < 500:
                    batch.append(self._queue.get_nowait())
            except queue.Empty:
                pass
            flushes: list[threading.Event] = []
            stop = False
            try:
                stop = self._write(batch, flushes)
            except Exception as e:  # noqa: BLE001 - the thread must outlive any one batch
                self._failed(e, 0)
            for event in flushes:
                event.set()
            if stop:
                for db in self._connections.values():
                    db.close()
                self._connections.clear()
                return

    def _write(self, batch: list[tuple[Path, Mapping[str, Any]] | None], flushes: list[threading.Event]) -> bool:
        """Write one batch; returns whether the writer was told to stop."""
        rows: dict[Path, list[tuple[str]]] = {}
        releases: list[Path] = []
        stop = False
        for it in batch:
            if it is None:
                stop = True
                continue
            path, entry = it
            if "__flush__" in entry:
                flushes.append(entry["__flush__"])
            elif "__release__" in entry:
                releases.append(path)
            else:
                # the recorder's own copy, clipped (the same keys in the same order: the same row)
                row = {**entry, **{key: _clip(entry[key]) for key in ("arguments", "result") if key in entry}}
                rows.setdefault(path, []).append((json.dumps(row, ensure_ascii=False, default=str),))
        for path, values in rows.items():
            try:
                db = self._connection(path)
                with db:
                    db.executemany("INSERT INTO calls (entry) VALUES (?)", values)
            except (sqlite3.Error, OSError) as e:
                self._drop(path)  # reopened on its next entry: the cause may be gone by then
                self._failed(e, len(values), path)
        for path in releases:
            self._drop(path)
        return stop

    def _connection(self, path: Path) -> sqlite3.Connection:
        db = self._connections.get(path)
        if db is not None:
            self._connections.move_to_end(path)
            return db
        while len(self._connections) >= self.max_open:
            self._drop(next(iter(self._connections)))
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            sqlite_files.create(path, SCHEMA)
        # synchronous=NORMAL: no fsync per batch (each read of a run's calls waits for the writer)
        db = sqlite_files.connect(path)
        self._connections[path] = db
        return db

    def _drop(self, path: Path) -> None:
        db = self._connections.pop(path, None)
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    def _failed(self, error: BaseException, lost: int, path: Path | None = None) -> None:
        self.lost += lost
        where = f" writing {path}" if path else ""
        self.failure = f"the trajectory writer failed{where}: {type(error).__name__}: {error}"
        log.error("%s (%d entries lost so far)", self.failure, self.lost)


def read(path: Path, after: int = 0, limit: int | None = None, *, last: bool = False) -> list[dict[str, Any]]:
    """Entries after `after` in order; with `last`, only the latest one (where a reader should start)."""
    if not path.exists():
        return []
    limit = PAGE if limit is None else limit
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if last:
            rows = db.execute("SELECT seq, entry FROM calls ORDER BY seq DESC LIMIT 1").fetchall()
        else:
            rows = db.execute(
                "SELECT seq, entry FROM calls WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit)
            ).fetchall()
    finally:
        db.close()
    return [{"seq": seq, **decode(entry)} for seq, entry in rows]


def decode(text: str | bytes) -> dict[str, Any]:
    """One recorded entry; one that cannot be read is a note saying why (`unreadable`), never an error."""
    try:
        entry = json_depth.loads(text, ENTRY_DEPTH)
    except json_depth.TooDeep as e:
        why = f"it nests deeper than {e.limit} levels (recorded by a gateway from before that limit)"
    except ValueError as e:  # not JSON, not UTF-8: damaged
        why = f"it is not JSON ({str(e)[:200]})"
    else:
        if isinstance(entry, dict):
            return entry
        why = f"it is a JSON {type(entry).__name__}, not an object"
    return {"unreadable": f"this entry cannot be read: {why}", "bytes": len(text)}


def decode_lines(raw: bytes) -> list[dict[str, Any]]:
    """The entries of a trajectory kept as JSON lines (`keys.trajectory`), each decoded as `decode` does."""
    return [decode(line) for line in raw.splitlines() if line.strip()]
