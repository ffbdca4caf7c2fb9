"""A bundle's `aliases.toml` (the framework's): short ids its envs and agents can be named by.

    [envs]
    mail = ["mail", "inbox"]        # envs/mail/ may be named "mail" or "inbox"
    [agents]
    helper = ["assistant"]

Each table maps a folder of the bundle (`envs/NAME`, `agents/NAME`) to a list of aliases. A name is looked up as
itself first: a folder of that name (in the task's bundle, then the built-in ones) or a built-in app wins over an
alias. Then the task's bundle's aliases, then the built-in bundles'. An alias is lowercase letters, digits and
'-' (at most 64, starting and ending with a letter or digit), names one folder of its table, and is not the
name of another folder of that kind in the bundle. A broken file is an error naming the file and the entry.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from agent_env.errors import BadInput

ALIASES_FILE = "aliases.toml"
KINDS = {"envs": "env", "agents": "agent"}
ALIAS = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
MAX_BYTES = 64 * 1024


def read_aliases(bundle: Path) -> dict[str, dict[str, str]]:
    """The bundle's aliases, by table then alias -> folder name ({} without an aliases.toml)."""
    path = bundle / ALIASES_FILE
    if not path.exists():
        return {}
    if not path.is_file() or path.is_symlink():
        raise BadInput(f"{path} is not a regular file", "make aliases.toml a plain file at the bundle's root")
    raw = path.read_bytes()
    if len(raw) > MAX_BYTES:
        raise BadInput(f"{path} is over {MAX_BYTES // 1024} KiB", "an aliases file lists short names only")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise BadInput(f"{path} is not valid TOML: {e}", "fix the syntax at that line") from None
    for table in data:
        if table not in KINDS:
            raise BadInput(f"{path}: [{table}] is not a table it takes", "use [envs] and [agents]")
    found: dict[str, dict[str, str]] = {}
    for table, noun in KINDS.items():
        entries = data.get(table, {})
        if not isinstance(entries, dict):
            raise BadInput(f"{path}: {table} must be a table", f"write [{table}] then FOLDER = [ALIAS, ...]")
        folders = {p.name for p in (bundle / table).iterdir() if p.is_dir()} if (bundle / table).is_dir() else set()
        by_alias: dict[str, str] = {}
        for folder, aliases in entries.items():
            where = f"{path}: {table}.{folder}"
            if folder not in folders:
                raise BadInput(f"{where}: the bundle has no {noun} folder {table}/{folder}", "name a folder it has")
            if not (isinstance(aliases, list) and aliases and all(isinstance(a, str) for a in aliases)):
                raise BadInput(f"{where} must be a non-empty list of aliases, not {aliases!r}", 'write ["alias"]')
            for alias in aliases:
                if not ALIAS.match(alias):
                    raise BadInput(
                        f"{where}: {alias!r} is not an alias",
                        "use lowercase letters, digits and '-' (at most 64, starting and ending with a letter or digit)",
                    )
                if alias in by_alias and by_alias[alias] != folder:
                    raise BadInput(f"{where}: {alias!r} also names {table}.{by_alias[alias]}", "an alias names one")
                if alias in folders and alias != folder:
                    raise BadInput(f"{where}: {alias!r} is the name of {table}/{alias}", "choose another alias")
                by_alias[alias] = folder
        found[table] = by_alias
    return found


def aliased(bundles: list[Path], table: str, name: str) -> tuple[Path, str] | None:
    """(the bundle, the folder name) the first of `bundles` whose aliases give `name` to one of its `table`."""
    for bundle in bundles:
        folder = read_aliases(bundle).get(table, {}).get(name)
        if folder is not None:
            return bundle, folder
    return None
