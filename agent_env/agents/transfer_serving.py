"""Our agent SDK's side of protocol v1's object transfers: `urn:agentenv:snapshot/v1` save and load, served by
`agents.sdk.serve` for an agent that keeps state it can save and restore.

An agent opts in by defining two hooks (no base class needed):

    class Notes(Agent):
        async def save_state(self, context_id: str) -> AgentState:       # LookupError: no such conversation (404)
            return AgentState(trajectory=json.dumps(self.notes[context_id]).encode())

        async def load_state(self, state: AgentState, context_id: str | None) -> str:
            context_id = context_id or new_context_id()
            self.notes[context_id] = json.loads(state.trajectory)
            return context_id                                              # where the state now lives

The run sends grants (`agentenv_protocol.transfers`: a URL and headers per object, for a few minutes); the SDK
moves the bytes with our one grant-transfer module (`stores.transfer`: sizes and digests checked, the grant's URL
never logged or followed elsewhere), so the hooks only see bytes.
The card declares the extension with the protocol's request and response contracts (`transfer_wire`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentenv_protocol.transfers import TransferError
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agent_env.agents.changelog_wire import changelog_card_methods
from agent_env.agents.extension_table import ENDPOINTS
from agent_env.agents.transfer_wire import (
    SNAPSHOT,
    SNAPSHOT_DESCRIPTION,
    ObjectSnapshotLoadRequest,
    ObjectSnapshotLoadResponse,
    ObjectSnapshotSaveRequest,
    ObjectSnapshotSaveResponse,
    TaskObjectTrajectoryRequest,
    TrajectoryObjectsResponse,
    snapshot_card_params,
)
from agent_env.guard import BodyTooLarge, read_body
from agent_env.stores import transfer
from agent_env.stores.transfer import download, put

MAX_REQUEST_BYTES = 256 * 1024  # a transfer request carries grants, never the objects


@dataclass
class AgentState:
    """What an agent saves of one conversation: its own account of it (`trajectory`) and, if it keeps one, its
    working files (`workspace`), each as opaque bytes of its own format."""

    trajectory: bytes
    workspace: bytes | None = None


def new_context_id() -> str:
    return uuid.uuid4().hex


def saves_state(agent: Any) -> bool:
    return callable(getattr(agent, "save_state", None)) and callable(getattr(agent, "load_state", None))


def card_entries(agent: Any) -> list[Any]:
    """The card's extensions for what `agent` can transfer: snapshot/v1 (with its `changelog` feature:
    `changelog_serving`) if it has the hooks."""
    if not saves_state(agent):
        return []
    from a2a.types import AgentExtension

    params = snapshot_card_params()
    params["methods"] = {**params["methods"], **changelog_card_methods()}  # its optional `changelog` feature too
    return [AgentExtension(uri=SNAPSHOT, description=SNAPSHOT_DESCRIPTION, params=params)]


def routes(agent: Any) -> list[Route]:
    """POST (save) and PUT (load) at /ext/snapshot, for an agent with the hooks."""
    if not saves_state(agent):
        return []

    async def save(request: Request) -> JSONResponse:
        wanted = ObjectSnapshotSaveRequest.model_validate(await _body(request))
        try:
            state: AgentState = await agent.save_state(wanted.context_id)
        except LookupError:
            return _refused(404, f"no conversation {wanted.context_id!r} to save")
        uploaded = {"trajectory": await put(wanted.objects.trajectory, state.trajectory)}
        if wanted.objects.workspace is not None and state.workspace is not None:
            uploaded["workspace"] = await put(wanted.objects.workspace, state.workspace)
        answer = ObjectSnapshotSaveResponse.model_validate({"context_id": wanted.context_id, "objects": uploaded})
        return JSONResponse(answer.model_dump(mode="json", exclude_none=True))

    async def load(request: Request) -> JSONResponse:
        wanted = ObjectSnapshotLoadRequest.model_validate(await _body(request))
        trajectory = await download(wanted.objects.trajectory)
        workspace = None if wanted.objects.workspace is None else await download(wanted.objects.workspace)
        context_id = await agent.load_state(AgentState(trajectory, workspace), wanted.target_context_id)
        return JSONResponse(ObjectSnapshotLoadResponse(context_id=context_id).model_dump(mode="json"))

    path = ENDPOINTS[SNAPSHOT]
    return [Route(path, _answering(save), methods=["POST"]), Route(path, _answering(load), methods=["PUT"])]


async def trajectory_to_object(body: Any, trajectories: Mapping[str, Any]) -> JSONResponse:
    """trajectory/v1 get, `task_objects` variant: the kept trajectory of a task, written as one JSON object
    through the run's grant; answered with what was uploaded."""

    try:
        wanted = TaskObjectTrajectoryRequest.model_validate(body)
        events = trajectories.get(wanted.task_id)
        if events is None:
            return _refused(404, f"No completed trajectory available for task {wanted.task_id!r}")
        data = json.dumps(events, ensure_ascii=False).encode()  # what the inline variant answers as "trajectory"
        uploaded = await put(wanted.objects.trajectory, data)
    except (*_MOVING, ValueError) as e:
        return _refusal(e)
    answer = TrajectoryObjectsResponse.model_validate({"objects": {"trajectory": uploaded.model_dump()}})
    return JSONResponse(answer.model_dump(mode="json", exclude_none=True))


async def _body(request: Request) -> Any:
    try:
        return json.loads(await read_body(request, MAX_REQUEST_BYTES) or b"{}")
    except BodyTooLarge:
        raise ValueError(f"the request is over {MAX_REQUEST_BYTES} bytes") from None


def _refused(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


_MOVING = (transfer.ObjectMoveFailed, transfer.TooLarge, transfer.Mismatch)
_CODES = {
    transfer.StoreUnreachable: "transfer_unavailable",
    transfer.ObjectMoveFailed: "transfer_rejected",
    transfer.TooLarge: "transfer_too_large",
}


def _refusal(e: Exception) -> JSONResponse:
    """A failed transfer as its own code (the protocol's error body), a bad body as a 400 naming the field:
    neither quotes the request, which holds grants."""
    if isinstance(e, _MOVING):
        code = _CODES.get(type(e), "integrity_mismatch")
        failed = TransferError(code, str(e) or "the object is over its grant's max_bytes")  # type: ignore[arg-type]
        return JSONResponse(failed.body(), status_code=failed.status_code)
    if isinstance(e, ValidationError):
        errors = e.errors(include_input=False, include_url=False)
        return _refused(400, "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in errors)[:2000])
    return _refused(400, str(e)[:2000])


def _answering(handler):
    async def route(request: Request) -> JSONResponse:
        try:
            return await handler(request)
        except (*_MOVING, ValueError) as e:  # pydantic's ValidationError is a ValueError
            return _refusal(e)

    return route
