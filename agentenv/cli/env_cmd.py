"""`agent-env env serve`."""

from __future__ import annotations

from pathlib import Path

from agentenv.cli.output import console
from agentenv.config import load_settings


def resolve_app(target: str):
    from agentenv.envs.builtin import APPS
    from agentenv.envs.instance import load_app_class

    return load_app_class(APPS.get(target, target))


def serve_command(target: str, host: str, port: int, state: str | None, data_root: str | None) -> int:
    import uvicorn

    from agentenv.envs.serve import create_app

    app_cls = resolve_app(target)
    folder = Path(state) if state else load_settings().state_dir / "serve" / app_cls.name
    app = create_app(app_cls, folder, data_root=Path(data_root) if data_root else None)
    base = f"http://{host}:{port}"
    console().print(f"serving [bold]{app_cls.name}[/] at {base}  (MCP {base}/mcp · card {base}/.well-known/agent-env.json"
                    f" · data plane {base}/agentenv)\n  state: {folder}")
    uvicorn.run(app, host=host, port=port, log_level="warning")
    return 0
