"""OpenAI Responses (`POST /responses`) through the `openai` SDK. The chat-shaped conversation the agents build
becomes input items: system text the instructions, tool calls `function_call`, results `function_call_output`."""

from __future__ import annotations

import json

import openai

from agent_env.agents.model_providers.errors import explained
from agent_env.agents.model_providers.openai_chat import client
from agent_env.agents.model_providers.reply import ChatReply, ModelError, ToolCall, Tuning
from agent_env.agents.wire import Wire
from agent_env.config import ModelSettings


def as_input(messages: list[Wire]) -> tuple[str | None, list[Wire]]:
    """(instructions, input items) for a chat-completions conversation."""
    instructions = "\n\n".join(m["content"] for m in messages if m["role"] == "system" and m.get("content")) or None
    items: list[Wire] = []
    for m in messages:
        if m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        elif m["role"] in ("user", "assistant"):
            if m.get("content"):
                items.append({"role": m["role"], "content": m["content"]})
            for call in m.get("tool_calls") or []:
                function = call["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function["arguments"],
                    }
                )
    return instructions, items


def as_tools(tools: list[Wire]) -> list[Wire]:
    return [{"type": "function", **t["function"]} for t in tools]


class OpenAIResponses:
    def __init__(self, config: ModelSettings, api_key: str | None) -> None:
        self.config, self.api_key = config, api_key

    async def complete(
        self,
        messages: list[Wire],
        tools: list[Wire] | None,
        *,
        response_json: bool,
        user: str | None,
        seed: int | None,  # the Responses API has no seed
        tuning: Tuning | None = None,  # (no thinking budget in the Responses API: its effort is the knob)
    ) -> ChatReply:
        instructions, items = as_input(messages)
        extra: Wire = {}
        if tuning is not None and tuning.params:
            extra["extra_body"] = dict(tuning.params)
        if tuning is not None and tuning.effort:
            extra["reasoning"] = {"effort": tuning.effort}
        if instructions:
            extra["instructions"] = instructions
        if user:
            extra["user"] = user
        if tools:
            extra["tools"] = as_tools(tools)
        if response_json:
            extra["text"] = {"format": {"type": "json_object"}}
        try:
            response = await client(self.config, self.api_key).responses.create(
                model=self.config.model or "",
                input=items,  # type: ignore[arg-type]  # input items as built above
                temperature=self.config.temperature,
                max_output_tokens=self.config.max_tokens,
                store=False,  # the conversation is ours: nothing needs keeping on the provider's side
                **extra,
            )
        except openai.OpenAIError as e:
            raise explained(e, self.config, openai) from None
        texts, calls = [], []
        try:
            for item in response.output:
                if item.type == "message":
                    texts += [part.text for part in item.content if part.type == "output_text"]
                elif item.type == "function_call":
                    calls.append(ToolCall(item.call_id, item.name, json.loads(item.arguments or "{}")))
        except (ValueError, AttributeError, TypeError) as e:
            raise ModelError(f"model endpoint {self.config.base_url} answered something unusable ({e})") from None
        usage = response.usage
        return ChatReply(
            "".join(texts) or None,
            calls,
            response.model or self.config.model or "",
            usage.input_tokens if usage else 0,
            usage.output_tokens if usage else 0,
        )
