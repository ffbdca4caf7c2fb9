"""A hosted agent's turns answered once: a turn resent with the same message id gets the first one's answer."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from agent_env.agents.host import GRACE_S, TURNS, HumanInbox
from agent_env.agents.sdk import Agent, Answer, Turn
from agent_env.spec.times import utc_now_iso

if TYPE_CHECKING:
    from agent_env.agents.host import AgentHost


class OnceAgent(Agent):
    """Wraps a hosted agent: answers each message id once, within the turn's deadline."""

    def __init__(self, host: AgentHost, agent_id: str, inner: Agent) -> None:
        self.host, self.agent_id, self.inner = host, agent_id, inner
        self.name, self.description = inner.name, inner.description

    async def answer(self, turn: Turn) -> Answer:
        key = f"{self.agent_id}/{turn.message_id}"
        if done := self.host.store.get(TURNS, key):
            return Answer(text=done["text"], data=done["data"], failed=done["failed"])
        running = self.host.turns.get(key)
        if running is None:
            running = self.host.turns[key] = asyncio.ensure_future(self._answer(key, turn))
            running.add_done_callback(lambda _: self.host.turns.pop(key, None))
        return await asyncio.shield(running)

    async def _answer(self, key: str, turn: Turn) -> Answer:
        started = time.perf_counter()
        try:
            async with asyncio.timeout((turn.deadline_s + GRACE_S) if turn.deadline_s else None):
                reply = await self.inner.answer(turn)
        except TimeoutError:
            HumanInbox(self.host.store, self.agent_id).expire(key)
            reply = Answer(text=f"abandoned: no answer within the turn's deadline ({turn.deadline_s:g}s)", failed=True)
        except Exception as e:  # noqa: BLE001 - the failure is the turn's answer
            reply = Answer(text=f"{type(e).__name__}: {e}", failed=True)
        if isinstance(reply, str):
            reply = Answer(text=reply)
        self.host.store.put(
            TURNS,
            key,
            {
                "agent_id": self.agent_id,
                "text": reply.text,
                "data": reply.data,
                "failed": reply.failed,
                "at": utc_now_iso(),
                "seconds": round(time.perf_counter() - started, 6),
            },
        )
        return reply
