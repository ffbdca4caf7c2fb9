"""Role tokens: HMAC of (instance, agent) under the gateway's key.

Derived, not stored: a restarted gateway recognises the same tokens, and no token needs to be
written into workflow history (runs pass references; the token is fetched when it is needed).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from pathlib import Path

PREFIX = "aet_"


def load_or_create_key(path: Path) -> bytes:
    """The gateway's secret key, created with mode 0600 on first use."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(32)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        try:
            os.link(tmp, path)  # atomic, and fails if another process created the key first
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
        return path.read_bytes()


def agent_token(key: bytes, instance: str, agent: str) -> str:
    digest = hmac.new(key, f"agent\x00{instance}\x00{agent}".encode(), hashlib.sha256).digest()
    return PREFIX + base64.urlsafe_b64encode(digest[:24]).decode().rstrip("=")


def admin_token(key: bytes) -> str:
    digest = hmac.new(key, b"admin", hashlib.sha256).digest()
    return "aea_" + base64.urlsafe_b64encode(digest[:24]).decode().rstrip("=")


def bearer(header: str | None) -> str | None:
    if header and header[:7].lower() == "bearer ":
        return header[7:].strip() or None
    return None
