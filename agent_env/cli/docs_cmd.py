"""`agent-env docs serve`: the user guide as an MCP server (search_docs, read_doc, list_docs) for coding agents."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

docs_app = typer.Typer(help="The user guide: serve it to coding agents over MCP.", no_args_is_help=True)


@docs_app.command("serve")
def docs_serve(
    port: Annotated[int, typer.Option(help="Port to bind (0: any free one; the URL is printed).")] = 8793,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    stdio: Annotated[
        bool, typer.Option("--stdio", help="Serve over stdin and stdout instead, for a client that starts it.")
    ] = False,
    docs_dir: Annotated[
        Path | None,
        typer.Option(help="Serve this folder of Markdown pages instead of the guide shipped with agent-env."),
    ] = None,
) -> None:
    """Serve the user guide over MCP: streamable HTTP at http://HOST:PORT/mcp (until Ctrl-C), or --stdio.

    Its tools: search_docs(query, limit) finds the sections that answer a question, read_doc(path, anchor)
    returns a page's or a section's Markdown, list_docs() lists the pages. Requests naming another Host or
    sent from another site's page (Origin) are refused.
    """
    raise typer.Exit(serve_command(host, port, stdio, docs_dir))


def serve_command(host: str, port: int, stdio: bool, docs_dir: Path | None) -> int:
    import asyncio

    from agent_env.docs_server.server import MCP_PATH, bind, http_app, load_index, serve_http, serve_stdio
    from agent_env.guard import is_ip_literal

    index = load_index(docs_dir)
    if stdio:
        serve_stdio(index)
        return 0
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{bound}"
    print(f"serving the docs ({len(index.pages)} pages) over MCP at {base}{MCP_PATH}", flush=True)
    print(f"  connect Claude Code: claude mcp add --transport http agent-env-docs {base}{MCP_PATH}", flush=True)
    # A bind name (not an IP) is how clients reach it: requests naming it are ours; other Hosts get 421.
    urls = [] if is_ip_literal(host) else [base]
    try:
        asyncio.run(serve_http(http_app(index, urls), sock))
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    sys.stdout.flush()
    return 0
