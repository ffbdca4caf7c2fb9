"""Real CLI coding agents (Codex, Claude Code) run by their presets against the fake model server over HTTP and a
real MCP server that checks the role token: the scripted model makes the CLI call an MCP tool, then answers; a
second turn resumes the session. Also the fake's streaming, read by the official openai and anthropic SDKs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from conftest import free_port

from agent_env.agents.cli_presets import PRESETS, McpEndpoint, ModelEndpoint
from agent_env.agents.fake_model import create_app

KEY = "sk-cli-" + os.urandom(4).hex()
TOKEN = "role-" + os.urandom(8).hex()
PINNED = {"codex": "@openai/codex@0.171.0", "claude_code": "@anthropic-ai/claude-code@2.1.332"}
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentenv-tests" / "cli-agents"
SCRIPTS: dict[str, Any] = {
    "cli-lookup": [{"tool": "lookup", "arguments": {"order_id": "ORD-1001"}}, {"say": "ORD-1001 has shipped."}],
    "cli-chat": {
        "turns": [
            [{"tool": "lookup", "arguments": {"order_id": "ORD-7"}}, {"say": "ORD-7 has shipped."}],
            [{"say": "Second turn, same session."}],
        ]
    },
    "streamer": [{"tool": "get_time", "arguments": {"tz": "UTC"}}, {"say": "It is noon."}],
}


def serve_in_thread(app: Any) -> Iterator[str]:
    port = free_port()
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
def fake() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The fake model server (its base URL ends in /v1), with the models it answered, in order."""
    log: list[dict[str, Any]] = []
    yield from ((f"{base}/v1", log) for base in serve_in_thread(create_app(SCRIPTS, api_key=KEY, usage_log=log)))


class ToolServer:
    """A real MCP server (streamable HTTP) with one tool, refusing any request without the role token."""

    def __init__(self) -> None:
        from mcp.server import MCPServer

        self.calls: list[tuple[float, dict[str, Any]]] = []
        self.refused = 0
        mcp = MCPServer("orders")

        @mcp.tool()
        def lookup(order_id: str) -> str:
            """Look an order up by its id."""
            self.calls.append((time.monotonic(), {"order_id": order_id}))
            return f"{order_id}: shipped on 2026-11-30"

        self.mcp_app = mcp.streamable_http_app()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != f"Bearer {TOKEN}".encode():
            from starlette.responses import PlainTextResponse

            self.refused += 1
            return await PlainTextResponse("a role token is required", 401)(scope, receive, send)
        await self.mcp_app(scope, receive, send)


@pytest.fixture(scope="module")
def tools() -> Iterator[tuple[str, ToolServer]]:
    server = ToolServer()
    yield from ((f"{base}/mcp", server) for base in serve_in_thread(server))


def installed(pinned: str) -> bool:
    """Whether the cache holds the package at its pinned version (`@scope/name@version`)."""
    package, version = pinned.rsplit("@", 1)
    manifest = CACHE / "node_modules" / package / "package.json"
    return manifest.exists() and json.loads(manifest.read_text()).get("version") == version


@pytest.fixture(scope="session")
def cli_bin() -> Path:
    """The pinned CLIs, installed once into a cache folder by npm (about 30 s the first time)."""
    bin_dir = CACHE / "node_modules" / ".bin"
    if not all(installed(pinned) and (bin_dir / PRESETS[name].executable).exists() for name, pinned in PINNED.items()):
        if shutil.which("npm") is None:
            if os.environ.get("CI") == "true":
                pytest.fail("npm is required in CI to install the CLI agents")
            pytest.skip("needs npm (to install the Codex and Claude Code CLIs)")
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(CACHE), *PINNED.values()],
            check=True,
            capture_output=True,
            timeout=600,
        )
    return bin_dir


def run_turn(preset: str, cli_bin: Path, home: Path, prompt: str, model: str, base: str, mcp_url: str, resume: bool):
    """One turn as the bridge runs it: the preset's argv and env over a minimal environment, stdin closed."""
    workdir = home.parent / "work"
    workdir.mkdir(exist_ok=True)
    home.mkdir(exist_ok=True)
    invocation = PRESETS[preset].prepare(
        home=home,
        workdir=workdir,
        prompt=prompt,
        model=ModelEndpoint(base_url=base, model=model, api_key=KEY, small_model="fake-small"),
        mcp=McpEndpoint(url=mcp_url, token=TOKEN),
        resume=resume,
        executable=str(cli_bin / PRESETS[preset].executable),
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "NO_COLOR": "1", "CI": "1", **invocation.env}
    started = time.monotonic()
    done = subprocess.run(
        invocation.argv, env=env, cwd=workdir, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120
    )
    assert done.returncode == 0, f"{preset} failed: {done.stderr[-2000:]}"
    return PRESETS[preset].final_answer(done.stdout), started, time.monotonic()


@pytest.mark.processes
@pytest.mark.parametrize("preset", list(PINNED))
def test_a_cli_calls_the_mcp_tool_with_the_role_token_then_answers(preset, cli_bin, fake, tools, tmp_path):
    base, log = fake
    mcp_url, server = tools
    server.calls.clear()
    answered_before, refused_before = len(log), server.refused

    answer, started, ended = run_turn(
        preset, cli_bin, tmp_path / "home", "Where is ORD-1001?", "cli-lookup", base, mcp_url, False
    )

    assert [args for _, args in server.calls] == [{"order_id": "ORD-1001"}]
    assert server.refused == refused_before  # every MCP request carried the token
    assert answer == "ORD-1001 has shipped."
    assert [e["model"] for e in log[answered_before:]] == ["cli-lookup", "cli-lookup"]  # no side requests failed
    first_call = server.calls[0][0] - started
    print(f"{preset}: first tool call after {first_call:.2f} s, done after {ended - started:.2f} s")


@pytest.mark.processes
@pytest.mark.parametrize("preset", list(PINNED))
def test_a_second_turn_resumes_the_session(preset, cli_bin, fake, tools, tmp_path):
    """The fake plays turn 2 of the script only when the request carries turn 1's conversation."""
    base, _ = fake
    mcp_url, server = tools
    home = tmp_path / "home"
    first, _, _ = run_turn(preset, cli_bin, home, "Where is ORD-7?", "cli-chat", base, mcp_url, False)
    second, _, _ = run_turn(preset, cli_bin, home, "Thanks. Anything else?", "cli-chat", base, mcp_url, True)
    assert (first, second) == ("ORD-7 has shipped.", "Second turn, same session.")
    assert {"order_id": "ORD-7"} in [args for _, args in server.calls]


def test_the_tool_server_refuses_a_wrong_token(tools):
    import httpx

    mcp_url, server = tools
    refused = server.refused
    reply = httpx.post(mcp_url, json={}, headers={"authorization": "Bearer not-the-token"})
    assert (reply.status_code, server.refused) == (401, refused + 1)


# -- the fake's streaming, as the official SDKs read it --

TOOL = {"name": "get_time", "description": "the time now", "parameters": {"type": "object", "properties": {}}}


def test_openai_responses_streaming(fake):
    from openai import OpenAI

    base, _ = fake
    client = OpenAI(base_url=base, api_key=KEY)
    tool = {"type": "function", **TOOL}
    with client.responses.stream(model="streamer", input="What time is it?", tools=[tool]) as stream:
        kinds = [event.type for event in stream]
        called = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    call = called.output[0]
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "get_time", {"tz": "UTC"})
    history = [
        {"role": "user", "content": "What time is it?"},
        {"type": "function_call", "call_id": call.call_id, "name": "get_time", "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "12:00"},
    ]
    with client.responses.stream(model="streamer", input=history, tools=[tool]) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "It is noon."
    assert final.usage is not None and final.usage.output_tokens > 0


def test_openai_chat_streaming(fake):
    from openai import OpenAI

    base, _ = fake
    client = OpenAI(base_url=base, api_key=KEY)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What time is it?"}]
    tools = [{"type": "function", "function": TOOL}]
    with client.chat.completions.stream(model="streamer", messages=messages, tools=tools) as stream:
        called = stream.get_final_completion()
    call = called.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_time", {"tz": "UTC"})
    messages += [called.choices[0].message.model_dump(), {"role": "tool", "tool_call_id": call.id, "content": "12:00"}]
    chunks = list(
        client.chat.completions.create(
            model="streamer", messages=messages, stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "It is noon."
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_anthropic_streaming_and_a_tool_named_by_its_mcp_suffix(fake):
    """The script says `get_time`; the request declares it as Claude Code does, `mcp__SERVER__get_time`."""
    from anthropic import Anthropic

    base, _ = fake
    client = Anthropic(base_url=base.removesuffix("/v1"), api_key=KEY)
    tools = [{"name": "mcp__agentenv__get_time", "description": "the time now", "input_schema": TOOL["parameters"]}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What time is it?"}]
    with client.messages.stream(model="streamer", max_tokens=100, messages=messages, tools=tools) as stream:
        called = stream.get_final_message()
    use = called.content[0]
    assert (called.stop_reason, use.type, use.name, use.input) == (
        "tool_use",
        "tool_use",
        "mcp__agentenv__get_time",
        {"tz": "UTC"},
    )
    messages += [
        {"role": "assistant", "content": [use.model_dump()]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "12:00"}]},
    ]
    with client.messages.stream(model="streamer", max_tokens=100, messages=messages, tools=tools) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "It is noon." and final.stop_reason == "end_turn" and final.usage.output_tokens > 0


def test_a_responses_tool_in_a_namespace_is_called_in_it(fake):
    """Codex declares MCP tools in a `namespace` named `mcp__SERVER` and expects calls to name it."""
    import httpx

    base, _ = fake
    tools = [{"type": "namespace", "name": "mcp__agentenv", "tools": [{"type": "function", **TOOL}]}]
    reply = httpx.post(
        f"{base}/responses",
        json={"model": "streamer", "input": "What time is it?", "tools": tools},
        headers={"authorization": f"Bearer {KEY}"},
    ).json()
    call = reply["output"][0]
    assert (call["name"], call["namespace"]) == ("get_time", "mcp__agentenv")


def test_side_requests_get_a_harmless_answer(fake):
    """CLIs send titles and small-model chores no script plays; the small model the presets name answers them."""
    from anthropic import Anthropic

    base, _ = fake
    client = Anthropic(base_url=base.removesuffix("/v1"), api_key=KEY)
    said = client.messages.create(
        model="fake-small", max_tokens=50, messages=[{"role": "user", "content": "Title this conversation"}]
    )
    assert said.content[0].text == "ok"


# -- what each preset writes, without its binary --


def test_the_gemini_preset_configures_its_documented_settings(tmp_path):
    preset = PRESETS["gemini"]
    invocation = preset.prepare(
        home=tmp_path,
        workdir=tmp_path,
        prompt="hello",
        model=ModelEndpoint(base_url="http://127.0.0.1:9/v1beta", model="gemini-x", api_key="k"),
        mcp=McpEndpoint(url="http://127.0.0.1:8/mcp", token="t"),
        resume=True,
    )
    settings = json.loads((tmp_path / ".gemini" / "settings.json").read_text())
    assert settings["mcpServers"]["agentenv"] == {
        "httpUrl": "http://127.0.0.1:8/mcp",
        "trust": True,
        "headers": {"Authorization": "Bearer $AGENT_ENV_MCP_TOKEN"},
    }
    assert "t" not in json.dumps(settings["mcpServers"]["agentenv"]["headers"]).split()  # the token stays in env
    assert invocation.env["AGENT_ENV_MCP_TOKEN"] == "t" and invocation.env["GEMINI_API_KEY"] == "k"
    assert invocation.argv[-2:] == ["--prompt", "hello"] and "latest" in invocation.argv
    assert preset.final_answer('{\n "response": "hi there",\n "stats": {}\n}') == "hi there"


def test_secrets_stay_out_of_the_config_files(tmp_path):
    for name, preset in PRESETS.items():
        home = tmp_path / name
        home.mkdir()
        preset.prepare(
            home=home,
            workdir=tmp_path,
            prompt="p",
            model=ModelEndpoint(base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-secret-key"),
            mcp=McpEndpoint(url="http://127.0.0.1:8/mcp", token="role-secret-token"),
            resume=False,
        )
        written = "".join(p.read_text() for p in home.rglob("*") if p.is_file())
        assert written and "secret" not in written, name


def test_an_mcp_server_name_that_would_confuse_a_cli_is_refused():
    with pytest.raises(ValueError, match="letters, digits and '-'"):
        McpEndpoint(url="http://127.0.0.1:8/mcp", token=None, name="my_server")
