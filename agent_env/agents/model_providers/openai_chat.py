"""OpenAI chat completions through the `openai` SDK: OpenAI itself and any OpenAI-compatible server."""

from __future__ import annotations

import json

import openai

from agent_env.agents.model_providers.clients import NO_KEY, shared
from agent_env.agents.model_providers.errors import explained
from agent_env.agents.model_providers.reply import ChatReply, ModelError, ToolCall
from agent_env.agents.wire import Wire
from agent_env.config import ModelSettings


def client(config: ModelSettings, api_key: str | None) -> openai.AsyncOpenAI:
    return shared(
        "openai",
        config,
        api_key,
        lambda http: openai.AsyncOpenAI(
            api_key=api_key or NO_KEY,
            base_url=config.base_url,
            timeout=config.timeout,
            max_retries=config.max_retries,
            http_client=http,
        ),
    )


class OpenAIChat:
    def __init__(self, config: ModelSettings, api_key: str | None) -> None:
        self.config, self.api_key = config, api_key

    async def complete(
        self,
        messages: list[Wire],
        tools: list[Wire] | None,
        *,
        response_json: bool,
        user: str | None,
        seed: int | None,
    ) -> ChatReply:
        extra: Wire = {}
        if user:
            extra["user"] = user  # who is asking (the standard field); the local fake picks its script by it
        if tools:
            extra["tools"] = tools
        if response_json:
            extra["response_format"] = {"type": "json_object"}
        if seed is not None:
            extra["seed"] = int(seed)  # best effort: endpoints that support it sample reproducibly
        try:
            response = await client(self.config, self.api_key).chat.completions.create(
                model=self.config.model or "",
                messages=messages,  # type: ignore[arg-type]  # the chat-completions shape, built by the agents
                temperature=self.config.temperature,
                **extra,
            )
        except openai.OpenAIError as e:
            raise explained(e, self.config, openai) from None
        try:
            message = response.choices[0].message
            calls = [
                ToolCall(c.id, c.function.name, json.loads(c.function.arguments or "{}"))
                for c in message.tool_calls or []
                if c.type == "function"
            ]
        except (ValueError, IndexError, AttributeError, TypeError) as e:
            raise ModelError(f"model endpoint {self.config.base_url} answered something unusable ({e})") from None
        usage = response.usage
        return ChatReply(
            message.content,
            calls,
            response.model or self.config.model or "",
            usage.prompt_tokens if usage else 0,
            usage.completion_tokens if usage else 0,
        )
