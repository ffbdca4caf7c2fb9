"""`python -m agent_env.gateway.own_server --root DIR`: one environment's own server (the `server` topology, and
what an `agent_env.env_providers` plugin runs on its compute).

It is the gateway's code serving the one instance a deploy_env step puts on it, on $HOST:$PORT (what a sandbox
provider hands it). Its key comes in $AGENT_ENV_SERVER_TOKEN (hex; the deploy derives it from the install's admin
token and the instance: `gateway_client.env_servers.server_key`), never on the command line, and is removed from
the environment before anything starts (apps in processes of their own do not inherit it). So the door is the
gateway's: Host and Origin checked, role tokens HMAC'd from its key, tools filtered by role, the admin API behind
the admin token. It reads no install settings and holds no Temporal credentials: a trigger hit an agent's call
matches here is parked (the run's own steps and pushes still reach it).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agent_env.envs.server_token import SERVER_TOKEN_ENV
from agent_env.gateway.delivery import Delivery, HitRefused
from agent_env.gateway.http import create_app
from agent_env.gateway.service import Gateway
from agent_env.spec.world_state import HitAck, TriggerHit


def key_from_env() -> bytes:
    value = os.environ.pop(SERVER_TOKEN_ENV, "")
    try:
        key = bytes.fromhex(value)
    except ValueError:
        key = b""
    if len(key) < 32:
        sys.exit(f"error: ${SERVER_TOKEN_ENV} must hold this server's key (64 hex digits), as deploy_env sets it")
    return key


async def park(run_id: str, update_id: str, hit: TriggerHit) -> HitAck:
    raise HitRefused("an env's own server delivers no trigger hits to runs (it holds no Temporal credentials)")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m agent_env.gateway.own_server", description=__doc__)
    parser.add_argument("--root", type=Path, default=Path("env-server"), help="its folder (instance, apps)")
    args = parser.parse_args()
    key = key_from_env()
    host, port = os.environ.get("HOST", "127.0.0.1"), int(os.environ.get("PORT", "8000"))

    import uvicorn

    gateway = Gateway(args.root, key=key)
    gateway.delivery = Delivery(gateway.store, sender=park)  # never Temporal: it holds no install's credentials
    try:
        uvicorn.run(create_app(gateway), host=host, port=port, log_level="warning")
    finally:
        gateway.close()


if __name__ == "__main__":
    main()
