"""Anthropic Messages through the `anthropic` SDK. The chat-shaped conversation the agents build becomes
Messages: system text the `system` prompt, tool calls `tool_use` blocks, their results `tool_result` blocks in
the next user turn (consecutive same-role messages merge: Messages alternates roles)."""

from __future__ import annotations

import json
from typing import Any

import anthropic

from agent_env.agents.model_providers.clients import NO_KEY, shared
from agent_env.agents.model_providers.errors import explained
from agent_env.agents.model_providers.reply import ChatReply, ModelError, ToolCall, Tuning
from agent_env.agents.wire import Wire
from agent_env.config import ModelSettings

JSON_ONLY = "Answer with one JSON object and nothing else."  # Messages has no JSON mode


def client(config: ModelSettings, api_key: str | None) -> anthropic.AsyncAnthropic:
    # The SDK adds the version (/v1/messages) itself: a base_url written as for OpenAI (…/v1) still works.
    base_url = (config.base_url or "").rstrip("/").removesuffix("/v1")
    return shared(
        "anthropic",
        config,
        api_key,
        lambda http: anthropic.AsyncAnthropic(
            api_key=api_key or NO_KEY,
            base_url=base_url,
            timeout=config.timeout,
            max_retries=config.max_retries,
            http_client=http,
        ),
    )


def as_messages(messages: list[Wire]) -> tuple[str, list[Wire]]:
    """(system prompt, messages) for a chat-completions conversation."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system" and m.get("content"))
    out: list[Wire] = []
    for m in messages:
        if m["role"] == "system":
            continue
        blocks: list[Wire] = []
        if m["role"] == "tool":
            blocks.append({"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]})
        elif m.get("content"):
            blocks.append({"type": "text", "text": m["content"]})
        for call in m.get("tool_calls") or []:
            function = call["function"]
            blocks.append(
                {"type": "tool_use", "id": call["id"], "name": function["name"], "input": _args(function["arguments"])}
            )
        role = "assistant" if m["role"] == "assistant" else "user"
        if out and out[-1]["role"] == role:
            out[-1]["content"] += blocks
        elif blocks:
            out.append({"role": role, "content": blocks})
    return system, out


def as_tools(tools: list[Wire]) -> list[Wire]:
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description", ""),
            "input_schema": t["function"].get("parameters") or {"type": "object"},
        }
        for t in tools
    ]


class AnthropicMessages:
    def __init__(self, config: ModelSettings, api_key: str | None) -> None:
        self.config, self.api_key = config, api_key

    async def complete(
        self,
        messages: list[Wire],
        tools: list[Wire] | None,
        *,
        response_json: bool,
        user: str | None,
        seed: int | None,  # Messages has no seed
        tuning: Tuning | None = None,
    ) -> ChatReply:
        system, converted = as_messages(messages)
        max_tokens = self.config.max_tokens
        body: Wire = dict(tuning.params) if tuning is not None else {}
        if tuning is not None and tuning.effort:
            body["output_config"] = {"effort": tuning.effort}
        if tuning is not None and tuning.thinking_tokens:
            body["thinking"] = {"type": "enabled", "budget_tokens": tuning.thinking_tokens}
            max_tokens = max(max_tokens, tuning.thinking_tokens + 1024)  # the budget must be below max_tokens
        if response_json:
            system = f"{system}\n\n{JSON_ONLY}".strip()
        extra: Wire = {}
        if system:
            extra["system"] = system
        if user:
            extra["metadata"] = {"user_id": user}  # who is asking; the local fake picks its script by it
        if tools:
            extra["tools"] = as_tools(tools)
        if body:
            extra["extra_body"] = body
        try:
            response = await client(self.config, self.api_key).messages.create(
                model=self.config.model or "",
                messages=converted,  # type: ignore[arg-type]  # Messages blocks as built above
                max_tokens=max_tokens,  # (no temperature: the Messages API of SDK 2.x takes none)
                **extra,
            )
        except anthropic.AnthropicError as e:
            raise explained(e, self.config, anthropic) from None
        texts, calls = [], []
        try:
            for block in response.content:
                if block.type == "text":
                    texts.append(block.text)
                elif block.type == "tool_use":
                    calls.append(ToolCall(block.id, block.name, dict(block.input or {})))
        except (ValueError, AttributeError, TypeError) as e:
            raise ModelError(f"model endpoint {self.config.base_url} answered something unusable ({e})") from None
        return ChatReply(
            "".join(texts) or None,
            calls,
            response.model or self.config.model or "",
            response.usage.input_tokens if response.usage else 0,
            response.usage.output_tokens if response.usage else 0,
        )


def _args(arguments: Any) -> Wire:
    value = json.loads(arguments) if isinstance(arguments, str) else arguments
    return value if isinstance(value, dict) else {}
