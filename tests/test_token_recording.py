"""Token-exact trajectories: the recorder (agent_env.episodes.recording) in front of the fake model records the token
ids and log-probs the upstream returned, never re-tokenised; an LLM agent in a real episode calls it as its model."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import httpx
import pytest
import uvicorn

from agent_env.agents.fake_model import builtin_scripts, create_app, load_scripts
from agent_env.episodes import EpisodeError, Episodes, EpisodeSpec
from agent_env.episodes.recording import RecorderServer, Recordings
from agent_env.errors import BadInput
from agent_env.ports import listening_socket
from agent_env.spec.run import RunStatus

SYSTEM = {"role": "system", "content": "You run tests."}
USER = {"role": "user", "content": "Check the time, please."}
TEST_SCRIPTS = Path(__file__).parent / "fake_scripts.json"
TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]


class Upstream:
    """The fake model in a thread, every chat completion it answered kept (what the recorder must match)."""

    def __init__(self, **options) -> None:
        self.answers: list[dict] = []
        app = create_app({**builtin_scripts(), **load_scripts([TEST_SCRIPTS])}, **options)

        async def teeing(scope, receive, send):
            chunks: list[bytes] = []

            async def kept(message):
                if message["type"] == "http.response.body":
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body") and scope["path"].endswith("/chat/completions"):
                        self.answers.append(json.loads(b"".join(chunks)))
                await send(message)

            await app(scope, receive, kept)

        sock = listening_socket("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        self.server = uvicorn.Server(uvicorn.Config(teeing, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        while not self.server.started:
            threading.Event().wait(0.01)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(5)


@pytest.fixture(scope="module")
def upstream():
    served = Upstream()
    yield served
    served.close()


@pytest.fixture
def recorder(upstream):
    served = RecorderServer(upstream.url, recordings=Recordings(max_episodes=4, max_tokens=5000))
    yield served
    served.close()


def chat(recorder, key: str, messages: list, **extra) -> httpx.Response:
    body = {"model": "fake", "user": "tester", "messages": messages, "tools": TOOLS, **extra}
    return httpx.post(f"{recorder.url}/episodes/{key}/v1/chat/completions", json=body, timeout=30)


def take(recorder, key: str) -> dict:
    answer = httpx.post(f"{recorder.url}/episodes/{key}/trajectory", timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_turn_records_the_upstreams_own_token_ids_and_logprobs(recorder, upstream):
    answer = chat(recorder, "ep-1", [SYSTEM, USER])
    assert answer.status_code == 200, answer.text
    said = answer.json()
    sent = upstream.answers[-1]  # what the fake answered the recorder
    assert said["choices"][0]["message"] == sent["choices"][0]["message"]
    assert "prompt_token_ids" not in said and "token_ids" not in said["choices"][0], "not asked: taken out"
    assert "logprobs" not in said["choices"][0]
    trajectory = take(recorder, "ep-1")
    (turn,) = trajectory["turns"]
    assert turn["prompt_token_ids"] == sent["prompt_token_ids"] and turn["prompt_token_ids"]
    assert turn["completion_token_ids"] == sent["choices"][0]["token_ids"] and turn["completion_token_ids"]
    assert turn["logprobs"] == [e["logprob"] for e in sent["choices"][0]["logprobs"]["content"]]
    assert all(v < 0 for v in turn["logprobs"]) and turn["finish_reason"] == "tool_calls"
    (segment,) = trajectory["segments"]
    assert segment["token_ids"] == sent["prompt_token_ids"] + sent["choices"][0]["token_ids"]
    assert segment["mask"] == [0] * len(sent["prompt_token_ids"]) + [1] * len(sent["choices"][0]["token_ids"])
    assert segment["why_new"] is None


def test_an_agent_that_asks_for_tokens_or_a_stream_gets_them(recorder, upstream):
    asked = chat(recorder, "ep-2", [SYSTEM, USER], return_token_ids=True, logprobs=True).json()
    assert asked["prompt_token_ids"] == upstream.answers[-1]["prompt_token_ids"]
    assert asked["choices"][0]["token_ids"] == upstream.answers[-1]["choices"][0]["token_ids"]
    streamed = chat(recorder, "ep-2", [SYSTEM, USER], stream=True)
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert "get_ticket" in streamed.text and streamed.text.rstrip().endswith("data: [DONE]")
    assert len(take(recorder, "ep-2")["turns"]) == 2


def test_turns_make_masked_segments_and_a_rewritten_history_a_new_one(recorder, upstream):
    first = chat(recorder, "ep-3", [SYSTEM, USER]).json()["choices"][0]["message"]
    a = upstream.answers[-1]
    tool = {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": '{"time": "09:30"}'}
    chat(recorder, "ep-3", [SYSTEM, USER, first, tool])
    b = upstream.answers[-1]
    summary = {"role": "user", "content": "Summary so far: the time was checked."}
    chat(recorder, "ep-3", [SYSTEM, summary])
    c = upstream.answers[-1]
    trajectory = take(recorder, "ep-3")
    assert [t["segment"] for t in trajectory["turns"]] == [0, 0, 1]
    one, two = trajectory["segments"]
    a_prompt, a_out, b_prompt, b_out = (
        a["prompt_token_ids"],
        a["choices"][0]["token_ids"],
        b["prompt_token_ids"],
        b["choices"][0]["token_ids"],
    )
    assert b_prompt[: len(a_prompt) + len(a_out)] == a_prompt + a_out, "the fake's template extends prompts"
    injected = b_prompt[len(a_prompt) + len(a_out) :]
    assert injected, "the tool result is in the second prompt"
    assert one["token_ids"] == a_prompt + a_out + injected + b_out == b_prompt + b_out
    assert one["mask"] == [0] * len(a_prompt) + [1] * len(a_out) + [0] * len(injected) + [1] * len(b_out)
    logprobs = [e["logprob"] for x in (a, b) for e in x["choices"][0]["logprobs"]["content"]]
    assert [v for v, m in zip(one["logprobs"], one["mask"], strict=True) if m] == logprobs
    assert set(v for v, m in zip(one["logprobs"], one["mask"], strict=True) if not m) == {0.0}
    assert one["turns"] == [0, 1] and two["turns"] == [2]
    assert two["token_ids"] == c["prompt_token_ids"] + c["choices"][0]["token_ids"]
    assert "does not extend" in two["why_new"]


def test_an_upstream_without_token_ids_is_refused_naming_the_flag():
    plain = Upstream(token_ids=False)
    recorder = RecorderServer(plain.url)
    try:
        answer = chat(recorder, "ep-4", [SYSTEM, USER])
        assert answer.status_code == 502 and answer.json()["error"]["type"] == "upstream_without_token_ids"
        message = answer.json()["error"]["message"]
        assert "return_token_ids" in message and "never re-tokenises" in message and "vLLM" in message
        assert plain.answers and "prompt_token_ids" not in plain.answers[-1]
        assert take(recorder, "ep-4")["turns"] == []
    finally:
        recorder.close()
        plain.close()


def test_bounds_host_and_keys_are_checked_at_the_door(recorder):
    url = f"{recorder.url}/episodes/ep-5/v1/chat/completions"
    body = {"model": "fake", "user": "tester", "messages": [USER]}
    assert httpx.post(url, json=body, headers={"host": "evil.example"}).status_code == 421
    assert httpx.post(url, json=body, headers={"origin": "https://evil.example"}).status_code == 403
    assert httpx.post(url, content=json.dumps(body), headers={"content-type": "text/plain"}).status_code == 415
    assert httpx.post(f"{recorder.url}/episodes/..%2Fx/v1/chat/completions", json=body).status_code in (400, 404)
    assert httpx.post(f"{recorder.url}/episodes/{'k' * 300}/v1/chat/completions", json=body).status_code == 400
    big = httpx.post(url, content=b"{" + b" " * (33 * 1024 * 1024) + b"}", headers={"content-type": "application/json"})
    assert big.status_code == 413
    assert chat(recorder, "ep-5", [USER], n=2).status_code == 400
    long = {"role": "user", "content": " ".join(["word"] * 3000)}  # over the 5000 tokens this recorder keeps
    refused = chat(recorder, "ep-5", [long, long])
    assert refused.status_code == 413 and "over 5000 tokens" in refused.json()["error"]["message"]
    for key in ("a", "b", "c", "d"):
        assert chat(recorder, key, [USER]).status_code == 200
    full = chat(recorder, "e", [USER])
    assert full.status_code == 503 and "take finished episodes" in full.json()["error"]["message"]


def test_the_upstreams_refusals_pass_through_and_a_keyed_recorder_wants_its_key(upstream):
    key = "rk-" + os.urandom(4).hex()
    recorder = RecorderServer(upstream.url, api_key=key)
    try:
        url = f"{recorder.url}/episodes/k/v1/chat/completions"
        body = {"model": "fake", "user": "tester", "messages": [USER]}
        assert httpx.post(url, json=body).status_code == 401
        assert httpx.post(f"{recorder.url}/episodes/k/trajectory").status_code == 401
        auth = {"authorization": f"Bearer {key}"}
        unknown = httpx.post(url, json={**body, "model": "no-such-model"}, headers=auth)
        assert unknown.status_code == 404 and "the upstream model server said" in unknown.json()["error"]["message"]
        assert httpx.post(url, json=body, headers=auth).status_code == 200
        taken = httpx.post(f"{recorder.url}/episodes/k/trajectory", headers=auth).json()
        assert len(taken["turns"]) == 1
    finally:
        recorder.close()


def test_nothing_is_kept_once_a_trajectory_is_taken(recorder):
    for key in ("x", "y"):
        assert chat(recorder, key, [SYSTEM, USER]).status_code == 200
    assert len(take(recorder, "x")["turns"]) == 1 and len(take(recorder, "y")["turns"]) == 1
    assert recorder.recordings.open == {} and recorder.recordings.sizes == {}
    late = chat(recorder, "x", [SYSTEM, USER])
    assert late.status_code == 409 and "taken already" in late.json()["error"]["message"]
    assert recorder.recordings.open == {}
    assert take(recorder, "x")["turns"] == [], "taken once: nothing more to hand over"


@pytest.fixture
async def episodes(client, settings, worker):
    yield Episodes(client, settings)


async def test_an_llm_agents_episode_carries_the_tokens_its_model_sampled(episodes):
    key = "sk-upstream-" + os.urandom(4).hex()  # the upstream's key: the recorder's to send, never the agent's
    keyed = Upstream(api_key=key)
    recorder = RecorderServer(keyed.url, upstream_key=key)
    try:
        spec = EpisodeSpec.from_task("refund", recorded_agents=["refunds"], recorder=recorder.url, seed=3)
        assert spec.trainer_agents == [] and spec.recorded_agents == {"refunds": "agent"}
        episode = await spec.start(episodes)
        scores = await episode.result()
        assert episode.state.status is RunStatus.PASSED and scores == {"grade": 1.0}, episode.state
        trajectory = await episode.trajectory()
        assert trajectory is episode.recorded and trajectory.key == episode.run_id
        sent = keyed.answers
        assert len(trajectory.turns) == len(sent) == 7, "six tool calls and the answer"
        for turn, answer in zip(trajectory.turns, sent, strict=True):
            assert turn.prompt_token_ids == answer["prompt_token_ids"]
            assert turn.completion_token_ids == answer["choices"][0]["token_ids"]
            assert turn.logprobs == [e["logprob"] for e in answer["choices"][0]["logprobs"]["content"]]
        (segment,) = trajectory.segments
        assert segment.turns == list(range(7))
        assert segment.token_ids == sent[-1]["prompt_token_ids"] + sent[-1]["choices"][0]["token_ids"]
        assert sum(segment.mask) == sum(len(a["choices"][0]["token_ids"]) for a in sent)
        assert recorder.recordings.open == {}, "the recorder forgot the finished episode"
    finally:
        recorder.close()
        keyed.close()


async def test_a_group_refuses_to_record(episodes):
    spec = EpisodeSpec.from_task("refund", recorded_agents=["refunds"], recorder="http://127.0.0.1:9")
    with pytest.raises(BadInput, match="a group does not record tokens"):
        await spec.start_group(2, episodes)


def test_recording_is_asked_for_properly(settings):
    spec = EpisodeSpec.from_task("refund", recorded_agents=["agent"], recorder="http://127.0.0.1:9/")
    (planned,) = [s for s in spec.planned(settings, "refund-run-1").steps if s.id == "agent"]
    endpoint = planned.config["models"]["agent"]
    assert endpoint["base_url"] == "http://127.0.0.1:9/episodes/refund-run-1/v1"
    assert endpoint["api_key"] is None and endpoint["withheld_key"] == "secret:test-model", "no key goes there"
    (other,) = [s for s in spec.planned(settings, "refund-run-2").steps if s.id == "agent"]
    assert other.config["models"]["agent"]["base_url"].endswith("/episodes/refund-run-2/v1"), "one plan, per run"
    with pytest.raises(BadInput, match="need the token recorder's URL"):
        EpisodeSpec.from_task("refund", recorded_agents=["refunds"])
    with pytest.raises(BadInput, match="both played by the trainer and recorded"):
        EpisodeSpec.from_task("refund", ["refunds"], recorded_agents=["refunds"], recorder="http://127.0.0.1:1")


async def test_an_episode_without_a_recorder_has_no_trajectory(episodes):
    with pytest.raises(EpisodeError, match="records no tokens"):
        await episodes.episode("no-such-run").trajectory()
