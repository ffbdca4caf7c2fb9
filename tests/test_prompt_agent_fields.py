"""The framework's prompt_agent fields at work, in real runs on the Temporal dev server: a prompt's model, model
params, effort, thinking budget and turn limit reach the model request of a hosted llm agent (a fake model server of
this test's, which logs each request); its `parts` reach an agent of ours as A2A file and data parts; prompts sharing a
`context_id` are one conversation; `output_format` is checked on the answer; `poll_interval_seconds` is taken."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette

from agent_env.agents.fake_model import create_app
from agent_env.agents.sdk import Agent, Turn, a2a_routes, advertised_url
from agent_env.ports import free_port
from agent_env.spec.run import RunStatus

ANSWER_SCHEMA = {
    "type": "json_schema",
    "schema": {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]},
}
SCRIPTS = {
    "tuned": [{"say": 'Worked it out. {"answer": 42}'}],
    "tuned-tools": [{"tool": "list_tickets", "arguments": {}}, {"say": "never reached"}],
}


def serve_in_thread(app: Any, port: int) -> Iterator[str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)


@pytest.fixture(scope="module")
def model_requests() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    log: list[dict[str, Any]] = []
    for base in serve_in_thread(create_app(SCRIPTS, request_log=log), free_port()):
        yield f"{base}/v1", log


class Mirror(Agent):
    """Answers with what its turn brought: the prompt, its attachments, its settings and what was said before."""

    name = "mirror"
    config_fields = ("system_prompt", "effort")  # its card lists these as taken through agent-config/v1

    async def answer(self, turn: Turn) -> str:
        said = [m["text"] for m in turn.conversation]
        return json.dumps({"prompt": turn.prompt, "attachments": turn.attachments, "settings": turn.settings,
                           "before": said, "config": turn.config})  # fmt: skip


@pytest.fixture(scope="module")
def mirror() -> Iterator[str]:
    port = free_port()
    routes, _ = a2a_routes(Mirror(), advertised_url("127.0.0.1", port, None), extensions=True)
    yield from serve_in_thread(Starlette(routes=routes), port)


def llm(model_url: str) -> dict[str, Any]:
    record = {"name": "tuner", "type": "llm", "config": {"model": {"base_url": model_url, "model": "fake"}}}
    return {"id": "a", "type": "deploy_agent", "config": {"record": record}}


async def test_a_prompts_model_settings_reach_the_model_request(run_task, model_requests):
    model_url, log = model_requests
    settings = {
        "model": "tuned",
        "model_params": {"temperature": 0.5, "top_p": 0.9},
        "effort": "low",
        "max_thinking_tokens": 2048,
        "output_format": ANSWER_SCHEMA,
        "poll_interval_seconds": 2,
    }
    state = await run_task(
        {
            "id": "tuned-prompt",
            "steps": [
                llm(model_url),
                {"id": "ask", "type": "prompt_agent", "depends_on": ["a"],
                 "config": {"agent": "a", "prompt": "What is six times seven?", **settings}},
                {"id": "capped", "type": "prompt_agent", "depends_on": ["ask"],
                 "config": {"agent": "a", "prompt": "Look at the tickets.", "model": "tuned-tools", "max_turns": 1,
                            "output_format": ANSWER_SCHEMA}},
            ],
        }
    )  # fmt: skip
    assert state.status is RunStatus.PASSED, state
    asked = [r for r in log if r["model"] == "tuned"]
    assert len(asked) == 1, log
    assert (asked[0]["temperature"], asked[0]["top_p"], asked[0]["reasoning_effort"]) == (0.5, 0.9, "low")
    assert asked[0]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert isinstance(asked[0]["thinking"]["budget_tokens"], int), "a whole number stays one on the way"
    out = state.steps["ask"].outputs
    assert out["structured_output"] == {"answer": 42} and out["output_matches_format"] is True
    # max_turns = 1: one model call, offered no tools; the tool call it still asks for is not made
    assert len([r for r in log if r["model"] == "tuned-tools"]) == 1
    capped = state.steps["capped"].outputs
    assert capped["tool_calls"] == 0 and capped["answer"] == ""
    assert capped["output_matches_format"] is False and capped["structured_output"] is None
    assert "no JSON object" in capped["output_format_problem"]


async def test_parts_go_as_a2a_parts_and_a_context_id_continues_the_conversation(run_task, mirror):
    parts = [
        {"kind": "text", "text": "Read the attached."},
        {"kind": "file", "file": {"uri": "https://example.com/report.pdf", "name": "report.pdf",
                                  "mimeType": "application/pdf"}},
        {"kind": "data", "data": {"ticket": "TCK-1004"}},
    ]  # fmt: skip
    agent = {"id": "m", "type": "deploy_agent", "config": {"record": {"name": "mirror", "type": "a2a",
                                                                         "config": {"url": mirror + "/"}}}}  # fmt: skip
    state = await run_task(
        {
            "id": "parts-and-context",
            "steps": [
                agent,
                {"id": "first", "type": "prompt_agent", "depends_on": ["m"],
                 "config": {"agent": "m", "parts": parts, "context_id": "thread", "effort": "high", "model": "m-1"}},
                {"id": "second", "type": "prompt_agent", "depends_on": ["first"],
                 "config": {"agent": "m", "prompt": "And then?", "context_id": "thread"}},
                {"id": "apart", "type": "prompt_agent", "depends_on": ["second"],
                 "config": {"agent": "m", "prompt": "Alone."}},
            ],
        }
    )  # fmt: skip
    assert state.status is RunStatus.PASSED, state
    first = json.loads(state.steps["first"].outputs["answer"])
    assert first["prompt"] == "Read the attached."
    assert first["attachments"] == parts[1:]
    assert first["settings"] == {"effort": "high", "model": "m-1"} and first["before"] == []
    # set through agent-config/v1 as well, as the framework does: only what its card lists (effort, not model)
    assert first["config"].get("effort") == "high" and "model" not in first["config"]
    assert state.steps["first"].outputs["configured"] == ["effort"]
    second = json.loads(state.steps["second"].outputs["answer"])
    assert second["before"] == ["Read the attached.", state.steps["first"].outputs["answer"]]
    assert second["attachments"] == [] and second["settings"] == {}
    assert json.loads(state.steps["apart"].outputs["answer"])["before"] == []


def test_parts_are_bounded_and_one_of_prompt_or_parts():
    from pydantic import ValidationError

    from agent_env.agents.conversation import PromptAgentConfig

    with pytest.raises(ValidationError, match="not both"):
        PromptAgentConfig.model_validate({"agent": "a", "prompt": "x", "parts": [{"kind": "text", "text": "x"}]})
    big = [{"kind": "file", "file": {"bytes": "A" * 300_000}}]
    with pytest.raises(ValidationError, match="give large files by `uri`"):
        PromptAgentConfig.model_validate({"agent": "a", "parts": big})
    with pytest.raises(ValidationError, match="one of `uri` or `bytes`"):
        PromptAgentConfig.model_validate({"agent": "a", "parts": [{"kind": "file", "file": {"name": "x"}}]})
    with pytest.raises(ValidationError, match="base64"):
        PromptAgentConfig.model_validate({"agent": "a", "parts": [{"kind": "file", "file": {"bytes": "!not base64"}}]})
    with pytest.raises(ValidationError, match="may not set"):
        PromptAgentConfig.model_validate({"agent": "a", "prompt": "x", "model_params": {"messages": []}})
