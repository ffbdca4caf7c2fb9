"""Our agent SDK's side of snapshot/v1's optional `changelog` feature, for an agent with state hooks
(`transfer_serving.AgentState`: `save_state` and `load_state`).

enable-changelog hands the agent a namespace grant; after each turn the SDK saves the turn's conversation with the
agent's own `save_state` and posts it there as the next increment (`000000.state`, `000001.state`, ...), before the
turn's answer goes out, so a run that has its answer finds the increment in the store. apply-changelog replays
increments it is given read grants for, in sequence order, through `load_state`, all into one conversation (the
`target_context_id`, or the one the first increment makes): position N is the agent's state after its first N turns.

An increment is our own envelope of the state's opaque bytes (JSON: the conversation id, and each object base64).
The agent keeps one grant (the latest enable) and one counter: nothing grows with the turns it serves.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agent_env.agents.changelog_wire import (
    APPLY,
    ENABLE,
    NamespaceChangelogEnableRequest,
    NamespaceChangelogEnableResponse,
    ObjectChangelogApplyRequest,
    ObjectChangelogApplyResponse,
    increment_name,
)
from agent_env.agents.extension_table import OPERATIONS, SNAPSHOT
from agent_env.agents.transfer_serving import AgentState, _answering, _body, _refused, saves_state
from agent_env.guard import BodyTooLarge, read_body
from agent_env.stores.transfer import OPAQUE, download, post_to_namespace

log = logging.getLogger(__name__)
MAX_APPLY_BYTES = 8 << 20  # an apply carries a read grant per increment (under 1 KiB each), up to 10,000 of them


def encode(state: AgentState, context_id: str) -> bytes:
    objects = {"trajectory": state.trajectory, "workspace": state.workspace}
    encoded = {name: None if data is None else base64.b64encode(data).decode() for name, data in objects.items()}
    return json.dumps({"context_id": context_id, **encoded}).encode()


def decode(increment: bytes) -> AgentState:
    try:
        envelope = json.loads(increment)
        workspace = envelope.get("workspace")
        return AgentState(
            trajectory=base64.b64decode(envelope["trajectory"], validate=True),
            workspace=None if workspace is None else base64.b64decode(workspace, validate=True),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ValueError("a changelog increment is not one this agent wrote") from None


class Changelog:
    """The agent's capture: the namespace it writes into (the latest enable's) and the next increment's sequence."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.grant: NamespaceChangelogEnableRequest | None = None
        self.sequence = 0
        self.written_bytes = 0
        self.writing = asyncio.Lock()  # turns of several conversations end together: their increments go in order

    async def after_turn(self, context_id: str) -> None:
        """Write the turn's increment, if a capture is on. A failure is logged, never the turn's: the run sees the
        missing increment when it replays."""
        if self.grant is None:
            return
        async with self.writing:
            await self._write(context_id)

    async def _write(self, context_id: str) -> None:
        assert self.grant is not None
        namespace = self.grant.write_namespace
        if self.sequence >= namespace.max_objects:
            log.warning("changelog: the namespace grant's %d objects are written; no more", namespace.max_objects)
            return
        try:
            data = encode(await self.agent.save_state(context_id), context_id)
            if len(data) > namespace.max_object_bytes or self.written_bytes + len(data) > namespace.max_total_bytes:
                log.warning("changelog: increment %d is over the namespace grant's limits; not written", self.sequence)
                return
            key = f"{namespace.root_path}/{increment_name(self.sequence)}"
            await post_to_namespace(namespace, key, data, OPAQUE)
        except Exception as e:  # noqa: BLE001 - a capture never fails the turn it records
            log.warning("changelog: increment %d not written (%s)", self.sequence, type(e).__name__)
            return
        self.sequence += 1
        self.written_bytes += len(data)

    def routes(self) -> list[Route]:
        async def enable(request: Request) -> JSONResponse:
            wanted = NamespaceChangelogEnableRequest.model_validate(await _body(request))
            self.grant, self.sequence, self.written_bytes = wanted, 0, 0
            # what it captures is its conversations' state (save_state), not files: it names no roots
            return JSONResponse(NamespaceChangelogEnableResponse(roots=[]).model_dump(mode="json"))

        async def apply(request: Request) -> JSONResponse:
            try:
                body = json.loads(await read_body(request, MAX_APPLY_BYTES) or b"{}")
            except BodyTooLarge:
                raise ValueError(f"the request is over {MAX_APPLY_BYTES} bytes") from None
            wanted = ObjectChangelogApplyRequest.model_validate(body)
            context_id = wanted.target_context_id
            for increment in wanted.increments:
                try:
                    state = decode(await download(increment.object))
                except ValueError as e:
                    return _refused(400, f"increment {increment.sequence}: {e}")
                context_id = await self.agent.load_state(state, context_id)
            answer = ObjectChangelogApplyResponse(count=len(wanted.increments), context_id=context_id)
            return JSONResponse(answer.model_dump(mode="json", exclude_none=True))

        return [
            Route(OPERATIONS[SNAPSHOT, ENABLE][1], _answering(enable), methods=[OPERATIONS[SNAPSHOT, ENABLE][0]]),
            Route(OPERATIONS[SNAPSHOT, APPLY][1], _answering(apply), methods=[OPERATIONS[SNAPSHOT, APPLY][0]]),
        ]


def changelog_of(agent: Any) -> Changelog | None:
    """The capture of an agent that can serve the feature (it has the state hooks), else None."""
    return Changelog(agent) if saves_state(agent) else None
