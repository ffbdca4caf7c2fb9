"""How specs name a secret: `secret:NAME`. Specs carry the reference; the stores hold the value."""

from __future__ import annotations

import re
from typing import TypeGuard

PREFIX = "secret:"
NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def is_reference(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value.startswith(PREFIX)
