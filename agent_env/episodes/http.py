"""Episodes over HTTP, for trainers not written in Python (`agent-env episodes serve`).

Every request carries the gateway's admin token (`Authorization: Bearer aea_...`): turns hand out
agents' role tokens. Bodies and answers are JSON.

    POST /episodes                          {"task": "refund", "trainer_agents": ["refunds"],
                                             "turn_timeout": 900, "seed": 7}        -> {"episode": ID}
                                            (trainer_agents: by default the task's only prompted agent;
                                             turn_timeout: by default each prompt's own turn_deadline)
    POST /episodes/{ID}/next-turn           {"agent": null}   waits for the next turn -> {"turn": {...}}
                                            or {"turn": null} once the episode is over
    POST /episodes/{ID}/turns/{TURN}/end    {"response": "Done."}                   -> {"ended": TURN}
    POST /episodes/{ID}/abandon             {"reason": "..."}
    GET  /episodes/{ID}/result              waits for the run to end -> {"status", "total", "score" (= total),
                                             "passed", "scores": {step: score}, "components": [row, ...], "error"}
                                            or, when the run could not grade the policy (an infrastructure
                                            failure), 502 {"error", "infrastructure": {"episode", "step", "cause",
                                            "status"}}: drop or retry it, never score it
    POST /episodes/groups                   {...as /episodes, "size": 8, "seeds": null}
                                            -> {"group": ID, "episodes": [ID, ...]}
    GET  /episodes/groups/{ID}/result       waits for every rollout -> {"group", "results": [result of each, in order]}
                                            (a rollout that could not be graded: its {"error", "infrastructure"})
    POST /episodes/groups/{ID}/close        ends the group early (its prototype released) -> {"closed": ID}

A group is `size` rollouts of one task from one start state (agent_env.episodes.group): its envs are deployed
once and forked per rollout. Each rollout is an episode, driven with the routes above by its ID.

A turn: `id`, `agent`, `role`, `prompt`, `system_prompt`, `conversation`, `deadline_s`, and where its
agent acts: `mcp_url` (MCP, streamable HTTP) and `tools_url` (REST: GET lists, POST /{name} calls), both
with `token` as a bearer token. Tool calls go to the gateway directly, never through here.

At the door (agent_env.guard.HostGuard): `Host` must be this server's, a browser's `Origin` its own, and
bodies are JSON (`Content-Type: application/json`; text/plain and form types are refused with 415), at most
16 MiB (413) and nested at most 64 levels (400). Every refusal is `{"error": ...}` with its status (401
without the admin token, 400 for a bad body or task, 404 for an unknown episode or group); the app has the
gateway's FastAPI shape (agent_env.http_app) and serves no documents.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from typing import Annotated, Any, TypedDict

from fastapi import APIRouter, Depends, FastAPI
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agent_env import http_app
from agent_env.config import Settings
from agent_env.episodes.client import Episode, Episodes
from agent_env.episodes.group import MAX_SIZE, EpisodeGroup
from agent_env.episodes.outcome import EpisodeInfrastructureError, EpisodeResult
from agent_env.episodes.spec import EpisodeSpec
from agent_env.errors import AgentEnvError, NotFound
from agent_env.gateway.embedded import admin_token, base_url
from agent_env.gateway_client.wire import JsonObject
from agent_env.guard import HostGuard, bearer, tokens_equal
from agent_env.planning.tasks import parse_task
from agent_env.task_lookup import resolve_target

KEPT_GROUPS = 1024  # groups this server remembers (by id) for their result and close routes
# Episodes this server remembers between requests: each keeps the next turn its start or last answer asked
# for (so a turn costs the run one update, as in Python); one not remembered is asked afresh, nothing is lost.
KEPT_EPISODES = 4096
MAX_BODY_BYTES = 16 * 1024 * 1024  # as the gateway's: a task posted whole may carry its envs' data


class StartRequest(BaseModel):
    task: str | dict[str, Any] = Field(
        description="a built-in bundle's name, a bundle folder or task file on this server, or a task as JSON"
    )
    task_name: str | None = Field(None, description="which task of a bundle with several")
    trainer_agents: list[str] | None = Field(
        None, min_length=1, description="the agents played; default: the task's only prompted agent"
    )
    turn_timeout: float | None = Field(None, gt=0, description="each turn's deadline; default: each prompt's own")
    seed: int | None = None


class StartGroupRequest(StartRequest):
    size: int = Field(ge=1, le=MAX_SIZE, description="rollouts in the group")
    seeds: list[int] | None = Field(None, description="one per rollout; default: every rollout the same seed")


class NextTurn(BaseModel):
    agent: str | None = None


class EndTurn(BaseModel):
    response: str


class Abandon(BaseModel):
    reason: str = "abandoned over HTTP"


class Result(TypedDict):
    """An ended episode's result, as `GET /episodes/{ID}/result` answers it (EpisodeResult's fields; `score` is
    `total`, kept under its first name)."""

    status: str
    total: float | None
    score: float | None
    passed: bool
    scores: dict[str, float]
    components: list[JsonObject]
    error: str | None


class Infrastructure(TypedDict):
    """Why an episode has no reward (EpisodeInfrastructureError), as its result route answers it (status 502)."""

    error: str
    infrastructure: dict[str, str | None]


INFRASTRUCTURE_STATUS = 502  # the run could not grade the policy: distinct from a refusal (4xx) and a score (200)


class Served:
    """What the routes share: the trainer's `Episodes` (connected at startup) and what this server remembers
    (the newest groups and episodes, bounded)."""

    def __init__(self, settings: Settings, worker: bool) -> None:
        self.settings = settings
        self.worker = worker
        self.admin = admin_token(settings)
        self.gateway_base = base_url(settings)
        self._episodes: Episodes | None = None
        self.groups: OrderedDict[str, EpisodeGroup] = OrderedDict()  # started here (the newest kept)
        self.playing: OrderedDict[str, Episode] = OrderedDict()  # last used here (the newest kept)

    @property
    def episodes(self) -> Episodes:
        if self._episodes is None:
            raise AgentEnvError("the server is not connected to Temporal yet", "retry once it has started")
        return self._episodes

    @contextlib.asynccontextmanager
    async def connected(self) -> AsyncIterator[None]:
        self._episodes = await Episodes.connect(self.settings, worker=self.worker)
        try:
            yield
        finally:
            await self._episodes.close()

    def keep(self, played: Episode) -> Episode:
        self.playing[played.run_id] = played
        self.playing.move_to_end(played.run_id)
        while len(self.playing) > KEPT_EPISODES:
            self.playing.popitem(last=False)
        return played

    def episode(self, run_id: str) -> Episode:
        return self.keep(self.playing.get(run_id) or self.episodes.episode(run_id))

    def group(self, group_id: str) -> EpisodeGroup:
        group = self.groups.get(group_id)
        if group is None:
            raise NotFound(
                f"no group {group_id!r} was started by this server",
                "start one with POST /episodes/groups (a server remembers its newest groups only)",
            )
        return group

    def remember(self, group: EpisodeGroup) -> None:
        self.groups[group.id] = group
        for member in group.episodes:
            self.keep(member)
        while len(self.groups) > KEPT_GROUPS:  # the oldest is forgotten here; its prototype expires on the gateway
            self.groups.popitem(last=False)


async def _served(request: Request) -> Served:  # async: a sync dependency costs a thread hop per request
    served: Served = request.app.state.served
    return served


ServedDep = Annotated[Served, Depends(_served)]


async def admin_only(request: Request, served: ServedDep) -> None:
    """Turns hand out agents' role tokens: every route needs the gateway's admin token."""
    if not tokens_equal(bearer(request.headers.get("authorization")), served.admin):
        raise http_app.Refused(401, "this needs the gateway's admin token (Authorization: Bearer aea_...)")


router = APIRouter(dependencies=[Depends(admin_only)])


def spec_of(body: StartRequest) -> EpisodeSpec:
    """The episode a start asks for; a bad task or agent is refused before anything connects."""
    if isinstance(body.task, dict):
        task = parse_task(body.task, "the posted task")
    else:
        task = resolve_target(body.task, body.task_name)
    return EpisodeSpec.from_task(task, body.trainer_agents, turn_timeout=body.turn_timeout, seed=body.seed)


def result_of(played: Episode, outcome: EpisodeResult) -> Result:
    """An ended episode's result (its `outcome()` returned)."""
    return {
        "status": outcome.status.value,
        "total": outcome.total,
        "score": outcome.total,
        "passed": outcome.passed,
        "scores": outcome.scores,
        "components": [c.model_dump(mode="json") for c in outcome.components],
        "error": played.state.error if played.state else None,
    }


def infrastructure_of(e: EpisodeInfrastructureError) -> Infrastructure:
    return {
        "error": str(e),
        "infrastructure": {"episode": e.run_id, "step": e.step, "cause": e.cause, "status": e.status},
    }


@router.post("/episodes", status_code=201)
async def start(request: Request, served: ServedDep) -> JSONResponse:
    body = await http_app.read_model(request, StartRequest, MAX_BODY_BYTES, "episode")
    spec = spec_of(body)
    started = served.keep(await served.episodes.start(spec))
    return JSONResponse({"episode": started.run_id}, status_code=201)


@router.post("/episodes/groups", status_code=201)
async def start_group(request: Request, served: ServedDep) -> JSONResponse:
    body = await http_app.read_model(request, StartGroupRequest, MAX_BODY_BYTES, "group")
    spec = spec_of(body)
    group = await served.episodes.start_group(spec, body.size, seeds=body.seeds)
    served.remember(group)
    return JSONResponse({"group": group.id, "episodes": [e.run_id for e in group.episodes]}, status_code=201)


@router.get("/episodes/groups/{group}/result")
async def group_result(group: str, served: ServedDep) -> JSONResponse:
    found = served.group(group)
    outcomes = await found.outcomes()
    results: list[Result | Infrastructure] = [
        infrastructure_of(o) if isinstance(o, EpisodeInfrastructureError) else result_of(e, o)
        for e, o in zip(found.episodes, outcomes, strict=True)
    ]
    return JSONResponse({"group": found.id, "results": results})


@router.post("/episodes/groups/{group}/close")
async def close_group(group: str, served: ServedDep) -> JSONResponse:
    found = served.group(group)
    await found.close()
    return JSONResponse({"closed": found.id})


@router.post("/episodes/{episode}/next-turn")
async def next_turn(episode: str, request: Request, served: ServedDep) -> JSONResponse:
    body = await http_app.read_model(request, NextTurn, MAX_BODY_BYTES, "next-turn")
    turn = await served.episode(episode).next_turn(body.agent)
    if turn is None:
        return JSONResponse({"turn": None})
    offer = turn.offer.model_dump(mode="json")
    if turn.offer.env:
        offer["token"] = await turn.token()
        base = turn.offer.mcp_url.split("/envs/", 1)[0] if turn.offer.mcp_url else served.gateway_base  # its gateway's
        offer["tools_url"] = f"{base}/envs/{turn.offer.env}/tools"
    return JSONResponse({"turn": offer})


@router.post("/episodes/{episode}/turns/{turn:path}/end")
async def end_turn(episode: str, turn: str, request: Request, served: ServedDep) -> JSONResponse:
    body = await http_app.read_model(request, EndTurn, MAX_BODY_BYTES, "end")
    await served.episode(episode).end_turn(turn, body.response)
    return JSONResponse({"ended": turn})


@router.post("/episodes/{episode}/abandon")
async def abandon(episode: str, request: Request, served: ServedDep) -> JSONResponse:
    body = await http_app.read_model(request, Abandon, MAX_BODY_BYTES, "abandon")
    await served.episode(episode).abandon(body.reason)
    return JSONResponse({"abandoned": body.reason})


@router.get("/episodes/{episode}/result")
async def result(episode: str, served: ServedDep) -> JSONResponse:
    played = served.episode(episode)
    try:
        outcome = await played.outcome()
    except EpisodeInfrastructureError as e:
        return JSONResponse(infrastructure_of(e), status_code=INFRASTRUCTURE_STATUS)
    finally:
        if played.state is not None:
            served.playing.pop(played.run_id, None)  # over: nothing more to ask
    return JSONResponse(result_of(played, outcome))


async def _not_found(request: Request, e: Exception) -> Response:
    return http_app.error(404, str(e))


async def _bad_input(request: Request, e: Exception) -> Response:  # a bad body, task or agent; an ended episode
    return http_app.error(400, str(e))


def create_app(settings: Settings, *, worker: bool = True, urls: Iterable[str | None] = ()) -> HostGuard:
    """The episodes ASGI app. `urls`: where it is reached besides 127.0.0.1 (the gateway URL's host is
    allowed too: a trainer reaching a remote gateway by name reaches this server by that name as well)."""
    served = Served(settings, worker)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with served.connected():
            yield

    app = http_app.create(
        "agent-env episodes", lifespan=lifespan, handlers={NotFound: _not_found, AgentEnvError: _bad_input}
    )
    app.state.served = served
    app.include_router(router)
    return HostGuard.serving(app, [*settings.gateway.urls(), *urls])
