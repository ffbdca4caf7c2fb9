"""Play agents from your own loop:

    spec = EpisodeSpec.from_task(Task.get("refund"), trainer_agents=["refunds"], turn_timeout=900)
    episode = await spec.start()
    while (turn := await episode.next_turn()) is not None:
        async with turn.tools() as tools:          # the env's tools, called as this agent's role
            ...                                    # your model reads turn.system_prompt and turn.prompt
        await turn.end(response="Done.")
    scores = await episode.result()                # every score the run recorded, by step id

Turns travel as Temporal updates (an answer sent twice counts once); tool calls go straight to the
gateway. One `Episodes` connection serves many episodes at once; many processes and machines can
play against one Temporal cluster (`agent-env worker` runs the rest of each run).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentenv.errors import AgentEnvError
from agentenv.spec.run import RunState, TurnOffer

if TYPE_CHECKING:
    from agentenv.config import Settings
    from agentenv.episodes.spec import EpisodeSpec
    from agentenv.gateway.client import GatewayClient


class EpisodeError(AgentEnvError):
    """The run refused what the trainer sent (e.g. an answer to a turn that is not waiting)."""


class Episodes:
    """A trainer process's connection: Temporal, the gateway, and (by default) a worker in this process."""

    _default: Episodes | None = None

    def __init__(self, client, settings: Settings, worker=None) -> None:
        self.client, self.settings = client, settings
        self._worker, self._worker_task = worker, None
        if worker is not None:
            self._worker_task = asyncio.create_task(worker.run())
        self._gateway: GatewayClient | None = None
        self._tokens: dict[tuple[str, str], str] = {}

    @classmethod
    async def connect(cls, settings: Settings | None = None, *, worker: bool = True) -> Episodes:
        """`worker=False` when workers run elsewhere (`agent-env worker`), e.g. on other machines."""
        from agentenv.config import load_settings
        from agentenv.temporal.client import connect

        settings = settings or load_settings()
        if settings.embedded:
            from agentenv.temporal import server

            await asyncio.to_thread(server.start, settings)
        client = await connect(settings)
        runner = None
        if worker:
            from agentenv.temporal.worker import create_worker

            runner = create_worker(client, settings)
        return cls(client, settings, runner)

    @classmethod
    async def default(cls) -> Episodes:
        if cls._default is None:
            cls._default = await cls.connect()
        return cls._default

    async def close(self) -> None:
        if self._worker_task is not None:
            self._worker_task.cancel()
            await asyncio.gather(self._worker_task, return_exceptions=True)
        if self._gateway is not None:
            await self._gateway.aclose()

    async def start(self, spec: EpisodeSpec, *, run_id: str | None = None) -> Episode:
        from agentenv import runner

        handle = await runner.start_run(self.client, self.settings, spec.task, run_id=run_id)
        return Episode(self, handle.id)

    def episode(self, run_id: str) -> Episode:
        """An episode already running (started here or elsewhere), by its run id."""
        return Episode(self, run_id)

    async def token(self, instance: str, agent: str) -> str:
        """The agent's role token, from the gateway (never through Temporal)."""
        key = (instance, agent)
        if key not in self._tokens:
            if self._gateway is None:
                from agentenv.gateway.embedded import connect

                self._gateway = await asyncio.to_thread(connect, self.settings)
            self._tokens[key] = await self._gateway.token(instance, agent)
        return self._tokens[key]


class Episode:
    def __init__(self, episodes: Episodes, run_id: str) -> None:
        self.episodes, self.run_id = episodes, run_id
        # No run id: updates follow the run through continue-as-new.
        self.handle = episodes.client.get_workflow_handle(run_id, result_type=RunState)
        self.state: RunState | None = None  # the final state, once result() returned

    async def _update(self, name: str, *args: Any, update_id: str | None = None) -> dict[str, Any] | None:
        """An update, or None when the run is over. Refusals become EpisodeError."""
        from temporalio.client import WorkflowUpdateFailedError
        from temporalio.service import RPCError, RPCStatusCode

        for attempt in range(50):
            try:
                return await self.handle.execute_update(name, args=list(args), id=update_id, result_type=dict)
            except WorkflowUpdateFailedError as e:
                cause = e.cause
                raise EpisodeError(f"run {self.run_id} refused {name}: {getattr(cause, 'message', cause)}") from None
            except RPCError as e:
                if e.status is RPCStatusCode.NOT_FOUND or "already completed" in str(e).lower():
                    return None
                # The run was completing a workflow task (e.g. continuing as new) as the update came in:
                # Temporal asks for the update again, which the run's next task takes.
                if e.status is not RPCStatusCode.FAILED_PRECONDITION or attempt == 49:
                    raise
                await asyncio.sleep(min(0.01 * 2**attempt, 0.5))
        return None

    async def next_turn(self, agent: str | None = None) -> EpisodeTurn | None:
        """The next turn for the trainer (waits until there is one), or None when the episode is over."""
        while True:
            answer = await self._update("next_turn", agent)
            if answer is None:
                return None
            if "turn" in answer:
                return EpisodeTurn(self, TurnOffer.model_validate(answer["turn"]))
            if answer.get("closing") != "continued":
                return None
            await asyncio.sleep(0.01)  # the run continued as new: ask the next one

    async def end_turn(self, turn_id: str, response: str) -> None:
        # The update's id makes a retried call (after a lost answer) count once.
        if await self._update("end_turn", turn_id, response, update_id=f"end:{turn_id}") is None:
            raise EpisodeError(
                f"run {self.run_id} is over: turn {turn_id!r} was not taken",
                "see why with `agent-env runs show " + self.run_id + "`",
            )

    async def abandon(self, reason: str) -> None:
        """Give the episode up: the run stops, recorded as cancelled with the reason."""
        await self._update("abandon", reason)

    async def result(self) -> dict[str, float]:
        """Waits for the run to end; every score it recorded, by step id (`self.state` has the rest)."""
        from agentenv import runner

        self.state = await runner.wait_result(self.handle)
        return {sid: s.score.value for sid, s in self.state.steps.items() if s.score is not None}


@dataclass
class EpisodeTurn:
    episode: Episode
    offer: TurnOffer

    @property
    def id(self) -> str:
        return self.offer.id

    @property
    def agent(self) -> str:
        return self.offer.agent

    @property
    def role(self) -> str | None:
        return self.offer.role

    @property
    def prompt(self) -> str:
        return self.offer.prompt

    @property
    def system_prompt(self) -> str | None:
        return self.offer.system_prompt

    @property
    def conversation(self) -> list[dict[str, Any]]:
        return self.offer.conversation

    async def token(self) -> str | None:
        if not self.offer.env:
            return None
        return await self.episode.episodes.token(self.offer.env, self.offer.agent)

    @contextlib.asynccontextmanager
    async def tools(self):
        """The environment's tools over MCP, as this agent (its role decides what it sees and may call)."""
        from agentenv.agents.sdk import Turn

        turn = Turn(prompt=self.prompt, mcp_url=self.offer.mcp_url, token=await self.token())
        async with turn.tools() as tools:
            yield tools

    async def end(self, response: str) -> None:
        await self.episode.end_turn(self.offer.id, response)
