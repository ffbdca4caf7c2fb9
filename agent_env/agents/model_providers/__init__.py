"""Model providers: one interface (given chat messages and tools, a reply with text, tool calls and token usage)
over each provider's official SDK, so retries, timeouts, 429s and Retry-After are the SDKs' and not ours.

Messages and tools come in the chat-completions shape (what the agents and the judge build); each provider
translates them into its own API: `openai_chat` (OpenAI and every OpenAI-compatible server), `openai_responses`,
`anthropic_messages`. SDKs are imported here only when a model is opened, never by the CLI's startup.
"""

from __future__ import annotations

import importlib.util
from typing import Protocol

from agent_env.agents.model_providers.reply import ChatReply, Tuning
from agent_env.agents.wire import Wire
from agent_env.config import ModelSettings
from agent_env.errors import BadInput


class ModelProvider(Protocol):
    async def complete(
        self,
        messages: list[Wire],
        tools: list[Wire] | None,
        *,
        response_json: bool,
        user: str | None,
        seed: int | None,
        tuning: Tuning | None = None,
    ) -> ChatReply: ...


def open_provider(config: ModelSettings, api_key: str | None) -> ModelProvider:
    if config.provider == "anthropic" and importlib.util.find_spec("anthropic") is None:
        raise BadInput(
            'a model endpoint has provider = "anthropic", but the Anthropic SDK is not installed',
            "pip install 'agentenv-framework[anthropic]'",
        )
    if config.provider == "anthropic":
        from agent_env.agents.model_providers.anthropic_messages import AnthropicMessages

        return AnthropicMessages(config, api_key)
    if config.api == "responses":
        from agent_env.agents.model_providers.openai_responses import OpenAIResponses

        return OpenAIResponses(config, api_key)
    from agent_env.agents.model_providers.openai_chat import OpenAIChat

    return OpenAIChat(config, api_key)
