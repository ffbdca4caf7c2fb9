"""What runs, trainers and the CLI ask of the gateway: one protocol, met by a single gateway's client
(`single.SingleGateway`) and by a pool of gateways (`pool.GatewayPool`), and the errors both raise.
tests/test_gateway_client.py holds both to every method of it, signatures included."""

from __future__ import annotations

from typing import Any, Protocol, Self

from agent_env.errors import AgentEnvError
from agent_env.gateway_client import wire
from agent_env.gateway_client.wire import JsonObject


class GatewayUnavailable(AgentEnvError):
    exit_code = 3


class GatewayRefused(AgentEnvError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class GatewayClient(Protocol):
    """The gateway's admin API (what runs use) and its agent REST API (what the CLI uses)."""

    base_url: str  # (a pool's: its first gateway's, for messages)

    async def __aenter__(self) -> Self: ...
    async def __aexit__(self, *exc: object) -> None: ...
    async def aclose(self) -> None: ...

    # -- instances --
    async def put_instance(self, spec: JsonObject) -> wire.InstanceView: ...
    async def get_instance(self, instance: str) -> wire.InstanceView: ...
    async def fork(self, source: str, spec: JsonObject) -> wire.InstanceView:
        """A new instance (`spec`'s id, run, agents, time and apps at URLs) starting from `source`'s current
        state, on the gateway holding it. Idempotent on the new id."""
        ...

    async def list_instances(self) -> list[JsonObject]: ...
    async def busy(self, run_id: str | None = None) -> wire.Load:
        """Open instances and hosted agents, and the instances of `run_id` held."""
        ...

    async def url_for(self, instance: str) -> str:
        """The base URL agents reach `instance` at (one gateway: its own; a pool: the owner's)."""
        ...

    async def agent_url_base(self, agent_id: str) -> str: ...
    async def delete_instance(self, instance: str, *, keep_data: bool = False) -> bool: ...
    async def token(self, instance: str, agent: str) -> str: ...
    async def token_and_tools(self, instance: str, agent: str) -> tuple[str, list[JsonObject] | None]:
        """The agent's role token and its role's tools in one request (None: a gateway that does not list them
        with the token: ask `list_tools`)."""
        ...

    async def server_token(self, instance: str, app: str) -> str:
        """The token the sandbox of `app` must be started with (only the gateway reaches it then)."""
        ...

    async def set_role(
        self, instance: str, role: str, tools: list[str], deny: list[str] | None = None
    ) -> list[str]: ...
    async def change_role(self, instance: str, role: str, enable: list[str], disable: list[str]) -> list[str]: ...
    async def push_world(self, instance: str, push: JsonObject) -> list[JsonObject]:
        """The run's clock and conditions for `instance`; the hits of state conditions already true (each a
        `wire.Hit`, handed to the run as the plain object it validates itself)."""
        ...

    async def set_agent_role(self, instance: str, agent: str, role: str) -> None: ...
    async def call_as(
        self,
        instance: str,
        tool: str,
        arguments: JsonObject,
        *,
        role: str | None = None,
        agent: str | None = None,
        idempotency_key: str | None = None,
        cause: str | None = None,
        at: str | None = None,
    ) -> wire.CallOutcome: ...
    async def load(
        self, instance: str, parts: list[JsonObject], *, idempotency_key: str | None = None, reset: bool = False
    ) -> None: ...
    async def snapshot(self, instance: str) -> bytes: ...
    async def restore(self, instance: str, blob: bytes) -> None: ...
    async def trajectory(self, instance: str, after: int = 0) -> list[JsonObject]:
        """Every entry after `after`, however many."""
        ...

    async def last_seq(self, instance: str) -> int:
        """Where the instance's trajectory ends now: read `after` it for what happens next."""
        ...

    async def changes(self, instance: str, after_id: int = 0, limit: int = 1000) -> wire.ChangesPage:
        """A page of the instance's changelog (changes/v1): its rows past `after_id`, at most `limit`."""
        ...

    async def data(self, instance: str, method: str, params: JsonObject | None = None) -> JsonObject: ...
    async def env_card(self, instance: str) -> JsonObject:
        """The instance's environment card as the admin sees it (every app, with the extensions it declares)."""
        ...

    async def invoke_extension(self, instance: str, verb: str, path: str, body: JsonObject) -> Any:
        """One operation a card declares, at `path` under the instance's base (as the card names it)."""
        ...

    # -- runs --
    async def parked_hits(self, run_id: str) -> list[JsonObject]:
        """Trigger hits of the run that the gateway stopped delivering, each with its error."""
        ...

    async def end_run(self, run_id: str, *, trajectories: bool = False) -> wire.RunEnded:
        """Release what the run holds: close its instances (kept), delete its hosted agents. `trajectories`: the
        answer carries closed instances' trajectories, as many as one page holds (`RunEnded.trajectories`)."""
        ...

    # -- hosted agents and people's turns --
    async def list_agents(self) -> list[JsonObject]: ...
    async def put_agent(self, spec: JsonObject) -> JsonObject: ...
    async def get_agent(self, agent_id: str) -> JsonObject: ...
    async def delete_agent(self, agent_id: str) -> bool: ...
    async def human_turns(self) -> list[JsonObject]: ...
    async def human_turn(self, turn_id: str, wait_s: float = 0) -> JsonObject:
        """One turn or review as it stands; `wait_s`: up to that long (at most 60 s) for its decision."""
        ...

    async def open_review(self, request: JsonObject) -> JsonObject:
        """Open a review for a person (agents.reviews.ReviewRequest); opened again, the same one as it stands."""
        ...

    async def answer_human_turn(self, turn_id: str, answer: str, **verdict: Any) -> JsonObject:
        """Answer a turn; a review also takes `verdict` ("continue" | "abort"), `score` (0..1) and `by`."""
        ...

    # -- agents (REST, with a role token) --
    async def list_tools(self, instance: str, token: str) -> list[JsonObject]: ...
    async def call_tool(self, instance: str, token: str, tool: str, arguments: JsonObject) -> Any: ...
