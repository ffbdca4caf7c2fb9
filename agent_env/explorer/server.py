"""The explorer's HTTP surface: the page, its static files, the one-time login, and a JSON API (read-only).

    GET /                                    the page (a login page, 401, without a session cookie)
    GET /login?code=CODE                     trade `agent-env up`'s one-time code for a session: its cookie,
                                             and a page handing the tab its key once (which then opens /)
    GET /static/...                          the page's HTML, CSS and JavaScript modules (no data in them)
    GET /api/runs?task&status&min_score&max_score&since&until&limit&cursor   runs, newest first -> {runs, next}
    GET /api/runs/{run}                      one run: steps (DAG layers, status, timing, score, outputs),
                                             scores, world clock, Temporal UI link, instances, pins
    GET /api/runs/{run}/world?kind&offset&limit         the world's timeline in virtual time
    GET /api/runs/{run}/calls?agent&tool&refused&offset&limit   tool calls, a page at a time
    GET /api/runs/{run}/calls/{n}            one call whole
    GET /api/runs/{run}/transcripts/{step}   a prompt step's conversation
    GET /api/runs/{run}/artifacts            what the run kept; .../artifacts/{path} downloads one
    GET /api/evals                           eval runs, newest first, each with its aggregate -> {evals}
    GET /api/evals/{eval_run}                one eval run's table: each task's status and score, mean, pass rate
    GET /api/registry                        envs, agents, tasks and evals of the registry
    GET /api/episodes                        runs a trainer played in

Every API route needs the session cookie and the session's key in a header (else 401; auth.py says why
both). Pages get a strict Content-Security-Policy (own scripts and styles only), and the whole app sits
behind `HostGuard` like every agent-env server. It takes no request bodies: one sent anyway is read within
64 KiB (413) and measured at the door (400 past 64 levels), never left for a parser. Refusals are
`{"error": ..., "fix": ...}`; the app has the gateway's FastAPI shape (agent_env.http_app) and serves no
documents.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Annotated, Any, TypedDict, TypeVar

from fastapi import APIRouter, Depends, FastAPI
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.staticfiles import StaticFiles

from agent_env import http_app
from agent_env.config import Settings
from agent_env.errors import AgentEnvError, NotFound
from agent_env.explorer import artifacts, calls, evals, runs, timeline
from agent_env.explorer.auth import COOKIE, KEY_HEADER, Door
from agent_env.gateway.embedded import routed
from agent_env.guard import HostGuard
from agent_env.registry.store import Registry
from agent_env.spec.run import RunState
from agent_env.spec.world_state import clip
from agent_env.stores import Stores, keys, open_stores
from agent_env.temporal.launch import query_state

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send
    from temporalio.client import Client

    from agent_env.gateway_client.env_servers import EnvServers

M = TypeVar("M", bound=BaseModel)

STATIC = Path(__file__).parent / "static"
SIGNIN = Path(__file__).parent / "signin.html"  # the sign-in answer's page, with its key: not a static file
MESSAGE_BYTES = 8 * 1024  # a transcript message's side data (its own account of tool calls), in the API
MAX_BODY_BYTES = 64 * 1024  # the API takes no bodies; one sent anyway is read this far (413 beyond)
HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        b"base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]


class SecurityHeaders:
    """Adds `HEADERS` to every response (the guard's refusals included: it wraps this)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []), *(h for h in HEADERS if h[0] not in present)]
            await send(message)

        await self.app(scope, receive, sending)


class Explorer:
    """What the routes read from: the stores, Temporal (live state of running runs) and the gateway (live
    trajectories). Without a Temporal client, running runs show their last record."""

    def __init__(self, settings: Settings, door: Door, stores: Stores, temporal: Client | None) -> None:
        self.settings = settings
        self.door = door
        self.stores = stores
        self.temporal = temporal
        self._gateway: EnvServers | None = None
        self.calls = calls.CallLog(stores, self.gateway)
        self._plans: dict[str, dict[str, Any]] = {}

    def gateway(self) -> EnvServers | None:
        """The client of whatever serves each instance: the install's gateway, or an instance's own server."""
        if self._gateway is None:
            try:
                self._gateway = routed(self.settings, self.stores, start_daemon=False)
            except AgentEnvError:  # e.g. configured gateways without an admin token: read the stores only
                return None
        return self._gateway

    async def close(self) -> None:
        if self._gateway is not None:
            await self._gateway.aclose()

    async def state(self, run_id: str) -> tuple[RunState, bool]:
        """The run's state, and whether it was read live from its workflow."""
        record = await asyncio.to_thread(self.stores.documents.get, keys.RUNS, run_id)
        if record is None:
            raise NotFound(f"there is no run {run_id!r}", "pick one from the runs list")
        state = RunState.model_validate(record)
        if state.status.finished or self.temporal is None:
            return state, False
        try:
            return await query_state(self.temporal.get_workflow_handle(run_id, result_type=RunState), 3.0), True
        except Exception:  # noqa: BLE001 - no worker or server now: the last record is still worth showing
            return state, False

    def plan(self, state: RunState) -> dict[str, Any] | None:
        digest = state.pins.get("plan")
        if not isinstance(digest, str):
            return None
        if digest not in self._plans:
            key = keys.plan(digest)
            self._plans[digest] = json.loads(self.stores.objects.get(key)) if self.stores.objects.exists(key) else {}
        return self._plans[digest]


async def _explorer(request: Request) -> Explorer:  # async: a sync dependency costs a thread hop per request
    explorer: Explorer = request.app.state.explorer
    return explorer


ExplorerDep = Annotated[Explorer, Depends(_explorer)]


async def no_body(request: Request) -> None:
    """Nothing here takes a body: one sent anyway is read within `MAX_BODY_BYTES` (413) and so measured at
    the door (400 past its nesting limit), then dropped."""
    await http_app.read_body(request, MAX_BODY_BYTES)


async def signed_in(request: Request, explorer: ExplorerDep) -> None:
    """Every API route: the session cookie and the tab's key (auth.py says why both)."""
    if not explorer.door.admits(request.cookies.get(COOKIE), request.headers.get(KEY_HEADER)):
        raise http_app.Refused(
            401,
            "not signed in",
            "open the one-time link `agent-env up` printed; the API answers the explorer's own page "
            f"only (the session cookie and the tab's key in {KEY_HEADER})",
        )


def query(model: type[M], request: Request) -> M:
    """The query string as `model` (blank values left out); a 400 names what is wrong."""
    values = {k: v for k, v in request.query_params.items() if v != ""}
    return model.model_validate(values)


def page(name: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse((STATIC / name).read_text(), status_code=status)


pages = APIRouter()
api = APIRouter(prefix="/api", dependencies=[Depends(signed_in)])


@pages.get("/")
async def index(request: Request, explorer: ExplorerDep) -> Response:
    return page("index.html") if explorer.door.has_session(request.cookies.get(COOKIE)) else page("login.html", 401)


@pages.get("/login")
async def login(request: Request, explorer: ExplorerDep) -> Response:
    granted = explorer.door.redeem(request.query_params.get("code"))
    if granted is None:
        return page("login.html", 401)
    # The key, once: this page's script keeps it in the tab's sessionStorage and opens the explorer.
    response = HTMLResponse(Template(SIGNIN.read_text()).substitute(key=granted.key))
    response.headers.append("set-cookie", explorer.door.cookie_header(granted.session))
    return response


@api.get("/runs")
async def run_list(request: Request, explorer: ExplorerDep) -> JSONResponse:
    f = query(runs.RunFilter, request)
    return JSONResponse(await asyncio.to_thread(runs.list_runs, explorer.stores, f))


@api.get("/runs/{run}")
async def run_detail(run: str, explorer: ExplorerDep) -> JSONResponse:
    state, live = await explorer.state(run)
    settings = explorer.settings
    view = runs.run_view(state, live=live, temporal_url=settings.run_url(state.run_id), real_now=datetime.now(UTC))
    view["artifacts"] = await asyncio.to_thread(artifacts.listing, explorer.stores, state.run_id)
    return JSONResponse(view)


@api.get("/runs/{run}/world")
async def world_page(run: str, request: Request, explorer: ExplorerDep) -> JSONResponse:
    q = query(timeline.WorldQuery, request)
    state, _ = await explorer.state(run)
    personas = timeline.personas_of(await asyncio.to_thread(explorer.plan, state))
    body = timeline.timeline(
        state.world.events if state.world else [], personas, kind=q.kind, offset=q.offset, limit=q.limit
    )
    body["dropped"] = state.world.dropped if state.world else {}
    return JSONResponse(body)


@api.get("/runs/{run}/calls")
async def call_page(run: str, request: Request, explorer: ExplorerDep) -> JSONResponse:
    q = query(calls.CallQuery, request)
    state, _ = await explorer.state(run)
    return JSONResponse(calls.page(await explorer.calls.calls(state), q))


@api.get("/runs/{run}/calls/{n:int}")
async def call_entry(run: str, n: int, explorer: ExplorerDep) -> JSONResponse:
    state, _ = await explorer.state(run)
    merged = (await explorer.calls.calls(state)).merged
    if not 0 <= n < len(merged):
        raise NotFound(f"run {state.run_id} has no call {n}", f"calls are numbered 0 to {len(merged) - 1}")
    return JSONResponse(merged[n])


@api.get("/runs/{run}/transcripts/{step}")
async def transcript(run: str, step: str, explorer: ExplorerDep) -> JSONResponse:
    state, _ = await explorer.state(run)
    found = state.steps.get(step)
    key = found.outputs.get("transcript") if found else None
    if not isinstance(key, str) or not await asyncio.to_thread(explorer.stores.objects.exists, key):
        raise NotFound(f"step {step!r} of run {state.run_id} kept no transcript")
    doc = json.loads(await asyncio.to_thread(explorer.stores.objects.get, key))
    messages = [
        {**m, **({"data": clip(m["data"], MESSAGE_BYTES)} if "data" in m else {})} for m in doc.get("messages", [])
    ]
    tool_calls = doc.get("tool_calls") or []
    return JSONResponse(
        {
            "step": doc.get("step"),
            "agent": doc.get("agent"),
            "partner": doc.get("partner"),
            "timed_out": doc.get("timed_out"),
            "messages": messages,
            "tool_calls": len(tool_calls),
            "refused": sum(1 for c in tool_calls if c.get("refused")),
        }
    )


@api.get("/runs/{run}/artifacts")
async def artifact_list(run: str, explorer: ExplorerDep) -> JSONResponse:
    return JSONResponse({"artifacts": await asyncio.to_thread(artifacts.listing, explorer.stores, run)})


@api.get("/runs/{run}/artifacts/{path:path}")
async def artifact_file(run: str, path: str, explorer: ExplorerDep) -> Response:
    name, data = await asyncio.to_thread(artifacts.read, explorer.stores, run, path)
    quoted = name.replace('"', "").replace("\\", "")
    return Response(
        data,
        media_type="application/octet-stream",
        headers={"content-disposition": f'attachment; filename="{quoted}"'},
    )


@api.get("/evals")
async def eval_list(explorer: ExplorerDep) -> JSONResponse:
    tables = await asyncio.to_thread(evals.eval_list, explorer.stores)
    return JSONResponse({"evals": [t.model_dump(mode="json", exclude={"rows"}) for t in tables]})


@api.get("/evals/{eval_run}")
async def eval_detail(eval_run: str, explorer: ExplorerDep) -> JSONResponse:
    table = await asyncio.to_thread(evals.eval_table, explorer.stores, eval_run)
    return JSONResponse(table.model_dump(mode="json"))


@api.get("/registry")
async def registry(explorer: ExplorerDep) -> JSONResponse:
    return JSONResponse(await asyncio.to_thread(registry_view, explorer.stores))


@api.get("/episodes")
async def episode_list(explorer: ExplorerDep) -> JSONResponse:
    return JSONResponse({"episodes": await asyncio.to_thread(runs.episodes, explorer.stores, 100)})


async def _invalid(request: Request, e: Exception) -> Response:  # a query string that does not fit its model
    assert isinstance(e, ValidationError)
    return http_app.error(400, "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()))


async def _not_found(request: Request, e: Exception) -> Response:
    assert isinstance(e, NotFound)
    return http_app.error(404, e.problem, e.fix)


async def _bad_input(request: Request, e: Exception) -> Response:
    assert isinstance(e, AgentEnvError)
    return http_app.error(400, e.problem, e.fix)


def create_app(
    settings: Settings,
    door: Door,
    *,
    stores: Stores | None = None,
    temporal: Client | None = None,
    urls: list[str] | None = None,
) -> HostGuard:
    """The explorer as an ASGI app. `stores`: opened from `settings` when not given (and closed at shutdown);
    `urls`: where it is reached besides loopback names and IP literals."""
    own_stores = stores is None
    explorer = Explorer(settings, door, stores or open_stores(settings), temporal)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await explorer.close()
            if own_stores:
                explorer.stores.close()

    app = http_app.create(
        "agent-env explorer",
        lifespan=lifespan,
        dependencies=[Depends(no_body)],
        handlers={ValidationError: _invalid, NotFound: _not_found, AgentEnvError: _bad_input},
    )
    app.state.explorer = explorer
    app.include_router(pages)
    app.include_router(api)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return HostGuard.serving(SecurityHeaders(app), urls or ())


class RegistryEntry(TypedDict):
    """A name in the registry: its latest version, how many it has, what it says it is."""

    name: str
    latest: str
    versions: int
    description: str
    pushed_at: str


def registry_view(stores: Stores) -> dict[str, list[RegistryEntry]]:
    """The registry's envs, agents, tasks and evals: each name, its latest version and what it says it is."""
    registry = Registry(stores.documents, stores.objects)  # not closed: the stores are the explorer's
    return {
        kind: [
            {
                "name": name,
                "latest": versions[-1].label,
                "versions": len(versions),
                "description": versions[-1].record.get("description", ""),
                "pushed_at": versions[-1].pushed_at,
            }
            for name, versions in registry.all_versions(kind).items()
        ]
        for kind in ("envs", "agents", "tasks", "evals")
    }
