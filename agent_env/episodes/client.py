"""Play agents from your own loop:

    from agent_env.task import EpisodeSpec, Task
    spec = EpisodeSpec.from_task(Task.get("my-task"), turn_timeout=900)
    episode = await spec.start()
    while (turn := await episode.next_turn()) is not None:
        async with turn.tools() as tools:  # the agent's env tools, called as its role
            ...  # your model reads turn.system_prompt and turn.prompt, and acts with tools.list() and tools.call()
        await turn.end(response="Done.")
    outcome = await episode.outcome()  # the reward (outcome.total), its rows (outcome.components), by step

`from_task` plays the task's only prompted agent unless `trainer_agents=[...]` names them (it must when the task
prompts several); `turn_timeout` replaces each played prompt's own `turn_deadline`. `episode.abandon(reason)` gives
an episode up (its run is recorded cancelled, with the reason). `outcome()` (an `EpisodeResult`, agent_env.episodes.
outcome) and `result()` (its scores by step id) raise `EpisodeInfrastructureError` when the run could not grade
the policy (it ended in error, was cancelled from outside, or a grading step failed): never a score.

Turns travel as Temporal updates (an answer sent twice counts once; an answer also asks for the next turn, so
a turn costs the run one workflow task); tool calls go straight to the gateway, over REST on a connection kept
across turns (`turn.tools("mcp")` for MCP): `tools.list()` gives the role's tool descriptions (`name`,
`description`, `inputSchema`; listed as the block opens), `await tools.call(name, arguments)` a tool's JSON result (ToolFailed with its error
text). One `Episodes` connection serves many episodes at once; many processes and machines can play against one
Temporal cluster (`agent-env worker` runs the rest of each run).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import httpx

from agent_env.agents.sdk import Turn as AgentTurn
from agent_env.config import load_settings
from agent_env.episodes.outcome import EpisodeResult, outcome_of
from agent_env.episodes.proxy_player import ProxyPlayer
from agent_env.episodes.recording import Trajectory
from agent_env.episodes.tools import RestTools, ToolInfo, TurnTools
from agent_env.errors import AgentEnvError
from agent_env.gateway import embedded
from agent_env.spec.run import RunState, StepStatus, TurnOffer
from agent_env.stores import in_thread, open_secrets, open_stores
from agent_env.temporal import background, launch
from agent_env.temporal.worker import create_worker
from agent_env.temporal_client import server
from agent_env.temporal_client.client import connect

if TYPE_CHECKING:
    from temporalio.client import WorkflowUpdateHandle

    from agent_env.config import Settings
    from agent_env.episodes.spec import EpisodeSpec
    from agent_env.gateway_client.env_servers import EnvServers
    from agent_env.gateway_client.wire import JsonObject
    from agent_env.stores import Stores


class EpisodeError(AgentEnvError):
    """The run refused what the trainer sent (e.g. an answer to a turn that is not waiting)."""


class Episodes:
    """A trainer process's connection: Temporal, the gateway, and a worker (by default the embedded server's
    background one, or one in this process with a cluster)."""

    _default: Episodes | None = None

    def __init__(self, client, settings: Settings, worker=None) -> None:
        self.client, self.settings = client, settings
        self._worker, self._worker_task = worker, None
        if worker is not None:
            self._worker_task = asyncio.create_task(worker.run())
        # The one client of whatever serves each instance (the install's gateway, or the instance's own server):
        # role tokens and the trainer's tool calls, kept alive across turns and episodes.
        self._gateway: EnvServers | None = None
        self._stores: Stores | None = None  # where runs are recorded as they start: opened once

    @classmethod
    async def connect(cls, settings: Settings | None = None, *, worker: bool | None = None) -> Episodes:
        """`worker`: None (default) uses the embedded server's background worker (started if need be), or with
        a cluster runs one in this process; True always runs one in this process; False: workers run elsewhere
        (`agent-env worker`), e.g. on other machines."""
        settings = settings or load_settings()
        if settings.embedded:
            await asyncio.to_thread(server.start, settings)
        client = await connect(settings)
        if worker is None:
            worker = not settings.embedded
            if settings.embedded:
                await asyncio.to_thread(background.ensure, settings)
        runner = None
        if worker:
            runner = create_worker(client, settings)
        return cls(client, settings, runner)

    @classmethod
    async def default(cls) -> Episodes:
        """This process's connection, made on first use from the install's settings (`connect()`)."""
        if cls._default is None:
            cls._default = await cls.connect()
        return cls._default

    async def close(self) -> None:
        """Stop the in-process worker, if any, and close the gateway client and the stores."""
        if self._worker_task is not None:
            self._worker_task.cancel()
            await asyncio.gather(self._worker_task, return_exceptions=True)
        if self._gateway is not None:
            await self._gateway.aclose()
        if self._stores is not None:
            self._stores.close()

    async def start(self, spec: EpisodeSpec, *, run_id: str | None = None) -> Episode:
        """Start an episode of `spec`: its run starts and its first `next_turn` is asked in the same request
        (the answer is kept for the first `next_turn()`)."""
        inp = await in_thread(spec.planned, self.settings, run_id or launch.new_run_id(spec.task.id))
        stores = await self.stores()
        if not spec.trainer_agents:  # every agent played through its proxy: the run offers no turn of its own
            handle = await launch.start(self.client, self.settings, inp, stores=stores)
            return Episode(self, handle.id, proxied=spec.proxied_agents, recorder=_recorder(spec))
        handle, first = await launch.start_with_update(
            self.client, self.settings, inp, "next_turn", [None], stores=stores
        )
        return Episode(self, handle.id, first_turn=first, proxied=spec.proxied_agents, recorder=_recorder(spec))

    async def start_group(self, spec: EpisodeSpec, size: int, *, seeds: list[int] | None = None, **kwargs: Any):
        """`size` rollouts of `spec` from one start state (its envs deployed once, forked per rollout): an
        `EpisodeGroup` (agent_env.episodes.group)."""
        from agent_env.episodes.group import start_group  # (group.py imports this module)

        return await start_group(self, spec, size, seeds=seeds, **kwargs)

    def episode(self, run_id: str) -> Episode:
        """An episode already running (started here or elsewhere), by its run id."""
        return Episode(self, run_id)

    async def stores(self) -> Stores:
        """The install's stores (where runs are recorded), opened once."""
        if self._stores is None:
            self._stores = await in_thread(open_stores, self.settings)
        return self._stores

    async def gateway(self) -> EnvServers:
        """The client of whatever serves each instance: the install's gateway, or the instance's own server."""
        if self._gateway is None:
            self._gateway = await asyncio.to_thread(embedded.routed, self.settings, await self.stores())
        return self._gateway

    async def token(self, instance: str, agent: str) -> str:
        """The agent's role token, from what serves its instance (never through Temporal)."""
        return await (await self.gateway()).token(instance, agent)

    async def token_and_tools(self, instance: str, agent: str) -> tuple[str, list[JsonObject] | None]:
        """The agent's role token and its role's tools, in one request (tools None: the gateway is older, ask)."""
        return await (await self.gateway()).token_and_tools(instance, agent)

    def run_over(self, run_id: str) -> None:
        """Nothing of a finished run is kept (a trainer lives for many): its instances' routes are forgotten."""
        if self._gateway is not None:
            self._gateway.forget_run(run_id)


class Episode:
    """One running episode (a run of the task): take its turns with `next_turn()`, answer each with
    `turn.end(...)`, then `await result()` for its scores. `run_id` names its run (`agent-env runs show`)."""

    def __init__(
        self,
        episodes: Episodes,
        run_id: str,
        *,
        first_turn: WorkflowUpdateHandle[dict] | None = None,
        proxied: dict[str, str] | None = None,
        recorder: tuple[str, str | None] | None = None,
    ) -> None:
        self.episodes, self.run_id = episodes, run_id
        self._recorder = recorder  # (the token recorder's URL, its key's reference) when agents are recorded
        self.recorded: Trajectory | None = None  # the trajectory, once taken from the recorder
        self._proxied = proxied or {}  # agents played through their proxy: name -> deploy_agent step id
        # The next turn, asked already (for any agent): by the start (the first one) or by the last answer.
        self._asked = first_turn
        # No run id: updates follow the run through continue-as-new.
        self.handle = episodes.client.get_workflow_handle(run_id, result_type=RunState)
        self.state: RunState | None = None  # the final state, once result() returned
        self._tokens: dict[tuple[str, str], str] = {}  # (instance, agent) -> role token: held by the episode only

    async def token(self, instance: str, agent: str) -> str:
        key = (instance, agent)
        if key not in self._tokens:
            self._tokens[key] = await self.episodes.token(instance, agent)
        return self._tokens[key]

    async def token_and_tools(self, instance: str, agent: str) -> tuple[str, list[JsonObject] | None]:
        """The agent's token (fetched once per episode and agent) and, when it is fetched now, its role's tools
        with it (None otherwise: roles may change between turns, so they are listed again)."""
        key = (instance, agent)
        if key in self._tokens:
            return self._tokens[key], None
        token, tools = await self.episodes.token_and_tools(instance, agent)
        self._tokens[key] = token
        return token, tools

    async def _send(
        self, name: str, *args: Any, update_id: str | None = None, wait: bool = True
    ) -> WorkflowUpdateHandle[dict] | None:
        """Send an update: its handle once the run answered it (`wait=False`: once it accepted it), or None when
        the run is over. A refusal raises EpisodeError at once, whatever the stage asked."""
        from temporalio.client import WorkflowUpdateStage
        from temporalio.service import RPCError, RPCStatusCode

        stage = WorkflowUpdateStage.COMPLETED if wait else WorkflowUpdateStage.ACCEPTED
        for attempt in range(50):
            try:
                handle = await self.handle.start_update(
                    name, args=list(args), id=update_id, result_type=dict, wait_for_stage=stage
                )
            except RPCError as e:
                if e.status is RPCStatusCode.NOT_FOUND or "already completed" in str(e).lower():
                    return None
                # The run was completing a workflow task (e.g. continuing as new) as the update came in:
                # Temporal asks for the update again, which the run's next task takes.
                if e.status is not RPCStatusCode.FAILED_PRECONDITION or attempt == 49:
                    raise
                await asyncio.sleep(min(0.01 * 2**attempt, 0.5))
                continue
            if _refused(handle):
                await self._outcome(name, handle)  # raises the refusal
            return handle
        return None

    async def _outcome(self, name: str, handle: WorkflowUpdateHandle[dict]) -> dict[str, Any] | None:
        """An update's answer, or None when its run is gone. Refusals become EpisodeError."""
        from temporalio.client import WorkflowUpdateFailedError
        from temporalio.service import RPCError, RPCStatusCode

        try:
            return await handle.result()
        except WorkflowUpdateFailedError as e:
            cause = e.cause or e
            raise EpisodeError(f"run {self.run_id} refused {name}: {getattr(cause, 'message', cause)}") from None
        except RPCError as e:
            if e.status is not RPCStatusCode.NOT_FOUND:
                raise
            return None

    async def _update(self, name: str, *args: Any, update_id: str | None = None) -> dict[str, Any] | None:
        """An update's answer, or None when the run is over. Refusals become EpisodeError."""
        handle = await self._send(name, *args, update_id=update_id)
        return None if handle is None else await self._outcome(name, handle)

    async def _asked_turn(self, agent: str | None) -> dict[str, Any] | None:
        """The answer to the next turn asked already, when it fits `agent`; else the run is asked now."""
        asked, self._asked = self._asked, None
        if asked is not None:
            answer = await self._outcome("next_turn", asked)
            offer = None if answer is None else answer.get("turn")
            if offer is None or agent is None or offer.get("agent") == agent:
                return answer
        return await self._update("next_turn", agent)

    async def next_turn(self, agent: str | None = None) -> Turn | None:
        """The next turn for the trainer (waits until there is one), or None when the episode is over."""
        while True:
            answer = await self._asked_turn(agent)
            if answer is None:
                return None
            if "turn" in answer:
                return Turn(self, TurnOffer.model_validate(answer["turn"]))
            if answer.get("closing") != "continued":
                return None
            await asyncio.sleep(0.01)  # the run continued as new: ask the next one

    async def end_turn(self, turn_id: str, response: str) -> None:
        """Answer a turn; returns once the run took the answer. The same update asks for the next turn (one
        workflow task per turn), kept for `next_turn`. Its id makes a retried call (after a lost answer) count
        once."""
        asked = await self._send("answer", turn_id, response, None, update_id=f"answer:{turn_id}", wait=False)
        if asked is None:
            raise EpisodeError(
                f"run {self.run_id} is over: turn {turn_id!r} was not taken",
                "see why with `agent-env runs show " + self.run_id + "`",
            )
        self._asked = asked

    async def proxy(self, agent: str) -> ProxyPlayer:
        """Claim the proxy (proxy/v1) of an agent the spec plays through it (`proxied_agents`; by name or
        deploy_agent step id), once the run deployed it: its turns are the ones the run prompts it with."""
        step_id = self._proxied.get(agent, agent)
        while True:
            state = await launch.query_state(self.handle)
            step = state.steps.get(step_id)
            if step is None:
                raise EpisodeError(f"run {self.run_id} deploys no agent {agent!r}", "name a proxied agent or its step")
            if step.status.finished or state.status.finished:
                break
            await asyncio.sleep(0.1)
        url = step.outputs.get("url")
        if step.status is not StepStatus.SUCCEEDED or not isinstance(url, str) or step.outputs.get("hosted"):
            raise EpisodeError(
                f"agent {agent!r} of run {self.run_id} is no deployed proxy (its step is {step.status})",
                "play through a proxy only an agent deployed at its own URL whose card declares urn:agentenv:proxy/v1",
            )
        return await ProxyPlayer.attach(url)

    async def abandon(self, reason: str) -> None:
        """Give the episode up: the run stops, recorded as cancelled with the reason (and the recorder forgets
        what it recorded of it)."""
        await self._update("abandon", reason)
        if self._recorder is not None and self.recorded is None:
            await self.trajectory()

    async def trajectory(self) -> Trajectory:
        """The exact tokens the recorded agents' model sampled, turn by turn and as masked segments
        (agent_env.episodes.recording), taken from the token recorder, which forgets them. Taken by `result()`;
        call it after the run ended (or earlier, to end the recording: later turns are refused)."""
        if self.recorded is not None:
            return self.recorded
        if self._recorder is None:
            raise EpisodeError(
                f"episode {self.run_id} records no tokens",
                "start it from EpisodeSpec.from_task(..., recorded_agents=[...], recorder=URL)",
            )
        url, key_ref = self._recorder
        key = await in_thread(_secret, self.episodes.settings, key_ref) if key_ref else None
        headers = {"authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(timeout=60) as http:
            try:
                answer = await http.post(f"{url.rstrip('/')}/episodes/{self.run_id}/trajectory", headers=headers)
            except httpx.HTTPError as e:
                raise EpisodeError(f"the token recorder at {url} did not answer ({e!r})", "is it running?") from None
        if answer.status_code != 200:
            raise EpisodeError(f"the token recorder at {url} refused the trajectory: {answer.text[:500]}")
        self.recorded = Trajectory.model_validate(answer.json())
        return self.recorded

    async def outcome(self) -> EpisodeResult:
        """Waits for the run to end: its reward (`total`, the run's score), every score by step id and each grading
        check's row (`self.state` has the rest). Raises EpisodeInfrastructureError when the run could not grade the
        policy (an error, a cancellation from outside, a failed grading step): such a run is never a score."""
        if self.state is None:
            self.state = await launch.wait_result(self.handle)
            self.episodes.run_over(self.run_id)
            self._tokens.clear()
            if self._recorder is not None:
                await self.trajectory()  # the recorder keeps nothing of a finished episode
        return outcome_of(self.state)

    async def result(self) -> dict[str, float]:
        """Waits for the run to end; every score it recorded, by step id (`outcome()` has the total and each
        check's row). Raises EpisodeInfrastructureError as `outcome()` does."""
        return (await self.outcome()).scores


def _secret(settings: Settings, ref: str) -> str:
    """A secret reference resolved (the secret store opened and read: off the event loop)."""
    return open_secrets(settings).resolve(ref)


def _recorder(spec: EpisodeSpec) -> tuple[str, str | None] | None:
    return (spec.recorder, spec.recorder_api_key) if spec.recorded_agents and spec.recorder else None


def _refused(handle: WorkflowUpdateHandle[dict]) -> bool:
    # The SDK keeps the outcome a refusal came with; there is no public accessor for it (temporalio 1.x).
    outcome = getattr(handle, "_known_outcome", None)
    return outcome is not None and outcome.HasField("failure")


@dataclass
class Turn:
    """A turn the run waits for: what the played agent is asked (`prompt`, `system_prompt`, `conversation`),
    as which `agent` and `role`. Act with `tools()`, then answer with `end(response)`."""

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
        """This turn's agent's role token (fetched once per episode and agent)."""
        if not self.offer.env:
            return None
        return await self.episode.token(self.offer.env, self.offer.agent)

    @contextlib.asynccontextmanager
    async def tools(self, transport: Literal["rest", "mcp"] = "rest"):
        """The environment's tools, as this agent (its role decides what it sees and may call): over REST on
        the connection's kept-alive client (the fastest), or over an MCP session opened for this turn."""
        if not self.offer.mcp_url or not self.offer.env:
            raise EpisodeError(f"turn {self.id} came with no environment: it has no tools")
        if transport == "rest":
            gateway = await self.episode.episodes.gateway()
            # The episode's first turn: the token and the tool list in one request.
            token, listed = await self.episode.token_and_tools(self.offer.env, self.offer.agent)
            rest = RestTools(gateway, self.offer.env, token)
            yield TurnTools(rest, await rest.list() if listed is None else cast("list[ToolInfo]", listed))
            return
        turn = AgentTurn(prompt=self.prompt, mcp_url=self.offer.mcp_url, token=await self.token())
        async with turn.tools() as tools:
            yield TurnTools(tools, await tools.list())

    async def end(self, response: str) -> None:
        """Answer the turn with the agent's final message; the run goes on to its next step."""
        await self.episode.end_turn(self.offer.id, response)
