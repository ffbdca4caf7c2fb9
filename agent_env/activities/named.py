"""Steps and world actions under activity types that say what they are (`agentenv.step.deploy_env`,
`agentenv.world.call_tool`: agent_env.workflows.contract, the named-activities patch), served by one dynamic
activity: it reads the family from the type's prefix, decodes the arguments as the family takes them, checks
that the type names what the arguments ask for, and runs the family's own activity (`run_step`,
`world_action`), so both paths do exactly the same work."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import activity
from temporalio.common import RawValue

from agent_env.activities.run_step import StepActivities
from agent_env.activities.shared import fatal
from agent_env.activities.world import WorldActivities
from agent_env.spec.run import StepCall
from agent_env.workflows import contract


def named_args(activity_type: str, raw: Sequence[RawValue]) -> list[Any]:
    """A named activity's arguments, typed; a type of no family, or arguments that do not decode, fail it for
    good (no retry makes them decode)."""
    try:
        args = contract.decode_named(activity_type, raw, activity.payload_converter().from_payload)
    except Exception as e:  # the converter's errors: a payload of another shape
        raise fatal(f"activity {activity_type}: its arguments do not decode ({str(e)[:300]})", "BadArguments") from None
    if args is None:
        raise fatal(f"activity {activity_type} is not registered on this worker", "NotFoundError")
    return args


class NamedActivities(StepActivities, WorldActivities):
    @activity.defn(dynamic=True)
    async def named_activity(self, raw: Sequence[RawValue]) -> Any:
        name = activity.info().activity_type
        args = named_args(name, raw)
        if contract.named(name) is contract.RUN_STEP:
            call: StepCall = args[0]
            if contract.step_activity(call.type) != name:
                raise fatal(f"activity {name} was asked to run a step of type '{call.type}'", "BadArguments")
            return await self.run_step(call)
        instance, action, key, cause, at = args
        if contract.world_activity(str(action.get("type"))) != name:
            raise fatal(f"activity {name} was asked for a world action of type {action.get('type')!r}", "BadArguments")
        return await self.world_action(instance, action, key, cause, at)
