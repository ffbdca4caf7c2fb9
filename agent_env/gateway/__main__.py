"""`python -m agent_env.gateway --root DIR --host IP --port N`: the gateway process (what the daemon runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m agent_env.gateway", description=__doc__)
    parser.add_argument("--root", required=True, type=Path, help="the gateway's folder (instances, key, store)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--max-body-kib", type=int, default=16 * 1024)
    args = parser.parse_args()

    import uvicorn

    from agent_env.config import load_settings
    from agent_env.errors import AgentEnvError
    from agent_env.gateway.http import create_app
    from agent_env.gateway.service import Gateway
    from agent_env.guard import is_ip_literal

    try:
        settings = load_settings()
        from agent_env import telemetry
        from agent_env.gateway import tokens

        telemetry.setup(settings, "gateway")  # before the app is made: it has server spans only if tracing is on
        gateway = Gateway(
            args.root,
            max_body_bytes=args.max_body_kib * 1024,
            settings=settings,
            max_calls_per_agent=settings.gateway.max_calls_per_agent,
            max_sessions_per_agent=settings.gateway.max_sessions_per_agent,
            max_app_data_mib=settings.gateway.max_app_data_mib,
            max_trajectory_mib=settings.gateway.max_trajectory_mib,
            min_free_disk_mib=settings.gateway.min_free_disk_mib,
            key=tokens.shared_key(settings) if settings.gateway.key_secret else None,
        )
    except AgentEnvError as e:  # e.g. a damaged key file: the log (shown by whoever started us) says what to do
        sys.exit(f"error: {e}")
    # Requests naming the configured public URL's host (or a bind name) are ours too; any other Host is refused.
    urls = [settings.gateway.url] + ([] if is_ip_literal(args.host) else [f"http://{args.host}:{args.port}"])
    try:
        uvicorn.run(create_app(gateway, urls=urls), host=args.host, port=args.port, log_level="warning")
    finally:
        gateway.close()


if __name__ == "__main__":
    main()
