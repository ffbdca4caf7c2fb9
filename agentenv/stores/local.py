"""Local stores: documents in one SQLite file, objects as files. The zero-config default."""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import Any

from agentenv.errors import NotFound
from agentenv.stores.base import DocumentStore, ObjectStore, check_collection, check_field, check_object_key


class SqliteDocumentStore(DocumentStore):
    """Safe for several processes (WAL, busy timeout) and threads (one connection behind a lock)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        # Private before the WAL exists: SQLite gives its -wal and -shm files the database's mode. (chmod, not
        # an open/close: closing any descriptor of the file drops this process's SQLite locks on it.)
        os.chmod(path, 0o600)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS documents ("
            " collection TEXT NOT NULL, key TEXT NOT NULL, doc TEXT NOT NULL,"
            " PRIMARY KEY (collection, key))"
        )

    def put(self, collection: str, key: str, doc: dict[str, Any]) -> None:
        text = json.dumps(doc, default=str)
        with self._lock:
            self._db.execute(
                "INSERT INTO documents VALUES (?, ?, ?) ON CONFLICT(collection, key) DO UPDATE SET doc = excluded.doc",
                (check_collection(collection), key, text),
            )

    def get(self, collection: str, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT doc FROM documents WHERE collection = ? AND key = ?", (check_collection(collection), key)
            ).fetchone()
        return json.loads(row[0]) if row else None

    def delete(self, collection: str, key: str) -> bool:
        with self._lock:
            cur = self._db.execute(
                "DELETE FROM documents WHERE collection = ? AND key = ?", (check_collection(collection), key)
            )
        return cur.rowcount > 0

    def query(self, collection, *, where=None, key_prefix=None, order_by=None, descending=False, limit=None):
        sql = "SELECT doc FROM documents WHERE collection = ?"
        args: list[Any] = [check_collection(collection)]
        for field, value in (where or {}).items():
            sql += f" AND json_extract(doc, '$.{check_field(field)}') = ?"
            args.append(value)
        if key_prefix:
            sql += " AND substr(key, 1, ?) = ?"
            args += [len(key_prefix), key_prefix]
        if order_by:
            sql += f" ORDER BY json_extract(doc, '$.{check_field(order_by)}') {'DESC' if descending else 'ASC'}"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [json.loads(r[0]) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class FileObjectStore(ObjectStore):
    """Objects as files under one root; writes are atomic (temp file + rename)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / check_object_key(key)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")  # 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no object with key {key!r} in {self.root}") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> bool:
        try:
            self._path(key).unlink()
            return True
        except FileNotFoundError:
            return False

    def list(self, prefix: str = "") -> list[str]:
        keys = []
        for path in self.root.rglob("*"):
            if path.is_file() and not path.name.startswith(".tmp-"):
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)


def create_private_once(path: Path, data: bytes) -> None:
    """Write `path` (mode 0600) unless it exists. Atomic (the whole content or no file), and the first of
    concurrent creators wins, so every process then reads the same content (a key, an install id)."""
    import secrets

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")  # one per process and thread
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)  # fails if another creator was first: theirs stands
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
