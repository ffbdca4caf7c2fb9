"""A Gymnasium-style adapter: one episode per `reset`, the trainer's agent acting through `step`.

    env = EpisodeEnv(EpisodeSpec.from_task("refund"))  # its only prompted agent played
    observation, info = env.reset(seed=7)          # the first turn: prompt, system prompt, tools
    observation, reward, terminated, truncated, info = env.step({"tool": "get_ticket",
                                                                 "arguments": {"ticket_id": "TCK-1004"}})
    ...                                            # observation["tool_result"] (or "tool_error")
    observation, reward, terminated, truncated, info = env.step({"response": "Done."})
    # the next turn's observation, or terminated=True with reward = the run's score (the outcome's total),
    # info["scores"] = every score by step id, info["components"] = each grading check's row,
    # info["outcome"] = the EpisodeResult; a run that could not grade the policy (an infrastructure
    # failure) raises EpisodeInfrastructureError from step() instead: drop or retry that episode

The API is synchronous (as Gymnasium's is): an event loop in a background thread runs the episode. It
needs no Gymnasium install; with Gymnasium, wrap it or register it as you would any environment.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from agent_env.episodes.client import Episode, EpisodeError, Episodes, Turn
from agent_env.episodes.spec import EpisodeSpec
from agent_env.gateway_client import GatewayRefused
from agent_env.gateway_client.env_servers import EnvServers


class EpisodeEnv:
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, spec: EpisodeSpec, *, agent: str | None = None, settings=None, worker: bool = True) -> None:
        self.spec, self.agent = spec, agent
        self._settings, self._worker = settings, worker
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agentenv-episode", daemon=True)
        self._thread.start()
        self._episodes: Episodes | None = None
        self._episode: Episode | None = None
        self._turn: Turn | None = None

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # -- the Gymnasium API --

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        return self._run(self._reset(seed))

    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        return self._run(self._step(action))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    # -- in the loop --

    async def _reset(self, seed: int | None) -> tuple[dict, dict]:
        if self._episodes is None:
            self._episodes = await Episodes.connect(self._settings, worker=self._worker)
        if self._episode is not None and self._turn is not None:
            await self._episode.abandon("reset before the episode ended")
        spec = self.spec if seed is None else self.spec.with_seed(seed)
        self._episode = await spec.start(self._episodes)
        observation = await self._next()
        return observation, {"run_id": self._episode.run_id}

    async def _next(self) -> dict[str, Any]:
        self._turn = await self._episode.next_turn(self.agent)  # type: ignore[union-attr]  # after _reset
        if self._turn is None:
            return {"turn": None}
        offer = self._turn.offer
        listed = []
        if offer.env:
            listed = [
                {"name": t["name"], "description": t["description"], "input_schema": t["inputSchema"]}
                for t in await (await self._gateway()).list_tools(
                    offer.env, await self._turn.episode.token(offer.env, offer.agent)
                )
            ]
        return {
            "turn": {
                "id": offer.id,
                "agent": offer.agent,
                "role": offer.role,
                "prompt": offer.prompt,
                "system_prompt": offer.system_prompt,
                "conversation": offer.conversation,
            },
            "tools": listed,
        }

    async def _gateway(self) -> EnvServers:
        """The connection's client of whatever serves this turn's environment (the gateway, a pool's member, or
        the instance's own server): tool calls go over its REST surface and hold no session across steps."""
        if self._episodes is None:  # a turn comes only from a started episode
            raise RuntimeError("the episode is over (or not started): call reset()")
        return await self._episodes.gateway()

    async def _step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        if self._turn is None:
            raise RuntimeError("the episode is over (or not started): call reset()")
        if "tool" in action:
            offer = self._turn.offer
            if not offer.env:
                return {"tool_error": "this turn has no environment"}, 0.0, False, False, {}
            try:
                token = await self._turn.episode.token(offer.env, offer.agent)  # (the turn's token(), its env known)
                result = await (await self._gateway()).call_tool(
                    offer.env, token, action["tool"], action.get("arguments") or {}
                )
                return {"tool_result": result}, 0.0, False, False, {}
            except GatewayRefused as e:
                return {"tool_error": str(e)}, 0.0, False, False, {}
        if "response" not in action:
            raise ValueError('an action is {"tool": NAME, "arguments": {...}} or {"response": TEXT}')
        episode = self._turn.episode
        try:
            await self._turn.end(str(action["response"]))
        except EpisodeError:  # the run ended without taking the answer: its outcome says why (an error raises)
            self._turn = None
            await episode.outcome()
            raise
        observation = await self._next()
        if self._turn is not None:
            return observation, 0.0, False, False, {}
        outcome = await episode.outcome()  # EpisodeInfrastructureError when the run could not grade the policy
        return (
            observation,
            float(outcome.total or 0.0),
            True,
            False,
            {
                "scores": outcome.scores,
                "total": outcome.total,
                "components": [c.model_dump(mode="json") for c in outcome.components],
                "outcome": outcome,
                "status": outcome.status.value,
                "run_id": outcome.run_id,
            },
        )

    async def _close(self) -> None:
        if self._episodes is not None:
            await self._episodes.close()
