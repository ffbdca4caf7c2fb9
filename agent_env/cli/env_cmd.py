"""`agent-env env serve`."""

from __future__ import annotations

import os
from pathlib import Path

from agent_env.cli.output import console
from agent_env.config import load_settings
from agent_env.errors import BadInput


def resolve_app(target: str):
    from agent_env.envs.app_instance import load_app_class
    from agent_env.envs.builtin import app_targets

    return load_app_class(app_targets().get(target, target))


def server_token(given: str | None) -> str | None:
    """`--token`, else $AGENT_ENV_SERVER_TOKEN (taken out of the environment, so nothing the app starts
    inherits it); None serves without a token."""
    from agent_env.envs.server_token import SERVER_TOKEN_ENV

    from_env = os.environ.pop(SERVER_TOKEN_ENV, None)
    token = given if given is not None else from_env
    if token is None:
        return None
    if not token or not token.isascii() or not token.isprintable() or " " in token:
        raise BadInput(
            "the server token is empty or not printable ASCII without spaces",
            "give a token such as the output of `python -c 'import secrets; print(secrets.token_urlsafe())'`",
        )
    return token


def serve_command(
    target: str, host: str, port: int, state: str | None, data_root: str | None, token: str | None = None
) -> int:
    import uvicorn

    from agent_env.envs.serve import create_app

    token = server_token(token)
    app_cls = resolve_app(target)
    folder = Path(state) if state else load_settings().state_dir / "serve" / app_cls.name
    app = create_app(app_cls, folder, data_root=Path(data_root) if data_root else None, token=token, names=(host,))
    base = f"http://{host}:{port}"
    access = "every request but /ready needs the token" if token else "no token: open to local processes"
    console().print(
        f"serving [bold]{app_cls.name}[/] at {base}  (MCP {base}/mcp · card {base}/.well-known/agent-env.json"
        f" · data plane {base}/agentenv)\n  {access}\n  state: {folder}"
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")
    return 0
