"""Local stores: documents in one SQLite file, objects as files. The zero-config default.

(Images are the local Docker daemon's, in `local_images.py`; secrets a file, in `secrets.py`.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from agent_env.errors import BadInput
from agent_env.stores.base import (
    Document,
    DocumentStore,
    MissingObject,
    ObjectStore,
    Page,
    Where,
    check_collection,
    check_field,
    check_limit,
    check_object_key,
    check_where,
    make_cursor,
    query_shape,
    read_cursor,
)

CHUNK = 1 << 20  # streamed copies move 1 MiB at a time


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
        # Fields looked up across a store that keeps growing (a gateway keeps every finished run's instances):
        # a run's documents at its end, and the few that expire, among all. Indexed, so neither lookup reads
        # the whole collection.
        self._db.execute(
            "CREATE INDEX IF NOT EXISTS documents_run_id ON documents (collection, json_extract(doc, '$.run_id'), key)"
        )
        self._db.execute(
            "CREATE INDEX IF NOT EXISTS documents_expires_at"
            " ON documents (collection, json_extract(doc, '$.expires_at'), key)"
        )

    def put(self, collection: str, key: str, doc: Document) -> None:
        text = json.dumps(doc, default=str)
        with self._lock:
            self._db.execute(
                "INSERT INTO documents VALUES (?, ?, ?) ON CONFLICT(collection, key) DO UPDATE SET doc = excluded.doc",
                (check_collection(collection), key, text),
            )

    def create(self, collection: str, key: str, doc: Document) -> bool:
        text = json.dumps(doc, default=str)
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO documents VALUES (?, ?, ?) ON CONFLICT(collection, key) DO NOTHING",
                (check_collection(collection), key, text),
            )
        return cur.rowcount == 1

    def get(self, collection: str, key: str) -> Document | None:
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

    def query(
        self,
        collection: str,
        *,
        where: Where | None = None,
        key_prefix: str | None = None,
        order_by: str | None = None,
        descending: bool = False,
        limit: int | None = None,
    ) -> list[Document]:
        rows = self._select(collection, where, key_prefix, order_by, descending, limit, None)
        return [json.loads(doc) for _, doc, _ in rows]

    def page(
        self, collection, *, where=None, key_prefix=None, order_by=None, descending=False, limit=100, after=None
    ) -> Page:
        """Keyset paging: the cursor holds the last document's (order value, key), so each page is one
        indexed range read, and documents written meanwhile do not shift the pages."""
        shape = query_shape(collection, where, key_prefix, order_by, descending)
        position = _check_position(read_cursor(after, shape), order_by) if after else None
        limit = check_limit(limit)
        rows = self._select(collection, where, key_prefix, order_by, descending, limit + 1, position)
        more = len(rows) > limit
        rows = rows[:limit]
        next_ = None
        if more:
            key, _, value = rows[-1]
            next_ = make_cursor(shape, [value, key] if order_by else key)
        return Page(items=[json.loads(doc) for _, doc, _ in rows], next=next_)

    def _select(self, collection, where, key_prefix, order_by, descending, limit, after) -> list[tuple[str, str, Any]]:
        """(key, doc, order value) rows of a query, after a keyset position if one is given.

        SQLite orders NULL (a missing field) first, then numbers, then text; `>` and `<` compare across types
        the same way but not with NULL, hence the explicit NULL cases below."""
        value = f"json_extract(doc, '$.{check_field(order_by)}')" if order_by else "NULL"
        sql = f"SELECT key, doc, {value} FROM documents WHERE collection = ?"
        args: list[Any] = [check_collection(collection)]
        for field, wanted in check_where(where).items():
            sql += f" AND json_extract(doc, '$.{field}') = ?"
            args.append(wanted)
        if key_prefix:
            sql += " AND substr(key, 1, ?) = ?"
            args += [len(key_prefix), key_prefix]
        more = "<" if descending else ">"
        if after is not None and not order_by:
            sql += f" AND key {more} ?"
            args.append(after)
        elif after is not None:
            last, key = after
            if last is None and not descending:
                sql += f" AND ({value} IS NOT NULL OR key > ?)"
                args.append(key)
            elif last is None:
                sql += f" AND {value} IS NULL AND key < ?"
                args.append(key)
            else:
                tail = f" OR {value} IS NULL" if descending else ""
                sql += f" AND ({value} {more} ? OR ({value} = ? AND key {more} ?){tail})"
                args += [last, last, key]
        direction = "DESC" if descending else "ASC"
        sql += f" ORDER BY {value} {direction}, key {direction}" if order_by else f" ORDER BY key {direction}"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _check_position(position: Any, order_by: str | None) -> Any:
    """A cursor's position has the shape this store gave it (it is bound as a parameter either way)."""
    scalar = (str, int, float, type(None))
    if order_by and isinstance(position, list) and len(position) == 2:
        if isinstance(position[0], scalar) and isinstance(position[1], str):
            return position
    elif not order_by and isinstance(position, str):
        return position
    raise ValueError("page cursor is malformed: pass back the `next` of the previous page")


class FileObjectStore(ObjectStore):
    """Objects as files under one root. Writes are atomic (a temp file renamed or linked into place); the
    temp files are named '.tmp-*', and `list` skips them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / check_object_key(key)

    @contextlib.contextmanager
    def _temp_beside(self, path: Path) -> Iterator[tuple[IO[bytes], str]]:
        """A private temp file in `path`'s directory (so a rename is atomic); removed unless moved away."""
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")  # 0600
        try:
            with os.fdopen(fd, "wb") as f:
                yield f, tmp
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        with self._temp_beside(path) as (f, tmp):
            f.write(data)
            f.close()
            os.replace(tmp, path)

    def create(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        with self._temp_beside(path) as (f, tmp):
            f.write(data)
            f.close()
            try:
                os.link(tmp, path)  # fails if the key exists: of racing creators, the first link wins
            except FileExistsError:
                return False
        return True

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise MissingObject(f"no object with key {key!r} in {self.root}") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> bool:
        path = self._path(key)
        if not path.is_file():
            return False
        try:
            path.unlink()
            return True
        except FileNotFoundError:
            return False

    def list(self, prefix: str = "") -> list[str]:
        # Walk only the prefix's folder: the store holds every run's objects, and a run looks up its own often.
        folder = prefix.rpartition("/")[0]
        start = self.root
        if folder:
            try:
                start = self._path(folder)
            except BadInput:
                return []  # no key has an empty, '.' or '..' segment: none starts with this prefix
        if not start.is_dir():
            return []
        keys = []
        for path in start.rglob("*"):
            if path.is_file() and not path.name.startswith(".tmp-"):
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def put_file(self, key: str, path: Path) -> None:
        target = self._path(key)
        with open(path, "rb") as src, self._temp_beside(target) as (f, tmp):
            shutil.copyfileobj(src, f, CHUNK)
            f.close()
            os.replace(tmp, target)

    def get_file(self, key: str, path: Path) -> None:
        try:
            src = open(self._path(key), "rb")  # noqa: SIM115 - closed below, after the missing-key case
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise MissingObject(f"no object with key {key!r} in {self.root}") from None
        with src, self._temp_beside(path) as (f, tmp):
            shutil.copyfileobj(src, f, CHUNK)
            f.close()
            os.replace(tmp, path)


def read_private(path: Path, *, what: str, remake: str, error: type[Exception], limit: int = 4096) -> bytes:
    """The content of a key file of this user's, if it can be trusted: not a link (which could point anywhere),
    not readable by others. FileNotFoundError when there is none yet; `error(problem, fix)` when it is not ours."""
    try:
        with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NOFOLLOW)) as f:
            mode = os.fstat(f.fileno()).st_mode
            data = f.read(limit)
    except FileNotFoundError:
        raise
    except OSError as e:  # not ours, a folder, a symlink
        raise error(
            f"{what} {path} cannot be read ({e.strerror})",
            f"make it a file of this user with mode 0600 (chmod 600 {path}), or {remake}",
        ) from None
    if mode & 0o077:
        raise error(
            f"{what} {path} is readable by other users (mode {mode & 0o777:o}), so it may be known to them",
            f"{remake}; if no one else could have read it, `chmod 600 {path}` keeps it",
        )
    return data


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
