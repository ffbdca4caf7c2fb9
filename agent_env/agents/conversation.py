"""A prompt as a conversation: its config, who speaks next, what each side is shown, how it is scored on a timeout.

Two drivers hold prompts: the `prompt_agent` step (an activity, agents over A2A) and the task-run workflow
(a side played by a trainer, turn by turn in history). Both decide with these functions, so they must stay
deterministic and light: pydantic and spec models only (no HTTP client, no A2A, no gateway).
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

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


URL_PARTNER = "user"  # what a partner at a URL (the framework's user_a2a_url) goes by in a transcript
MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,199}$"
# What the framework asks a user simulator for when the task names no format: its line, and whether it is satisfied.
USER_REPLY_FORMAT: dict[str, object] = {
    "type": "json_schema",
    "schema": {
        "type": "object",
        "properties": {"message": {"type": "string"}, "done": {"type": "boolean"}},
        "required": ["message", "done"],
    },
}


def a2a_url(url: str) -> str:
    """An agent's A2A URL a task names: http(s), with no credentials in it (the URL is in the run's history, and
    no credential of ours is sent to an agent the task did not deploy)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url[:200]!r} is not an http(s) URL of an A2A agent")
    if parts.username or parts.password or parts.fragment:
        raise ValueError("the URL may not hold credentials or a fragment: they would enter the run's history")
    return url


class Conversation(_Config):
    """Another agent plays the user (a customer, a colleague): it answers each of the agent's replies."""

    partner: str | None = Field(None, description="the deploy_agent step of who plays the user")
    partner_url: str | None = Field(
        None, max_length=2048, description="or the A2A URL of an agent the task did not deploy (it gets no credential)"
    )
    max_turns: int = Field(6, ge=1, le=200, description="the agent's turns at most")
    stop_when: StopWhen | None = Field(None, description="end early when a message says this")
    partner_prompt: str = Field("", description="instructions for the partner (its system prompt)")
    partner_deadline: Duration | None = Field(
        None,
        description="how long the partner may take; one that misses it ends the conversation (default: "
        "turn_deadline, and on_timeout applies)",
    )
    partner_model: str | None = Field(None, pattern=MODEL_NAME, description="the partner's model in this conversation")
    partner_output_format: dict[str, object] | None = Field(
        None, description="asks the partner for a JSON object: its `message` is what it says, `done: true` ends"
    )

    @field_validator("partner_url")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        return url if url is None else a2a_url(url)

    @model_validator(mode="after")
    def _one_partner(self) -> Conversation:
        if (self.partner is None) == (self.partner_url is None):
            raise ValueError("name who plays the user: `partner` (a deploy_agent step) or `partner_url`, one of them")
        return self


class PromptSnapshots(_Config):
    """The framework's snapshot_config: the prompted agent's state saved (snapshot/v1) while the prompt runs."""

    at_end: bool = Field(True, description="when the prompt ends")
    per_turn: bool = Field(False, description="after each of the agent's turns that the user answers")
    max_snapshots: int = Field(24, ge=1, le=200, description="the per-turn ones at most")
    timeout_seconds: float = Field(300, gt=0, le=3600, description="how long the agent may take to save")
    interval_seconds: float | None = Field(None, description="refused: not on a timer, per turn instead")
    env_id: str | None = Field(None, description="refused: snapshot an env with a snapshot_env step")

    @model_validator(mode="after")
    def _captures(self) -> PromptSnapshots:
        if self.interval_seconds:
            raise ValueError("snapshots on a timer (interval_seconds) are not taken here: set per_turn instead")
        if self.env_id is not None:
            raise ValueError("env_id: an environment's state is saved by a snapshot_env step, not by the prompt")
        if not (self.at_end or self.per_turn):
            raise ValueError("with at_end false and per_turn false no snapshot is ever taken")
        return self


class FrameworkUser(_Config):
    """The framework's user-simulator fields, taken as a `conversation` (one mechanism; `as_conversation`)."""

    user_agent: str | None = Field(None, description="the framework's user_agent_name: conversation.partner")
    user_a2a_url: str | None = Field(None, max_length=2048, description="conversation.partner_url")

    @field_validator("user_a2a_url")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        return url if url is None else a2a_url(url)

    @field_validator("trajectory_output_prefix")
    @classmethod
    def _within(cls, prefix: str | None) -> str | None:
        if prefix is not None and {".", ".."} & set(prefix.split("/")):
            raise ValueError("a folder of the run's: no '.' or '..' in it")
        return prefix

    max_conversation_turns: int | None = Field(None, ge=1, le=200, description="conversation.max_turns (default 1)")
    user_agent_timeout_seconds: float | None = Field(None, gt=0, le=86_400, description="conversation.partner_deadline")
    user_model: str | None = Field(None, pattern=MODEL_NAME, description="conversation.partner_model")
    user_output_format: dict[str, object] | None = Field(None, description="conversation.partner_output_format")
    snapshot_config: PromptSnapshots | None = Field(None, description="save the agent's state as the prompt runs")
    live_trajectory: bool = Field(False, description="taken: the run records each call as it happens, always")
    trajectory_output_prefix: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/?$",
        description="also keep the transcript (the agents' trajectories in it) under this folder of the run's",
    )

    def as_conversation(self, given: Conversation | None) -> Conversation | None:
        """The conversation the framework's fields describe (the given one when they describe none)."""
        if self.user_agent is None and self.user_a2a_url is None:
            if (self.max_conversation_turns or 1) > 1:
                raise ValueError("max_conversation_turns > 1 needs who plays the user: user_agent_name or user_a2a_url")
            return given
        if self.user_agent is not None and self.user_a2a_url is not None:
            raise ValueError("give user_agent_name or user_a2a_url, not both")
        fields = {
            "partner": self.user_agent,
            "partner_url": self.user_a2a_url,
            "max_turns": self.max_conversation_turns or 1,
            "partner_deadline": self.user_agent_timeout_seconds,
            "partner_model": self.user_model,
            # a simulator the task deployed is asked for the framework's reply format; a URL's agent as it is
            "partner_output_format": self.user_output_format or (USER_REPLY_FORMAT if self.user_agent else None),
        }
        made = Conversation.model_validate({k: v for k, v in fields.items() if v is not None})
        if given is not None and given != made:
            raise ValueError("give `conversation` or the framework's user_* fields, not both")
        return made


# litellm's call arguments the framework sets itself (its ModelParam): a prompt's model_params may not set them
RESERVED_MODEL_PARAMS = frozenset(
    ("model", "messages", "api_key", "api_base", "user", "metadata", "timeout", "response_format")
)


class OutputFormat(_Config):
    """The answer's shape: one JSON object matching `schema` (the framework's `{"type": "json_schema", ...}`)."""

    type: Literal["json_schema"] = "json_schema"
    schema_: dict[str, JsonValue] = Field(
        alias="schema", description="a JSON Schema the answer's JSON object must match"
    )


class PromptSettings(_Config):
    """How the agent works on this prompt, sent with each of its turns (the `settings` of its `agentenv` data
    part); agent-env's built-in agents follow them, an agent of yours may. Unset: the agent's own."""

    model: str | None = Field(None, max_length=200, description="the model to answer with")
    model_params: dict[str, JsonValue] | None = Field(None, description="the model call's parameters, e.g. temperature")
    effort: str | None = Field(None, pattern=r"^[a-z]{1,20}$", description="reasoning effort: low, medium, high...")
    max_turns: int | None = Field(None, ge=1, le=1000, description="the agent's model calls per turn at most")
    max_thinking_tokens: int | None = Field(None, ge=1, le=1_000_000, description="its thinking budget per call")
    output_format: OutputFormat | None = Field(None, description="checked on the answer, in the step's outputs")

    @field_validator("model_params")
    @classmethod
    def _params(cls, params: dict[str, JsonValue] | None) -> dict[str, JsonValue] | None:
        if params and (reserved := sorted(set(params) & RESERVED_MODEL_PARAMS)):
            raise ValueError(f"model_params may not set {reserved}: agent-env sets them on the call")
        if params and json_size(params) > MAX_SETTINGS_BYTES:
            raise ValueError(f"model_params is over {MAX_SETTINGS_BYTES} bytes of JSON")
        return params

    def sent(self) -> dict[str, JsonValue]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, include=set(PromptSettings.model_fields))


MAX_SETTINGS_BYTES = 16_000
MAX_PARTS, MAX_PARTS_BYTES = 32, 256_000  # a prompt's parts are in the run's history


class FileContent(_Config):
    uri: str | None = Field(None, max_length=2000)
    bytes: Annotated[str | None, AfterValidator(_base64)] = Field(None, description="base64")
    name: str | None = Field(None, max_length=200)
    mimeType: str | None = Field(None, max_length=200)


def _base64(value: str | None) -> str | None:
    if value is not None:
        binascii.a2b_base64(value, strict_mode=True)  # (binascii.Error is a ValueError: pydantic reports it)
    return value


class Part(_Config):
    """One part of an A2A message (the framework's `parts`): `text`, `file` (a URI or base64 bytes) or `data`."""

    kind: Literal["text", "file", "data"]
    text: str | None = None
    file: FileContent | None = None
    data: dict[str, JsonValue] | None = None
    metadata: dict[str, JsonValue] | None = None

    @model_validator(mode="after")
    def _one(self) -> Part:
        if getattr(self, self.kind) is None:
            raise ValueError(f"a {self.kind} part has `{self.kind}`")
        if self.kind == "file" and (self.file is None or (self.file.uri is None) == (self.file.bytes is None)):
            raise ValueError("a file part's `file` has one of `uri` or `bytes`")
        return self


class PromptAgentConfig(PromptSettings, FrameworkUser):
    # the message is `prompt` or `parts`, one of them: so the JSON Schema says, as the validators below do
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"oneOf": [{"required": ["prompt"]}, {"required": ["parts"]}]}
    )

    # The framework's fields (agent_env.planning.framework_fields; as agent_env.steps.StepConfig declares them)
    framework_names: ClassVar[Mapping[str, tuple[str, FrameworkName]]] = {
        "agent_name": ("agent", "agent_step"),
        "timeout_seconds": ("turn_deadline", "same"),
        "user_agent_name": ("user_agent", "agent_step"),
    }
    refused_fields: ClassVar[Mapping[str, str]] = {
        "harness": "an agent's harness is its agent record's (llm, cli preset, a2a): deploy_agent sets it, a "
        "prompt cannot switch it",
        "agentenv_tools": "the tools an agent sees are its role's in the environment (the env record's roles); a "
        "prompt adds none",
    }

    @model_validator(mode="before")
    @classmethod
    def _text_of_parts(cls, data: Any) -> Any:
        """Given `parts` (and no `prompt`), the prompt is their text; the other parts go with it."""
        if isinstance(data, dict) and isinstance(parts := data.get("parts"), list):
            if data.get("prompt") is not None:
                raise ValueError("give `prompt` or `parts`, not both")
            if json_size(parts) > MAX_PARTS_BYTES:
                raise ValueError(f"parts are over {MAX_PARTS_BYTES} bytes of JSON: give large files by `uri`")
            texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
            data = {**data, "prompt": "\n\n".join(texts) or "(see the attached parts)"}
        return data

    def attachments(self) -> list[dict[str, JsonValue]]:
        """The parts sent beside the prompt's text (files, data)."""
        return [p.model_dump(mode="json", exclude_none=True) for p in self.parts or () if p.kind != "text"]

    agent: str = Field(description="the deploy_agent step of the agent to prompt")
    prompt_id: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.\-]{1,128}$", description="what verifiers name this prompt by (default: its id)"
    )
    prompt: str = Field(
        "", description="the task (or, in a conversation, the partner's first message); or give `parts`"
    )
    parts: list[Part] | None = Field(
        None, max_length=MAX_PARTS, description="instead of `prompt`: the message as A2A parts (text, file, data)"
    )
    context_id: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.\-]{1,128}$", description="continue the earlier prompts' conversation of this id"
    )
    poll_interval_seconds: float | None = Field(
        None, ge=0, description="the framework's; unused: the step waits on the agent's A2A answer, it does not poll"
    )
    system_prompt: str | None = Field(None, description="default: the agent's own")
    conversation: Conversation | None = None
    turn_deadline: Duration = Field(timedelta(minutes=5), description="how long one answer may take")
    on_timeout: Literal["fail", "score_zero"] = Field(
        "fail", description="when an answer misses its deadline: fail the step, or record a score of 0"
    )
    deployed: dict[str, Any] = Field(default_factory=dict, description="filled in when the run is planned")
    partner_deployed: dict[str, Any] = Field(default_factory=dict, description="filled in when the run is planned")
    seed: int | None = Field(None, description="filled in when the run is planned (the run's seed, for agents)")

    @model_validator(mode="after")
    def _framework_user(self) -> PromptAgentConfig:
        if not self.prompt:  # (`parts` set it when given)
            raise ValueError("prompt_agent needs its message: give `prompt` (the task's text) or `parts`")
        self.conversation = self.as_conversation(self.conversation)
        return self


def played_by_trainer(config: PlannedConfig) -> bool:
    """Whether a trainer plays a side of this (resolved) prompt config: then the run holds the conversation."""
    sides = (config.get("deployed"), config.get("partner_deployed"))
    return any(isinstance(who, dict) and who.get("trainer") for who in sides)


def opening(config: PromptAgentConfig) -> dict[str, Any]:
    """The first message: the task, or in a conversation, the partner's opening line."""
    attached = {"attachments": config.attachments()} if config.parts else {}  # its file and data parts, if any
    if config.conversation:
        named = config.partner_deployed.get("name") or (URL_PARTNER if config.conversation.partner_url else "partner")
        return {"side": "partner", "speaker": named, "text": config.prompt, **attached}
    return {"side": "user", "speaker": "run", "text": config.prompt, **attached}


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
