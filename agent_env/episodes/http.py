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
    GET  /episodes/{ID}/result              waits for the run to end -> {"status", "score", "scores": {step: score}}
    POST /episodes/groups                   {...as /episodes, "size": 8, "seeds": null}
                                            -> {"group": ID, "episodes": [ID, ...]}
    GET  /episodes/groups/{ID}/result       waits for every rollout -> {"group", "results": [result of each, in order]}
    POST /episodes/groups/{ID}/close        ends the group early (its prototype released) -> {"closed": ID}

A group is `size` rollouts of one task from one start state (agent_env.episodes.group): its envs are deployed
once and forked per rollout. Each rollout is an episode, driven with the routes above by its ID.

A turn: `id`, `agent`, `role`, `prompt`, `system_prompt`, `conversation`, `deadline_s`, and where its
agent acts: `mcp_url` (MCP, streamable HTTP) and `tools_url` (REST: GET lists, POST /{name} calls), both
with `token` as a bearer token. Tool calls go to the gateway directly, never through here.

At the door (agent_env.guard.HostGuard): `Host` must be this server's, a browser's `Origin` its own, and
bodies are JSON (`Content-Type: application/json`; text/plain and form types are refused with 415).
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agent_env.episodes.group import MAX_SIZE
from agent_env.errors import AgentEnvError, NotFound, from_validation_error
from agent_env.guard import HostGuard, tokens_equal

KEPT_GROUPS = 1024  # groups this server remembers (by id) for their result and close routes
# Episodes this server remembers between requests: each keeps the next turn its start or last answer asked
# for (so a turn costs the run one update, as in Python); one not remembered is asked afresh, nothing is lost.
KEPT_EPISODES = 4096


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


def create_app(settings, *, worker: bool = True, urls: Iterable[str | None] = ()) -> HostGuard:
    """The episodes ASGI app. `urls`: where it is reached besides 127.0.0.1 (the gateway URL's host is
    allowed too: a trainer reaching a remote gateway by name reaches this server by that name as well)."""
    from agent_env.episodes import Episodes, EpisodeSpec
    from agent_env.gateway import embedded, tokens
    from agent_env.gateway.embedded import base_url

    state: dict[str, Any] = {}
    groups: OrderedDict[str, Any] = OrderedDict()  # group id -> EpisodeGroup started here (the newest kept)
    playing: OrderedDict[str, Any] = OrderedDict()  # episode id -> Episode last used here (the newest kept)
    admin = embedded.admin_token(settings)
    gateway_base = base_url(settings)

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    async def body_of(request: Request, model: type[BaseModel], what: str):
        try:
            raw = await request.body()
            return model.model_validate(json.loads(raw) if raw else {})
        except ValueError as e:
            if isinstance(e, ValidationError):
                raise AgentEnvError(str(from_validation_error(e, what))) from None
            raise AgentEnvError(f"{what}: the body is not JSON") from None

    def endpoint(handler):
        async def run(request: Request) -> Response:
            if not tokens_equal(tokens.bearer(request.headers.get("authorization")), admin):
                return error(401, "this needs the gateway's admin token (Authorization: Bearer aea_...)")
            try:
                return await handler(request)
            except NotFound as e:
                return error(404, str(e))
            except AgentEnvError as e:
                return error(400, str(e))

        return run

    def keep(played):
        playing[played.run_id] = played
        playing.move_to_end(played.run_id)
        while len(playing) > KEPT_EPISODES:
            playing.popitem(last=False)
        return played

    def episode(request: Request):
        run_id = request.path_params["episode"]
        return keep(playing.get(run_id) or state["episodes"].episode(run_id))

    def spec_of(body: StartRequest):
        if isinstance(body.task, dict):
            from agent_env.planning.tasks import parse_task

            task = parse_task(body.task, "the posted task")
        else:
            from agent_env.task_lookup import resolve_target

            task = resolve_target(body.task, body.task_name)
        return EpisodeSpec.from_task(task, body.trainer_agents, turn_timeout=body.turn_timeout, seed=body.seed)

    async def start(request: Request) -> Response:
        body = await body_of(request, StartRequest, "episode")
        spec = spec_of(body)  # a bad task or agent is refused before anything connects
        started = keep(await state["episodes"].start(spec))
        return JSONResponse({"episode": started.run_id}, status_code=201)

    async def start_group(request: Request) -> Response:
        body = await body_of(request, StartGroupRequest, "group")
        spec = spec_of(body)
        group = await state["episodes"].start_group(spec, body.size, seeds=body.seeds)
        groups[group.id] = group
        for member in group.episodes:
            keep(member)
        while len(groups) > KEPT_GROUPS:  # the oldest is forgotten here; its prototype expires on the gateway
            groups.popitem(last=False)
        return JSONResponse({"group": group.id, "episodes": [e.run_id for e in group.episodes]}, status_code=201)

    def group_of(request: Request):
        group = groups.get(request.path_params["group"])
        if group is None:
            raise NotFound(
                f"no group {request.path_params['group']!r} was started by this server",
                "start one with POST /episodes/groups (a server remembers its newest groups only)",
            )
        return group

    async def group_result(request: Request) -> Response:
        group = group_of(request)
        await group.results()
        return JSONResponse({"group": group.id, "results": [result_of(e) for e in group.episodes]})

    async def close_group(request: Request) -> Response:
        group = group_of(request)
        await group.close()
        return JSONResponse({"closed": group.id})

    async def next_turn(request: Request) -> Response:
        body = await body_of(request, NextTurn, "next-turn")
        turn = await episode(request).next_turn(body.agent)
        if turn is None:
            return JSONResponse({"turn": None})
        offer = turn.offer.model_dump(mode="json")
        if turn.offer.env:
            offer["token"] = await turn.token()
            base = turn.offer.mcp_url.split("/envs/", 1)[0] if turn.offer.mcp_url else gateway_base  # its gateway's
            offer["tools_url"] = f"{base}/envs/{turn.offer.env}/tools"
        return JSONResponse({"turn": offer})

    async def end_turn(request: Request) -> Response:
        body = await body_of(request, EndTurn, "end")
        await episode(request).end_turn(request.path_params["turn"], body.response)
        return JSONResponse({"ended": request.path_params["turn"]})

    async def abandon(request: Request) -> Response:
        body = await body_of(request, Abandon, "abandon")
        await episode(request).abandon(body.reason)
        return JSONResponse({"abandoned": body.reason})

    def result_of(played) -> dict[str, Any]:
        """An ended episode's result (its `result()` returned)."""
        state = played.state
        scores = {sid: s.score.value for sid, s in state.steps.items() if s.score is not None}
        return {"status": state.status.value, "score": state.score, "scores": scores, "error": state.error}

    async def result(request: Request) -> Response:
        played = episode(request)
        await played.result()
        playing.pop(played.run_id, None)  # over: nothing more to ask
        return JSONResponse(result_of(played))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        state["episodes"] = await Episodes.connect(settings, worker=worker)
        yield
        await state["episodes"].close()

    return HostGuard.serving(
        Starlette(
            routes=[
                Route("/episodes", endpoint(start), methods=["POST"]),
                Route("/episodes/groups", endpoint(start_group), methods=["POST"]),
                Route("/episodes/groups/{group}/result", endpoint(group_result), methods=["GET"]),
                Route("/episodes/groups/{group}/close", endpoint(close_group), methods=["POST"]),
                Route("/episodes/{episode}/next-turn", endpoint(next_turn), methods=["POST"]),
                Route("/episodes/{episode}/turns/{turn:path}/end", endpoint(end_turn), methods=["POST"]),
                Route("/episodes/{episode}/abandon", endpoint(abandon), methods=["POST"]),
                Route("/episodes/{episode}/result", endpoint(result), methods=["GET"]),
            ],
            lifespan=lifespan,
        ),
        [*settings.gateway.urls(), *urls],
    )
