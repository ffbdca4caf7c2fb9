"""The fake model's tokens (agent_env.agents.fake_model): deterministic token ids and log-probs, in vLLM's field
names, for a request that asks for them, so the token recorder (agent_env.episodes.recording) has an upstream to
record in CI without a GPU.

It is a stand-in tokenizer, and says so: a conversation is rendered through a fixed chat template (a marker token
per role, the text, an end token), each piece cut into words and spaces, each of those an id from its hash. Pieces
are tokenised apart and joined, so a conversation's tokens extend those of any conversation it extends, as a real
chat template's usually do: the next prompt is the last prompt, the completion, then what the environment added.

    "return_token_ids": true  ->  "prompt_token_ids": [...] and choices[0]["token_ids"]: [...]
    "logprobs": true          ->  choices[0]["logprobs"]["content"]: [{"token", "logprob", "bytes", "top_logprobs"}]
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from agent_env.agents.wire import Wire

WORDS = re.compile(r"\s+|[^\s]+")
SPECIAL = {"<|end|>": 1, "<|system|>": 2, "<|user|>": 3, "<|assistant|>": 4, "<|tool|>": 5, "<|developer|>": 6}
VOCABULARY = 50_000  # ids past the special ones


def token_id(piece: str) -> int:
    if piece in SPECIAL:
        return SPECIAL[piece]
    return 100 + int.from_bytes(hashlib.sha256(piece.encode("utf-8", "surrogatepass")).digest()[:4]) % VOCABULARY


def pieces(text: str) -> list[str]:
    return WORDS.findall(text)


def _body(message: Wire) -> list[str]:
    """A message's text and tool calls (a call as its name and arguments; ids are not rendered, as in most
    real templates), as pieces."""
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content) if content else ""
    out = pieces(text)
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {} if isinstance(call, dict) else {}
        arguments = function.get("arguments")
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments)
        out += ["<tool_call>", *pieces(f"{function.get('name')} {shown}"), "</tool_call>"]
    return out


def _role(message: Any) -> str:
    role = message.get("role") if isinstance(message, dict) else None
    return f"<|{role}|>" if f"<|{role}|>" in SPECIAL else "<|user|>"


def prompt_pieces(messages: list[Any]) -> list[str]:
    """The prompt the template renders: every message, then the assistant's marker (the generation prompt)."""
    out: list[str] = []
    for message in messages:
        out += [_role(message), *(_body(message) if isinstance(message, dict) else []), "<|end|>"]
    return [*out, "<|assistant|>"]


def completion_pieces(said: Wire) -> list[str]:
    """What the model sampled: the assistant's body, then the end token."""
    return [*_body(said), "<|end|>"]


def logprob(piece: str, position: int) -> float:
    """A deterministic stand-in log-probability (in (-2, 0)) of sampling `piece` at `position`."""
    digest = hashlib.sha256(f"{position}:{piece}".encode("utf-8", "surrogatepass")).digest()
    return -round((int.from_bytes(digest[:2]) % 2000 + 1) / 1000, 3)


def with_tokens(reply: Wire, body: Wire, messages: list[Any], said: Wire) -> Wire:
    """`reply` (a chat completion) with what `body` asked for: `return_token_ids` adds `prompt_token_ids` and the
    choice's `token_ids`; `logprobs` adds the choice's `logprobs.content`, one entry per sampled token."""
    if not body.get("return_token_ids") and not body.get("logprobs"):
        return reply
    prompt = prompt_pieces(messages)
    sampled = completion_pieces(said)
    choice = dict(reply["choices"][0])
    if body.get("return_token_ids"):
        reply = {**reply, "prompt_token_ids": [token_id(p) for p in prompt]}
        choice["token_ids"] = [token_id(p) for p in sampled]
    if body.get("logprobs"):
        entries = []
        for i, piece in enumerate(sampled):
            value = logprob(piece, len(prompt) + i)
            entry = {"token": piece, "logprob": value, "bytes": list(piece.encode("utf-8", "surrogatepass"))}
            entries.append({**entry, "top_logprobs": [] if not body.get("top_logprobs") else [entry]})
        choice["logprobs"] = {"content": entries}
    return {**reply, "choices": [choice]}
