"""A prompt as a conversation: its config, who speaks next, what each side is shown, how it is scored on a timeout.

Two drivers hold prompts: the `prompt_agent` step (an activity, agents over A2A) and the task-run workflow
(a side played by a trainer, turn by turn in history). Both decide with these functions, so they must stay
deterministic and light: pydantic and spec models only (no HTTP client, no A2A, no gateway).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_env.spec.duration import Duration
from agent_env.spec.named_steps import FrameworkName
from agent_env.spec.predicates import TextTest
from agent_env.spec.run import Criterion, PlannedConfig, Score
from agent_env.spec.world_state import json_size


class _Config(BaseModel):
    """Like a step's config (agent_env.steps.StepConfig): unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


class StopWhen(_Config, TextTest):
    """Ends a conversation when either side's message contains (or matches) this, ignoring case."""

    field = "stop_when"


class Conversation(_Config):
    """Another agent plays the user (a customer, a colleague): it answers each of the agent's replies."""

    partner: str = Field(description="the deploy_agent step of who plays the user")
    max_turns: int = Field(6, ge=1, le=200, description="the agent's turns at most")
    stop_when: StopWhen | None = Field(None, description="end early when a message says this")
    partner_prompt: str = Field("", description="instructions for the partner (its system prompt)")


_HOW_IT_RUNS = "how the agent works (model, harness, its tools, its turns) is its agent.toml's, not the prompt's"
_PARTNER = "an agent that plays the user is a `conversation` here: {partner: a deploy_agent step, max_turns}"


class PromptAgentConfig(_Config):
    # The framework's fields (agent_env.planning.framework_fields; as agent_env.steps.StepConfig declares them)
    framework_names: ClassVar[Mapping[str, tuple[str, FrameworkName]]] = {
        "agent_name": ("agent", "agent_step"),
        "timeout_seconds": ("turn_deadline", "same"),
    }
    refused_fields: ClassVar[Mapping[str, str]] = {
        "parts": "a prompt here is text: write it in `prompt`",
        **dict.fromkeys(
            ("model", "model_params", "max_turns", "max_thinking_tokens", "effort", "harness", "output_format"),
            _HOW_IT_RUNS,
        ),
        "agentenv_tools": _HOW_IT_RUNS,
        "context_id": "each prompt_agent step is a conversation of its own (deploy_agent restores one from a snapshot)",
        "live_trajectory": "the gateway records the trajectory as the calls happen, always",
        "poll_interval_seconds": "the step waits on the agent's answer over A2A; there is no polling to tune",
        "snapshot_config": "snapshot the agent after the prompt with a snapshot_agent_state step",
        "trajectory_output_prefix": "the run keeps transcripts and trajectories in its own folder of the object store",
        **dict.fromkeys(
            (
                "max_conversation_turns",
                "user_agent_name",
                "user_a2a_url",
                "user_agent_timeout_seconds",
                "user_output_format",
                "user_model",
            ),
            _PARTNER,
        ),
    }

    agent: str = Field(description="the deploy_agent step of the agent to prompt")
    prompt_id: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.\-]{1,128}$", description="what verifiers name this prompt by (default: its id)"
    )
    prompt: str = Field(min_length=1, description="the task (or, in a conversation, the partner's first message)")
    system_prompt: str | None = Field(None, description="default: the agent's own")
    conversation: Conversation | None = None
    turn_deadline: Duration = Field(timedelta(minutes=5), description="how long one answer may take")
    on_timeout: Literal["fail", "score_zero"] = Field(
        "fail", description="when an answer misses its deadline: fail the step, or record a score of 0"
    )
    deployed: dict[str, Any] = Field(default_factory=dict, description="filled in when the run is planned")
    partner_deployed: dict[str, Any] = Field(default_factory=dict, description="filled in when the run is planned")
    seed: int | None = Field(None, description="filled in when the run is planned (the run's seed, for agents)")


def played_by_trainer(config: PlannedConfig) -> bool:
    """Whether a trainer plays a side of this (resolved) prompt config: then the run holds the conversation."""
    sides = (config.get("deployed"), config.get("partner_deployed"))
    return any(isinstance(who, dict) and who.get("trainer") for who in sides)


def opening(config: PromptAgentConfig) -> dict[str, Any]:
    """The first message: the task, or in a conversation, the partner's opening line."""
    if config.conversation:
        return {"side": "partner", "speaker": config.partner_deployed.get("name", "partner"), "text": config.prompt}
    return {"side": "user", "speaker": "run", "text": config.prompt}


def agent_turns(transcript: list[dict[str, Any]]) -> int:
    return sum(1 for m in transcript if m["side"] == "agent")


def next_side(config: PromptAgentConfig, transcript: list[dict[str, Any]]) -> str | None:
    """Who speaks next ("agent" or "partner"), or None when the prompt is over."""
    last = transcript[-1]
    conversation = config.conversation
    if last["side"] != "agent":
        if len(transcript) > 1 and conversation and conversation.stop_when and conversation.stop_when.hit(last["text"]):
            return None
        return "agent"
    if conversation is None or agent_turns(transcript) >= conversation.max_turns:
        return None
    if conversation.stop_when and conversation.stop_when.hit(last["text"]):
        return None
    return "partner"


def system_prompt_for(config: PromptAgentConfig, side: str) -> str | None:
    if side == "agent":
        return config.system_prompt
    return (config.conversation.partner_prompt or None) if config.conversation else None


def conversation_view(transcript: list[dict[str, Any]], side: str) -> list[dict[str, str]]:
    """What was said before the last message (the one being answered), from `side`'s point of view."""
    return [{"from": ("agent" if m["side"] == side else "user"), "text": m["text"]} for m in transcript[:-1]]


def turn_number(transcript: list[dict[str, Any]], side: str) -> int:
    """How many times `side` has answered in this prompt: its turn's index."""
    return sum(1 for m in transcript if m["side"] == side and "seconds" in m)


def tail(transcript: list[dict[str, Any]], max_bytes: int) -> list[dict[str, Any]]:
    """The latest entries whose JSON fits in `max_bytes` (the last one always): what an agent asked by the
    run is sent, instead of the whole conversation on every turn."""
    out: list[dict[str, Any]] = []
    used = 0
    for entry in reversed(transcript):
        size = json_size(entry)
        if out and used + size > max_bytes:
            break
        out.append(entry)
        used += size
    return out[::-1]


def timeout_score(timed_out: str | None) -> Score | None:
    """A prompt whose answer missed its deadline scores 0 (with `on_timeout = "fail"` the step fails instead)."""
    if not timed_out:
        return None
    return Score(value=0.0, criteria=[Criterion(name="answered in time", passed=False, detail=timed_out)])
