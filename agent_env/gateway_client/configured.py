"""The configured gateway as its clients reach it: its address (`base_url`) and admin credential (`admin_token`),
for whatever calls it with admin rights (the embedded gateway's clients, hosted agents' turns, episodes), and the
public URL a gateway names in hosted agents' cards (`public_base`)."""

from __future__ import annotations

from agent_env.config import Settings
from agent_env.errors import BadInput
from agent_env.gateway_client import keys


def base_url(settings: Settings) -> str:
    """The configured gateway's URL (a pool's first; a pool gateway's own `url`), else the embedded one's."""
    g = settings.gateway
    return (g.url or (g.pool[0] if g.pool else None) or f"http://{g.ip}:{g.port}").rstrip("/")


def admin_token(settings: Settings) -> str:
    """The admin token of the configured gateways: given (`[gateway] admin_token`), derived from the pool's
    shared key in the secret store (`[gateway] key_secret`), or the embedded gateway's own."""
    g = settings.gateway
    if g.admin_token:
        return g.admin_token
    if g.key_secret:
        return keys.admin_token(keys.shared_key(settings))
    if g.urls():
        raise BadInput(
            f"gateways are configured ({', '.join(g.urls())}) but no admin token",
            "set AGENT_ENV_GATEWAY_TOKEN (or [gateway] admin_token) to their admin token, or [gateway] key_secret "
            "to the secret holding a pool's shared key",
        )
    return keys.admin_token(keys.load_or_create_key(settings.state_dir / "gateway" / "key"))


def public_base(settings: Settings | None) -> str | None:
    """The gateway's public base URL from its settings: [gateway] url, else its address unless it listens on
    all interfaces (then no one address is its own: each request's socket address is used)."""
    if settings is None:
        return None
    if settings.gateway.url:
        return settings.gateway.url.rstrip("/")
    if settings.gateway.ip in ("0.0.0.0", "::", ""):
        return None
    return base_url(settings)
