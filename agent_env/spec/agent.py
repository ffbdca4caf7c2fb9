"""Agents as declared: `agents/NAME/agent.toml` in a bundle, or inline in a deploy_agent step.

name = "support"
type = "llm"                 # scripted | llm | persona | human | a2a | cli (| trainer: set by episodes)
role = "support"             # its role in the environment it works in (deploy_agent may override)
[config]
system_prompt = "You are Acme's support agent..."
max_tool_calls = 30
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_env.spec.duration import Duration
from agent_env.spec.env import AgentSandbox
from agent_env.spec.predicates import TextTest

NAME = r"^[a-z][a-z0-9_\-]{0,39}$"
ARTIFACT_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*(@[A-Za-z0-9_.\-]+)?$")  # NAME[@VERSION]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelOverride(_Spec):
    """Which endpoint to use instead of the configured one for this purpose (any field may be left out)."""

    base_url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="an http(s) URL; on another origin than "
        "the configured endpoint's, the configured "
        "key is not sent there",
    )
    model: str | None = None
    provider: Literal["openai", "anthropic"] | None = Field(None, description="whose API the endpoint speaks")
    api: Literal["chat", "responses"] | None = Field(None, description="openai only: chat completions or responses")
    api_key: str | None = Field(None, description="a `secret:NAME` reference, sent only to this endpoint")
    temperature: float | None = Field(None, ge=0, le=2)


class ScriptedAction(_Spec):
    """A tool call (`tool` + `arguments`) or the turn's answer (`say`)."""

    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    say: str | None = None

    @model_validator(mode="after")
    def _one(self) -> ScriptedAction:
        if (self.tool is None) == (self.say is None):
            raise ValueError("a scripted action is either a tool call (`tool`) or an answer (`say`)")
        return self


class ScriptedConfig(_Spec):
    """Plays its turns in order: each a list of tool calls ending with what it says. Deterministic."""

    turns: list[list[ScriptedAction]] = Field(min_length=1)


class LlmConfig(_Spec):
    """An OpenAI-compatible chat model that uses the environment's MCP tools in a loop."""

    system_prompt: str = ""
    model: ModelOverride | None = None
    max_tool_calls: int = Field(30, ge=0, le=1000, description="tool calls per turn before it must answer")
    time_budget: Duration = Field(timedelta(minutes=5), description="per turn")


class ReplyRule(_Spec, TextTest):
    """A templated reply: when what was said contains or matches (ignoring case), say this (`${message}` is
    what was said). With neither rule it never answers."""

    field = "reply"
    exactly_one = False

    say: str


class PersonaConfig(_Spec):
    """A simulated person. With `llm = true` a model plays them from their brief; otherwise (and if the
    model fails) the first matching templated reply answers."""

    brief: str = Field("", description="who they are, what they want, how they talk")
    llm: bool = False
    model: ModelOverride | None = None
    replies: list[ReplyRule] = Field(default_factory=list)
    default_reply: str = "I see. Can you tell me more?"


class HumanConfig(_Spec):
    """A person answers each turn from the CLI (`agent-env agents answer`)."""

    instructions: str = ""


class TrainerConfig(_Spec):
    """Played from a trainer's own loop (an episode): its turns wait for the trainer's model."""


class InlineSkill(_Spec):
    """A skill given to an a2a agent through skill-config/v1 (inline variant): its SKILL.md. A record's skill
    artifacts (`skills`) are sent this way too; the other files of their folders reach sandboxed agents only."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    description: str
    skill_md: str = Field(max_length=100_000)


class A2aConfig(_Spec):
    """Your own agent: any A2A server, running at `url` or started in a sandbox for the run."""

    url: str | None = Field(None, description="the agent's base URL (its card is at /.well-known/agent-card.json)")
    sandbox: AgentSandbox | None = Field(
        None, description="instead of `url`: run the agent in a sandbox (serving A2A on $HOST:$PORT)"
    )
    agent_config: dict[str, Any] = Field(
        default_factory=dict, description="the agent's own settings, set through its urn:agentenv:agent-config/v1"
    )
    skills: list[InlineSkill] = Field(
        default_factory=list, description="skills added through its urn:agentenv:skill-config/v1"
    )

    @model_validator(mode="after")
    def _one(self) -> A2aConfig:
        if (self.url is None) == (self.sandbox is None):
            raise ValueError(
                "an a2a agent has exactly one of `url` (a running agent) or `sandbox` (started for the run)"
            )
        return self


CLI_IMAGE = "agentenv/cli-agents:bookworm"  # made by scripts/cli-agent-image: the CLIs' binaries and agent-env
CLI_BRIDGE = ["python3", "-m", "agent_env.agents.cli_agent"]  # serves A2A in the sandbox, runs the CLI each turn


def _cli_sandbox() -> AgentSandbox:
    # On the host's network: the CLI reaches the gateway's MCP endpoint and the model on the host's 127.0.0.1.
    return AgentSandbox(image=CLI_IMAGE, command=CLI_BRIDGE, network="host", provider="docker,local")


class CliConfig(_Spec):
    """A command-line coding agent (Claude Code, Codex, Gemini CLI, or a command of yours) run in a sandbox. Each
    turn runs it once with the prompt, set up with the environment's MCP endpoint under the agent's role token and
    with a model endpoint (its key sent only to the sandbox); its last message is the turn's answer. A prompt's
    settings become the CLI's own options where it has them (agent_env.agents.cli_settings); the step's outputs
    name those it has none for (`settings_not_applied`)."""

    preset: Literal["claude_code", "codex", "gemini"] | None = Field(
        None, description="a CLI agent-env knows how to set up (see agent_env.agents.cli_presets)"
    )
    command: list[str] | None = Field(
        None,
        min_length=1,
        description="instead of a preset: your command. It gets the prompt on stdin and in $AGENT_ENV_PROMPT, the "
        "MCP endpoint in $AGENT_ENV_MCP_URL and $AGENT_ENV_MCP_TOKEN, the model in $AGENT_ENV_MODEL_BASE_URL, "
        "$AGENT_ENV_MODEL and $AGENT_ENV_MODEL_API_KEY, the prompt's settings (effort, max_turns...) as JSON in "
        "$AGENT_ENV_SETTINGS, deploy_agent's env_vars as they are; what it prints is its answer",
    )
    executable: str | None = Field(None, description="the preset CLI's binary (default: its name, on the PATH)")
    model: ModelOverride | None = Field(None, description="the endpoint it uses (default: [models] agent)")
    turn_timeout: Duration = Field(timedelta(minutes=10), description="per turn, before the CLI is stopped")
    sandbox: AgentSandbox = Field(
        default_factory=_cli_sandbox,
        description=f"where it runs (default: the {CLI_IMAGE} image on Docker, else a local process); a sandbox "
        "of yours runs the bridge too: give it an `image` with python3, agent-env and the CLI",
    )

    @model_validator(mode="after")
    def _one(self) -> CliConfig:
        if (self.preset is None) == (self.command is None):
            raise ValueError("a cli agent has exactly one of `preset` (claude_code, codex, gemini) or `command`")
        if self.sandbox.command is None:  # the bridge is what serves A2A, whatever the image's CMD
            self.sandbox = self.sandbox.model_copy(update={"command": CLI_BRIDGE})
        return self


CONFIGS: dict[str, type[_Spec]] = {
    "scripted": ScriptedConfig,
    "llm": LlmConfig,
    "persona": PersonaConfig,
    "human": HumanConfig,
    "a2a": A2aConfig,
    "cli": CliConfig,
    "trainer": TrainerConfig,
}


class AgentRecord(_Spec):
    """An agent (`agent.toml`): its `type` (scripted, llm, persona, human, a2a, cli, trainer), the `config` that
    type takes, its role in the environment and the skills it is given."""

    name: str = Field(pattern=NAME)
    version: str = "1"
    description: str = ""
    type: Literal["scripted", "llm", "persona", "human", "a2a", "cli", "trainer"]
    role: str | None = Field(None, description="its role in the environment it works in")
    config: dict[str, Any] = Field(default_factory=dict)
    skills: list[str] = Field(
        default_factory=list,
        description="artifacts (NAME[@VERSION]), each a folder with a SKILL.md, given to the agent when deploy_agent "
        "deploys it: an a2a or cli agent gets them under /skills/NAME/ in its sandbox (if it runs in one) and each "
        "SKILL.md through urn:agentenv:skill-config/v1 when its card declares it; an llm or persona agent's model gets "
        "each SKILL.md in its system prompt (at most 32 skills; their other files stay behind); a scripted agent "
        "plays its script without them; human and trainer agents refuse them",
    )

    @field_validator("skills")
    @classmethod
    def _skill_refs(cls, value: list[str]) -> list[str]:
        for ref in value:
            if not ARTIFACT_REF.match(ref):
                raise ValueError(f"skill {ref!r} is not an artifact's NAME or NAME@VERSION")
        return value

    @model_validator(mode="after")
    def _config_fits(self) -> AgentRecord:
        from pydantic import ValidationError

        from agent_env.errors import from_validation_error

        try:
            CONFIGS[self.type].model_validate(self.config)
        except ValidationError as e:
            head, *rows = str(from_validation_error(e, f"config of a {self.type!r} agent")).splitlines()
            raise ValueError(f"{head.rsplit(':', 1)[0]}: " + "; ".join(r.strip() for r in rows)) from None
        return self

    def typed_config(self) -> Any:
        return CONFIGS[self.type].model_validate(self.config)

    def model_override(self) -> ModelOverride | None:
        return getattr(self.typed_config(), "model", None)

    def needs_model(self) -> bool:
        return self.type in ("llm", "cli") or (self.type == "persona" and self.typed_config().llm)

    def sandbox(self) -> AgentSandbox | None:
        """The sandbox it runs in: an a2a agent's (unless it is at a URL of its own), a cli agent's."""
        return self.typed_config().sandbox if self.type in ("a2a", "cli") else None
