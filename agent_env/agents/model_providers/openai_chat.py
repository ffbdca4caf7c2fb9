"""OpenAI chat completions through the `openai` SDK: OpenAI itself and any OpenAI-compatible server."""

from __future__ import annotations

import json

import openai

from agent_env.agents.model_providers.clients import NO_KEY, shared
from agent_env.agents.model_providers.errors import explained
from agent_env.agents.model_providers.reply import ChatReply, ModelError, ToolCall, Tuning
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
        tuning: Tuning | None = None,
    ) -> ChatReply:
        extra: Wire = {}
        if tuning is not None:
            extra.update(tuned(tuning))
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


def tuned(tuning: Tuning) -> Wire:
    """A prompt's tuning as chat completions arguments: `reasoning_effort`; the thinking budget as LiteLLM and the
    Anthropic-compatible servers read it; the other parameters in the body as given."""
    body: Wire = dict(tuning.params)
    if tuning.thinking_tokens:
        body["thinking"] = {"type": "enabled", "budget_tokens": tuning.thinking_tokens}
    extra: Wire = {"extra_body": body} if body else {}
    if tuning.effort:
        extra["reasoning_effort"] = tuning.effort
    return extra
