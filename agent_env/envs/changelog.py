"""An app's changelog: a row for each row its tables gain, change or lose, with who wrote it.

The source is the app's own SQLite file: triggers on each of its tables write a row into `_agentenv_changes` in the
same transaction as the write itself, so the changelog is never out of step with the state (a rolled-back call leaves
no row), sees every write whatever made it (a tool, a load, a reset), and costs one small insert per changed row.
The triggers are TEMP ones, made on each connection an `AppInstance` opens: the file stays plain SQLite, and another
program writing it needs none of the functions they call.

Who wrote a row is the transaction's writer (`writing`): the gateway passes the actor of each call in its `Ctx` (the
role, the tool, the trigger action), and sync calls run one at a time per app, each in one transaction, so a row has
exactly the actor whose call wrote it; data-plane writes name their operation.

Ids are the instance's, shared by its in-process apps (`ChangeIds`), so one `after_id` pages all of them in order.
Bounded: an instance serves its last `KEEP` ids; each app's table is pruned past them as it writes (so it holds at
most `KEEP` rows), and a row's fields are clipped to `FIELDS_BYTES`: an instance's changelog is at most its apps x
`KEEP` rows of ~5 KB on disk, counted in its app-data storage budget like the rest of its apps' files.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import itertools
import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

TABLE = "_agentenv_changes"
SCHEMA = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    id INTEGER PRIMARY KEY,
    timestamp TEXT NOT NULL,
    virtual_time TEXT,
    table_name TEXT NOT NULL,
    operation TEXT NOT NULL,
    row_id TEXT,
    changed_fields TEXT,
    actor TEXT
)"""
KEEP = 10_000  # the ids an instance serves (its last ones); each app's table is pruned past them
FIELDS_BYTES = 4096  # a row's changed fields, as JSON, at most (values clipped first, then fields left out)
VALUE_CHARS = 256  # a text value in changed fields, at most
MAX_COLUMNS = 60  # the columns recorded of a wider table (SQLite's json_object takes at most 127 arguments)
SUMMARY_CHARS = 300

JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]


class ChangeIds:
    """The ids of an instance's changes: one increasing sequence shared by its apps (a rolled-back write leaves a
    gap). Seeded from what the apps' files hold, so ids keep rising across restarts and restores."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    @property
    def last(self) -> int:
        return self._last

    def seen(self, last: int | None) -> None:
        with self._lock:
            self._last = max(self._last, last or 0)

    def next(self) -> int:
        with self._lock:
            self._last += 1
            return self._last


@dataclass(frozen=True)
class Writer:
    actor: str | None  # JSON text
    virtual_time: str | None


_writer: contextvars.ContextVar[Writer | None] = contextvars.ContextVar("agentenv_change_writer", default=None)


@contextlib.contextmanager
def writing(actor: Mapping[str, object] | None, virtual_time: str | None = None) -> Iterator[None]:
    """Rows written inside (on this thread or task) name `actor`."""
    token = _writer.set(Writer(json.dumps(actor) if actor else None, virtual_time))
    try:
        yield
    finally:
        _writer.reset(token)


def _actor() -> str | None:
    writer = _writer.get()
    return writer.actor if writer else None


def _virtual_time() -> str | None:
    writer = _writer.get()
    return writer.virtual_time if writer else None


def _clip(value: JsonValue) -> JsonValue:
    if isinstance(value, str) and len(value) > VALUE_CHARS:
        return f"{value[:VALUE_CHARS]}… ({len(value)} characters)"
    return value


def _fields(operation: str, old: str | None, new: str | None) -> str:
    """The changed fields as JSON: an insert's or delete's whole row, an update's {column: {old, new}} for the
    columns it changed; clipped to FIELDS_BYTES (the fields that do not fit are named in `_omitted`)."""
    before, after = json.loads(old) if old else {}, json.loads(new) if new else {}
    if operation == "UPDATE":
        changed: dict[str, JsonValue] = {
            k: {"old": _clip(before.get(k)), "new": _clip(v)} for k, v in after.items() if before.get(k) != v
        }
    else:
        changed = {k: _clip(v) for k, v in (after if operation == "INSERT" else before).items()}
    text = json.dumps(changed, ensure_ascii=False)
    if len(text.encode()) <= FIELDS_BYTES:
        return text
    kept: dict[str, JsonValue] = {}
    omitted: list[JsonValue] = []
    size = 64
    for key, value in changed.items():
        part = len(json.dumps({key: value}, ensure_ascii=False).encode())
        if size + part + len(key) + 4 > FIELDS_BYTES:
            omitted.append(key)
        else:
            kept[key] = value
            size += part
    kept["_omitted"] = omitted[:20]
    return json.dumps(kept, ensure_ascii=False)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _row_json(ref: str, columns: list[str]) -> str:
    """json_object of a row (`NEW` or `OLD`); a BLOB (which JSON cannot hold) is recorded as its size."""
    values = ", ".join(
        f"'{c.replace(chr(39), chr(39) * 2)}', CASE WHEN typeof({ref}.{_quote(c)}) = 'blob' "
        f"THEN '<' || length({ref}.{_quote(c)}) || ' bytes>' ELSE {ref}.{_quote(c)} END"
        for c in columns[:MAX_COLUMNS]
    )
    return f"json_object({values})"


def _row_id(ref: str, keys: list[str]) -> str:
    if not keys:
        return f"CAST({ref}.rowid AS TEXT)"
    if len(keys) == 1:
        return f"CAST({ref}.{_quote(keys[0])} AS TEXT)"
    return "json_object(" + ", ".join(f"'{k.replace(chr(39), chr(39) * 2)}', {ref}.{_quote(k)}" for k in keys) + ")"


def _tables(db: sqlite3.Connection) -> list[str]:
    rows = db.execute(
        "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "AND name NOT LIKE '\\_agentenv%' ESCAPE '\\' ORDER BY name"
    ).fetchall()
    return [r[0] for r in rows]


def install(db: sqlite3.Connection, ids: ChangeIds) -> None:
    """Make `db` record its changes: the table, the functions its triggers call, a trigger for each write of each
    table, and the pruning of rows past the last `KEEP` ids. Again after a restore (the tables may differ)."""
    db.execute(SCHEMA)
    db.create_function("agentenv_change_id", 0, ids.next)
    db.create_function("agentenv_change_actor", 0, _actor)
    db.create_function("agentenv_change_vtime", 0, _virtual_time)
    db.create_function("agentenv_change_fields", 3, _fields)
    ids.seen(db.execute(f"SELECT MAX(id) FROM {TABLE}").fetchone()[0])
    for (name,) in db.execute("SELECT name FROM temp.sqlite_master WHERE type = 'trigger'").fetchall():
        db.execute(f"DROP TRIGGER temp.{_quote(name)}")
    db.execute(
        f"CREATE TEMP TRIGGER _agentenv_prune AFTER INSERT ON main.{TABLE} "
        f"BEGIN DELETE FROM {TABLE} WHERE id <= NEW.id - {int(KEEP)}; END"
    )
    for table in _tables(db):
        info = db.execute(f"PRAGMA main.table_info({_quote(table)})").fetchall()
        columns = [row[1] for row in info]
        keys = [row[1] for row in sorted(info, key=lambda r: r[5]) if row[5] > 0]
        literal = "'" + table.replace("'", "''") + "'"
        for operation, ref in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
            old = _row_json("OLD", columns) if operation != "INSERT" else "NULL"
            new = _row_json("NEW", columns) if operation != "DELETE" else "NULL"
            when = ""
            if operation == "UPDATE":  # an update that changes nothing is no change
                when = "WHEN " + " OR ".join(f"OLD.{_quote(c)} IS NOT NEW.{_quote(c)}" for c in columns) + " "
            db.execute(
                f"CREATE TEMP TRIGGER {_quote(f'_agentenv_{operation.lower()}_{table}')} AFTER {operation} "
                f"ON main.{_quote(table)} FOR EACH ROW {when}BEGIN INSERT INTO {TABLE} "
                "(id, timestamp, virtual_time, table_name, operation, row_id, changed_fields, actor) VALUES ("
                "agentenv_change_id(), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), agentenv_change_vtime(), "
                f"{literal}, '{operation}', {_row_id(ref, keys)}, "
                f"agentenv_change_fields('{operation}', {old}, {new}), agentenv_change_actor()); END"
            )


def last_id(path: Path) -> int:
    """The highest change id an app's file holds (0: none, or no file yet)."""
    if not path.exists():
        return 0
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = db.execute(f"SELECT MAX(id) FROM {TABLE}").fetchone()
    except sqlite3.OperationalError:  # a file from before the changelog
        return 0
    finally:
        db.close()
    return int(row[0] or 0)


def read(path: Path, app: str, after_id: int, limit: int) -> list[dict[str, JsonValue]]:
    """An app's change rows past `after_id`, oldest first, at most `limit`, in the protocol's shape (`actors`: who
    wrote it, none when no one the gateway knows did)."""
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT id, timestamp, virtual_time, table_name, operation, row_id, changed_fields, actor "
            f"FROM {TABLE} WHERE id > ? ORDER BY id LIMIT ?",
            (after_id, limit),
        ).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()
    return [
        {
            "id": id_,
            "timestamp": timestamp,
            "virtual_time": vtime,
            "schema_name": app,
            "table_name": table,
            "operation": operation,
            "row_id": row_id,
            "summary": summary(operation, json.loads(fields) if fields else {}),
            "changed_fields": json.loads(fields) if fields else None,
            "actors": [json.loads(actor)] if actor else [],
        }
        for id_, timestamp, vtime, table, operation, row_id, fields, actor in rows
    ]


def summary(operation: str, fields: dict[str, JsonValue]) -> str:
    """A change in a line, as the reference words it: `Inserted: {...}`, `Deleted: {...}`, `col: 'a' -> 'b'`."""
    if operation == "UPDATE":
        parts = []
        for key, change in fields.items():
            if isinstance(change, dict):
                parts.append(f"{key}: {_short(change.get('old'))} -> {_short(change.get('new'))}")
        text = ", ".join(parts)
    else:
        text = f"{'Inserted' if operation == 'INSERT' else 'Deleted'}: {json.dumps(fields, ensure_ascii=False)}"
    return text[:SUMMARY_CHARS]


def _short(value: JsonValue) -> str:
    return "NULL" if value is None else repr(str(value)[:50])


def read_apps(apps: list[tuple[str, Path]], after_id: int, limit: int) -> list[dict[str, JsonValue]]:
    """The change rows of several apps sharing one instance's ids, merged in id order: at most `limit`."""
    pages = [read(path, app, after_id, limit) for app, path in apps]
    return list(itertools.islice(heapq.merge(*pages, key=lambda row: cast(int, row["id"])), limit))
