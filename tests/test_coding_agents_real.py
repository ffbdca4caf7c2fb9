"""Real command-line coding agents (from npm) as cli agents, solving the refund cookbook: the fake model scripts
their tool calls (agent_env/bundles/refund/models/fake.json), the CLIs call the desk's tools through the gateway
under their role token, a judge grades the result. Codex and Claude Code on the local provider; Codex in its
container (agentenv/cli-agents:bookworm, made by scripts/cli-agent-image) on the Docker tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_presets import cli_bin  # noqa: F401 - the pinned CLIs, installed from npm once
from test_docker import containers_of, docker_client  # noqa: F401 - the Docker tier's fixture

from agent_env.spec.agent import CLI_IMAGE
from agent_env.spec.run import RunStatus
from agent_env.stores import open_stores
from agent_env.temporal import launch

ROOT = Path(__file__).parent.parent


def on_this_machine(preset: str, cli_bin: Path, **change):  # noqa: F811
    """The refund-codex task with its agent as a local process: this Python runs the bridge, the cached CLI."""
    model = {"model": "refunds", "provider": "anthropic"} if preset == "claude_code" else None

    def local(steps):
        agent = steps["agent"].config
        record = {
            "name": f"refunds-{preset.replace('_', '-')}",
            "type": "cli",
            "role": "billing_lead",
            "config": {
                "preset": preset,
                "executable": str(cli_bin / ("claude" if preset == "claude_code" else "codex")),
                "model": model or {"model": "refunds", "provider": "openai", "api": "responses"},
                "turn_timeout": "2m",
                "sandbox": {"command": [sys.executable, "-m", "agent_env.agents.cli_agent"], "provider": "local"},
            },
        }
        agent.update({"agent": None, "record": record, **change})

    return local


async def run_refund(client, settings, change):
    from agent_env.task_lookup import resolve_target

    spec = resolve_target("refund", "refund-codex")
    change({s.id: s for s in spec.steps})
    return await launch.wait_result(await launch.start_run(client, settings, spec))


def tools_called(settings, work: dict) -> list[tuple[str, bool]]:
    transcript = json.loads(open_stores(settings).objects.get(work["transcript"]))
    return [(c["tool"], bool(c.get("refused"))) for c in transcript["tool_calls"]]


@pytest.mark.parametrize("preset", ["codex", "claude_code"])
async def test_a_real_cli_solves_the_refund_through_the_gateway(preset, client, settings, worker, cli_bin):  # noqa: F811
    state = await run_refund(client, settings, on_this_machine(preset, cli_bin))
    assert state.status is RunStatus.PASSED and state.score == 1, state.error or state.steps["grade"].score
    work = state.steps["work"].outputs
    assert [t for t, _ in tools_called(settings, work)] == [
        "get_ticket",
        "get_order",
        "verify_order",
        "issue_refund",
        "add_comment",
        "set_status",
    ], "every call went through the gateway, under the agent's name"
    assert work["refused"] == 0
    assert "refunded" in work["answer"].lower(), work["answer"]


async def test_a_real_cli_outside_its_role_cannot_refund(client, settings, worker, cli_bin):  # noqa: F811
    """As support, the gateway offers the CLI no verify_order or issue_refund (its role's tool list): the scripted
    calls never reach the desk, nothing is refunded, and the judge grades it down."""
    state = await run_refund(client, settings, on_this_machine("codex", cli_bin, role="support"))
    assert state.status is RunStatus.FAILED, state
    called = [tool for tool, _ in tools_called(settings, state.steps["work"].outputs)]
    assert "get_ticket" in called and not {"verify_order", "issue_refund"} & set(called), called
    verdicts = {c.name: c.passed for c in state.steps["grade"].score.criteria}
    assert verdicts["refund"] is False and verdicts["verified"] is False, state.steps["grade"].score


async def test_a_real_cli_takes_the_prompts_settings_and_the_step_says_which_it_could_not(
    client,
    settings,
    worker,
    cli_bin,  # noqa: F811
):
    """Codex gets the prompt's reasoning effort as its own option; it has none for a turn limit or a thinking
    budget, and prompt_agent's outputs say so rather than dropping them."""
    local = on_this_machine("codex", cli_bin)

    def change(steps):
        local(steps)
        steps["work"].config.update({"effort": "low", "max_turns": 30, "max_thinking_tokens": 4000})

    state = await run_refund(client, settings, change)
    assert state.status is RunStatus.PASSED, state.error
    assert state.steps["work"].outputs["settings_not_applied"] == {
        "max_turns": "Codex has no option for max_turns",
        "max_thinking_tokens": "Codex has no option for max_thinking_tokens",
    }


# -- Docker: the cookbook as written, in the CLI agents' image --


@pytest.fixture(scope="module")
def cli_image(docker_client, cli_bin):  # noqa: F811
    """agentenv/cli-agents:bookworm, built by its script once (the CLIs' binaries from the npm cache)."""
    made = subprocess.run(
        [str(ROOT / "scripts" / "cli-agent-image")],
        env={**os.environ, "PYTHON": sys.executable, "CLI_MODULES": str(cli_bin.parent.parent)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    return CLI_IMAGE


async def test_the_codex_cookbook_runs_in_its_container(client, settings, worker, cli_image, docker_client):  # noqa: F811
    state = await run_refund(client, settings, lambda steps: None)
    assert state.status is RunStatus.PASSED and state.score == 1, state.error or state.steps["grade"].score
    assert state.steps["agent"].outputs["sandbox"]["provider"] == "docker"
    assert len(tools_called(settings, state.steps["work"].outputs)) == 6
    assert containers_of(docker_client, state.run_id) == [], "the run's end removes the agent's container"
