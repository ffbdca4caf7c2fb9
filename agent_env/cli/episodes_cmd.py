"""`agent-env episodes serve`: the episode turn loop over HTTP, for trainers in any language."""

from __future__ import annotations

from typing import Annotated

import typer

episodes_app = typer.Typer(help="Trainer episodes: play a task's agents from your own loop.", no_args_is_help=True)


@episodes_app.command("serve")
def episodes_serve(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8792,
    worker: Annotated[
        bool,
        typer.Option(help="Run a worker in this process (--no-worker: workers run elsewhere, `agent-env worker`)."),
    ] = True,
) -> None:
    """Serve the episode turn loop over HTTP (start, next-turn, end, abandon, result), until Ctrl-C."""
    raise typer.Exit(serve_command(host, port, worker))


def serve_command(host: str, port: int, worker: bool) -> int:
    import uvicorn

    from agent_env.cli.output import console
    from agent_env.config import load_settings
    from agent_env.episodes.http import create_app
    from agent_env.guard import is_ip_literal

    settings = load_settings()
    base = f"http://{host}:{port}"
    console().print(
        f"serving episodes at {base}/episodes (POST to start one; see `agent_env/episodes/http.py` or "
        "the README)\n  auth: the gateway's admin token as a bearer token"
        + ("" if worker else "\n  runs are executed by workers elsewhere (`agent-env worker`)")
    )
    # A bind name (not an IP) is how trainers reach it: requests naming it are ours; other Hosts get 421.
    urls = [] if is_ip_literal(host) else [base]
    uvicorn.run(create_app(settings, worker=worker, urls=urls), host=host, port=port, log_level="warning")
    return 0
