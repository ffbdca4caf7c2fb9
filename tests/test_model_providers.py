"""Each model provider (OpenAI chat completions, OpenAI Responses, Anthropic Messages) through its official SDK
against the fake model server over real HTTP: tool use, a refused key, a 429 then success, a timeout, and the
tokens a run's calls used, summed per model."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
import uvicorn
from conftest import free_port

from agent_env.agents.fake_model import create_app
from agent_env.agents.models import ChatModel, ModelError
from agent_env.agents.usage import summed
from agent_env.config import ModelSettings

PROVIDERS = {
    "openai-chat": {"provider": "openai", "api": "chat"},
    "openai-responses": {"provider": "openai", "api": "responses"},
    "anthropic": {"provider": "anthropic"},
}
KEY = "sk-providers-" + "4f2a9c"
SCRIPTS: dict[str, Any] = {
    "clock-reader": [{"tool": "get_time", "arguments": {"tz": "UTC"}}, {"say": "It is noon."}],
    "busy": [{"say": "served after a 429", "rate_limited": 0.3}],
    "two-calls": [{"tool": "look_around", "arguments": {}}, {"say": "looked, and done"}],
}
GET_TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "the time now",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
    },
}

pytestmark = pytest.mark.parametrize("kind", list(PROVIDERS))


@contextlib.asynccontextmanager
async def serving(app):
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the fake model server did not start"
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        await task


@pytest.fixture
async def fake():
    """A fake model server of this test's own, with the usage it reported to each call."""
    log: list[dict[str, Any]] = []
    async with serving(create_app(SCRIPTS, api_key=KEY, usage_log=log)) as base:
        yield base, log


def endpoint(kind: str, base: str, model: str, **fields: Any) -> ModelSettings:
    return ModelSettings.model_validate(
        {"base_url": base, "model": model, "api_key": "secret:provider-test", **PROVIDERS[kind], **fields}
    )


def reported(log: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    return summed([{e["model"]: {"calls": 1, **{k: e[k] for k in ("input_tokens", "output_tokens")}}} for e in log])


async def test_a_tool_use_round_trip_and_its_usage(kind, fake):
    base, log = fake
    model = ChatModel(endpoint(kind, base, "clock-reader"), KEY)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You read clocks."},
        {"role": "user", "content": "What time is it?"},
    ]
    reply = await model.complete(messages, [GET_TIME], user="tester")
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("get_time", {"tz": "UTC"})]
    call = reply.tool_calls[0]
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call.id, "type": "function", "function": {"name": "get_time", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "12:00"},
    ]
    reply = await model.complete(messages, [GET_TIME], user="tester")
    assert (reply.content, reply.tool_calls) == ("It is noon.", [])
    assert len(log) == 2 and all(e["input_tokens"] > 0 and e["output_tokens"] > 0 for e in log)
    assert model.usage == reported(log)
    assert model.usage["clock-reader"]["calls"] == 2


async def test_a_refused_key_names_its_secret_and_never_the_key(kind, fake):
    base, _ = fake
    wrong = "sk-wrong-" + "77d1e0"
    model = ChatModel(endpoint(kind, base, "clock-reader"), wrong)
    with pytest.raises(ModelError, match=r"refused the API key secret:provider-test \(401") as caught:
        await model.complete([{"role": "user", "content": "hi"}])
    assert "agent-env secrets set provider-test" in str(caught.value)
    assert wrong not in str(caught.value) and KEY not in str(caught.value)


async def test_a_429_is_retried_by_the_sdk_after_retry_after(kind, fake):
    base, log = fake
    model = ChatModel(endpoint(kind, base, "busy"), KEY)
    started = time.perf_counter()
    reply = await model.complete([{"role": "user", "content": "hi"}])
    assert reply.content == "served after a 429"
    assert time.perf_counter() - started >= 0.3, "the SDK waited as Retry-After asked"
    assert len(log) == 1 and model.usage["busy"]["calls"] == 1, "the refused attempt is not a call that cost"
    impatient = ChatModel(endpoint(kind, base, "busy", max_retries=0), KEY)
    with pytest.raises(ModelError, match=r"rate limiting \(429.*after 0 retries"):
        await impatient.complete([{"role": "user", "content": "a new request"}])


async def test_a_slow_endpoint_times_out_with_a_clear_error(kind, fake):
    base, _ = fake
    model = ChatModel(endpoint(kind, base, "fake-slow-2", timeout=0.5, max_retries=0), KEY)
    started = time.perf_counter()
    with pytest.raises(ModelError, match=r"did not answer within 0.5s .*raise `timeout`"):
        await model.complete([{"role": "user", "content": "hi"}])
    assert time.perf_counter() - started < 3


async def test_a_runs_usage_is_the_sum_of_what_the_endpoint_reported(kind, run_task):
    """A hosted llm agent (in the gateway's process) makes two model calls in its turn; the step's outputs and
    the run's usage (what `runs show` prints) add up what the endpoint reported, per model."""
    from agent_env.cli.runs_cmd import run_usage
    from agent_env.spec.run import RunStatus

    log: list[dict[str, Any]] = []
    async with serving(create_app(SCRIPTS, usage_log=log)) as base:  # another origin: it gets no key
        model = {"base_url": base, "model": "two-calls", **PROVIDERS[kind]}
        record = {"name": "counter", "type": "llm", "config": {"model": model}}
        state = await _run_one_prompt(run_task, f"usage-{kind}", record)
    assert state.status is RunStatus.PASSED, state.error
    assert state.steps["ask"].outputs["answer"] == "looked, and done"
    assert len(log) == 2
    assert state.steps["ask"].outputs["usage"] == reported(log)
    assert run_usage(state) == reported(log) and run_usage(state)["two-calls"]["calls"] == 2


async def _run_one_prompt(run_task, task_id: str, record: dict[str, Any]):
    return await run_task(
        {
            "id": task_id,
            "steps": [
                {"id": "agent", "type": "deploy_agent", "config": {"record": record}},
                {
                    "id": "ask",
                    "type": "prompt_agent",
                    "depends_on": ["agent"],
                    "config": {"agent": "agent", "prompt": "look around", "turn_deadline": "30s"},
                },
            ],
        }
    )
