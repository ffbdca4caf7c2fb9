"""One gateway's client: its admin API (what runs use) and its agent REST API (what the CLI uses)."""

from __future__ import annotations

from json import dumps
from typing import Any, Self, TypeVar, cast
from urllib.parse import quote, urlencode, urlsplit

from agent_env import telemetry, tls
from agent_env.gateway_client import wire
from agent_env.gateway_client.api import GatewayRefused, GatewayUnavailable
from agent_env.gateway_client.wire import JsonObject
from agent_env.keepalive import HttpReply, KeepAliveClient

MAX_ANSWER = 1024 * 1024 * 1024 + 1024  # the largest answer: a snapshot (the gateway's own limit on them)


FORK_FIELDS = ("id", "run_id", "agents", "now", "apps")  # what a fork takes of a new instance's spec


T = TypeVar("T")


class SingleGateway:
    """`api.GatewayClient` over one gateway. Every call is a small JSON request to one origin, many per run: a keep-alive client (agent_env.keepalive)
    carries them; the admin token goes only to this gateway."""

    def __init__(self, base_url: str, admin_token: str | None = None, *, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._prefix = urlsplit(self.base_url).path  # a gateway served under a path (behind a proxy)
        self._headers = {"authorization": f"Bearer {admin_token}"} if admin_token else {}
        self._http = KeepAliveClient(self.base_url, timeout=timeout, ssl_context=tls.context(), max_body=MAX_ANSWER)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: JsonObject | None = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> HttpReply:
        headers = {**self._headers, **(headers or {})}
        body = content or b""
        if json is not None:
            body, headers["content-type"] = dumps(json).encode(), "application/json"
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        try:
            reply = await self._http.request(method, target, headers=telemetry.trace_headers(headers), body=body)
        except (OSError, TimeoutError) as e:
            raise GatewayUnavailable(
                f"the gateway at {self.base_url} did not answer ({e!r})",
                "start it with `agent-env gateway start`, or check [gateway] url",
            ) from None
        if reply.status >= 400:
            raise GatewayRefused(reply.status, reply.error())
        return reply

    async def _json(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: JsonObject | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """The answer, as any JSON (the callers know its shape)."""
        return (await self._request(method, path, json=json, params=params, headers=headers)).json()

    async def _object(self, method: str, path: str, *, json: Any = None) -> JsonObject:
        """An answer the gateway gives as a JSON object whose shape another room owns (an agent's record, a
        JSON-RPC reply): not checked here."""
        answer: JsonObject = await self._json(method, path, json=json)
        return answer

    async def _answer(
        self,
        shape: type[T],
        method: str,
        path: str,
        *,
        json: Any = None,
        params: JsonObject | None = None,
        headers: dict[str, str] | None = None,
    ) -> T:
        """The answer, checked as the shape the gateway declares for it (`wire`)."""
        return wire.parse(shape, await self._json(method, path, json=json, params=params, headers=headers))

    # -- admin --
    async def put_instance(self, spec: JsonObject) -> wire.InstanceView:
        return await self._answer(wire.InstanceView, "PUT", f"/admin/instances/{spec['id']}", json=spec)

    async def get_instance(self, instance: str) -> wire.InstanceView:
        return await self._answer(wire.InstanceView, "GET", f"/admin/instances/{instance}")

    async def fork(self, source: str, spec: JsonObject) -> wire.InstanceView:
        """A new instance (`spec`'s id, run, agents, time and apps at URLs) starting from `source`'s current
        state, on the gateway holding it. Idempotent on the new id."""
        body = {k: spec[k] for k in FORK_FIELDS if k in spec}
        return await self._answer(wire.InstanceView, "POST", f"/admin/instances/{source}/fork", json=body)

    async def list_instances(self) -> list[JsonObject]:
        return (await self._answer(wire.Instances, "GET", "/admin/instances"))["instances"]

    async def list_agents(self) -> list[JsonObject]:
        return (await self._answer(wire.Agents, "GET", "/admin/agents"))["agents"]

    async def busy(self, run_id: str | None = None) -> wire.Load:
        """Open instances and hosted agents here, and the instances of `run_id` this gateway holds."""
        return await self._answer(wire.Load, "GET", "/admin/load", params={"run": run_id} if run_id else {})

    async def url_for(self, instance: str) -> str:
        """The base URL agents reach `instance` at (one gateway: its own; a pool: the owner's)."""
        return self.base_url

    async def agent_url_base(self, agent_id: str) -> str:
        return self.base_url

    async def delete_instance(self, instance: str, *, keep_data: bool = False) -> bool:
        params = {"keep_data": "1"} if keep_data else {}
        return (await self._answer(wire.Deleted, "DELETE", f"/admin/instances/{instance}", params=params))["deleted"]

    async def token(self, instance: str, agent: str) -> str:
        return (await self._answer(wire.Token, "GET", f"/admin/instances/{instance}/tokens/{agent}"))["token"]

    async def token_and_tools(self, instance: str, agent: str) -> tuple[str, list[JsonObject] | None]:
        path = f"/admin/instances/{instance}/tokens/{agent}"
        answer = await self._answer(wire.Token, "GET", path, params={"tools": "1"})
        return answer["token"], answer.get("tools")

    async def server_token(self, instance: str, app: str) -> str:
        """The token the sandbox of `app` must be started with (only the gateway reaches it then)."""
        return (await self._answer(wire.Token, "GET", f"/admin/instances/{instance}/servers/{app}/token"))["token"]

    async def set_role(self, instance: str, role: str, tools: list[str], deny: list[str] | None = None) -> list[str]:
        body = {"tools": tools, "deny": deny or []}
        return (await self._answer(wire.RoleTools, "PUT", f"/admin/instances/{instance}/roles/{role}", json=body))[
            "tools"
        ]

    async def change_role(self, instance: str, role: str, enable: list[str], disable: list[str]) -> list[str]:
        body = {"enable": enable, "disable": disable}
        return (await self._answer(wire.RoleTools, "PATCH", f"/admin/instances/{instance}/roles/{role}", json=body))[
            "tools"
        ]

    async def push_world(self, instance: str, push: JsonObject) -> list[JsonObject]:
        hits = (await self._answer(wire.Hits, "PUT", f"/admin/instances/{instance}/world", json=push))["hits"]
        return cast(list[JsonObject], hits)  # (the run validates each as a TriggerHit itself)

    async def set_agent_role(self, instance: str, agent: str, role: str) -> None:
        await self._answer(wire.AgentRoleSet, "PUT", f"/admin/instances/{instance}/agents/{agent}", json={"role": role})

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
    ) -> wire.CallOutcome:
        body = {
            "tool": tool,
            "arguments": arguments,
            "role": role,
            "agent": agent,
            "idempotency_key": idempotency_key,
            "cause": cause,
            "at": at,
        }
        return await self._answer(wire.CallOutcome, "POST", f"/admin/instances/{instance}/call", json=body)

    async def load(
        self, instance: str, parts: list[JsonObject], *, idempotency_key: str | None = None, reset: bool = False
    ) -> None:
        await self._answer(
            wire.Loaded,
            "POST",
            f"/admin/instances/{instance}/load",
            json={"parts": parts, "idempotency_key": idempotency_key, "reset": reset},
        )

    async def snapshot(self, instance: str) -> bytes:
        return (await self._request("GET", f"/admin/instances/{instance}/snapshot")).body

    async def restore(self, instance: str, blob: bytes) -> None:
        await self._request("PUT", f"/admin/instances/{instance}/snapshot", content=blob)

    async def trajectory(self, instance: str, after: int = 0) -> list[JsonObject]:
        """Every entry after `after`, however many: the gateway answers a page at a time."""
        entries: list[JsonObject] = []
        while True:
            reply = await self._answer(
                wire.TrajectoryPage, "GET", f"/admin/instances/{instance}/trajectory", params={"after": after}
            )
            entries += cast(list[JsonObject], reply["entries"])  # (plain objects: their readers take any entry)
            if not reply["entries"] or not reply.get("more", True):  # a gateway that does not say: ask again
                return entries
            after = reply["entries"][-1]["seq"]

    async def changes(self, instance: str, after_id: int = 0, limit: int = 1000) -> wire.ChangesPage:
        """A page of the instance's changelog (changes/v1, the operator's read: the admin token)."""
        params = {"after_id": after_id, "limit": limit}
        return await self._answer(wire.ChangesPage, "GET", f"/envs/{instance}/changes", params=params)

    async def parked_hits(self, run_id: str) -> list[JsonObject]:
        """Trigger hits of the run that the gateway stopped delivering, each with its error."""
        return (await self._answer(wire.Parked, "GET", f"/admin/runs/{run_id}/parked"))["parked"]

    async def end_run(self, run_id: str, *, trajectories: bool = False) -> wire.RunEnded:
        """Release what the run holds on the gateway: close its instances (kept), delete its hosted agents."""
        params = {"trajectories": "1"} if trajectories else None
        return await self._answer(wire.RunEnded, "POST", f"/admin/runs/{run_id}/end", params=params)

    async def last_seq(self, instance: str) -> int:
        """Where the instance's trajectory ends now: read `after` it for what happens next."""
        last = await self._answer(
            wire.TrajectoryPage, "GET", f"/admin/instances/{instance}/trajectory", params={"last": 1}
        )
        entries = last["entries"]
        return entries[0]["seq"] if entries else 0

    # -- hosted agents --
    async def put_agent(self, spec: JsonObject) -> JsonObject:
        return await self._object("PUT", f"/admin/agents/{spec['id']}", json=spec)

    async def get_agent(self, agent_id: str) -> JsonObject:
        return await self._object("GET", f"/admin/agents/{agent_id}")

    async def delete_agent(self, agent_id: str) -> bool:
        return (await self._answer(wire.Deleted, "DELETE", f"/admin/agents/{agent_id}"))["deleted"]

    async def human_turns(self) -> list[JsonObject]:
        return (await self._answer(wire.Turns, "GET", "/admin/human"))["turns"]

    async def human_turn(self, turn_id: str, wait_s: float = 0) -> JsonObject:
        answer: JsonObject = await self._json("GET", f"/admin/human/{turn_id}", params={"wait": wait_s})
        return answer

    async def open_review(self, request: JsonObject) -> JsonObject:
        return await self._object("PUT", f"/admin/human/{request['id']}", json=request)

    async def answer_human_turn(self, turn_id: str, answer: str, **verdict: Any) -> JsonObject:
        body = {"answer": answer, **{k: v for k, v in verdict.items() if v is not None}}
        return await self._object("POST", f"/admin/human/{turn_id}", json=body)

    async def data(self, instance: str, method: str, params: JsonObject | None = None) -> JsonObject:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
        answer = await self._object("POST", f"/envs/{instance}/agentenv", json=body)
        if "error" in answer:
            error = answer["error"]
            detail = (error.get("data") or {}).get("detail")
            raise GatewayRefused(400, f"{method}: {error['message']}" + (f" ({detail})" if detail else ""))
        result: JsonObject = answer["result"]  # the data plane answers every method with an object
        return result

    async def env_card(self, instance: str) -> JsonObject:
        return await self._object("GET", f"/envs/{instance}/.well-known/agent-env.json")

    async def invoke_extension(self, instance: str, verb: str, path: str, body: JsonObject) -> Any:
        return await self._json(verb, f"/envs/{instance}{path}", json=body)

    # -- agents (REST) --
    async def list_tools(self, instance: str, token: str) -> list[JsonObject]:
        headers = {"authorization": f"Bearer {token}"}
        return (await self._answer(wire.ToolList, "GET", f"/envs/{instance}/tools", headers=headers))["tools"]

    async def call_tool(self, instance: str, token: str, tool: str, arguments: JsonObject) -> Any:
        headers = {"authorization": f"Bearer {token}"}
        # (the agents' hot path: read as it comes, not checked against `wire.ToolResult`)
        path = f"/envs/{instance}/tools/{quote(tool, safe='')}"  # (an agent's choice: one path segment, whatever it is)
        return (await self._json("POST", path, json=arguments, headers=headers))["result"]
