"""Run one step: its type from the catalog, its config checked, its code in a StepContext, its outputs bounded
(they travel through history)."""

from __future__ import annotations

import asyncio
import json
import time

from pydantic import ValidationError
from temporalio import activity

from agent_env.activities.shared import Activities, clipped_hits, fatal, keep_heartbeating, step_failed
from agent_env.errors import format_loc
from agent_env.spec.run import StepCall, StepOutcome
from agent_env.spec.verbs import RENAMED_STEP_TYPES
from agent_env.steps import StepContext, StepFailed, catalog
from agent_env.workflows import contract

# Outputs travel through workflow history: keep them to decisions and small facts.
MAX_OUTPUT_BYTES = 64 * 1024


class StepActivities(Activities):
    @activity.defn(name=contract.RUN_STEP.name)
    async def run_step(self, call: StepCall) -> StepOutcome:
        info = activity.info()
        try:
            # (a run planned before a step type took the framework's name carries the old one)
            step_type = catalog.get(RENAMED_STEP_TYPES.get(call.type, call.type))
        except KeyError:
            raise fatal(f"unknown step type '{call.type}' on this worker", "UnknownStepType") from None
        except ImportError as e:
            raise fatal(str(e), "UnknownStepType") from None
        try:
            config = step_type.config.model_validate(call.config)
        except ValidationError as e:
            problems = "; ".join(
                f"config.{format_loc(tuple(x['loc']))}: {x['msg']}" for x in e.errors(include_url=False)
            )
            raise fatal(f"invalid config after resolving references: {problems}", "InvalidConfig") from None
        local = info.is_local
        ctx = StepContext(
            run_id=call.run_id,
            task_id=call.task_id,
            step_id=call.step_id,
            attempt=info.attempt,
            settings=self.settings,
            heartbeat=(lambda *d: None) if local else activity.heartbeat,
            _stores=self._stores,
        )
        beat = None
        if not local and call.heartbeat_timeout:
            beat = asyncio.create_task(keep_heartbeating(call.heartbeat_timeout.total_seconds() / 3))
        started = time.perf_counter()
        try:
            result = await step_type(ctx, config)
        except StepFailed as e:
            raise step_failed(e) from None
        finally:
            if beat:
                beat.cancel()
        duration_ms = (time.perf_counter() - started) * 1000
        size = len(json.dumps(result.outputs, default=str))
        if size > MAX_OUTPUT_BYTES:
            raise fatal(
                f"outputs are {size // 1024} KiB; the limit is {MAX_OUTPUT_BYTES // 1024} KiB because outputs travel "
                "through workflow history — put large data in the object store (ctx.stores.objects) and output its key",
                "OutputTooLarge",
            )
        return StepOutcome(
            outputs=result.outputs,
            score=result.score,
            attempt=info.attempt,
            duration_ms=duration_ms,
            hits=clipped_hits(result.hits),
        )
