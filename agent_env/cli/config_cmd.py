"""`agent-env config show`: the settings this install runs with, each value with where it came from.

The source of every value is what `load_settings` recorded while reading (the file, a variable, the default),
never a guess from comparing values. Secret values are masked: a `secret:NAME` reference is shown as it is
(it names the secret, not its value), a literal key or token as `****`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agent_env.config import Origin, Settings, leaves, load_settings
from agent_env.spec.secret_refs import is_reference

MASK = "****"
# Fields that hold a credential; in free-form tables (a provider's or a store's own options) any key named so.
SECRET_FIELDS = {"api_key", "admin_token", "withheld_key"}
SECRET_NAME = re.compile(r"(^|_)(key|token|secret|password|passphrase|credentials?)$", re.IGNORECASE)
TOKEN_PREFIXES = ("aea_",)  # the gateway's admin tokens, wherever one was pasted
FREE_FORM = (("sandboxes", "providers"), ("stores",))


def _is_secret(path: tuple[str, ...], value: Any) -> bool:
    if value is None or is_reference(value):
        return False
    if isinstance(value, str) and value.startswith(TOKEN_PREFIXES):
        return True
    if path[-1] in SECRET_FIELDS:
        return True
    return any(path[: len(room)] == room for room in FREE_FORM) and bool(SECRET_NAME.search(path[-1]))


def _mask(path: tuple[str, ...], value: Any) -> Any:
    if isinstance(value, list):
        return [_mask(path, item) for item in value]
    if isinstance(value, dict):  # a table inside a list
        return {key: _mask((*path, key), item) for key, item in value.items()}
    return MASK if _is_secret(path, value) else value


def effective(settings: Settings) -> list[tuple[str, Any, Origin]]:
    """Every setting as (dotted key, value with secrets masked, where it came from)."""
    return [
        (".".join(path), _mask(path, value), settings.origin(*path))
        for path, value in leaves(settings.model_dump(mode="json"))
    ]


def show_command(json_out: bool) -> int:
    settings = load_settings()
    rows = effective(settings)
    if json_out:
        print(
            json.dumps(
                {
                    "config_file": str(settings.config_file) if settings.config_file else None,
                    "settings": {
                        key: {"value": value, **origin.model_dump(exclude_none=True)} for key, value, origin in rows
                    },
                },
                indent=2,
            )
        )
        return 0
    from rich.markup import escape
    from rich.table import Table

    from agent_env.cli.output import console

    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("setting", "value", "from"):
        table.add_column(column, overflow="fold")
    for key, value, origin in rows:
        shown = (
            "[dim](unset)[/]" if value is None else escape(json.dumps(value) if not isinstance(value, str) else value)
        )
        table.add_row(escape(key), shown, _describe(origin))
    out = console()
    out.print(f"config file: {escape(str(settings.config_file)) if settings.config_file else 'none (defaults)'}")
    out.print(table)
    return 0


def _describe(origin: Origin) -> str:
    from rich.markup import escape

    if origin.source == "default":
        return "[dim]default[/]"
    where = f"{origin.source} {escape(origin.name or '')}"
    return where + (f" [dim](as {escape(origin.written_as)})[/]" if origin.written_as else "")
