"""The world's verbs, named once: what a task step or a trigger's action can do to the world.

A verb is either a decision the workflow applies itself (the clock, triggers, waits, the run's end: no I/O,
recorded in history) or an effect on an environment, done by an activity through the gateway. Task steps
(agent_env.steps.builtin.world_steps and .envs) and trigger actions (agent_env.spec.world) are the two ways to say
one; where both can, they share the verb's name and fields (`triggers`, with `ids` accepted for actions).

Two verbs look alike and are not the same: the step `set_role_tools` replaces a role's rules (`tools` it
may call, `deny` patterns), the action `set_tools` changes them (`enable` adds, `disable` denies, the rest
is kept). A trigger fires in the middle of a run whose roles other triggers may have changed: it edits;
a setup step states the whole rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# The verbs a step the workflow applies itself may name (StepPlan.verb).
WorldStepVerb = Literal["set_clock", "register_triggers", "cancel_triggers", "wait_clock"]


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
        Verb("set_clock", "Set the world's clock: its time, pace or mode.", in_workflow=True, step=True, action=True),
        Verb("register_triggers", "Start watching the task's triggers.", in_workflow=True, step=True, action=True),
        Verb("cancel_triggers", "Stop triggers before they fire (again).", in_workflow=True, step=True, action=True),
        Verb("wait_clock", "Wait until the world's clock reaches a time.", in_workflow=True, step=True, action=False),
        Verb("end_run", "End the run: steps still running are cancelled.", in_workflow=True, step=False, action=True),
        Verb("call_tool", "Call a tool as a role or agent.", in_workflow=False, step=True, action=True),
        Verb(
            "set_role_tools",
            "Replace a role's rules: the tools it may call and the patterns it is denied.",
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
