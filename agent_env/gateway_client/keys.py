"""The gateway's key and the admin token derived from it: the key file an embedded gateway makes (0600), the key a
pool shares in the secret store, and the admin token both the gateway and its clients derive from either (clients
of the configured gateway: `configured.admin_token`; role tokens are the gateway's own, `gateway/tokens.py`)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from agent_env.errors import AgentEnvError, BadInput
from agent_env.stores import hex_secret
from agent_env.stores.local import create_private_once, read_private

if TYPE_CHECKING:
    from agent_env.config import Settings

KEY_BYTES = 32


class BrokenKey(AgentEnvError):
    """The gateway key file exists but cannot be trusted: tokens derived from it would be guessable."""


def load_or_create_key(path: Path) -> bytes:
    """The gateway's secret key, created with mode 0600 on first use. A key file that is short (say, empty:
    HMAC under b"" makes every token predictable), unreadable or readable by others is refused."""
    try:
        return _checked_key(path)
    except FileNotFoundError:
        create_private_once(path, secrets.token_bytes(KEY_BYTES))
        return _checked_key(path)


def _checked_key(path: Path) -> bytes:
    """The key in `path`, if it can be trusted (FileNotFoundError when there is none yet)."""
    remake = "delete it to make a new one (every agent and admin token changes), or restore it from a backup"
    key = read_private(path, what="the gateway key file", remake=remake, error=BrokenKey)
    if len(key) < KEY_BYTES:
        raise BrokenKey(
            f"the gateway key file {path} is empty or damaged ({len(key)} bytes, not {KEY_BYTES}): "
            "tokens made from it would be guessable",
            remake,
        )
    return key


def shared_key(settings: Settings) -> bytes:
    """The key a pool of gateways shares, from the secret store (`[gateway] key_secret`): 64 hex digits.
    Kept there, not in files or run history, so every gateway and worker of the install reads the same one."""
    name = settings.gateway.key_secret
    if not name:  # (its callers ask for it only when it is set)
        raise BadInput("[gateway] key_secret is not set: no shared key to read", "name the pool's key secret there")
    key = hex_secret(settings, name)
    if len(key) < KEY_BYTES:
        raise BrokenKey(
            f"secret:{name} (the gateway pool's key) is not {KEY_BYTES * 2} or more hex digits",
            f"set it to a fresh key: `python -c 'import secrets; print(secrets.token_hex(32))' | "
            f"agent-env secrets set {name}` (every token changes)",
        )
    return key


def admin_token(key: bytes) -> str:
    digest = hmac.new(key, b"admin", hashlib.sha256).digest()
    return "aea_" + base64.urlsafe_b64encode(digest[:24]).decode().rstrip("=")
