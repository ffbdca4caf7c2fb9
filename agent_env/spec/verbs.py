"""The world's verbs, named once: what a task step or a trigger's action can do to the world.

A verb is either a decision the workflow applies itself (the clock, triggers, waits, the run's end: no I/O,
recorded in history) or an effect on an environment, done by an activity through the gateway. Task steps
(agent_env.steps.builtin.world_steps and .envs) and trigger actions (agent_env.spec.world) are the two ways to say
one. Steps take the AgentEnv Framework's step names (`sync_env_clock`, `register_env_triggers`,
`modify_env_tool_access`); trigger actions keep theirs (`set_clock`, `register_triggers`, `set_tools`), the same
decision under the action's name, with the same fields where both have them (`triggers`, with `ids` accepted
for actions).

The step `modify_env_tool_access` either changes a role's rules (`action` enable or disable `tools`, the rest
kept), as the action `set_tools` does, or, without `action`, replaces them (`tools` it may call, `deny`
patterns): a setup step may state the whole rule; a trigger fires in the middle of a run whose roles other
triggers may have changed, so it only edits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# The verbs a step the workflow applies itself may name (StepPlan.verb).
WorldStepVerb = Literal["sync_env_clock", "register_env_triggers", "cancel_triggers", "wait_clock"]

# Plans recorded before the steps took the framework's names carry the old type (and verb): what each is now.
# Only recorded plans are read with it (a run in flight, a recorded history); a task naming an old type is refused.
RENAMED_STEP_TYPES = {
    "set_clock": "sync_env_clock",
    "register_triggers": "register_env_triggers",
    "set_role_tools": "modify_env_tool_access",
    "rubric_judge": "rubrics_verifier",
    "aggregate_scores": "aggregate_verifiers",
}


@dataclass(frozen=True)
class Verb:
    name: str
    does: str
    in_workflow: bool  # a decision the workflow applies; otherwise an activity's effect on an environment
    step: bool  # a task step of this name does it
    action: bool  # a trigger action of this type does it


VERBS: dict[str, Verb] = {
    v.name: v
    for v in (
        Verb(
            "sync_env_clock",
            "Set the world's clock: its time, pace or mode.",
            in_workflow=True,
            step=True,
            action=False,
        ),
        Verb("set_clock", "Set the world's clock: its time, pace or mode.", in_workflow=True, step=False, action=True),
        Verb("register_env_triggers", "Start watching the task's triggers.", in_workflow=True, step=True, action=False),
        Verb("register_triggers", "Start watching the task's triggers.", in_workflow=True, step=False, action=True),
        Verb("cancel_triggers", "Stop triggers before they fire (again).", in_workflow=True, step=True, action=True),
        Verb("wait_clock", "Wait until the world's clock reaches a time.", in_workflow=True, step=True, action=False),
        Verb("end_run", "End the run: steps still running are cancelled.", in_workflow=True, step=False, action=True),
        Verb("call_tool", "Call a tool as a role or agent.", in_workflow=False, step=True, action=True),
        Verb(
            "modify_env_tool_access",
            "Change a role's rules (enable or disable tools), or replace them: the tools it may call and the patterns "
            "it is denied.",
            in_workflow=False,
            step=True,
            action=False,
        ),
        Verb(
            "set_tools",
            "Change a role's rules: enable tools, disable others, keep the rest.",
            in_workflow=False,
            step=False,
            action=True,
        ),
        Verb(
            "instruct",
            "Tell a world agent what to do (it acts with its tools, or a templated reply is made).",
            in_workflow=False,
            step=False,
            action=True,
        ),
    )
}
