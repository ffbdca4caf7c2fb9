"""A local, deterministic stand-in for a model endpoint (no network exists in CI). It speaks OpenAI chat
completions (`/v1/chat/completions`), OpenAI Responses (`/v1/responses`) and Anthropic Messages
(`/v1/messages`), plays the same scripts on each, and reports `usage` (about four characters a token).

It is a fake, and says so: nothing here understands language.
- A scripted model (any name found in the loaded scripts) replays its script: the Nth assistant turn
  of a conversation gets the script's Nth step, a tool call (`{"tool": ..., "arguments": {...}}`) or a
  final answer (`{"say": "..."}`). It drives the real LLM-agent code (tool calling over MCP, budgets).
  For conversations, `{"turns": [[steps of the 1st turn], [steps of the 2nd], ...]}`. `${seed}` in an
  answer is the request's `seed`.
- `fake-judge` grades rubric criteria: a criterion passes when every 'quoted' term in its text appears
  in the material it is given (case-insensitive), with a reason saying which terms it found or missed.
- `fake-garbage` answers text that is not JSON; `fake-judge-flaky` does so once, then judges;
  `fake-slow-N` waits N seconds first.
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
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

QUOTED = re.compile(r"(?<![A-Za-z])'([^']+)'(?![A-Za-z])")  # 'terms', not the apostrophe of "clerk's"


def _reply(model: str, message: dict[str, Any], used: tuple[int, int] = (0, 0)) -> JSONResponse:
    return JSONResponse(
        {
            "id": f"fake-{time.monotonic_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}
            ],
            "usage": {"prompt_tokens": used[0], "completion_tokens": used[1], "total_tokens": sum(used)},
        }
    )


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
    """Verdicts for the criteria listed in the judge's request (see agentenv.steps.builtin.grading)."""
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
    `{"turns": [[...], ...]}` script: the Kth user message starts turn K, whose steps are played in order."""
    if isinstance(script, list):
        return sum(1 for m in messages if m.get("role") == "assistant"), 0
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    since = sum(1 for m in messages[users[-1] :] if m.get("role") == "assistant") if users else 0
    turn = max(len(users) - 1, 0)
    steps = script["turns"][min(turn, len(script["turns"]) - 1)]
    return turn, min(since, len(steps) - 1)


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
    from agentenv.guard import HostGuard, bearer, tokens_equal

    seen: set[str] = set()

    def authorized(request: Request) -> bool:
        given = request.headers.get("x-api-key") or bearer(request.headers.get("authorization"))
        return api_key is None or tokens_equal(given, api_key)

    async def answer(
        model: str, messages: list[dict[str, Any]], user: str, seed: Any, raw: bytes
    ) -> dict[str, Any] | tuple[int, str, dict[str, str]]:
        """The assistant's chat-shaped message, or (status, error message, headers) to refuse with."""
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
            call = {
                "id": f"call_{turn}",
                "type": "function",
                "function": {"name": step["tool"], "arguments": json.dumps(step.get("arguments", {}))},
            }
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"role": "assistant", "content": step["say"].replace("${seed}", str(seed))}

    def counted(model: str, asked: Any, said: dict[str, Any]) -> tuple[int, int]:
        used = _tokens(asked), _tokens(said)
        if usage_log is not None:
            usage_log.append({"model": model, "input_tokens": used[0], "output_tokens": used[1]})
        return used

    async def completions(request: Request) -> JSONResponse:
        if not authorized(request):
            return JSONResponse({"error": {"message": "invalid API key"}}, status_code=401)
        raw = await request.body()
        body = json.loads(raw)
        model, messages = body.get("model", ""), body.get("messages", [])
        said = await answer(model, messages, body.get("user", ""), body.get("seed"), raw)
        if isinstance(said, tuple):
            return JSONResponse({"error": {"message": said[1]}}, status_code=said[0], headers=said[2])
        return _reply(model, said, counted(model, messages, said))

    async def responses(request: Request) -> JSONResponse:
        if not authorized(request):
            return JSONResponse({"error": {"message": "invalid API key"}}, status_code=401)
        raw = await request.body()
        body = json.loads(raw)
        model = body.get("model", "")
        messages = responses_as_chat(body)
        said = await answer(model, messages, body.get("user", ""), None, raw)
        if isinstance(said, tuple):
            return JSONResponse({"error": {"message": said[1]}}, status_code=said[0], headers=said[2])
        used = counted(model, body.get("input"), said)
        return JSONResponse(responses_reply(model, said, used))

    async def messages_api(request: Request) -> JSONResponse:
        def error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
            body = {"type": "error", "error": {"type": kind, "message": message}}
            return JSONResponse(body, status_code=status, headers=headers)

        if not authorized(request):
            return error(401, "authentication_error", "invalid x-api-key")
        raw = await request.body()
        body = json.loads(raw)
        model = body.get("model", "")
        messages = anthropic_as_chat(body)
        said = await answer(model, messages, (body.get("metadata") or {}).get("user_id", ""), None, raw)
        if isinstance(said, tuple):
            kinds = {404: "not_found_error", 429: "rate_limit_error"}
            return error(said[0], kinds.get(said[0], "api_error"), said[1], said[2])
        used = counted(model, body.get("messages"), said)
        return JSONResponse(anthropic_reply(model, said, used))

    async def models(request: Request) -> JSONResponse:
        names = [*scripts, "fake", "fake-judge", "fake-judge-flaky", "fake-garbage"]
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
        elif text or not results:
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
    from agentenv.bundles import BUILTIN_ROOT

    return load_scripts(sorted(BUILTIN_ROOT.glob("*/models/fake.json")))
