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
    GET /api/registry                        envs, agents and tasks of the registry
    GET /api/episodes                        runs a trainer played in

Every API route needs the session cookie and the session's key in a header (else 401; auth.py says why
both). Pages get a strict Content-Security-Policy (own scripts and styles only), and the whole app sits
behind `HostGuard` like every agent-env server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agent_env.config import Settings
from agent_env.errors import AgentEnvError, NotFound
from agent_env.explorer import artifacts, calls, runs, world
from agent_env.explorer.auth import COOKIE, KEY_HEADER, Door
from agent_env.guard import HostGuard
from agent_env.spec.run import RunState
from agent_env.spec.world_state import clip
from agent_env.stores import Stores, keys, open_stores

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send
    from temporalio.client import Client

    from agent_env.gateway_client import GatewayClient

STATIC = Path(__file__).parent / "static"
SIGNIN = Path(__file__).parent / "signin.html"  # the sign-in answer's page, with its key: not a static file
MESSAGE_BYTES = 8 * 1024  # a transcript message's side data (its own account of tool calls), in the API
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


def error(status: int, message: str, fix: str | None = None) -> JSONResponse:
    return JSONResponse({"error": message, **({"fix": fix} if fix else {})}, status_code=status)


class Explorer:
    """What the routes read from: the stores, Temporal (live state of running runs) and the gateway (live
    trajectories). Without a Temporal client, running runs show their last record."""

    def __init__(self, settings: Settings, stores: Stores, temporal: Client | None) -> None:
        self.settings = settings
        self.stores = stores
        self.temporal = temporal
        self._gateway: GatewayClient | None = None
        self.calls = calls.CallLog(stores, self.gateway)
        self._plans: dict[str, dict[str, Any]] = {}

    def gateway(self) -> GatewayClient | None:
        if self._gateway is None:
            from agent_env.gateway.embedded import connect

            try:
                self._gateway = connect(self.settings, start_daemon=False)
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
        from agent_env.runner import query_state

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


def query(model: type[BaseModel], request: Request) -> Any:
    """The query string as `model` (blank values left out); a 400 names what is wrong."""
    values = {k: v for k, v in request.query_params.items() if v != ""}
    return model.model_validate(values)


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
    explorer = Explorer(settings, stores or open_stores(settings), temporal)

    def page(name: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse((STATIC / name).read_text(), status_code=status)

    def api(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            if not door.admits(request.cookies.get(COOKIE), request.headers.get(KEY_HEADER)):
                return error(
                    401,
                    "not signed in",
                    "open the one-time link `agent-env up` printed; the API answers the explorer's own page "
                    f"only (the session cookie and the tab's key in {KEY_HEADER})",
                )
            try:
                return await handler(request)
            except ValidationError as e:
                return error(400, "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()))
            except NotFound as e:
                return error(404, e.problem, e.fix)
            except AgentEnvError as e:
                return error(400, e.problem, e.fix)

        return guarded

    async def index(request: Request) -> Response:
        return page("index.html") if door.has_session(request.cookies.get(COOKIE)) else page("login.html", 401)

    async def login(request: Request) -> Response:
        granted = door.redeem(request.query_params.get("code"))
        if granted is None:
            return page("login.html", 401)
        # The key, once: this page's script keeps it in the tab's sessionStorage and opens the explorer.
        response = HTMLResponse(Template(SIGNIN.read_text()).substitute(key=granted.key))
        response.headers.append("set-cookie", door.cookie_header(granted.session))
        return response

    async def run_list(request: Request) -> Response:
        f = query(runs.RunFilter, request)
        return JSONResponse(await asyncio.to_thread(runs.list_runs, explorer.stores, f))

    async def run_detail(request: Request) -> Response:
        state, live = await explorer.state(request.path_params["run"])
        view = runs.run_view(state, live=live, temporal_url=settings.run_url(state.run_id), real_now=datetime.now(UTC))
        view["artifacts"] = await asyncio.to_thread(artifacts.listing, explorer.stores, state.run_id)
        return JSONResponse(view)

    async def world_page(request: Request) -> Response:
        q = query(world.WorldQuery, request)
        state, _ = await explorer.state(request.path_params["run"])
        personas = world.personas_of(await asyncio.to_thread(explorer.plan, state))
        body = world.timeline(
            state.world.events if state.world else [], personas, kind=q.kind, offset=q.offset, limit=q.limit
        )
        body["dropped"] = state.world.dropped if state.world else {}
        return JSONResponse(body)

    async def call_page(request: Request) -> Response:
        q = query(calls.CallQuery, request)
        state, _ = await explorer.state(request.path_params["run"])
        return JSONResponse(calls.page(await explorer.calls.calls(state), q))

    async def call_entry(request: Request) -> Response:
        state, _ = await explorer.state(request.path_params["run"])
        merged = (await explorer.calls.calls(state)).merged
        n = request.path_params["n"]
        if not 0 <= n < len(merged):
            raise NotFound(f"run {state.run_id} has no call {n}", f"calls are numbered 0 to {len(merged) - 1}")
        return JSONResponse(merged[n])

    async def transcript(request: Request) -> Response:
        state, _ = await explorer.state(request.path_params["run"])
        step = state.steps.get(request.path_params["step"])
        key = step.outputs.get("transcript") if step else None
        if not isinstance(key, str) or not await asyncio.to_thread(explorer.stores.objects.exists, key):
            raise NotFound(f"step {request.path_params['step']!r} of run {state.run_id} kept no transcript")
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

    async def artifact_list(request: Request) -> Response:
        run_id = request.path_params["run"]
        return JSONResponse({"artifacts": await asyncio.to_thread(artifacts.listing, explorer.stores, run_id)})

    async def artifact_file(request: Request) -> Response:
        name, data = await asyncio.to_thread(
            artifacts.read, explorer.stores, request.path_params["run"], request.path_params["path"]
        )
        quoted = name.replace('"', "").replace("\\", "")
        return Response(
            data,
            media_type="application/octet-stream",
            headers={"content-disposition": f'attachment; filename="{quoted}"'},
        )

    async def registry(request: Request) -> Response:
        return JSONResponse(await asyncio.to_thread(registry_view, explorer.stores))

    async def episode_list(request: Request) -> Response:
        return JSONResponse({"episodes": await asyncio.to_thread(runs.episodes, explorer.stores, 100)})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await explorer.close()
            if own_stores:
                explorer.stores.close()

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/login", login),
            Route("/api/runs", api(run_list)),
            Route("/api/runs/{run}", api(run_detail)),
            Route("/api/runs/{run}/world", api(world_page)),
            Route("/api/runs/{run}/calls", api(call_page)),
            Route("/api/runs/{run}/calls/{n:int}", api(call_entry)),
            Route("/api/runs/{run}/transcripts/{step}", api(transcript)),
            Route("/api/runs/{run}/artifacts", api(artifact_list)),
            Route("/api/runs/{run}/artifacts/{path:path}", api(artifact_file)),
            Route("/api/registry", api(registry)),
            Route("/api/episodes", api(episode_list)),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        lifespan=lifespan,
    )
    return HostGuard.serving(SecurityHeaders(app), urls or ())


def registry_view(stores: Stores) -> dict[str, Any]:
    """The registry's envs, agents and tasks: each name, its latest version and what it says it is."""
    from agent_env.registry.store import Registry

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
        for kind in ("envs", "agents", "tasks")
    }
