"""Dotted paths into JSON-like values (`charges.0.id`, `items.-1`): one walker for `${...}` templates,
checks, trigger predicates and state conditions, so a path means the same thing everywhere.

A part names a dict key, or, in a list, an index (negative counts from the end). The empty path is the
whole value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class PathError(KeyError):
    """The path leads nowhere. `args[0]` is the part that failed (as a KeyError's key); `walked` the parts
    before it; `at` the value it was looked up in (for messages that list what is there)."""

    def __init__(self, part: str, walked: Sequence[str], at: Any) -> None:
        super().__init__(part)
        self.part = part
        self.walked = list(walked)
        self.at = at


def walk_parts(value: Any, parts: Sequence[str]) -> Any:
    """Follow already split parts (for hot paths that split once); PathError if they lead nowhere."""
    current = value
    for i, part in enumerate(parts):
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.lstrip("-").isdigit() and -len(current) <= int(part) < len(current):
            current = current[int(part)]
        else:
            raise PathError(part, parts[:i], current)
    return current


def split(path: str) -> list[str]:
    """A dotted path's parts; the empty path has none."""
    return path.split(".") if path else []


def walk(value: Any, path: str) -> Any:
    """Follow a dotted path into dicts and lists; PathError (a KeyError) if it leads nowhere."""
    return walk_parts(value, split(path))
