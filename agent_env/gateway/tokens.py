"""Role tokens: HMAC of (instance, agent) under the gateway's key.

Derived, not stored: a restarted gateway recognises the same tokens, and no token needs to be
written into workflow history (runs pass references; the token is fetched when it is needed).
The key and the admin token are `agent_env/gateway_client/keys.py`'s (clients derive the admin token too), named
here as well for the gateway's modules.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from agent_env import guard
from agent_env.gateway_client.keys import KEY_BYTES as KEY_BYTES
from agent_env.gateway_client.keys import BrokenKey as BrokenKey
from agent_env.gateway_client.keys import admin_token as admin_token
from agent_env.gateway_client.keys import load_or_create_key as load_or_create_key
from agent_env.gateway_client.keys import shared_key as shared_key

PREFIX = "aet_"


def agent_token(key: bytes, instance: str, agent: str) -> str:
    digest = hmac.new(key, f"agent\x00{instance}\x00{agent}".encode(), hashlib.sha256).digest()
    return PREFIX + base64.urlsafe_b64encode(digest[:24]).decode().rstrip("=")


def server_token(key: bytes, instance: str, app: str) -> str:
    """What the env server started for (instance, app) asks of its callers: only the gateway derives it."""
    digest = hmac.new(key, f"server\x00{instance}\x00{app}".encode(), hashlib.sha256).digest()
    return "aes_" + base64.urlsafe_b64encode(digest[:24]).decode().rstrip("=")


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer ...` header (one parser for every server: agent_env.guard)."""
    return guard.bearer(header)
