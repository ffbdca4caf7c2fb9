"""A local, deterministic stand-in for a model endpoint (no network exists in CI). It speaks OpenAI chat
completions (`/v1/chat/completions`), OpenAI Responses (`/v1/responses`) and Anthropic Messages
(`/v1/messages`), each also streamed (`"stream": true`: chat chunks, Responses events, Anthropic events, as the
official SDKs and the CLI coding agents read them), plays the same scripts on each, and reports `usage` (about four
characters a token). A chat completion asking for token ids or log-probs (vLLM's `return_token_ids`, `logprobs`)
gets them, made up deterministically (agent_env.agents.fake_tokens): the token recorder's upstream in CI.

It is a fake, and says so: nothing here understands language.
- A scripted model (any name found in the loaded scripts) replays its script: the Nth assistant turn
  of a conversation gets the script's Nth step, a tool call (`{"tool": ..., "arguments": {...}}`) or a
  final answer (`{"say": "..."}`). It drives the real LLM-agent code (tool calling over MCP, budgets) and real CLI
  agents (Codex, Claude Code). For conversations, `{"turns": [[steps of the 1st turn], [steps of the 2nd], ...]}`
  (consecutive user messages are one turn). `${seed}` in an answer is the request's `seed`.
- A step's `tool` names the request's declared tool of that name, else the one named `..._NAME` after a `__`
  (Claude Code declares MCP tools as `mcp__SERVER__TOOL`; Codex declares them in a `namespace` named `mcp__SERVER`,
  and the call names that namespace), so one script drives every kind of agent.
- `fake-judge` grades rubric criteria: a criterion passes when every 'quoted' term in its description appears
  in the material it is given (case-insensitive), with a reason saying which terms it found or missed; its
  `score` (for rubric_partial) is the share of the terms found.
- `fake-garbage` answers text that is not JSON; `fake-judge-flaky` does so once, then judges;
  `fake-slow-N` waits N seconds first; `fake-small` (and `fake-small-*`) answers anything with "ok": the small
  model the CLI presets name, for the titles and chores CLIs send on the side.
- A script step may carry faults: `"delay": S` waits S seconds before answering; `"rate_limited": S` answers
  the first sight of a request with a 429 and `Retry-After: S` (the retry of the same request is served).
- The model `fake` serves everyone at once: the judge for a grading request (the last message is the
  JSON of `rubrics_verifier`, whoever sends it: the judge model or a judge agent), else the script named by
  the request's `user` (our LLM agents send their agent's name there).

It has the gateway's FastAPI shape (agent_env.http_app): the key is checked by a dependency, bodies are read
within 32 MiB (413) and measured at the door (400 past 64 levels) before they are parsed, and refusals come in
each API's own error shape. It serves no documents.

    agent-env models fake --port 8791 --scripts bundle/models/scripts.json
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, TypedDict

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agent_env import http_app
from agent_env.agents.fake_model_wire import (
    Message,
    ToolCall,
    Wire,
    anthropic_as_chat,
    anthropic_events,
    anthropic_reply,
    chat_chunks,
    chat_reply,
    responses_as_chat,
    responses_events,
    responses_reply,
    sse,
)
from agent_env.agents.fake_tokens import with_tokens
from agent_env.bundles import BUILTIN_ROOT
from agent_env.guard import HostGuard, bearer, tokens_equal

QUOTED = re.compile(r"(?<![A-Za-z])'([^']+)'(?![A-Za-z])")  # 'terms', not the apostrophe of "clerk's"
# Models named so (`fake-small`, `fake-small-haiku` ...) answer anything harmlessly: CLI agents may send titles,
# quota checks and small-model chores on the side, which no script plays.
SIDE_MODEL = "fake-small"
SIDE_ANSWER = "ok"
MAX_BODY_BYTES = 32 * 1024 * 1024  # as Anthropic's Messages API takes: a CLI agent's long context fits


class Step(TypedDict, total=False):
    """One step of a script: a tool call (`tool`, `arguments`) or a final answer (`say`), perhaps with faults."""

    tool: str
    arguments: Any
    say: str
    delay: float
    rate_limited: float


class Turns(TypedDict):
    turns: list[list[Step]]  # the steps of each user turn


Script = list[Step] | Turns
Scripts = dict[str, Script]


class Criterion(TypedDict):
    id: str
    description: str


class GradingRequest(TypedDict):
    """What a judge is asked (agent_env.steps.builtin.judging): criteria, and the material to grade."""

    criteria: list[Criterion]
    material: Any


class Verdict(TypedDict):
    id: str
    verdict: str
    score: float
    reason: str


class Verdicts(TypedDict):
    criteria: list[Verdict]


class Usage(TypedDict):
    """What one answer reported using (appended to `create_app`'s `usage_log`)."""

    model: str
    input_tokens: int
    output_tokens: int


Tools = dict[str, tuple[str, str | None]]  # a request's declared tools: full name -> (name to call, namespace)


def declared_tools(tools: list[Wire] | None) -> Tools:
    """A request's declared tools in any wire format (chat `function`, Responses `function` and Codex's `namespace`
    groups, Anthropic `tools`): full name -> (the name to call it by, its namespace or None). A namespaced tool's
    full name is `NAMESPACE__NAME`, as Codex names MCP tools (`mcp__SERVER__TOOL`)."""
    found: Tools = {}
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


def resolve_tool(wanted: str, tools: Tools) -> tuple[str, str | None]:
    """The declared tool a script step's `tool` means: the one of that name, else the one whose full name ends with
    `__NAME` (Claude Code declares MCP tools as `mcp__SERVER__TOOL`), else the name as written. So one script drives
    the LLM agent and any CLI agent alike."""
    if wanted in tools:
        return tools[wanted]
    suffixed = sorted(full for full in tools if full.endswith(f"__{wanted}"))
    return tools[suffixed[0]] if suffixed else (wanted, None)


def grading_request(messages: list[Message]) -> GradingRequest | None:
    """The judge's request in the first user message, if that is what it is."""
    users = [m for m in messages if m.get("role") == "user"]
    content = users[0].get("content") if users else None  # retries append a correction after it
    try:
        request = json.loads(content) if isinstance(content, str) else None
    except ValueError:
        return None
    if isinstance(request, dict) and {"criteria", "material"} <= request.keys():
        return GradingRequest(criteria=request["criteria"], material=request["material"])
    return None


def judge(request: GradingRequest) -> Verdicts:
    """Verdicts for the criteria listed in the judge's request (see agent_env.steps.builtin.judging)."""
    material = json.dumps(request.get("material"), ensure_ascii=False).lower()
    verdicts: list[Verdict] = []
    for criterion in request["criteria"]:
        terms = QUOTED.findall(criterion["description"])
        missing = [t for t in terms if t.lower() not in material]
        verdicts.append(
            {
                "id": criterion["id"],
                "verdict": "fail" if missing or not terms else "pass",
                "score": round((len(terms) - len(missing)) / len(terms), 6) if terms else 0.0,
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


def _position(script: Script, messages: list[Message]) -> tuple[int, int]:
    """Where a conversation is in a script. A flat list: the Nth assistant message gets step N. A
    `{"turns": [[...], ...]}` script: the Kth user turn starts turn K, whose steps are played in order."""
    if isinstance(script, list):
        return sum(1 for m in messages if m.get("role") == "assistant"), 0
    users = _turn_starts(messages)
    since = sum(1 for m in messages[users[-1] :] if m.get("role") == "assistant") if users else 0
    turn = max(len(users) - 1, 0)
    steps = script["turns"][min(turn, len(script["turns"]) - 1)]
    return turn, min(since, len(steps) - 1)


def _turn_starts(messages: list[Message]) -> list[int]:
    """Where user turns start: consecutive user messages are one turn (CLI agents send their context, e.g. Codex's
    environment, as a user message before the prompt), system and developer messages between them aside."""
    starts: list[int] = []
    previous = None
    for i, message in enumerate(messages):
        role = message.get("role")
        if role in ("system", "developer"):
            continue
        if role == "user" and previous != "user":
            starts.append(i)
        previous = role
    return starts


def _fault(step: Step, seen: set[str], raw: bytes) -> tuple[float, float]:
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


class FakeModel:
    """The server's state: the scripts it plays, its key, the requests a scripted 429 has refused once."""

    def __init__(
        self, scripts: Scripts, api_key: str | None, usage_log: list[Usage] | None, request_log: list[Wire] | None
    ) -> None:
        self.scripts = scripts
        self.api_key = api_key
        self.usage_log = usage_log
        self.request_log = request_log
        self.token_ids = True  # answers token ids and log-probs when asked (vLLM's fields), as vLLM does
        self.seen: set[str] = set()

    async def answer(
        self, model: str, messages: list[Message], user: str, seed: Any, raw: bytes, tools: Tools
    ) -> Message:
        """The assistant's chat-shaped message (or Refused: an unknown model, a scripted 429). `tools`: the
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
        script = self.scripts.get(user) if model == "fake" else self.scripts.get(model)
        if script is None and model.startswith(SIDE_MODEL):
            return {"role": "assistant", "content": SIDE_ANSWER}
        if script is None:
            raise http_app.Refused(404, f"model {model!r} not found (scripts: {', '.join(self.scripts)})")
        turn, at = _position(script, messages)
        step = (
            script[min(turn, len(script) - 1)]
            if isinstance(script, list)
            else script["turns"][min(turn, len(script["turns"]) - 1)][at]
        )
        delay, retry_after = _fault(step, self.seen, raw)
        if retry_after:
            raise http_app.Refused(429, "rate limited (scripted)", headers={"retry-after": f"{retry_after:g}"})
        await asyncio.sleep(delay)
        if "tool" in step:
            name, namespace = resolve_tool(step["tool"], tools)
            call: ToolCall = {
                "id": f"call_{len(messages)}",  # unique within a conversation
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(step.get("arguments", {}))},
            }
            if namespace:
                call["namespace"] = namespace
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"role": "assistant", "content": step["say"].replace("${seed}", str(seed))}

    def logged(self, body: Wire) -> None:
        """Keep a request's settings (all but the conversation and the tools): what a test checks reached it."""
        if self.request_log is not None:
            self.request_log.append(
                {k: v for k, v in body.items() if k not in ("messages", "input", "tools", "system")}
            )

    def counted(self, model: str, asked: Any, said: Message) -> tuple[int, int]:
        used = _tokens(asked), _tokens(said)
        if self.usage_log is not None:
            self.usage_log.append({"model": model, "input_tokens": used[0], "output_tokens": used[1]})
        return used


async def _fake(request: Request) -> FakeModel:  # async: a sync dependency costs a thread hop per request
    fake: FakeModel = request.app.state.fake
    return fake


FakeDep = Annotated[FakeModel, Depends(_fake)]


def _anthropic(request: Request) -> bool:
    return request.url.path.endswith("/messages")


async def keyed(request: Request, fake: FakeDep) -> None:
    """When the server has a key, requests carry it (as real endpoints require theirs)."""
    given = request.headers.get("x-api-key") or bearer(request.headers.get("authorization"))
    if fake.api_key is not None and not tokens_equal(given, fake.api_key):
        raise http_app.Refused(401, "invalid x-api-key" if _anthropic(request) else "invalid API key")


async def asked(request: Request) -> tuple[Wire, bytes]:
    """The request's JSON object and its bytes (a scripted 429 recognizes a retry by them)."""
    raw = await http_app.read_body(request, MAX_BODY_BYTES)
    body = http_app.parse_json(raw)
    if not isinstance(body, dict):
        raise http_app.Refused(400, "the body must be a JSON object")
    request.app.state.fake.logged(body)
    return body, raw


router = APIRouter(dependencies=[Depends(keyed)])


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def completions(request: Request, fake: FakeDep) -> Response:
    body, raw = await asked(request)
    model, messages = body.get("model", ""), body.get("messages", [])
    tools = declared_tools(body.get("tools"))
    said = await fake.answer(model, messages, body.get("user", ""), body.get("seed"), raw, tools)
    reply = chat_reply(model, said, fake.counted(model, messages, said))
    if fake.token_ids:
        reply = with_tokens(reply, body, messages, dict(said))
    if body.get("stream"):
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return sse(chat_chunks(reply, usage), done="[DONE]")
    return JSONResponse(reply)


@router.post("/v1/responses")
@router.post("/responses")
async def responses(request: Request, fake: FakeDep) -> Response:
    body, raw = await asked(request)
    model = body.get("model", "")
    messages = responses_as_chat(body)
    said = await fake.answer(model, messages, body.get("user", ""), None, raw, declared_tools(body.get("tools")))
    reply = responses_reply(model, said, fake.counted(model, body.get("input"), said))
    return sse(responses_events(reply)) if body.get("stream") else JSONResponse(reply)


@router.post("/v1/messages")
async def messages_api(request: Request, fake: FakeDep) -> Response:
    body, raw = await asked(request)
    model = body.get("model", "")
    messages = anthropic_as_chat(body)
    user = (body.get("metadata") or {}).get("user_id", "")
    said = await fake.answer(model, messages, user, None, raw, declared_tools(body.get("tools")))
    reply = anthropic_reply(model, said, fake.counted(model, body.get("messages"), said))
    return sse(anthropic_events(reply)) if body.get("stream") else JSONResponse(reply)


async def models(request: Request) -> JSONResponse:
    names = [*request.app.state.fake.scripts, "fake", "fake-judge", "fake-judge-flaky", "fake-garbage", SIDE_MODEL]
    return JSONResponse({"object": "list", "data": [{"id": n, "object": "model"} for n in names]})


ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}


async def _refused(request: Request, e: Exception) -> Response:
    """A refusal in the API's own error shape: Anthropic's typed error, else OpenAI's `{"error": {"message"}}`."""
    assert isinstance(e, http_app.Refused)
    if _anthropic(request):
        error = {"type": ANTHROPIC_ERRORS.get(e.status, "api_error"), "message": e.message}
        return JSONResponse({"type": "error", "error": error}, status_code=e.status, headers=e.headers)
    return JSONResponse({"error": {"message": e.message}}, status_code=e.status, headers=e.headers)


def create_app(
    scripts: Scripts,
    api_key: str | None = None,
    host_names: tuple[str, ...] = (),
    usage_log: list[Usage] | None = None,
    request_log: list[Wire] | None = None,
    token_ids: bool = True,
) -> HostGuard:
    """`api_key`: when given, requests must carry it (as real endpoints require theirs). Behind HostGuard:
    a web page the user visits cannot drive it (DNS rebinding, cross-site posts); `host_names`: names it
    answers for besides loopback names and IP literals. `usage_log`: each answer's reported usage is appended;
    `request_log`: each request's settings (its body but the conversation and tools). `token_ids`: a chat completion
    asking for them gets token ids and log-probs (agent_env.agents.fake_tokens); False: it does not, as a stock
    OpenAI-compatible server would not."""
    app = http_app.create("agent-env fake model", handlers={http_app.Refused: _refused})
    app.state.fake = FakeModel(scripts, api_key, usage_log, request_log)
    app.state.fake.token_ids = token_ids
    app.include_router(router)
    app.add_api_route("/v1/models", models, methods=["GET"])
    return HostGuard(names=host_names, app=app)


def load_scripts(paths: list[Path]) -> Scripts:
    scripts: Scripts = {}
    for path in paths:
        scripts.update(json.loads(path.read_text()))
    return scripts


def builtin_scripts() -> Scripts:
    """The scripts the built-in bundles ship (`models/fake.json`): their agents' parts, played back."""
    return load_scripts(sorted(BUILTIN_ROOT.glob("*/models/fake.json")))
