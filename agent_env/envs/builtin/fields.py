"""Bounded argument types and linear-time checks shared by the built-in apps.

Every string an agent sends has a maximum length, so a hostile value (an "e-mail address" of 120 KB) is
refused by argument validation, naming the argument and the limit, before the tool runs.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

MAX_ADDRESS = 254  # RFC 5321's limit on a forward path
MAX_ID = 100  # ids, handles, keys, names, channel names
MAX_LINE = 1_000  # subjects, reasons, search queries
MAX_TEXT = 50_000  # bodies, descriptions, notes, messages
MAX_RECIPIENTS = 100

Address = Annotated[str, Field(max_length=MAX_ADDRESS)]
Id = Annotated[str, Field(max_length=MAX_ID)]
Line = Annotated[str, Field(max_length=MAX_LINE)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
Addresses = Annotated[list[Address], Field(max_length=MAX_RECIPIENTS)]
Ids = Annotated[list[Id], Field(max_length=MAX_RECIPIENTS)]


def is_address(value: str) -> bool:
    """name@domain.tld: one @, no whitespace, a dot inside the domain. Split-based, so linear in the
    length (the regex it replaces backtracked quadratically: seconds on `a@` + 30,000 dots + `@`)."""
    local, at, domain = value.partition("@")
    no_whitespace = value.split(None, 1) == [value]  # str.split cuts at any whitespace, in C
    return bool(local and at) and "@" not in domain and "." in domain[1:-1] and no_whitespace
