"""A local, deterministic stand-in for an OpenAI-compatible endpoint (no network exists in CI).

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
- The model `fake` serves everyone at once: the judge for a grading request (the last message is the
  JSON of `rubric_judge`, whoever sends it: the judge model or a judge agent), else the script named by
  the request's `user` (our LLM agents send their agent's name there).

    agent-env models fake --port 8791 --scripts bundle/models/scripts.json
"""

from __future__ import annotations

import asyncio
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


def _reply(model: str, message: dict[str, Any]) -> JSONResponse:
    return JSONResponse(
        {
            "id": f"fake-{time.monotonic_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
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


def create_app(scripts: dict[str, list[dict[str, Any]]], api_key: str | None = None, host_names: tuple[str, ...] = ()):
    """`api_key`: when given, requests must carry it (as real endpoints require theirs). Behind HostGuard:
    a web page the user visits cannot drive it (DNS rebinding, cross-site posts); `host_names`: names it
    answers for besides loopback names and IP literals."""
    from agentenv.guard import HostGuard, bearer, tokens_equal

    async def completions(request: Request) -> JSONResponse:
        if api_key is not None and not tokens_equal(bearer(request.headers.get("authorization")), api_key):
            return JSONResponse({"error": {"message": "invalid API key"}}, status_code=401)
        body = await request.json()
        model, messages = body.get("model", ""), body.get("messages", [])
        if model.startswith("fake-slow-"):
            await asyncio.sleep(float(model.removeprefix("fake-slow-")))
            return _reply(model, {"role": "assistant", "content": "done, slowly"})
        if model == "fake-garbage":
            return _reply(model, {"role": "assistant", "content": "I think it went well overall!"})
        if model == "fake-judge-flaky" and not any(m.get("role") == "assistant" for m in messages):
            return _reply(model, {"role": "assistant", "content": "Verdict: mostly good."})
        if (graded := grading_request(messages)) is not None and model in ("fake", "fake-judge", "fake-judge-flaky"):
            return _reply(model, {"role": "assistant", "content": json.dumps(judge(graded))})
        script = scripts.get(body.get("user", "")) if model == "fake" else scripts.get(model)
        if script is None:
            return JSONResponse(
                {"error": {"message": f"model {model!r} not found (scripts: {', '.join(scripts)})"}}, status_code=404
            )
        turn, at = _position(script, messages)
        step = (
            script[min(turn, len(script) - 1)]
            if isinstance(script, list)
            else script["turns"][min(turn, len(script["turns"]) - 1)][at]
        )
        if "tool" in step:
            call = {
                "id": f"call_{turn}",
                "type": "function",
                "function": {"name": step["tool"], "arguments": json.dumps(step.get("arguments", {}))},
            }
            return _reply(model, {"role": "assistant", "content": None, "tool_calls": [call]})
        return _reply(model, {"role": "assistant", "content": step["say"].replace("${seed}", str(body.get("seed")))})

    async def models(request: Request) -> JSONResponse:
        names = [*scripts, "fake", "fake-judge", "fake-judge-flaky", "fake-garbage"]
        return JSONResponse({"object": "list", "data": [{"id": n, "object": "model"} for n in names]})

    return HostGuard(
        names=host_names,
        app=Starlette(
            routes=[
                Route("/v1/chat/completions", completions, methods=["POST"]),
                Route("/chat/completions", completions, methods=["POST"]),
                Route("/v1/models", models, methods=["GET"]),
            ]
        ),
    )


def load_scripts(paths: list[Path]) -> dict[str, list[dict[str, Any]]]:
    scripts: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        scripts.update(json.loads(path.read_text()))
    return scripts


def builtin_scripts() -> dict[str, list[dict[str, Any]]]:
    """The scripts the built-in bundles ship (`models/fake.json`): their agents' parts, played back."""
    from agentenv.bundles import BUILTIN_ROOT

    return load_scripts(sorted(BUILTIN_ROOT.glob("*/models/fake.json")))
