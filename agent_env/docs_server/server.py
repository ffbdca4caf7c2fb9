"""The guide as MCP tools: `search_docs`, `read_doc` and `list_docs` (and each page as a resource,
`agent-env-docs://PATH`), over streamable HTTP at `/mcp` or over stdio.

Over HTTP the server is stateless (each request stands alone: no session table grows) and answers JSON. It sits
behind the door every server of ours has (`guard.HostGuard`: a forged `Host` is a 421, another site's `Origin`
a 403, a form or text/plain body a 415, JSON nested too deep a 400), so a web page the user visits cannot drive
it; the SDK's own Host check is off, the door being the one place that decides. It reads nothing from disk
after it starts: every page was loaded into the index, and a path names an entry of it, never a file.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Annotated

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resources import TextResource
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp

from agent_env import json_depth
from agent_env.docs_server.pages import MAX_PAGES, GuidePage, load_pages, page_path, shipped_root
from agent_env.docs_server.search import MAX_LIMIT, MAX_QUERY_CHARS, DocsIndex
from agent_env.errors import AgentEnvError, BadInput, NotFound
from agent_env.guard import HostGuard
from agent_env.ports import listening_socket

DEFAULT_PORT = 8793
MCP_PATH = "/mcp"
READY_PATH = "/healthz"
MAX_BODY = 64 * 1024  # a tool call's arguments are a query or a path: small
MAX_ANCHOR_CHARS = 200
RESOURCE_SCHEME = "agent-env-docs"  # each page is also the resource agent-env-docs://PATH
INSTRUCTIONS = (
    "The agent-env user guide (AgentEnv Framework on Temporal). search_docs finds the sections that answer a "
    "question; read_doc returns a page's Markdown, or one section's with its anchor; list_docs lists the pages."
)

SEARCH_DOCS = (
    "Search the agent-env user guide: the sections that best match the query, best first, each with its page path, "
    "title, section heading and anchor (give them to read_doc), a short snippet and a score."
)
READ_DOC = "A page of the agent-env user guide as Markdown, or one section of it (with its subsections) by its anchor."
LIST_DOCS = "The pages of the agent-env user guide in reading order, with their titles and second-level headings."


class DocHit(BaseModel):
    path: str = Field(description="the page, relative to the guide's root (give it to read_doc)")
    title: str = Field(description="the page's title")
    heading: str = Field(description="the section's heading")
    anchor: str = Field(description="the section's anchor (give it to read_doc for the section alone)")
    snippet: str = Field(description="a short passage of the section")
    score: float = Field(description="how well it matches (higher is better; comparable within one search)")


class SearchResults(BaseModel):
    query: str
    hits: list[DocHit]


class DocPage(BaseModel):
    path: str
    title: str
    nav: list[str] = Field(description="the guide's sections the page sits under")
    headings: list[str] = Field(description="its second-level headings")


class DocList(BaseModel):
    pages: list[DocPage]


def load_index(docs_dir: Path | None = None) -> DocsIndex:
    """The index of the shipped guide, or of the Markdown pages in `docs_dir` (with its mkdocs.yml's nav when the
    folder or the one above it has one)."""
    if docs_dir is None:
        root, config = shipped_root()
    else:
        if not docs_dir.is_dir():
            raise BadInput(f"--docs-dir {docs_dir} is not a folder", "give a folder of Markdown pages")
        root = docs_dir
        config = next((c for c in (root / "mkdocs.yml", root.parent / "mkdocs.yml") if c.is_file()), None)
    pages = load_pages(root, config)
    if not pages:
        raise BadInput(f"{root} holds no Markdown pages", "give a folder of .md pages with --docs-dir")
    return DocsIndex(pages[:MAX_PAGES])


def create_server(index: DocsIndex) -> MCPServer:
    """The MCP server of the guide in `index`: its tools read only the index."""
    server = MCPServer(
        "agent-env-docs",
        title="agent-env docs",
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

    @server.tool(annotations=read_only, description=SEARCH_DOCS)
    def search_docs(
        query: Annotated[
            str, Field(min_length=1, max_length=MAX_QUERY_CHARS, description="words or a question about agent-env")
        ],
        limit: Annotated[int, Field(ge=1, le=MAX_LIMIT, description="how many hits at most")] = 8,
    ) -> SearchResults:
        hits = [DocHit(**vars(hit)) for hit in index.search(query, limit)]
        return SearchResults(query=query, hits=hits)

    @server.tool(annotations=read_only, description=READ_DOC)
    def read_doc(
        path: Annotated[
            str, Field(min_length=1, max_length=300, description="a page's path, as search_docs or list_docs give it")
        ],
        anchor: Annotated[
            str | None,
            Field(max_length=MAX_ANCHOR_CHARS, description="a section's anchor: that section alone (with its own)"),
        ] = None,
    ) -> str:
        try:
            return find_page(index, path).markdown(anchor.lstrip("#") if anchor else None)
        except AgentEnvError as e:  # the caller's to correct: said as the tool's result
            raise ToolError(str(e)) from None

    @server.tool(annotations=read_only, description=LIST_DOCS)
    def list_docs() -> DocList:
        return DocList(
            pages=[
                DocPage(
                    path=page.path,
                    title=page.title,
                    nav=list(page.nav),
                    headings=[s.heading for s in page.sections if s.level == 2],
                )
                for page in index.pages.values()
            ]
        )

    for page in index.pages.values():  # each page as a resource too, for clients that attach resources
        server.add_resource(
            TextResource(
                uri=f"{RESOURCE_SCHEME}://{page.path}",
                name=page.path,
                title=page.title,
                mime_type="text/markdown",
                text=page.markdown(),
            )
        )

    @server.custom_route(READY_PATH, methods=["GET"])
    async def ready(request: Request) -> Response:
        return PlainTextResponse("ok")

    return server


def find_page(index: DocsIndex, path: str) -> GuidePage:
    """The page `path` names (a leading `docs/` is the guide's root too), or BadInput naming the pages."""
    clean = page_path(path)
    for candidate in (clean, clean.removeprefix("docs/"), f"{clean}.md", f"{clean}/index.md"):
        if candidate in index.pages:
            return index.pages[candidate]
    raise NotFound(f"the guide has no page {path[:100]!r}", "list_docs() names every page; give one of its paths")


def http_app(index: DocsIndex, urls: list[str] | None = None) -> ASGIApp:
    """The server as an ASGI app: MCP at /mcp, /healthz, behind the door (`urls`: names it is reached at besides
    loopback addresses)."""
    app = create_server(index).streamable_http_app(
        streamable_http_path=MCP_PATH,
        json_response=True,
        stateless_http=True,
        max_request_body_size=MAX_BODY,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return HostGuard.serving(app, urls or [], json_rpc={MCP_PATH: json_depth.MCP})


def bind(host: str, port: int) -> socket.socket:
    """The server's socket, bound now: a taken port is said plainly, and port 0 is a free one."""
    try:
        return listening_socket(host, port)
    except OSError as e:
        raise BadInput(
            f"cannot listen on {host}:{port} ({e.strerror})", "give another --port (0: any free one)"
        ) from None


async def serve_http(app: ASGIApp, sock: socket.socket) -> None:
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    await server.serve(sockets=[sock])


def serve_stdio(index: DocsIndex) -> None:
    """Serve over stdin and stdout until the client closes them (nothing else is written to stdout)."""
    asyncio.run(create_server(index).run_stdio_async())
