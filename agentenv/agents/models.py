"""A minimal client of OpenAI-compatible chat completions (with tool calls): the same code talks to a
real endpoint or to the local fake (`agentenv.agents.fake_model`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx2 as httpx

from agentenv import tls
from agentenv.config import ModelSettings
from agentenv.errors import BadInput


class ModelError(Exception):
    """The endpoint failed or answered something unusable (retryable: it may be transient)."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class ChatReply:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)


class ChatModel:
    def __init__(self, config: ModelSettings, api_key: str | None) -> None:
        if not config.base_url or not config.model:
            raise BadInput(
                "no model endpoint is configured for this purpose",
                "set [models.default] (or [models.agent|persona|judge]) base_url and model in "
                ".agentenv/config.toml, or AGENTENV_MODEL_BASE_URL and AGENTENV_MODEL",
            )
        self.config = config
        self._auth = {"authorization": f"Bearer {api_key}"} if api_key else {}
        # The key goes with each request to base_url itself, never as a default header, and redirects are
        # not followed: it reaches only the origin it was configured (or named) for.
        self._http = httpx.AsyncClient(
            base_url=config.base_url.rstrip("/"), timeout=config.timeout, follow_redirects=False, verify=tls.context()
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        response_json: bool = False,
        user: str | None = None,
        seed: int | None = None,
    ) -> ChatReply:
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
        }
        if user:
            body["user"] = user  # who is asking (the standard field); the local fake picks its script by it
        if tools:
            body["tools"] = tools
        if response_json:
            body["response_format"] = {"type": "json_object"}
        if seed is not None:
            body["seed"] = int(seed)  # best effort: endpoints that support it sample reproducibly
        try:
            response = await self._http.post("/chat/completions", json=body, headers=self._auth)
        except httpx.TransportError as e:
            raise ModelError(f"model endpoint {self.config.base_url} did not answer: {e}") from None
        if response.status_code >= 400:
            why = f" ({said})" if response.status_code in (401, 403) and (said := self.config.withheld_notice()) else ""
            raise ModelError(f"model endpoint answered {response.status_code}: {response.text[:300]}{why}")
        try:
            raw = response.json()
            message = raw["choices"][0]["message"]
            calls = [
                ToolCall(c["id"], c["function"]["name"], json.loads(c["function"].get("arguments") or "{}"))
                for c in message.get("tool_calls") or []
            ]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise ModelError(f"model endpoint answered something unusable ({e}): {response.text[:300]}") from None
        return ChatReply(message.get("content"), calls, raw)


def mcp_tools_as_functions(tools: list[Any]) -> list[dict[str, Any]]:
    """MCP tool listings in the chat-completions `tools` shape."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description or "",
                "parameters": t.input_schema or {"type": "object"},
            },
        }
        for t in tools
    ]


class Endpoints:
    """The model endpoints an agent may use, by purpose, with their API keys (resolved, never stored)."""

    def __init__(self, configs: dict[str, ModelSettings], keys: dict[str, str | None]) -> None:
        self.configs, self.keys = configs, keys

    def open(self, purpose: str) -> ChatModel:
        config = self.configs.get(purpose)
        if config is None:
            raise BadInput(
                f"this agent was deployed without a model endpoint for {purpose!r}",
                "redeploy it: deploy_agent pins the endpoints a model-driven agent needs",
            )
        return ChatModel(config, self.keys.get(purpose))


def check_endpoint(config: ModelSettings, purpose: str, secrets) -> None:
    """Fail before a run starts when its model endpoint is not usable: no URL, no model, no key."""
    if not config.base_url or not config.model:
        raise BadInput(
            f"no model endpoint is configured for {purpose!r}",
            f"set [models.{purpose}] or [models.default] base_url and model in .agentenv/config.toml, "
            "or AGENTENV_MODEL_BASE_URL and AGENTENV_MODEL (no network? `agent-env models fake` "
            "serves a local stand-in)",
        )
    if config.api_key:
        from agentenv.stores.secrets import PREFIX, is_reference

        if not is_reference(config.api_key):
            raise BadInput(
                f"the {purpose!r} model's api_key is written out in plain text",
                f'store it with `agent-env secrets set NAME` and write api_key = "{PREFIX}NAME"',
            )
        from agentenv.stores.secrets import MissingSecret, env_var

        name = config.api_key[len(PREFIX) :]
        try:
            secrets.get(name)
        except MissingSecret:
            raise MissingSecret(
                f"the {purpose!r} model's API key {config.api_key} is not set",
                f"set it with `agent-env secrets set {name}` or the environment variable {env_var(name)}",
            ) from None


def resolve_key(config: ModelSettings, secrets) -> str | None:
    return secrets.resolve(config.api_key) if config.api_key else None
