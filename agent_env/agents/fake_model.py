"""A local, deterministic stand-in for a model endpoint (no network exists in CI). It speaks OpenAI chat
completions (`/v1/chat/completions`), OpenAI Responses (`/v1/responses`) and Anthropic Messages
(`/v1/messages`), each also streamed (`"stream": true`: chat chunks, Responses events, Anthropic events, as the
official SDKs and the CLI coding agents read them), plays the same scripts on each, and reports `usage` (about four
characters a token).

It is a fake, and says so: nothing here understands language.
- A scripted model (any name found in the loaded scripts) replays its script: the Nth assistant turn
  of a conversation gets the script's Nth step, a tool call (`{"tool": ..., "arguments": {...}}`) or a
  final answer (`{"say": "..."}`). It drives the real LLM-agent code (tool calling over MCP, budgets) and real CLI
  agents (Codex, Claude Code). For conversations, `{"turns": [[steps of the 1st turn], [steps of the 2nd], ...]}`
  (consecutive user messages are one turn). `${seed}` in an answer is the request's `seed`.
- A step's `tool` names the request's declared tool of that name, else the one named `..._NAME` after a `__`
  (Claude Code declares MCP tools as `mcp__SERVER__TOOL`; Codex declares them in a `namespace` named `mcp__SERVER`,
  and the call names that namespace), so one script drives every kind of agent.
- `fake-judge` grades rubric criteria: a criterion passes when every 'quoted' term in its text appears
  in the material it is given (case-insensitive), with a reason saying which terms it found or missed.
- `fake-garbage` answers text that is not JSON; `fake-judge-flaky` does so once, then judges;
  `fake-slow-N` waits N seconds first; `fake-small` (and `fake-small-*`) answers anything with "ok": the small
  model the CLI presets name, for the titles and chores CLIs send on the side.
- A script step may carry faults: `"delay": S` waits S seconds before answering; `"rate_limited": S` answers
  the first sight of a request with a 429 and `Retry-After: S` (the retry of the same request is served).
- The model `fake` serves everyone at once: the judge for a grading request (the last message is the
  JSON of `rubric_judge`, whoever sends it: the judge model or a judge agent), else the script named by
  the request's `user` (our LLM agents send their agent's name there).

    agent-env models fake --port 8791 --scripts bundle/models/scripts.json
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

QUOTED = re.compile(r"(?<![A-Za-z])'([^']+)'(?![A-Za-z])")  # 'terms', not the apostrophe of "clerk's"
# Models named so (`fake-small`, `fake-small-haiku` ...) answer anything harmlessly: CLI agents may send titles,
# quota checks and small-model chores on the side, which no script plays.
SIDE_MODEL = "fake-small"
SIDE_ANSWER = "ok"


def declared_tools(tools: list[dict[str, Any]] | None) -> dict[str, tuple[str, str | None]]:
    """A request's declared tools in any wire format (chat `function`, Responses `function` and Codex's `namespace`
    groups, Anthropic `tools`): full name -> (the name to call it by, its namespace or None). A namespaced tool's
    full name is `NAMESPACE__NAME`, as Codex names MCP tools (`mcp__SERVER__TOOL`)."""
    found: dict[str, tuple[str, str | None]] = {}
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                    found[f"{tool.get('name')}__{inner['name']}"] = inner["name"], str(tool.get("name"))
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if isinstance(name, str):
            found[name] = name, None
    return found


def resolve_tool(wanted: str, tools: dict[str, tuple[str, str | None]]) -> tuple[str, str | None]:
    """The declared tool a script step's `tool` means: the one of that name, else the one whose full name ends with
    `__NAME` (Claude Code declares MCP tools as `mcp__SERVER__TOOL`), else the name as written. So one script drives
    the LLM agent and any CLI agent alike."""
    if wanted in tools:
        return tools[wanted]
    suffixed = sorted(full for full in tools if full.endswith(f"__{wanted}"))
    return tools[suffixed[0]] if suffixed else (wanted, None)


def chat_reply(model: str, message: dict[str, Any], used: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    calls = [{k: v for k, v in call.items() if k != "namespace"} for call in message.get("tool_calls") or []]
    message = {**message, "tool_calls": calls} if calls else message
    return {
        "id": f"fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": used[0], "completion_tokens": used[1], "total_tokens": sum(used)},
    }


def grading_request(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rubric_judge request in the last user message, if that is what it is."""
    users = [m for m in messages if m.get("role") == "user"]
    content = users[0].get("content") if users else None  # retries append a correction after it
    try:
        request = json.loads(content) if isinstance(content, str) else None
    except ValueError:
        return None
    return request if isinstance(request, dict) and {"criteria", "material"} <= request.keys() else None


def judge(request: dict[str, Any]) -> dict[str, Any]:
    """Verdicts for the criteria listed in the judge's request (see agent_env.steps.builtin.grading)."""
    material = json.dumps(request.get("material"), ensure_ascii=False).lower()
    verdicts = []
    for criterion in request["criteria"]:
        terms = QUOTED.findall(criterion["text"])
        missing = [t for t in terms if t.lower() not in material]
        verdicts.append(
            {
                "id": criterion["id"],
                "verdict": "fail" if missing or not terms else "pass",
                "reason": (
                    f"missing: {', '.join(missing)}"
                    if missing
                    else "no quoted terms to look for"
                    if not terms
                    else f"found: {', '.join(terms)}"
                ),
            }
        )
    return {"criteria": verdicts}


def _position(script: Any, messages: list[dict[str, Any]]) -> tuple[int, int]:
    """Where a conversation is in a script. A flat list: the Nth assistant message gets step N. A
    `{"turns": [[...], ...]}` script: the Kth user turn starts turn K, whose steps are played in order."""
    if isinstance(script, list):
        return sum(1 for m in messages if m.get("role") == "assistant"), 0
    users = _turn_starts(messages)
    since = sum(1 for m in messages[users[-1] :] if m.get("role") == "assistant") if users else 0
    turn = max(len(users) - 1, 0)
    steps = script["turns"][min(turn, len(script["turns"]) - 1)]
    return turn, min(since, len(steps) - 1)


def _turn_starts(messages: list[dict[str, Any]]) -> list[int]:
    """Where user turns start: consecutive user messages are one turn (CLI agents send their context, e.g. Codex's
    environment, as a user message before the prompt), system and developer messages between them aside."""
    starts, previous = [], None
    for i, message in enumerate(messages):
        role = message.get("role")
        if role in ("system", "developer"):
            continue
        if role == "user" and previous != "user":
            starts.append(i)
        previous = role
    return starts


def _fault(step: dict[str, Any], seen: set[str], raw: bytes) -> tuple[float, float]:
    """A step's faults: (seconds to wait before answering, Retry-After seconds of a 429 to answer instead).
    `{"rate_limited": S}` refuses the first sight of a request (a retry of the same one is served)."""
    if (wait := step.get("rate_limited")) is not None:
        fingerprint = hashlib.sha256(raw).hexdigest()
        if fingerprint not in seen:
            if len(seen) > 10_000:
                seen.clear()
            seen.add(fingerprint)
            return 0.0, float(wait)
    return float(step.get("delay") or 0), 0.0


def _tokens(value: Any) -> int:
    """A stand-in token count: about four characters a token, deterministic."""
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4)


def create_app(
    scripts: dict[str, list[dict[str, Any]]],
    api_key: str | None = None,
    host_names: tuple[str, ...] = (),
    usage_log: list[dict[str, Any]] | None = None,
):
    """`api_key`: when given, requests must carry it (as real endpoints require theirs). Behind HostGuard:
    a web page the user visits cannot drive it (DNS rebinding, cross-site posts); `host_names`: names it
    answers for besides loopback names and IP literals. `usage_log`: each answer's reported usage is appended."""
    from agent_env.guard import HostGuard, bearer, tokens_equal

    seen: set[str] = set()

    def authorized(request: Request) -> bool:
        given = request.headers.get("x-api-key") or bearer(request.headers.get("authorization"))
        return api_key is None or tokens_equal(given, api_key)

    async def answer(
        model: str,
        messages: list[dict[str, Any]],
        user: str,
        seed: Any,
        raw: bytes,
        tools: dict[str, tuple[str, str | None]] | None = None,
    ) -> dict[str, Any] | tuple[int, str, dict[str, str]]:
        """The assistant's chat-shaped message, or (status, error message, headers) to refuse with. `tools`: the
        request's declared tools, by the name the client knows them (see `declared_tools`)."""
        if model.startswith("fake-slow-"):
            await asyncio.sleep(float(model.removeprefix("fake-slow-")))
            return {"role": "assistant", "content": "done, slowly"}
        if model == "fake-garbage":
            return {"role": "assistant", "content": "I think it went well overall!"}
        if model == "fake-judge-flaky" and not any(m.get("role") == "assistant" for m in messages):
            return {"role": "assistant", "content": "Verdict: mostly good."}
        if (graded := grading_request(messages)) is not None and model in ("fake", "fake-judge", "fake-judge-flaky"):
            return {"role": "assistant", "content": json.dumps(judge(graded))}
        script = scripts.get(user) if model == "fake" else scripts.get(model)
        if script is None and model.startswith(SIDE_MODEL):
            return {"role": "assistant", "content": SIDE_ANSWER}
        if script is None:
            return 404, f"model {model!r} not found (scripts: {', '.join(scripts)})", {}
        turn, at = _position(script, messages)
        step = (
            script[min(turn, len(script) - 1)]
            if isinstance(script, list)
            else script["turns"][min(turn, len(script["turns"]) - 1)][at]
        )
        delay, retry_after = _fault(step, seen, raw)
        if retry_after:
            return 429, "rate limited (scripted)", {"retry-after": f"{retry_after:g}"}
        await asyncio.sleep(delay)
        if "tool" in step:
            name, namespace = resolve_tool(step["tool"], tools or {})
            call: dict[str, Any] = {
                "id": f"call_{len(messages)}",  # unique within a conversation
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(step.get("arguments", {}))},
                **({"namespace": namespace} if namespace else {}),
            }
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"role": "assistant", "content": step["say"].replace("${seed}", str(seed))}

    def counted(model: str, asked: Any, said: dict[str, Any]) -> tuple[int, int]:
        used = _tokens(asked), _tokens(said)
        if usage_log is not None:
            usage_log.append({"model": model, "input_tokens": used[0], "output_tokens": used[1]})
        return used

    async def completions(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"error": {"message": "invalid API key"}}, status_code=401)
        raw = await request.body()
        body = json.loads(raw)
        model, messages = body.get("model", ""), body.get("messages", [])
        tools = declared_tools(body.get("tools"))
        said = await answer(model, messages, body.get("user", ""), body.get("seed"), raw, tools)
        if isinstance(said, tuple):
            return JSONResponse({"error": {"message": said[1]}}, status_code=said[0], headers=said[2])
        reply = chat_reply(model, said, counted(model, messages, said))
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return _sse(chat_chunks(reply, usage), done="[DONE]")
        return JSONResponse(reply)

    async def responses(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"error": {"message": "invalid API key"}}, status_code=401)
        raw = await request.body()
        body = json.loads(raw)
        model = body.get("model", "")
        messages = responses_as_chat(body)
        said = await answer(model, messages, body.get("user", ""), None, raw, declared_tools(body.get("tools")))
        if isinstance(said, tuple):
            return JSONResponse({"error": {"message": said[1]}}, status_code=said[0], headers=said[2])
        reply = responses_reply(model, said, counted(model, body.get("input"), said))
        return _sse(responses_events(reply)) if body.get("stream") else JSONResponse(reply)

    async def messages_api(request: Request) -> Response:
        def error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
            body = {"type": "error", "error": {"type": kind, "message": message}}
            return JSONResponse(body, status_code=status, headers=headers)

        if not authorized(request):
            return error(401, "authentication_error", "invalid x-api-key")
        raw = await request.body()
        body = json.loads(raw)
        model = body.get("model", "")
        messages = anthropic_as_chat(body)
        user = (body.get("metadata") or {}).get("user_id", "")
        said = await answer(model, messages, user, None, raw, declared_tools(body.get("tools")))
        if isinstance(said, tuple):
            kinds = {404: "not_found_error", 429: "rate_limit_error"}
            return error(said[0], kinds.get(said[0], "api_error"), said[1], said[2])
        reply = anthropic_reply(model, said, counted(model, body.get("messages"), said))
        return _sse(anthropic_events(reply)) if body.get("stream") else JSONResponse(reply)

    async def models(request: Request) -> JSONResponse:
        names = [*scripts, "fake", "fake-judge", "fake-judge-flaky", "fake-garbage", SIDE_MODEL]
        return JSONResponse({"object": "list", "data": [{"id": n, "object": "model"} for n in names]})

    return HostGuard(
        names=host_names,
        app=Starlette(
            routes=[
                Route("/v1/chat/completions", completions, methods=["POST"]),
                Route("/chat/completions", completions, methods=["POST"]),
                Route("/v1/responses", responses, methods=["POST"]),
                Route("/responses", responses, methods=["POST"]),
                Route("/v1/messages", messages_api, methods=["POST"]),
                Route("/v1/models", models, methods=["GET"]),
            ]
        ),
    )


# -- the other wire protocols, as chat-shaped conversations (what the scripts are played against) and back --


def responses_as_chat(body: dict[str, Any]) -> list[dict[str, Any]]:
    """An OpenAI Responses request's instructions and input items as chat messages."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or []:
        kind = item.get("type", "message")
        if kind == "function_call":
            function = {"name": item["name"], "arguments": item.get("arguments", "{}")}
            call = {"id": item["call_id"], "type": "function", "function": function}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item.get("output", "")})
        elif kind == "message":
            messages.append({"role": item.get("role", "user"), "content": _text(item.get("content"))})
    return messages


def responses_reply(model: str, said: dict[str, Any], used: tuple[int, int]) -> dict[str, Any]:
    output: list[dict[str, Any]] = [
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


def anthropic_as_chat(body: dict[str, Any]) -> list[dict[str, Any]]:
    """An Anthropic Messages request's system prompt and messages (text, tool_use, tool_result) as chat messages."""
    messages: list[dict[str, Any]] = []
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
            calls = [
                {
                    "id": b["id"],
                    "type": "function",
                    "function": {"name": b["name"], "arguments": json.dumps(b["input"])},
                }
                for b in uses
            ]
            messages.append({"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})})
        elif not results:  # text beside tool results (a CLI's reminders) is not a new user turn
            messages.append({"role": "user", "content": text})
    return messages


def anthropic_reply(model: str, said: dict[str, Any], used: tuple[int, int]) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": said["content"]}] if said.get("content") else []
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


def _sse(events: list[dict[str, Any]], done: str | None = None) -> StreamingResponse:
    """Events as server-sent events, named by their `type` (Responses, Anthropic) or unnamed (chat chunks)."""

    async def lines() -> AsyncIterator[bytes]:
        for event in events:
            name = f"event: {event['type']}\n" if "type" in event else ""
            yield f"{name}data: {json.dumps(event)}\n\n".encode()
        if done:
            yield f"data: {done}\n\n".encode()

    return StreamingResponse(lines(), media_type="text/event-stream", headers={"cache-control": "no-cache"})


def chat_chunks(reply: dict[str, Any], usage: bool) -> list[dict[str, Any]]:
    """A chat completion as `chat.completion.chunk`s: the role, the text or each tool call whole, the finish reason,
    then (with `stream_options.include_usage`) a last chunk with no choices and the usage."""
    choice = reply["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
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


def responses_events(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses API reply as the events it streams: created, in_progress, each output item added, its text or
    arguments delta and done, the item done, then completed (with the usage)."""
    started = {**reply, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
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


def anthropic_events(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """An Anthropic message as the events it streams: message_start, each content block's start, delta and stop,
    message_delta (stop reason, output tokens), message_stop."""
    started = {**reply, "content": [], "stop_reason": None, "usage": {**reply["usage"], "output_tokens": 0}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": started}]
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


def load_scripts(paths: list[Path]) -> dict[str, list[dict[str, Any]]]:
    scripts: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        scripts.update(json.loads(path.read_text()))
    return scripts


def builtin_scripts() -> dict[str, list[dict[str, Any]]]:
    """The scripts the built-in bundles ship (`models/fake.json`): their agents' parts, played back."""
    from agent_env.bundles import BUILTIN_ROOT

    return load_scripts(sorted(BUILTIN_ROOT.glob("*/models/fake.json")))
