"""A model endpoint for one purpose, as the agents and the judge use it: the same code talks to OpenAI, Anthropic,
any OpenAI-compatible server or the local fake (`agent_env.agents.fake_model`), through the providers' SDKs
(`agent_env.agents.model_providers`), and tallies the tokens its calls used."""

from __future__ import annotations

from typing import Any

from agent_env.agents import usage
from agent_env.agents.model_providers.reply import ChatReply, ModelError, ToolCall
from agent_env.agents.wire import Wire
from agent_env.config import ModelSettings
from agent_env.errors import BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.stores.secrets import PREFIX, MissingSecret, env_var, is_reference

__all__ = ["ChatModel", "ChatReply", "ModelError", "ToolCall", "Endpoints", "check_endpoint", "resolve_key"]


class ChatModel:
    def __init__(self, config: ModelSettings, api_key: str | None) -> None:
        if not config.base_url or not config.model:
            raise BadInput(
                "no model endpoint is configured for this purpose",
                "set [models.default] (or [models.agent|persona|judge]) base_url and model in "
                ".agentenv/config.toml, or AGENT_ENV_MODEL_BASE_URL and AGENT_ENV_MODEL",
            )
        from agent_env.agents.model_providers import open_provider

        self.config = config
        self.usage: usage.Usage = {}  # this model's calls so far, per model name
        self._provider = open_provider(config, api_key)

    async def aclose(self) -> None:
        """Nothing to release: the SDK clients are shared per endpoint and key (model_providers.clients)."""

    async def complete(
        self,
        messages: list[Wire],
        tools: list[Wire] | None = None,
        *,
        response_json: bool = False,
        user: str | None = None,
        seed: int | None = None,
    ) -> ChatReply:
        reply = await self._provider.complete(messages, tools, response_json=response_json, user=user, seed=seed)
        usage.add(self.usage, reply.model or self.config.model or "", reply.input_tokens, reply.output_tokens)
        return reply


def mcp_tools_as_functions(tools: list[Any]) -> list[Wire]:
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

    def open(self, purpose: str, settings: JsonObject | None = None) -> ChatModel:
        """`settings`: a prompt's, as its turn brought them: the model it names answers these calls. The endpoint
        stays the configured one (and its key with it): a prompt names a model, not a URL."""
        config = self.configs.get(purpose)
        if config is None:
            raise BadInput(
                f"this agent was deployed without a model endpoint for {purpose!r}",
                "redeploy it: deploy_agent pins the endpoints a model-driven agent needs",
            )
        model = (settings or {}).get("model")
        named = config.model_copy(update={"model": model}) if isinstance(model, str) and model else config
        return ChatModel(named, self.keys.get(purpose))


def check_endpoint(config: ModelSettings, purpose: str, secrets) -> None:
    """Fail before a run starts when its model endpoint is not usable: no URL, no model, no key."""
    if not config.base_url or not config.model:
        raise BadInput(
            f"no model endpoint is configured for {purpose!r}",
            f"set [models.{purpose}] or [models.default] base_url and model in .agentenv/config.toml, "
            "or AGENT_ENV_MODEL_BASE_URL and AGENT_ENV_MODEL (no network? `agent-env models fake` "
            "serves a local stand-in)",
        )
    if config.api_key:
        if not is_reference(config.api_key):
            raise BadInput(
                f"the {purpose!r} model's api_key is written out in plain text",
                f'store it with `agent-env secrets set NAME` and write api_key = "{PREFIX}NAME"',
            )

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
