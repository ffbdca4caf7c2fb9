"""A prompt's settings (model, effort, max_turns, max_thinking_tokens...) reach a cli agent's CLI as that CLI's own
options, or are reported as not applied; a deploy step's env_vars reach the CLI, the bridge's other variables do not.
The real pinned CLIs run against the fake model through the bridge (CliAgent.answer) where npm has them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_cli_presets import KEY, SCRIPTS, TOKEN, cli_bin, serve_in_thread, tools  # noqa: F401 - fixtures

from agent_env.agents import cli_agent
from agent_env.agents.cli_agent import CliAgent
from agent_env.agents.cli_presets import PRESETS, ModelEndpoint
from agent_env.agents.cli_settings import options_for
from agent_env.agents.fake_model import create_app
from agent_env.agents.sdk import Turn
from agent_env.spec.agent import AgentSandbox
from agent_env.steps.builtin.agent_deploy_fields import PASS_ENV, FrameworkDeployFields, sandbox_for

BUDGETED = "claude-sonnet-4-5-20250929"  # a model Claude Code gives a thinking budget (newer ones think adaptively)
ALL = {"model": "m2", "effort": "high", "max_turns": 3, "max_thinking_tokens": 2048, "model_params": {"top_k": 5}}


def test_claude_code_takes_effort_max_turns_and_thinking_tokens():
    options = options_for("claude_code", ALL)
    assert options.argv == ["--effort", "high", "--max-turns", "3"]
    assert options.env == {"MAX_THINKING_TOKENS": "2048"}
    assert options.not_applied == {"model_params": "Claude Code has no option for model_params"}


def test_codex_takes_the_effort_and_reports_what_it_has_no_option_for():
    options = options_for("codex", ALL)
    assert options.argv == ["-c", 'model_reasoning_effort="high"']
    assert set(options.not_applied) == {"max_turns", "max_thinking_tokens", "model_params"}
    assert "Codex has no option for max_turns" in options.not_applied["max_turns"]


def test_an_effort_the_cli_does_not_know_is_reported_not_passed():
    assert options_for("codex", {"effort": "max"}).not_applied["effort"].startswith("Codex's model_reasoning_effort")
    claude = options_for("claude_code", {"effort": "minimal"})
    assert claude.argv == [] and "low, medium, high, xhigh, max" in claude.not_applied["effort"]


def test_gemini_maps_only_the_model_and_a_command_gets_the_settings_as_json():
    assert set(options_for("gemini", ALL).not_applied) == {"effort", "max_turns", "max_thinking_tokens", "model_params"}
    command = options_for(None, ALL)
    assert json.loads(command.env["AGENT_ENV_SETTINGS"]) == ALL and not command.not_applied
    assert options_for("codex", {}).argv == [] and options_for(None, {}).env == {}


@pytest.mark.parametrize("preset", ["codex", "claude_code", "gemini"])
@pytest.mark.parametrize("resume", [False, True])
def test_the_options_come_before_the_prompt(preset, resume, tmp_path):
    invocation = PRESETS[preset].prepare(
        home=tmp_path,
        workdir=tmp_path,
        prompt="--effort low",
        model=ModelEndpoint(base_url="http://127.0.0.1:9/v1", model="m", api_key=None),
        mcp=None,
        resume=resume,
        options=["--x", "1"],
    )
    argv = invocation.argv
    assert argv[-1] == "--effort low" and argv.index("--x") < len(argv) - 2
    if preset == "codex":
        assert argv[1] == "exec" and (not resume or argv.index("--x") < argv.index("resume"))


def test_the_step_env_vars_reach_the_cli_and_nothing_else_does(tmp_path, monkeypatch):
    box = AgentSandbox(command=["python3"], env={"RECORD_VAR": "r"})
    fields = FrameworkDeployFields.model_validate({"env_vars": {"MY_FLAG": "on", "OTHER": "2"}})
    sized, _ = sandbox_for(box, fields, "local", None)  # type: ignore[arg-type]
    assert sized.env[PASS_ENV] == "MY_FLAG,OTHER"
    for name, value in {**sized.env, "WORKER_SECRET": "s3cret", "AGENT_ENV_TOKEN": "t", "MCP_PORT": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(PASS_ENV, "MY_FLAG,OTHER,AGENT_ENV_TOKEN,HOME,PORT,MCP_PORT")  # names the bridge never passes on
    env = cli_agent._base_env(tmp_path)
    assert env["MY_FLAG"] == "on" and env["OTHER"] == "2" and env["HOME"] == str(tmp_path)
    assert not {"RECORD_VAR", "WORKER_SECRET", "AGENT_ENV_TOKEN", PASS_ENV, "PORT", "MCP_PORT"} & set(env)


@pytest.fixture(scope="module")
def fake_requests():
    """The fake model, keeping each request's settings (model, reasoning, thinking...) as it got them."""
    requests: list[dict[str, Any]] = []
    scripts = {**SCRIPTS, BUDGETED: SCRIPTS["cli-lookup"]}
    yield from (
        (f"{base}/v1", requests) for base in serve_in_thread(create_app(scripts, api_key=KEY, request_log=requests))
    )


async def ask_through_the_bridge(preset: str, cli_bin: Path, base: str, mcp_url: str, settings: dict, root: Path):  # noqa: F811
    (root / "homes").mkdir()
    agent = CliAgent(root / "homes")
    agent.workdir = root
    config = {
        "preset": preset,
        "executable": str(cli_bin / PRESETS[preset].executable),
        "model": {"base_url": base, "model": "not-this-one", "api_key": KEY},
        "turn_timeout_s": 120,
    }
    turn = Turn("Where is ORD-1001?", mcp_url=mcp_url, token=TOKEN, config=config, settings=settings, context_id="c")
    return await agent.answer(turn)


@pytest.mark.processes
async def test_claude_code_answers_with_the_prompts_model_and_effort(cli_bin, fake_requests, tools, tmp_path):  # noqa: F811
    base, requests = fake_requests
    mcp_url, _ = tools
    settings = {"model": "cli-lookup", "effort": "high", "max_turns": 5, "model_params": {"top_k": 3}}
    before = len(requests)
    answer = await ask_through_the_bridge("claude_code", cli_bin, base, mcp_url, settings, tmp_path)
    assert not answer.failed and answer.text == "ORD-1001 has shipped.", answer.text
    asked = requests[before:]
    assert asked and all(r["model"] == "cli-lookup" for r in asked), asked  # not the endpoint's own model
    assert all(r["output_config"]["effort"] == "high" for r in asked), asked
    assert answer.data == {"settings_not_applied": {"model_params": "Claude Code has no option for model_params"}}


@pytest.mark.processes
async def test_claude_code_thinks_within_the_prompts_budget(cli_bin, fake_requests, tools, tmp_path):  # noqa: F811
    base, requests = fake_requests
    mcp_url, _ = tools
    before = len(requests)
    settings = {"model": BUDGETED, "max_thinking_tokens": 2048}
    answer = await ask_through_the_bridge("claude_code", cli_bin, base, mcp_url, settings, tmp_path)
    assert answer.text == "ORD-1001 has shipped." and not answer.data, answer
    assert [r["thinking"].get("budget_tokens") for r in requests[before:]] == [2048, 2048]


@pytest.mark.processes
async def test_claude_code_stops_at_its_max_turns(cli_bin, fake_requests, tools, tmp_path):  # noqa: F811
    """One model call allowed: the CLI stops after the tool call it asked for, before the scripted answer, and the
    turn fails saying so (Claude Code exits 1 there, with no answer)."""
    base, requests = fake_requests
    mcp_url, _ = tools
    before = len(requests)
    settings = {"model": "cli-lookup", "max_turns": 1}
    answer = await ask_through_the_bridge("claude_code", cli_bin, base, mcp_url, settings, tmp_path)
    assert answer.failed and answer.text.endswith("Reached maximum number of turns (1)"), answer
    assert len(requests) - before == 1


@pytest.mark.processes
async def test_codex_sends_the_prompts_model_and_effort(cli_bin, fake_requests, tools, tmp_path):  # noqa: F811
    base, requests = fake_requests
    mcp_url, _ = tools
    before = len(requests)
    settings = {"model": "cli-lookup", "effort": "low", "max_turns": 4}
    answer = await ask_through_the_bridge("codex", cli_bin, base, mcp_url, settings, tmp_path)
    assert not answer.failed and answer.text == "ORD-1001 has shipped.", answer.text
    asked = [r for r in requests[before:] if r["model"] != "fake-small"]
    assert asked and all(r["model"] == "cli-lookup" for r in asked), asked
    assert all((r.get("reasoning") or {}).get("effort") == "low" for r in asked), asked
    assert answer.data == {"settings_not_applied": {"max_turns": "Codex has no option for max_turns"}}
