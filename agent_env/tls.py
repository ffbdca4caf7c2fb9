"""One TLS context per process, shared by every HTTP client we create.

Building a default context loads the system's CA bundle: ~17 ms measured here, paid by each new client
(even one that only ever talks plain HTTP to 127.0.0.1). MCP sessions and model clients are created
per turn, so they share this one instead.
"""

from __future__ import annotations

import ssl
from functools import cache


@cache
def context() -> ssl.SSLContext:
    return ssl.create_default_context()
