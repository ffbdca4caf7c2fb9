"""The environment SDK: an app is one class whose `@tool` methods agents call over MCP.

    class Notes(App):
        name = "notes"
        schema = "CREATE TABLE notes (key TEXT PRIMARY KEY, text TEXT NOT NULL, at TEXT NOT NULL);"

        @tool
        def write_note(self, ctx: Ctx, key: str, text: str) -> dict:
            \"\"\"Write a note.

            Args:
                key: what the note is filed under
                text: the note itself
            \"\"\"
            self.db.execute("INSERT OR REPLACE INTO notes VALUES (?, ?, ?)", (key, text, ctx.now_iso()))
            return {"key": key}

Typed arguments become the tool's JSON Schema (docstring "Args:" lines become their descriptions), the
docstring's text before "Args:" its description. Return JSON-able values or pydantic models; raise
`ToolError` for errors the agent should see. Each instance keeps its state in its own SQLite file
(`self.db`); every call runs in one transaction, rolled back if the tool raises. The data plane
(reset, load, export) has table-shaped defaults that apps may override.
"""

from __future__ import annotations

import inspect
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from agent_env.envs.context import Ctx

APP_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ToolError(Exception):
    """An error the calling agent sees as the tool's result (MCP `isError`), e.g. 'order not found'."""


class ToolArgumentError(ToolError):
    """The arguments do not fit the tool's schema; the message names each bad argument."""


@dataclass(frozen=True)
class ToolOptions:
    name: str | None
    read_only: bool
    hidden: bool


def tool(fn: Callable | None = None, *, name: str | None = None, read_only: bool = False, hidden: bool = False):
    """Mark an App method as a tool.

    read_only: the tool changes nothing (state triggers skip re-evaluation after it).
    hidden: only roles that name the tool get it; `*` does not include it.
    """

    def mark(f: Callable) -> Callable:
        f.__agentenv_tool__ = ToolOptions(name, read_only, hidden)  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


@dataclass(frozen=True)
class ToolInfo:
    """What agents see of a tool (for in-process apps and for apps reached over the network alike)."""

    name: str
    app: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool
    hidden: bool

    @property
    def qualified_name(self) -> str:
        return f"{self.app}.{self.name}"


@dataclass(frozen=True)
class ToolSpec(ToolInfo):
    """A tool of an in-process app: its info plus how to validate arguments and call it."""

    method: str
    args_model: type[BaseModel]
    wants_ctx: bool
    is_async: bool

    def parse_arguments(self, arguments: dict[str, Any] | None) -> dict[str, Any]:
        try:
            return dict(self.args_model.model_validate(arguments or {}))
        except ValidationError as e:
            problems = []
            for err in e.errors(include_url=False):
                where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
                problems.append(f"{where}: {_problem(err)}")
            raise ToolArgumentError(f"invalid arguments for {self.name}: " + "; ".join(problems)) from None


def _problem(err: Any) -> str:
    """One validation error in words; never echoes the value (it may be 100 KB long)."""
    if err["type"] in ("string_too_long", "too_long"):
        unit = "characters" if err["type"] == "string_too_long" else "items"
        size = len(err["input"]) if hasattr(err["input"], "__len__") else "too many"
        return f"is {size} {unit} long; at most {err['ctx']['max_length']} are allowed — shorten it"
    return {"missing": "is required", "extra_forbidden": "is not an argument of this tool"}.get(err["type"], err["msg"])


def _split_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {arg: description}) from a Google-style docstring."""
    text = inspect.cleandoc(doc or "")
    head, _, args_block = text.partition("\nArgs:\n")
    descriptions: dict[str, str] = {}
    current = None
    for line in args_block.splitlines():
        m = re.match(r"^\s{0,8}(\w+)\s*(?:\([^)]*\))?:\s*(.*)$", line)
        if m and not line.startswith(" " * 9):
            current = m.group(1)
            descriptions[current] = m.group(2).strip()
        elif current and line.strip():
            descriptions[current] += " " + line.strip()
        elif not line.strip() and descriptions:
            current = None
    return head.strip(), descriptions


def build_tool_spec(app_name: str, method: Callable, options: ToolOptions) -> ToolSpec:
    name = options.name or method.__name__
    if not TOOL_NAME.match(name):
        raise TypeError(f"tool name {name!r} of app {app_name!r} must be lowercase letters, digits and _")
    description, arg_docs = _split_docstring(method.__doc__)
    if not description:
        raise TypeError(f"tool {app_name}.{name} needs a docstring: it is the description agents read")
    hints = get_type_hints(method, include_extras=True)
    params = list(inspect.signature(method).parameters.values())[1:]  # drop self
    wants_ctx = bool(params) and (params[0].name == "ctx" or hints.get(params[0].name) is Ctx)
    if wants_ctx:
        params = params[1:]
    fields: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"tool {app_name}.{name}: *args/**kwargs cannot become a schema")
        if p.name not in hints:
            raise TypeError(f"tool {app_name}.{name}: argument {p.name!r} needs a type annotation")
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (hints[p.name], Field(default, description=arg_docs.get(p.name)))
    model = create_model(f"{app_name}_{name}_args", __config__=ConfigDict(extra="forbid"), **fields)
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return ToolSpec(
        name=name,
        app=app_name,
        description=description,
        input_schema=schema,
        read_only=options.read_only,
        hidden=options.hidden,
        method=method.__name__,
        args_model=model,
        wants_ctx=wants_ctx,
        is_async=inspect.iscoroutinefunction(method),
    )


class App:
    """Base class of environment apps. Subclasses set `name` (and usually `schema`) and define tools."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ""
    schema: ClassVar[str] = ""  # SQL run once on a new instance's database
    tools: ClassVar[dict[str, ToolSpec]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            return  # an abstract intermediate class
        if not APP_NAME.match(cls.name):
            raise TypeError(f"app name {cls.name!r} must be lowercase letters, digits and _ (max 40)")
        specs: dict[str, ToolSpec] = {}
        for klass in reversed(cls.__mro__):
            for value in vars(klass).values():
                options = getattr(value, "__agentenv_tool__", None)
                if options is not None:
                    spec = build_tool_spec(cls.name, value, options)
                    specs[spec.name] = spec
        cls.tools = specs

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    # -- helpers for tools --

    def rows(self, sql: str, args: tuple | list = ()) -> list[dict[str, Any]]:
        """A query's rows as dicts keyed by column."""
        cur = self.db.execute(sql, args)
        columns = [d[0] for d in cur.description]
        return [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]

    def next_id(self, table: str, prefix: str, *, column: str = "id", first: int = 1, width: int = 4) -> str:
        """The next readable id, e.g. 'TCK-1042' after 'TCK-1041': deterministic, never random."""
        row = self.db.execute(
            f'SELECT MAX(CAST(SUBSTR("{column}", ?) AS INTEGER)) FROM "{table}" WHERE "{column}" LIKE ?',
            (len(prefix) + 1, prefix + "%"),
        ).fetchone()
        return f"{prefix}{(row[0] or first - 1) + 1:0{width}d}"

    # -- data plane hooks. Defaults treat the data as {table: [row, ...]} over the app's schema. --

    def tables(self) -> list[str]:
        rows = self.db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "AND name NOT LIKE '\\_agentenv%' ESCAPE '\\' ORDER BY name"
        ).fetchall()
        return [r[0] for r in rows]

    def reset(self) -> None:
        """Empty every table (the schema stays)."""
        for table in self.tables():
            self.db.execute(f'DELETE FROM "{table}"')

    def load(self, data: dict[str, Any]) -> None:
        """Add rows: {"table": [{"column": value, ...}, ...]}. Unknown tables or columns are errors."""
        tables = set(self.tables())
        for table, rows in data.items():
            if table not in tables:
                raise ToolError(f"{self.name} has no table {table!r} (tables: {', '.join(sorted(tables))})")
            if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
                raise ToolError(f"{self.name}.{table}: expected a list of rows (objects)")
            columns = {r[1] for r in self.db.execute(f'PRAGMA table_info("{table}")')}
            for i, row in enumerate(rows):
                unknown = set(row) - columns
                if unknown:
                    raise ToolError(
                        f"{self.name}.{table} has no column {sorted(unknown)[0]!r} "
                        f"(columns: {', '.join(sorted(columns))})"
                    )
                names = list(row)
                try:
                    self.db.execute(
                        f'INSERT INTO "{table}" ({", ".join(chr(34) + n + chr(34) for n in names)}) '
                        f"VALUES ({', '.join('?' for _ in names)})",
                        [_sql_value(row[n]) for n in names],
                    )
                except sqlite3.Error as e:
                    raise ToolError(f"{self.name}.{table} row {i}: {e}") from None

    def export(self) -> dict[str, Any]:
        """Every table's rows, in insertion (rowid) order. JSON written by `load` comes back as text."""
        out: dict[str, Any] = {}
        for table in self.tables():
            cur = self.db.execute(f'SELECT * FROM "{table}" ORDER BY rowid')
            columns = [d[0] for d in cur.description]
            out[table] = [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
        return out


def _sql_value(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        import json

        return json.dumps(value)
    return value
