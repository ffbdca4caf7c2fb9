"""The pieces the task-run workflow stands on, without a server: the activity contract both sides share, the step
traits its plans carry (and fill for plans recorded before them), the world's verbs, and what it imports."""

from __future__ import annotations

import ast
import base64
import inspect
import json
from datetime import timedelta
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from pydantic import ValidationError
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import (
    Interceptor,
    Replayer,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowOutboundInterceptor,
)

import agent_env
from agent_env.activities import RunActivities
from agent_env.agents import conversation
from agent_env.spec.run import NEW_TRAITS, RunInput, StepCall, StepPlan, StepTraits, builtin_traits
from agent_env.spec.verbs import RENAMED_STEP_TYPES, VERBS
from agent_env.spec.world import Action, TriggersAction
from agent_env.steps import BUILTINS, catalog
from agent_env.workflows import contract

HISTORIES = Path(__file__).parent / "histories"


# -- the contract --


def _activities() -> dict[str, Any]:
    found = {}
    for _, method in inspect.getmembers(RunActivities, inspect.isfunction):
        definition = getattr(method, "__temporal_activity_definition", None)
        if definition is not None:
            found[definition.name] = method
    return found


def test_every_activity_is_in_the_contract_and_only_those():
    """(the one dynamic activity, named None, serves the named families: below)"""
    assert set(_activities()) == {a.name for a in contract.ACTIVITIES} | {None}
    assert _activities()[None] is RunActivities.named_activity


def test_steps_and_world_actions_are_named_by_their_type_and_verb():
    assert contract.step_activity("deploy_env") == "agentenv.step.deploy_env"
    assert contract.world_activity("call_tool") == "agentenv.world.call_tool"
    assert contract.named("agentenv.step.deploy_env") is contract.RUN_STEP
    assert contract.named("agentenv.world.call_tool") is contract.WORLD_ACTION
    assert contract.named("agentenv.step.") is None and contract.named("agentenv.run_step") is None
    # plugin step types are user-named: what reaches an activity type is bounded and plain
    odd = contract.step_activity("acme/fetch page\n" + "x" * 200)
    assert odd.startswith("agentenv.step.acme_fetch_page_x") and len(odd) == len("agentenv.step.") + 64
    assert contract.step_activity("") == "agentenv.step._"
    for name in [*catalog.names(), *VERBS]:  # the catalog's and the verbs' own names are kept as they are
        assert contract.step_activity(name) == f"agentenv.step.{name}"
        assert contract.world_activity(name) == f"agentenv.world.{name}"


def test_a_named_familys_arguments_decode_as_it_takes_them():
    from temporalio.common import RawValue

    convert = pydantic_data_converter.payload_converter
    call = StepCall(run_id="r", task_id="t", step_id="s", type="check", config={"a": 1})
    raw = [RawValue(p) for p in convert.to_payloads([call])]
    assert contract.decode_named("agentenv.step.check", raw, convert.from_payload) == [call]
    action = ["i", {"type": "call_tool"}, "k", "trigger x", None]
    raw = [RawValue(p) for p in convert.to_payloads(action)]
    assert contract.decode_named("agentenv.world.call_tool", raw, convert.from_payload) == action
    assert contract.decode_named("agentenv.world.call_tool", raw[:4], convert.from_payload) is None
    assert contract.decode_named("agentenv.other", raw, convert.from_payload) is None


@pytest.mark.parametrize("declared", contract.ACTIVITIES, ids=[a.name for a in contract.ACTIVITIES])
def test_an_activity_takes_and_returns_what_the_contract_says(declared):
    method = _activities()[declared.name]
    hints = get_type_hints(method)
    params = [p for p in inspect.signature(method).parameters.values() if p.name != "self"]
    assert tuple(hints[p.name] for p in params) == declared.takes
    assert hints["return"] == declared.returns


def test_payloads_keep_the_shape_of_the_dicts_they_replace():
    """agent_ask and prompt_finish took dicts: what older workers scheduled still validates."""
    old_ask = {
        "who": {"name": "a"},
        "side": "agent",
        "transcript": [{"side": "user", "text": "hi"}],
        "run_id": "r",
        "step_id": "s",
        "system_prompt": None,
        "deadline": 30.0,
        "seed": 1,
    }  # before the tail patch: no turn
    assert contract.AgentAsk.model_validate(old_ask).turn is None
    assert contract.AgentAnswer.model_validate({"timed_out": "late"}).entry is None
    assert contract.Paced.model_validate({"real": "2026-01-01T00:00:00+00:00", "hits": []}).hits == []
    finish = contract.PromptFinish.model_validate(
        {
            "run_id": "r",
            "step_id": "s",
            "transcript": [],
            "marks": {"e": 3},
            "agent": {"name": "a"},
            "partner": {},
            "timed_out": None,
            "seconds": 1.5,
        }
    )
    assert set(finish.model_dump()) == {
        "run_id",
        "step_id",
        "transcript",
        "marks",
        "agent",
        "partner",
        "timed_out",
        "seconds",
    }


# -- step traits --


def _plan(**fields: Any) -> dict[str, Any]:
    return {"id": "s", "timeout": timedelta(minutes=1), "retries": 0, **fields}


def test_plans_recorded_before_step_traits_get_the_builtin_types_traits():
    sandboxed_env = {"record": {"apps": [{"app": "x", "sandbox": {"image": "y"}}, "plain"]}}
    env = StepPlan.model_validate(_plan(type="deploy_env", config=sandboxed_env))
    assert env.deploys_env and env.sandboxes and not env.deploys_agent
    assert not StepPlan.model_validate(_plan(type="deploy_env", config={"record": {"apps": [{"app": "x"}]}})).sandboxes
    agent = StepPlan.model_validate(
        _plan(type="deploy_agent", config={"record": {"type": "a2a", "config": {"sandbox": {}}}})
    )
    assert agent.deploys_agent and not agent.sandboxes  # an empty sandbox section starts none
    assert StepPlan.model_validate(
        _plan(type="deploy_agent", config={"record": {"type": "a2a", "config": {"sandbox": {"image": "x"}}}})
    ).sandboxes
    assert StepPlan.model_validate(_plan(type="prompt_agent")).conversation
    clock = StepPlan.model_validate(_plan(type="sync_env_clock", in_workflow=True))
    assert clock.verb == "sync_env_clock" and clock.in_workflow
    # recorded before the world steps took the framework's names: the same verb, under its name now
    old = StepPlan.model_validate(_plan(type="set_clock", in_workflow=True))
    assert old.verb == "sync_env_clock" and old.type == "set_clock", "the recorded type stays as recorded"
    traited = StepPlan.model_validate(_plan(type="register_triggers", in_workflow=True, verb="register_triggers"))
    assert traited.verb == "register_env_triggers"
    plugin = StepPlan.model_validate(_plan(type="my_plugin_step"))
    assert plugin.model_dump(include=NEW_TRAITS | {"in_workflow"}) == StepTraits().model_dump()


def test_plans_with_traits_keep_them():
    """A plan made by today's planner says what its type declared, even under a built-in's name."""
    plan = StepPlan.model_validate(_plan(type="deploy_env", deploys_env=False, sandboxes=False))
    assert not plan.deploys_env
    again = StepPlan.model_validate(plan.model_dump(mode="json"))
    assert again == plan


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"record": {"apps": [{"app": "a", "sandbox": {"image": "i"}}]}},
        {"record": {"type": "a2a", "config": {"sandbox": {"image": "i"}}}},
    ],
)
def test_the_builtin_step_types_declare_the_traits_old_plans_are_given(config):
    for name in BUILTINS:
        declared = catalog.get(name).traits(config).model_dump(exclude={"in_workflow"})
        assert declared == StepTraits(**builtin_traits(name, config)).model_dump(exclude={"in_workflow"}), name


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
def test_recorded_plans_get_the_traits_their_types_declare_now(path):
    started = json.loads(path.read_text())["events"][0]["workflowExecutionStartedEventAttributes"]
    inp = RunInput.model_validate_json(base64.b64decode(started["input"]["payloads"][0]["data"]))
    for plan in inp.steps:
        now = catalog.get(RENAMED_STEP_TYPES.get(plan.type, plan.type))  # (a type renamed since it was recorded)
        assert plan.model_dump(include=NEW_TRAITS) == now.traits(plan.config).model_dump(include=NEW_TRAITS), plan.id


# -- the world's verbs --


def test_trigger_actions_and_world_steps_are_verbs():
    action_types = {t for model in _union_members(Action) for t in model.model_fields["type"].annotation.__args__}
    assert action_types == {v.name for v in VERBS.values() if v.action}
    for verb in VERBS.values():
        if verb.step:
            step_type = catalog.get(verb.name)
            assert step_type.in_workflow == verb.in_workflow, verb.name
            assert step_type.verb == (verb.name if verb.in_workflow else None), verb.name


def _union_members(annotated: Any) -> list[Any]:
    return list(annotated.__origin__.__args__)


def test_register_and_cancel_actions_say_triggers_and_still_take_ids():
    new = TriggersAction.model_validate({"type": "cancel_triggers", "triggers": ["a"]})
    old = TriggersAction.model_validate({"type": "cancel_triggers", "ids": ["a"]})
    assert new == old and old.model_dump(mode="json", exclude={"delay"}) == {
        "type": "cancel_triggers",
        "triggers": ["a"],
    }
    with pytest.raises(ValidationError):
        TriggersAction.model_validate({"type": "cancel_triggers", "triggers": ["a"], "ids": ["b"]})
    with pytest.raises(ValidationError):
        TriggersAction.model_validate({"type": "register_triggers", "ids": []})


# -- what the workflow imports --


def _module_imports(path: Path) -> list[str]:
    """agentenv modules a module imports when it is imported (not under `if TYPE_CHECKING`, not in functions)."""
    names: list[str] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.extend([node.module] + [f"{node.module}.{a.name}" for a in node.names])
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, (ast.With, ast.Try)):
                visit(node.body)

    visit(ast.parse(path.read_text()).body)
    return [n for n in names if n.split(".")[0] == "agent_env"]


def _module_file(name: str) -> Path | None:
    base = Path(agent_env.__file__).parent.parent / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def test_the_workflow_imports_no_steps_gateway_or_providers():
    """The workflow runs in every worker and replays histories: it loads the models it decides with, not the
    code that talks to environments, agents or sandboxes (HTTP clients, A2A, cloud SDKs)."""
    seen: set[str] = set()
    todo = ["agent_env.workflows.task_run"]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a module's packages are imported with it
            module = ".".join(parts[:i])
            path = _module_file(module)
            if path is not None and module not in seen:
                seen.add(module)
                todo.extend(_module_imports(path))
    heavy = sorted(m for m in seen if m.split(".")[1:2] in (["steps"], ["gateway"], ["providers"]))
    assert not heavy, f"the workflow imports {heavy}"
    assert "agent_env.agents.conversation" in seen


def test_conversation_helpers_decide_turns():
    config = conversation.PromptAgentConfig.model_validate(
        {
            "agent": "a",
            "prompt": "hi",
            "conversation": {"partner": "p", "max_turns": 1},
            "deployed": {"name": "a"},
            "partner_deployed": {"name": "p", "trainer": True},
        }
    )
    transcript = [conversation.opening(config)]
    assert transcript[0]["side"] == "partner" and conversation.next_side(config, transcript) == "agent"
    transcript.append({"side": "agent", "speaker": "a", "text": "ok", "seconds": 1.0})
    assert conversation.next_side(config, transcript) is None  # max_turns reached
    assert conversation.turn_number(transcript, "agent") == 1
    assert conversation.played_by_trainer(config.model_dump())
    assert conversation.timeout_score(None) is None and conversation.timeout_score("late").value == 0.0


# -- what travels: activities scheduled on replay take exactly what the recorded runs' activities took --


class _Scheduled(WorkflowOutboundInterceptor):
    log: list[tuple[str, str, list[Any]]] = []

    def start_activity(self, input):  # noqa: A002 - the SDK's name
        payloads = pydantic_data_converter.payload_converter.to_payloads(list(input.args))
        self.log.append((input.activity, input.activity_id, [json.loads(p.data) for p in payloads]))
        return super().start_activity(input)


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound):
        super().init(_Scheduled(outbound))


class _Capture(Interceptor):
    def workflow_interceptor_class(self, input):  # noqa: A002
        return _Inbound


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_replayed_activities_take_what_the_recorded_ones_took(path):
    """Replay compares commands, not their payloads: this compares the payloads (the shape activities of runs in
    flight receive), for the activities a history records the input of."""
    from agent_env.workflows.task_run import TaskRun

    history = json.loads(path.read_text())
    recorded = [
        (
            a["activityType"]["name"],
            a["activityId"],
            [json.loads(base64.b64decode(p["data"])) for p in a.get("input", {}).get("payloads", [])],
        )
        for e in history["events"]
        if (a := e.get("activityTaskScheduledEventAttributes"))
    ]
    _Scheduled.log = []
    replayer = Replayer(
        workflows=[TaskRun],
        workflow_runner=UnsandboxedWorkflowRunner(),
        interceptors=[_Capture()],
        data_converter=pydantic_data_converter,
    )
    result = await replayer.replay_workflow(
        WorkflowHistory.from_json(path.stem, path.read_text()), raise_on_replay_failure=False
    )
    assert result.replay_failure is None
    assert _Scheduled.log == recorded


async def test_the_named_activity_runs_only_what_its_type_names(tmp_path):
    """The dynamic activity behind `agentenv.step.<type>` and `agentenv.world.<verb>` refuses, for good,
    arguments that ask for something its type does not name, and a type of no named family."""
    from dataclasses import replace

    from temporalio.common import RawValue
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from agent_env.config import load_settings

    env = ActivityEnvironment()
    env.payload_converter = pydantic_data_converter.payload_converter
    named = RunActivities(load_settings(tmp_path)).named_activity
    call = StepCall(run_id="r", task_id="t", step_id="s", type="deploy_env", config={})
    action = ["i", {"type": "set_tools", "role": "r", "enable": [], "disable": []}, "k", "trigger x", None]
    cases = [
        ("agentenv.step.check", [call], "BadArguments", "asked to run a step of type 'deploy_env'"),
        ("agentenv.world.call_tool", action, "BadArguments", "asked for a world action of type 'set_tools'"),
        ("agentenv.world.call_tool", action[:2], "NotFoundError", "not registered on this worker"),
        ("agentenv.step.check", ["not a call"], "BadArguments", "its arguments do not decode"),
    ]
    for kind, args, error, says in cases:
        env.info = replace(ActivityEnvironment.default_info(), activity_type=kind)
        raw = [RawValue(p) for p in env.payload_converter.to_payloads(args)]
        with pytest.raises(ApplicationError) as caught:
            await env.run(named, raw)
        assert caught.value.type == error and caught.value.non_retryable and says in caught.value.message, kind
