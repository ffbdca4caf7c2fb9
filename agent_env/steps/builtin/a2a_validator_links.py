"""What an A2A validator learns from other steps of its run (the framework's fields for them): the deployed agent
it checks (`agent_name`, `a2a_agent_id`: a deploy_agent step, instead of a `url`), prompts other steps sent that
agent (`prompt_id`; `peer_prompt_id` with the `expected_token` its answer must hold; `probes`, each a modality's
prompt and the text its answer must hold), and a rubrics_verifier's verdict (`rubric_verifier_id`, and the one
criterion that counts, `rubric_criterion_id`).

Planning rewrites the framework's names into the steps that made them (`framework_names`); `prepare_links` points
the config at those steps' outputs, which the workflow fills in when the validator runs; `linked_findings` grades
them into the validator's report, beside what its own check found.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_env.errors import BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.named_steps import prompt_step
from agent_env.spec.run import PlannedConfig
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepConfig
from agent_env.validators.report import Finding

LINKED_STEPS = ("agent", "a2a_agent", "prompt_step", "peer_prompt_step", "rubric_verifier")
_EXCERPT = 200  # how much of an answer a finding quotes


class ModalityProbe(BaseModel):
    """One modality probe: a prompt_agent step sent the agent an input of `modality`; its answer must hold
    `expected` (ignoring case)."""

    model_config = ConfigDict(extra="forbid")

    modality: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    prompt_id: str = Field(min_length=1, max_length=200, description="the prompt_agent step (or its prompt_id)")
    expected: str = Field(min_length=1, max_length=1000, description="text the answer must hold")


class LinkedChecks(StepConfig):
    """The fields every A2A validator takes to be told things by other steps of its run."""

    framework_names = {
        "a2a_agent_id": ("a2a_agent", "agent_step"),
        "agent_name": ("agent", "agent_step"),
        "prompt_id": ("prompt_step", "prompt_step"),
        "peer_prompt_id": ("peer_prompt_step", "prompt_step"),
        "rubric_verifier_id": ("rubric_verifier", "verifier_step"),
        "rubric_criterion_id": ("rubric_criterion", "same"),
    }

    url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="the agent's A2A URL (its card is at URL/.well-known/agent-card.json); or name its step",
    )
    agent: str | None = Field(None, description="the deploy_agent step whose agent is checked (instead of `url`)")
    a2a_agent: str | None = Field(
        None, description="the deploy_agent step of the agent (the framework's a2a_agent_id), if `agent` is not given"
    )
    prompt_step: str | None = Field(None, description="a prompt_agent step whose prompt the agent must have answered")
    peer_prompt_step: str | None = Field(
        None, description="a prompt_agent step asking the agent to reach a peer; its answer must hold `expected_token`"
    )
    expected_token: str | None = Field(None, min_length=1, max_length=1000, description="see `peer_prompt_step`")
    probes: list[ModalityProbe] = Field(default_factory=list, max_length=32, description="modality probes to grade")
    rubric_verifier: str | None = Field(None, description="a rubrics_verifier step whose verdict counts too")
    rubric_criterion: str | None = Field(
        None, max_length=200, description="the criterion of it that counts (default: all of them)"
    )
    # filled in when the run is planned: references to the named steps' outputs
    agent_deployed: JsonObject = Field(default_factory=dict, description="filled in when the run is planned")
    prompt_outputs: JsonObject = Field(default_factory=dict, description="filled in when the run is planned")
    peer_prompt_outputs: JsonObject = Field(default_factory=dict, description="filled in when the run is planned")
    probe_outputs: list[JsonObject] = Field(default_factory=list, description="filled in when the run is planned")
    rubric_outputs: JsonObject = Field(default_factory=dict, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _linked(self) -> LinkedChecks:
        if not (self.url or self.agent or self.a2a_agent):
            raise ValueError("give the agent's `url`, or name the deploy_agent step that deployed it (`agent`)")
        if (self.peer_prompt_step is None) != (self.expected_token is None):
            raise ValueError("`peer_prompt_id` and `expected_token` go together: the peer prompt's answer holds it")
        if self.rubric_criterion is not None and self.rubric_verifier is None:
            raise ValueError("`rubric_criterion_id` is a criterion of `rubric_verifier_id`: name that verifier too")
        return self

    def agent_url(self) -> str:
        """The URL of the agent checked: `url`, else its deploy_agent step's."""
        if self.url:
            return self.url
        step = self.agent or self.a2a_agent
        if self.agent_deployed.get("hosted"):
            raise BadInput(
                f"the agent of step {step!r} is hosted by the gateway, which admits only its run's callers",
                "validate an a2a agent (one at a URL of its own, or started in a sandbox)",
            )
        url = self.agent_deployed.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise BadInput(f"step {step!r} deployed no agent at an http(s) URL", "name a deploy_agent step")
        return url


def prepare_links(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """Point the config at the outputs of the steps it names (and find each probe's prompt_agent step)."""
    if step := config.get("agent") or config.get("a2a_agent"):
        config["agent_deployed"] = ref(f"steps.{step}.outputs")
    for named, outputs in (("prompt_step", "prompt_outputs"), ("peer_prompt_step", "peer_prompt_outputs")):
        if config.get(named):
            config[outputs] = ref(f"steps.{config[named]}.outputs")
    if config.get("rubric_verifier"):
        config["rubric_outputs"] = ref(f"steps.{config['rubric_verifier']}.outputs")
    probes = config.get("probes") or []
    if probes and (plan.task is None or plan.step_id is None):
        raise BadInput("modality probes name prompt steps of a task", "run the validator as a step of a task")
    found = [prompt_step(plan.task, plan.step_id, str(p.get("prompt_id"))) for p in probes]  # type: ignore[arg-type]
    if found:
        config["probe_outputs"] = [ref(f"steps.{s}.outputs") for s in found]
    return config


def linked_findings(config: Any) -> list[Finding]:
    """What the steps the config names say about the agent, as findings of its report."""
    if not isinstance(config, LinkedChecks):
        return []
    found = []
    if config.prompt_step:
        found.append(_answered("linked.prompt_answered", config.prompt_step, config.prompt_outputs))
    if config.peer_prompt_step and config.expected_token:
        found.append(
            _holds("linked.peer_call", config.peer_prompt_step, config.peer_prompt_outputs, config.expected_token)
        )
    for probe, outputs in zip(config.probes, config.probe_outputs, strict=False):
        found.append(_holds(f"modality.{probe.modality}.probe", probe.prompt_id, outputs, probe.expected))
    if config.rubric_verifier:
        found.append(_rubric(config.rubric_verifier, config.rubric_criterion, config.rubric_outputs))
    return found


def _answer(outputs: JsonObject) -> str:
    answer = outputs.get("answer")
    return answer if isinstance(answer, str) else ""


def _answered(name: str, step: str, outputs: JsonObject) -> Finding:
    if outputs.get("timed_out"):
        return Finding.failed(name, f"step {step!r}: the agent's answer did not come in time", "answer in time")
    if not _answer(outputs).strip():
        return Finding.failed(name, f"step {step!r}: the agent answered nothing", "answer message/send with text")
    return Finding.ok(name)


def _holds(name: str, step: str, outputs: JsonObject, expected: str) -> Finding:
    answer = _answer(outputs)
    if expected.lower() in answer.lower():
        return Finding.ok(name)
    return Finding.failed(
        name,
        f"step {step!r}: the answer does not hold {expected!r}: {answer[:_EXCERPT]!r}",
        "take the input and answer from it as the prompt asks",
    )


def _rubric(verifier: str, criterion: str | None, outputs: JsonObject) -> Finding:
    name = f"linked.rubric.{criterion}" if criterion else "linked.rubric"
    rows = [r for r in outputs.get("results") or [] if isinstance(r, dict)]
    if criterion is not None:
        rows = [r for r in rows if r.get("id") == criterion]
        if not rows:
            return Finding.failed(name, f"verifier {verifier!r} has no criterion {criterion!r}", "name one of its")
    if not rows:
        return Finding.failed(name, f"verifier {verifier!r} graded nothing", "give it criteria")
    failed = [str(r.get("id")) for r in rows if r.get("result") is not True]
    if failed:
        return Finding.failed(
            name, f"verifier {verifier!r} failed the agent on {', '.join(failed)}", "see that verifier's results"
        )
    return Finding.ok(name)
