"""The fake model's wire protocols (agent_env.agents.fake_model): OpenAI Responses and Anthropic Messages
requests as chat-shaped conversations (what the scripts are played against), the assistant's chat-shaped
message back as each API's reply, and each reply as the server-sent events its API streams.

Requests and replies are other APIs' JSON objects (`Wire`), typed as loosely as those APIs allow; the
conversation in between is ours (`Message`, `ToolCall`).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any, NotRequired, TypedDict

from starlette.responses import StreamingResponse

from agent_env.agents.wire import Wire


class FunctionCall(TypedDict):
    name: str
    arguments: str  # JSON text, as chat completions carry it


class ToolCall(TypedDict):
    """A chat-shaped tool call; `namespace`: the Codex namespace the called tool was declared in."""

    id: str
    type: str
    function: FunctionCall
    namespace: NotRequired[str]


class Message(TypedDict):
    """One message of a chat-shaped conversation (the form every request is played in, and the answer's)."""

    role: str
    content: Any  # text, a list of parts, or None beside tool calls
    tool_calls: NotRequired[list[ToolCall]]
    tool_call_id: NotRequired[str]


def chat_reply(model: str, message: Message, used: tuple[int, int] = (0, 0)) -> Wire:
    calls = [{k: v for k, v in call.items() if k != "namespace"} for call in message.get("tool_calls") or []]
    shown: Wire = {**message, "tool_calls": calls} if calls else dict(message)
    return {
        "id": f"fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": shown, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": used[0], "completion_tokens": used[1], "total_tokens": sum(used)},
    }


def responses_as_chat(body: Wire) -> list[Message]:
    """An OpenAI Responses request's instructions and input items as chat messages."""
    messages: list[Message] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or []:
        kind = item.get("type", "message")
        if kind == "function_call":
            function: FunctionCall = {"name": item["name"], "arguments": item.get("arguments", "{}")}
            call: ToolCall = {"id": item["call_id"], "type": "function", "function": function}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item.get("output", "")})
        elif kind == "message":
            messages.append({"role": item.get("role", "user"), "content": _text(item.get("content"))})
    return messages


def responses_reply(model: str, said: Message, used: tuple[int, int]) -> Wire:
    output: list[Wire] = [
        {
            "type": "function_call",
            "id": f"fc_{call['id']}",
            "call_id": call["id"],
            "name": call["function"]["name"],
            **({"namespace": call["namespace"]} if call.get("namespace") else {}),
            "arguments": call["function"]["arguments"],
            "status": "completed",
        }
        for call in said.get("tool_calls") or []
    ]
    if said.get("content") is not None:
        text = {"type": "output_text", "text": said["content"], "annotations": []}
        message = {"type": "message", "id": f"msg_{time.monotonic_ns()}", "role": "assistant", "status": "completed"}
        output.append({**message, "content": [text]})
    return {
        "id": f"resp_{time.monotonic_ns()}",
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": used[0],
            "output_tokens": used[1],
            "total_tokens": sum(used),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def anthropic_as_chat(body: Wire) -> list[Message]:
    """An Anthropic Messages request's system prompt and messages (text, tool_use, tool_result) as chat messages."""
    messages: list[Message] = []
    if system := _text(body.get("system")):
        messages.append({"role": "system", "content": system})
    for m in body.get("messages") or []:
        content = m.get("content")
        if m.get("role") == "system":  # Claude Code sends its environment as a system message among the turns
            messages.append({"role": "system", "content": _text(content)})
            continue
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        results = [b for b in blocks if b.get("type") == "tool_result"]
        for b in results:
            messages.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": _text(b.get("content"))})
        text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        uses = [b for b in blocks if b.get("type") == "tool_use"]
        if m.get("role") == "assistant":
            calls: list[ToolCall] = [
                {
                    "id": b["id"],
                    "type": "function",
                    "function": {"name": b["name"], "arguments": json.dumps(b["input"])},
                }
                for b in uses
            ]
            said: Message = {"role": "assistant", "content": text or None}
            if calls:
                said["tool_calls"] = calls
            messages.append(said)
        elif not results:  # text beside tool results (a CLI's reminders) is not a new user turn
            messages.append({"role": "user", "content": text})
    return messages


def anthropic_reply(model: str, said: Message, used: tuple[int, int]) -> Wire:
    content: list[Wire] = [{"type": "text", "text": said["content"]}] if said.get("content") else []
    content += [
        {
            "type": "tool_use",
            "id": call["id"],
            "name": call["function"]["name"],
            "input": json.loads(call["function"]["arguments"]),
        }
        for call in said.get("tool_calls") or []
    ]
    return {
        "id": f"msg_{time.monotonic_ns()}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if said.get("tool_calls") else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": used[0], "output_tokens": used[1]},
    }


# -- streaming: the same reply as the server-sent events each API streams (`"stream": true`) --


def sse(events: list[Wire], done: str | None = None) -> StreamingResponse:
    """Events as server-sent events, named by their `type` (Responses, Anthropic) or unnamed (chat chunks)."""

    async def lines() -> AsyncIterator[bytes]:
        for event in events:
            name = f"event: {event['type']}\n" if "type" in event else ""
            yield f"{name}data: {json.dumps(event)}\n\n".encode()
        if done:
            yield f"data: {done}\n\n".encode()

    return StreamingResponse(lines(), media_type="text/event-stream", headers={"cache-control": "no-cache"})


def chat_chunks(reply: Wire, usage: bool) -> list[Wire]:
    """A chat completion as `chat.completion.chunk`s: the role, the text or each tool call whole, the finish reason,
    then (with `stream_options.include_usage`) a last chunk with no choices and the usage."""
    choice = reply["choices"][0]
    message = choice["message"]

    def chunk(delta: Wire, finish: str | None = None) -> Wire:
        head = {k: reply[k] for k in ("id", "created", "model")}
        return {
            **head,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        chunks.append(chunk({"content": message["content"]}))
    for index, call in enumerate(message.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": index, **call}]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if usage:
        chunks.append({**chunk({}), "choices": [], "usage": reply["usage"]})
    return chunks


def responses_events(reply: Wire) -> list[Wire]:
    """A Responses API reply as the events it streams: created, in_progress, each output item added, its text or
    arguments delta and done, the item done, then completed (with the usage)."""
    started = {**reply, "status": "in_progress", "output": [], "usage": None}
    events: list[Wire] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    doing = {"status": "in_progress"}
    for index, item in enumerate(reply["output"]):
        at = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "message":
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": {**item, **doing, "content": []}}
            )
            for part_index, part in enumerate(item["content"]):
                part_at = {**at, "content_index": part_index}
                events += [
                    {"type": "response.content_part.added", **part_at, "part": {**part, "text": ""}},
                    {"type": "response.output_text.delta", **part_at, "delta": part["text"], "logprobs": []},
                    {"type": "response.output_text.done", **part_at, "text": part["text"], "logprobs": []},
                    {"type": "response.content_part.done", **part_at, "part": part},
                ]
        else:
            events += [
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, **doing, "arguments": ""},
                },
                {"type": "response.function_call_arguments.delta", **at, "delta": item["arguments"]},
                {"type": "response.function_call_arguments.done", **at, "arguments": item["arguments"]},
            ]
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": reply})
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def anthropic_events(reply: Wire) -> list[Wire]:
    """An Anthropic message as the events it streams: message_start, each content block's start, delta and stop,
    message_delta (stop reason, output tokens), message_stop."""
    started = {**reply, "content": [], "stop_reason": None, "usage": {**reply["usage"], "output_tokens": 0}}
    events: list[Wire] = [{"type": "message_start", "message": started}]
    for index, block in enumerate(reply["content"]):
        if block["type"] == "text":
            empty, delta = {**block, "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            empty, delta = (
                {**block, "input": {}},
                {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
            )
        events += [
            {"type": "content_block_start", "index": index, "content_block": empty},
            {"type": "content_block_delta", "index": index, "delta": delta},
            {"type": "content_block_stop", "index": index},
        ]
    stopped = {"stop_reason": reply["stop_reason"], "stop_sequence": None}
    events += [
        {"type": "message_delta", "delta": stopped, "usage": {"output_tokens": reply["usage"]["output_tokens"]}},
        {"type": "message_stop"},
    ]
    return events


def _text(content: Any) -> str:
    """Text of a string, or of a list of text parts (input_text, output_text, text blocks)."""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
