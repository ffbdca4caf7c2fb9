"""A running app instance: its SQLite file, its tool calls, its data plane, snapshots and forks."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import inspect
import json
import shutil
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent_env.envs import changelog
from agent_env.envs.app import App, ToolError, ToolSpec
from agent_env.envs.context import Ctx
from agent_env.errors import BadInput
from agent_env.sqlite_files import connect, create

DB_FILE = "app.sqlite"
_CALLS_TABLE = "CREATE TABLE IF NOT EXISTS _agentenv_calls (key TEXT PRIMARY KEY, result TEXT NOT NULL)"

# Sync tools run here, never on the event loop: one slow or hostile call must not stall every agent (and
# /ready) of the process. Our own pool, not the loop's default one (min(32, CPUs + 4) threads, shared with
# DNS and file work): a few slow tools must not starve the rest. Threads start on demand.
TOOL_THREADS = 64
_tool_pool = ThreadPoolExecutor(max_workers=TOOL_THREADS, thread_name_prefix="agentenv-tool")


_DATA_PLANE_LOAD = {"kind": "data_plane", "operation": "load"}
_DATA_PLANE_RESET = {"kind": "data_plane", "operation": "reset"}


def _vtime(ctx: Ctx) -> str | None:
    return ctx.now_iso() if ctx.virtual_now else None


class UnknownTool(KeyError):
    pass


def load_app_class(target: str) -> type[App]:
    """'package.module:ClassName' -> the App subclass, with clear errors."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise BadInput(f"app {target!r} is not of the form MODULE:Class", "e.g. agent_env.envs.builtin.mail:Mail")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise BadInput(f"cannot import {module_name!r} for app {target!r}: {e}", "check the module path") from None
    cls = getattr(module, attr, None)
    if not (inspect.isclass(cls) and issubclass(cls, App) and "name" in vars(cls)):
        raise BadInput(f"{target!r} is not an agent-env App class", "subclass agent_env.envs.App and set `name`")
    return cls


class AppInstance:
    """One instance of an app. Sync calls are serialised per instance and each is one transaction.

    `call_async` runs a sync tool in a worker thread, after the instance's earlier calls (in arrival
    order, waiting without holding a thread). `_lock` (a thread lock) guards the SQLite connection for
    tool calls and the data plane alike, whichever thread they run on. Async tools run on the event loop,
    unserialised (they own their concurrency), as before.
    """

    def __init__(self, app_cls: type[App], folder: Path, *, change_ids: changelog.ChangeIds | None = None) -> None:
        """`change_ids`: the instance's, when this app is one of several sharing one changelog (changelog.py)."""
        self.app_cls = app_cls
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / DB_FILE
        self.change_ids = change_ids or changelog.ChangeIds()
        self._lock = threading.Lock()
        self._queue: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self.db = self._open()
        self.app = app_cls(self.db)

    def _open(self) -> sqlite3.Connection:
        if self.app_cls.schema and not self.path.exists():
            create(self.path, f"{self.app_cls.schema};\n{_CALLS_TABLE};\n{changelog.SCHEMA};")
        db = connect(self.path, check_same_thread=False)
        try:
            db.execute(_CALLS_TABLE)  # files made before the table existed, and apps without a schema
            changelog.install(db, self.change_ids)
        except BaseException:
            db.close()
            raise
        return db

    def close(self) -> None:
        with self._lock:
            self.db.close()

    @property
    def tools(self) -> dict[str, ToolSpec]:
        return self.app_cls.tools

    def _transaction(self, fn, *args, defer_foreign_keys: bool = False):
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                if defer_foreign_keys:  # bulk data changes may pass through inconsistent states
                    self.db.execute("PRAGMA defer_foreign_keys = ON")
                result = fn(*args)
                self.db.execute("COMMIT")  # may fail too (deferred constraints): roll back then as well
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
            return result

    def call(self, name: str, arguments: dict[str, Any] | None, ctx: Ctx) -> Any:
        """Run a sync tool in one transaction. With `ctx.idempotency_key`, a repeated call returns the
        first call's result without running again (the key is stored in the same transaction)."""
        spec = self.tools.get(name)
        if spec is None:
            raise UnknownTool(name)
        kwargs = spec.parse_arguments(arguments)
        if spec.is_async:
            raise TypeError("async tools go through call_async")

        def run() -> Any:
            key = ctx.idempotency_key
            if key:
                row = self.db.execute("SELECT result FROM _agentenv_calls WHERE key = ?", (key,)).fetchone()
                if row:
                    return json.loads(row[0])
            method = getattr(self.app, spec.method)
            with changelog.writing(ctx.actor, _vtime(ctx)):
                result = jsonable(method(ctx, **kwargs) if spec.wants_ctx else method(**kwargs))
            if key:
                self.db.execute("INSERT INTO _agentenv_calls VALUES (?, ?)", (key, json.dumps(result)))
            return result

        return self._transaction(run)

    async def call_async(self, name: str, arguments: dict[str, Any] | None, ctx: Ctx) -> Any:
        spec = self.tools.get(name)
        if spec is None:
            raise UnknownTool(name)
        if not spec.is_async:
            return await self.run_in_turn(self.call, name, arguments, ctx)
        kwargs = spec.parse_arguments(arguments)
        method = getattr(self.app, spec.method)
        with changelog.writing(ctx.actor, _vtime(ctx)):  # (a context variable: this task's writes only)
            return jsonable(await (method(ctx, **kwargs) if spec.wants_ctx else method(**kwargs)))

    def _turns(self) -> asyncio.Lock:
        """The running loop's FIFO queue of this instance's calls (an asyncio.Lock belongs to one loop)."""
        loop = asyncio.get_running_loop()
        if self._queue is None or self._queue[0] is not loop:
            self._queue = (loop, asyncio.Lock())
        return self._queue[1]

    async def run_in_turn(self, fn, *args: Any) -> Any:
        """`fn(*args)` in a worker thread, after this instance's earlier calls: the event loop stays free.
        For sync work on the instance from async code (tool calls; the data plane from a server)."""
        job = functools.partial(contextvars.copy_context().run, fn, *args)
        async with self._turns():
            return await asyncio.get_running_loop().run_in_executor(_tool_pool, job)

    # -- data plane --

    def reset(self) -> None:
        def run() -> None:
            with changelog.writing(_DATA_PLANE_RESET):
                self.app.reset()
            self.db.execute("DELETE FROM _agentenv_calls")

        self._transaction(run, defer_foreign_keys=True)

    def load(self, data: dict[str, Any], *, key: str | None = None) -> bool:
        """Add data in one transaction. With `key`, a repeated load with the same key does nothing
        (returns False): a load retried after a crash takes effect once."""
        if not isinstance(data, dict):
            raise ToolError(f"{self.app_cls.name}: data must be an object, got {type(data).__name__}")

        def run() -> bool:
            if key:
                if self.db.execute("SELECT 1 FROM _agentenv_calls WHERE key = ?", (key,)).fetchone():
                    return False
                self.db.execute("INSERT INTO _agentenv_calls VALUES (?, 'loaded')", (key,))
            with changelog.writing(_DATA_PLANE_LOAD):
                self.app.load(data)
            return True

        try:
            return self._transaction(run, defer_foreign_keys=True)
        except sqlite3.IntegrityError as e:
            raise ToolError(f"{self.app_cls.name}: the data breaks a constraint ({e}); nothing was loaded") from None

    def export(self) -> dict[str, Any]:
        with self._lock:
            return jsonable(self.app.export())

    def columns(self) -> dict[str, list[tuple[Any, ...]]]:
        """Each table the data plane loads, with its columns as SQLite describes them (`PRAGMA table_info`:
        cid, name, type, notnull, dflt_value, pk)."""
        with self._lock:
            return {t: self.db.execute(f'PRAGMA table_info("{t}")').fetchall() for t in self.app.tables()}

    # -- snapshots: whole-file copies through SQLite's online backup (consistent, no downtime) --

    def snapshot(self, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        with self._lock:
            target = sqlite3.connect(tmp)
            try:
                self.db.backup(target)
            finally:
                target.close()
        tmp.replace(dest)

    def restore(self, src: Path) -> None:
        if not src.is_file():
            raise FileNotFoundError(f"no snapshot at {src}")
        source = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
        try:
            with self._lock:
                source.backup(self.db)
                changelog.install(self.db, self.change_ids)  # its tables' triggers; ids past the file's
        finally:
            source.close()

    def fork(self, folder: Path) -> AppInstance:
        """A new, independent instance starting from this one's current state."""
        folder.mkdir(parents=True, exist_ok=True)
        self.snapshot(folder / DB_FILE)
        return AppInstance(self.app_cls, folder)

    def delete(self) -> None:
        self.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def jsonable(value: Any) -> Any:
    """Tool results as plain JSON values (pydantic models dumped)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
