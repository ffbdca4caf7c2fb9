"""`urn:agentenv:intake/v1`: a declaration, with no endpoint, of what the data plane takes on data/add and answers on
data/get, so a caller can check a universe fits an env before deploying it (the reference's `intake_fit_check`).

An app's data is one JSON object, `{table: [row, ...]}`, carried by a data part, a text part or a JSON file part
(inline bytes, a file under the data root, or an object), and rows are added (`additive`). When the app keeps the
SDK's table-shaped load and export, each table's row schema comes from its SQLite columns: their JSON types,
which may be null, which a row must give, and no other column.
"""

from __future__ import annotations

from typing import Any

from agentenv_protocol.types import (
    INTAKE_EXTENSION_URI,
    EnvironmentExtension,
    IntakeDeclaration,
    IntakeFormat,
    intake_extension,
)

from agent_env.envs.app import App
from agent_env.envs.app_instance import AppInstance
from agent_env.envs.extensions import data_objects

URI = INTAKE_EXTENSION_URI
FORMAT = "json"  # one JSON object of {table: [rows]}
JSON_MEDIA = [data_objects.MEDIA_TYPE]
RowSchema = dict[str, object]


def _json_types(sql_type: str) -> list[str] | None:
    """The JSON values a column of `sql_type` takes, by SQLite's type affinity; None: any value. Booleans are
    stored as integers, objects and arrays as JSON text (as `App.load` writes them)."""
    declared = sql_type.upper()
    if "INT" in declared:
        return ["integer", "boolean"]
    if any(word in declared for word in ("CHAR", "CLOB", "TEXT")):
        return ["string", "object", "array"]
    if not declared or "BLOB" in declared:
        return None
    return ["number"]  # REAL, FLOAT, DOUBLE and NUMERIC affinity


def row_schema(columns: list[tuple[Any, ...]]) -> RowSchema:
    """A row's JSON Schema from `PRAGMA table_info` rows (cid, name, type, notnull, dflt_value, pk)."""
    properties: dict[str, object] = {}
    required: list[str] = []
    rowid_alias = sum(1 for c in columns if c[5]) == 1  # a lone INTEGER PRIMARY KEY is filled in by SQLite
    for _cid, name, sql_type, notnull, default, pk in columns:
        kinds = _json_types(sql_type)
        properties[name] = {} if kinds is None else {"type": kinds if notnull else [*kinds, "null"]}
        generated = pk and rowid_alias and sql_type.upper() == "INTEGER"
        if notnull and default is None and not generated:
            required.append(name)
    schema: RowSchema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def declaration(instance: AppInstance, *, objects: bool) -> IntakeDeclaration:
    """What `instance`'s data plane takes and answers; `objects`: it serves data-objects/v1 too."""
    app_cls = instance.app_cls
    table_shaped = app_cls.load is App.load and app_cls.export is App.export
    tables: dict[str, dict[Any, Any]] | None = (
        {table: row_schema(columns) for table, columns in instance.columns().items()} if table_shaped else None
    )
    add = [
        IntakeFormat(part="data", format=FORMAT, load="additive", tables=tables),
        IntakeFormat(part="file", format=FORMAT, mimeTypes=JSON_MEDIA, load="additive"),
        IntakeFormat(part="text", format=FORMAT, load="additive"),
    ]
    get = [IntakeFormat(part="data", format=FORMAT, tables=tables)]
    if objects:
        get.append(IntakeFormat(part="file", format=FORMAT, mimeTypes=JSON_MEDIA))
    return IntakeDeclaration(add=add, get=get)


def card(instance: AppInstance, *, objects: bool) -> EnvironmentExtension:
    return intake_extension(
        declaration(instance, objects=objects),
        "data/add takes the app's data as one JSON object of {table: [rows]} (a data, text or JSON file part) and "
        "adds the rows; data/get answers it the same way.",
    )
