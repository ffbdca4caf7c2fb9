"""Token-exact trajectories: an OpenAI-compatible endpoint in front of the trainer's own inference server (vLLM, or
the fake model) that records, per model call of an episode, the exact prompt and completion token ids and the
log-probs the server returned, so a trainer trains on what was sampled and never on a re-tokenisation
(huggingface/trl#5224).

    agent-env models record --upstream http://127.0.0.1:8000/v1 --port 8799
    spec = EpisodeSpec.from_task("refund", recorded_agents=["refunds"], recorder="http://127.0.0.1:8799")
    episode = await spec.start()
    scores = await episode.result()
    trajectory = await episode.trajectory()   # taken from the recorder, which then forgets it

An agent calls `{recorder}/episodes/{KEY}/v1/chat/completions` as its model (an episode's key is its run id: an
identifier, not a credential, so it may sit in the run's plan). The call goes upstream with `logprobs: true` and
`return_token_ids: true` (vLLM's flags: `prompt_token_ids` and `choices[0].token_ids` come back) and never streamed;
an agent that asked for a stream gets the answer as chat chunks. An upstream that returns no token ids is refused
(502, naming the flag): nothing is ever re-tokenised here. What the agent did not ask for (token ids, log-probs) is
taken out of the answer it gets: strict clients choke on unknown fields, and token ids would make each answer grow
with the conversation.

Per episode the turns make segments, a trainer's sequences: a segment is a prompt's tokens (mask 0), the completion
(mask 1, with its log-probs), then, turn by turn, what the environment injected between turns (the next prompt past
the last prompt and completion: tool results, user messages; mask 0) and the next completion. A prompt that does not
extend any segment (the agent summarised or rewrote its history, or a second agent talks on the same key) starts a
new segment, which says why: nothing is stitched that the model did not see.

Bounded: at most MAX_EPISODES episodes recorded at once and MAX_TOKENS tokens in one; taking a trajectory forgets it
(and a late turn of a taken episode is refused, not kept).
"""

from __future__ import annotations

import collections
import threading
from typing import Annotated, Any

import httpx
import uvicorn
from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agent_env import http_app
from agent_env.agents.fake_model_wire import chat_chunks, sse
from agent_env.agents.wire import Wire
from agent_env.guard import HostGuard, bearer, tokens_equal
from agent_env.ports import listening_socket

MAX_BODY_BYTES = 32 * 1024 * 1024  # an agent's request (a long context fits)
MAX_UPSTREAM_BYTES = 64 * 1024 * 1024  # the upstream's answer, token ids and log-probs included
MAX_EPISODES = 256  # recorded at once; more are refused until trajectories are taken
MAX_TOKENS = 4_000_000  # recorded in one episode (every turn's prompt and completion ids)
TAKEN_REMEMBERED = 4096  # keys of taken trajectories, remembered (bounded) so a late turn is refused, not kept
KEY = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"
UPSTREAM_FLAGS = {"logprobs": True, "return_token_ids": True, "stream": False}
NO_TOKEN_IDS_FIX = (
    "serve the model with vLLM (0.10.2 or later), which answers `return_token_ids: true` with `prompt_token_ids` and "
    "`choices[].token_ids`; SGLang's OpenAI API returns no token ids: put a server that does in front of it"
)


class RecordedTurn(BaseModel):
    """One model call, as the upstream answered it."""

    prompt_token_ids: list[int] = Field(description="the prompt's tokens, as the upstream rendered them")
    completion_token_ids: list[int] = Field(description="the tokens it sampled")
    logprobs: list[float] = Field(description="each sampled token's log-probability, as the upstream returned it")
    model: str = ""
    finish_reason: str | None = None
    segment: int = Field(description="the segment (index into `segments`) this turn is part of")


class Segment(BaseModel):
    """A token sequence for training: `token_ids`, `mask` (1: sampled by the model, 0: prompt or injected by the
    environment) and `logprobs` (the sampled tokens' log-probs; 0.0 where the mask is 0), all of one length."""

    token_ids: list[int] = Field(default_factory=list)
    mask: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    turns: list[int] = Field(default_factory=list, description="the turns (indices into `turns`) it holds")
    why_new: str | None = Field(None, description="why it does not continue an earlier segment (None: the first)")


class Trajectory(BaseModel):
    """An episode's recorded model calls (`turns`) and the sequences they make (`segments`)."""

    key: str
    turns: list[RecordedTurn] = Field(default_factory=list)
    segments: list[Segment] = Field(default_factory=list)

    def add(self, prompt: list[int], completion: list[int], logprobs: list[float], model: str, finish: Any) -> None:
        """Record a turn: it continues the latest segment its prompt extends, else starts a new one."""
        index = len(self.turns)
        for at in range(len(self.segments) - 1, -1, -1):
            segment = self.segments[at]
            size = len(segment.token_ids)
            if len(prompt) >= size and prompt[:size] == segment.token_ids:
                injected = prompt[size:]
                break
        else:
            why = None
            if self.segments:
                why = (
                    f"turn {index}'s prompt does not extend any earlier prompt and completion (the agent rewrote "
                    "its history: summarised, truncated or re-rendered it, or another conversation shares the key)"
                )
            self.segments.append(Segment(why_new=why))
            at, segment, injected = len(self.segments) - 1, self.segments[-1], prompt
        segment.token_ids += [*injected, *completion]
        segment.mask += [0] * len(injected) + [1] * len(completion)
        segment.logprobs += [0.0] * len(injected) + logprobs
        segment.turns.append(index)
        finish_reason = finish if isinstance(finish, str) else None
        self.turns.append(
            RecordedTurn(
                prompt_token_ids=prompt,
                completion_token_ids=completion,
                logprobs=logprobs,
                model=model,
                finish_reason=finish_reason,
                segment=at,
            )
        )


class Recordings:
    """The episodes being recorded, bounded (module doc)."""

    def __init__(self, max_episodes: int = MAX_EPISODES, max_tokens: int = MAX_TOKENS) -> None:
        self.max_episodes, self.max_tokens = max_episodes, max_tokens
        self.open: dict[str, Trajectory] = {}
        self.sizes: dict[str, int] = {}
        self.taken: collections.deque[str] = collections.deque(maxlen=TAKEN_REMEMBERED)

    def record(self, key: str, prompt: list[int], completion: list[int], logprobs: list[float], reply: Wire) -> None:
        if key in self.taken:
            raise http_app.Refused(409, f"episode {key!r}'s trajectory was taken already: this turn is not recorded")
        if key not in self.open and len(self.open) >= self.max_episodes:
            raise http_app.Refused(
                503,
                f"{len(self.open)} episodes are being recorded, the most this recorder keeps at once",
                "take finished episodes' trajectories (episode.trajectory(), or POST /episodes/KEY/trajectory)",
            )
        size = self.sizes.get(key, 0) + len(prompt) + len(completion)
        if size > self.max_tokens:
            raise http_app.Refused(413, f"episode {key!r} recorded over {self.max_tokens} tokens: not recorded")
        trajectory = self.open.setdefault(key, Trajectory(key=key))
        self.sizes[key] = size
        choice = reply["choices"][0]
        trajectory.add(prompt, completion, logprobs, str(reply.get("model") or ""), choice.get("finish_reason"))

    def take(self, key: str) -> Trajectory:
        """The episode's trajectory (empty when its agents called no model), forgotten here."""
        self.taken.append(key)
        self.sizes.pop(key, None)
        return self.open.pop(key, None) or Trajectory(key=key)


class NoTokenIds(http_app.Refused):
    """The upstream answered without token ids or log-probs (502, error type `upstream_without_token_ids`)."""

    kind = "upstream_without_token_ids"

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(502, message, fix)


def _token_ids(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return value
    return None


def sampled(reply: Any) -> tuple[list[int], list[int], list[float]]:
    """The prompt's and the completion's token ids and the completion's log-probs in an upstream's chat completion
    (vLLM's fields), or a 502 saying what is missing."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise http_app.Refused(502, "the upstream model server's answer has no single choice: nothing to record")
    prompt, completion = _token_ids(reply.get("prompt_token_ids")), _token_ids(choices[0].get("token_ids"))
    if prompt is None or completion is None:
        raise NoTokenIds(
            "the upstream model server returned no token ids (`prompt_token_ids` and `choices[0].token_ids`, asked "
            "for with `return_token_ids: true`); the recorder never re-tokenises, so this turn is not recorded",
            NO_TOKEN_IDS_FIX,
        )
    content = (
        (choices[0].get("logprobs") or {}).get("content") if isinstance(choices[0].get("logprobs"), dict) else None
    )
    values = [e.get("logprob") for e in content] if isinstance(content, list) else None
    if values is None or len(values) != len(completion) or not all(isinstance(v, int | float) for v in values):
        raise NoTokenIds(
            "the upstream model server returned no log-prob for each sampled token (`choices[0].logprobs.content`, "
            f"asked for with `logprobs: true`: {len(completion)} tokens, "
            f"{'no' if values is None else len(values)} log-probs)",
            NO_TOKEN_IDS_FIX,
        )
    return prompt, completion, [float(v) for v in values]


class Recorder:
    """The server's state: where the upstream is, its key, the recordings."""

    def __init__(self, upstream: str, upstream_key: str | None, api_key: str | None, recordings: Recordings) -> None:
        self.upstream = upstream.rstrip("/")
        self.upstream_key, self.api_key, self.recordings = upstream_key, api_key, recordings
        self._http: httpx.AsyncClient | None = None

    def http(self) -> httpx.AsyncClient:
        if self._http is None:  # made on the server's loop, on first use
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0))
        return self._http

    async def ask(self, body: Wire) -> Wire:
        """The upstream's chat completion for `body`, asked with token ids and log-probs, not streamed."""
        sent = {k: v for k, v in body.items() if k != "stream_options"} | UPSTREAM_FLAGS
        headers = {"authorization": f"Bearer {self.upstream_key}"} if self.upstream_key else {}
        try:
            async with self.http().stream(
                "POST", f"{self.upstream}/chat/completions", json=sent, headers=headers
            ) as answer:
                raw = b""
                async for chunk in answer.aiter_bytes():
                    raw += chunk
                    if len(raw) > MAX_UPSTREAM_BYTES:
                        raise http_app.Refused(502, f"the upstream's answer is over {MAX_UPSTREAM_BYTES} bytes")
        except httpx.HTTPError as e:
            raise http_app.Refused(
                502, f"the upstream model server at {self.upstream} did not answer ({e!r})"
            ) from None
        try:
            reply = http_app.parse_json(raw)
        except http_app.Refused:
            reply = None
        if answer.status_code != 200:
            said = reply.get("error") if isinstance(reply, dict) else None
            message = said.get("message") if isinstance(said, dict) else said
            kept = {k: v for k, v in answer.headers.items() if k.lower() == "retry-after"}
            raise http_app.Refused(
                answer.status_code, f"the upstream model server said: {message or raw[:500]!r}", headers=kept
            )
        if not isinstance(reply, dict):
            raise http_app.Refused(502, "the upstream model server's answer is not a JSON object")
        return reply


async def _recorder(request: Request) -> Recorder:
    recorder: Recorder = request.app.state.recorder
    return recorder


RecorderDep = Annotated[Recorder, Depends(_recorder)]
EpisodeKey = Annotated[str, Path(pattern=KEY, description="the episode's key (its run id)")]


async def keyed(request: Request, recorder: RecorderDep) -> None:
    """When the recorder has a key, every request carries it (the agent's model key, the trainer's)."""
    if recorder.api_key is not None and not tokens_equal(
        bearer(request.headers.get("authorization")), recorder.api_key
    ):
        raise http_app.Refused(401, "invalid API key")


router = APIRouter(dependencies=[Depends(keyed)])


@router.post("/episodes/{key}/v1/chat/completions")
async def completions(key: EpisodeKey, request: Request, recorder: RecorderDep) -> Response:
    body = http_app.parse_json(await http_app.read_body(request, MAX_BODY_BYTES))
    if not isinstance(body, dict):
        raise http_app.Refused(400, "the body must be a JSON object")
    if body.get("n", 1) != 1:
        raise http_app.Refused(400, "n must be 1: a recorded turn is one sample", "ask for one choice at a time")
    reply = await recorder.ask(body)
    prompt, completion, logprobs = sampled(reply)
    recorder.recordings.record(key, prompt, completion, logprobs, reply)
    shown = {k: v for k, v in reply.items() if k != "prompt_token_ids" or body.get("return_token_ids")}
    choice = {
        k: v
        for k, v in reply["choices"][0].items()
        if (k != "token_ids" or body.get("return_token_ids")) and (k != "logprobs" or body.get("logprobs"))
    }
    shown["choices"] = [choice]
    if body.get("stream"):
        return sse(chat_chunks(shown, bool((body.get("stream_options") or {}).get("include_usage"))), done="[DONE]")
    return JSONResponse(shown)


@router.post("/episodes/{key}/trajectory")
async def take(key: EpisodeKey, recorder: RecorderDep) -> JSONResponse:
    """The episode's trajectory, forgotten here as it is handed over."""
    return JSONResponse(recorder.recordings.take(key).model_dump(mode="json"))


async def _refused(request: Request, e: Exception) -> Response:
    """A refusal in OpenAI's error shape (what an agent's SDK reads), with the fix when there is one."""
    assert isinstance(e, http_app.Refused)
    kind = getattr(e, "kind", "recorder_refused")
    error = {"message": e.message + (f" (fix: {e.fix})" if e.fix else ""), "type": kind}
    return JSONResponse({"error": error}, status_code=e.status, headers=e.headers)


def create_app(
    upstream: str,
    *,
    upstream_key: str | None = None,
    api_key: str | None = None,
    host_names: tuple[str, ...] = (),
    recordings: Recordings | None = None,
) -> HostGuard:
    """The recorder in front of `upstream` (an OpenAI-style base URL, ending in /v1). `upstream_key`: sent
    upstream (never the agent's). `api_key`: when given, requests must carry it. Behind HostGuard."""
    app = http_app.create("agent-env token recorder", handlers={http_app.Refused: _refused})
    app.state.recorder = Recorder(upstream, upstream_key, api_key, recordings or Recordings())
    app.include_router(router)
    return HostGuard(names=host_names, app=app)


class RecorderServer:
    """A recorder served from a thread of this process (a trainer's, a test's): `url`, `close()`."""

    def __init__(self, upstream: str, *, host: str = "127.0.0.1", port: int = 0, **options: Any) -> None:
        sock = listening_socket(host, port)
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        self.recordings: Recordings = options.setdefault("recordings", Recordings())
        self.app = create_app(upstream, **options)
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the token recorder did not start")
            threading.Event().wait(0.01)

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(5)
