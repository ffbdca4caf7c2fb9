"""What every provider answers, whichever API it speaks: text, tool calls, and the tokens the call used."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_env.agents.wire import Wire


class ModelError(Exception):
    """The endpoint failed or answered something unusable (retryable: it may be transient)."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: Wire


@dataclass
class ChatReply:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    model: str = ""  # the model that answered, as the endpoint names it
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class Tuning:
    """A prompt's settings for its model calls beyond the endpoint's own (agent_env.agents.conversation
    PromptSettings): each provider sends them its API's way."""

    effort: str | None = None  # reasoning effort
    thinking_tokens: int | None = None  # the thinking budget
    params: Wire = field(default_factory=dict)  # further body parameters, sent as given (top_p, stop...)
