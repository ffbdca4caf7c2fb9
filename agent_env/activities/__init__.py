"""Temporal activities: run one step through the registry, and keep run records in the store.

Their names and types are the workflow's contract (agent_env.workflows.contract)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from agent_env.agents.conversation import turn_number
from agent_env.config import Settings
from agent_env.errors import format_loc
from agent_env.spec.run import RunState, StepCall, StepOutcome
from agent_env.spec.world_state import WorldPush, clip_fields
from agent_env.steps import StepContext, StepFailed, registry
from agent_env.workflows import contract
from agent_env.workflows.contract import AgentAnswer, AgentAsk, Hit, Paced, PromptFinish, Who

# Outputs travel through workflow history: keep them to decisions and small facts.
MAX_OUTPUT_BYTES = 64 * 1024
HEARTBEAT_EVERY = 5.0  # seconds, for activities that wait on others (an agent's turn)


def clipped_hits(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trigger hits with each field of their match bounded: they enter history (whatever agents sent)."""
    return [{**h, "match": clip_fields(h.get("match") or {})} for h in hits]


def _step_failed(e: StepFailed) -> ApplicationError:
    """A step's own verdict. One that will not be retried is benign to Temporal: the run reports it, so
    workers do not log it as a warning with a traceback (it would land on the CLI user's terminal)."""
    return ApplicationError(
        str(e),
        type="StepFailed",
        non_retryable=not e.retryable,
        category=ApplicationErrorCategory.UNSPECIFIED if e.retryable else ApplicationErrorCategory.BENIGN,
    )


def _fatal(message: str, kind: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=True)


class RunActivities:
    """Bound to one worker's settings; opens the stores once and reuses them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stores = None

    @property
    def stores(self):
        if self._stores is None:
            from agent_env.stores import open_stores

            self._stores = open_stores(self.settings)
        return self._stores

    @activity.defn(name=contract.RUN_STEP.name)
    async def run_step(self, call: StepCall) -> StepOutcome:
        info = activity.info()
        try:
            step_type = registry.get(call.type)
        except KeyError:
            raise _fatal(f"unknown step type '{call.type}' on this worker", "UnknownStepType") from None
        except ImportError as e:
            raise _fatal(str(e), "UnknownStepType") from None
        try:
            config = step_type.config.model_validate(call.config)
        except ValidationError as e:
            problems = "; ".join(
                f"config.{format_loc(tuple(x['loc']))}: {x['msg']}" for x in e.errors(include_url=False)
            )
            raise _fatal(f"invalid config after resolving references: {problems}", "InvalidConfig") from None
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
            beat = asyncio.create_task(_keep_heartbeating(call.heartbeat_timeout.total_seconds() / 3))
        started = time.perf_counter()
        try:
            result = await step_type(ctx, config)
        except StepFailed as e:
            raise _step_failed(e) from None
        finally:
            if beat:
                beat.cancel()
        duration_ms = (time.perf_counter() - started) * 1000
        size = len(json.dumps(result.outputs, default=str))
        if size > MAX_OUTPUT_BYTES:
            raise _fatal(
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

    @activity.defn(name=contract.RECORD_RUN.name)
    async def record_run(self, state: RunState, release: list[str] | None) -> None:
        """Upsert the run's record: runs stay listable without Temporal and after its retention. With `release`
        (the run's id), then release what the run holds on the gateway (it started no sandbox: see `end_run`)."""
        self.stores.documents.put("runs", state.run_id, state.model_dump(mode="json"))
        if release:
            from agent_env.gateway.release import end_run

            await end_run(await self._gateway(), self.stores, release[0])

    @activity.defn(name=contract.RELEASE_SANDBOXES.name)
    async def release_sandboxes(self, run_id: str, instances: list[str], sandboxes: bool = True) -> dict[str, Any]:
        """At the run's end (done, failed or cancelled): retire its sandboxed instances, remove its sandboxes
        (if it started any), and release all else it holds on the gateway (see `end_run`)."""
        from agent_env.gateway.release import end_run, retire_instance
        from agent_env.providers.apps import remove_sandboxes

        beat = asyncio.create_task(_keep_heartbeating(HEARTBEAT_EVERY))  # a dead worker is noticed in seconds
        try:
            gateway = await self._gateway()
            for instance in instances:
                await retire_instance(gateway, self.stores, run_id, instance)
            ended = await end_run(gateway, self.stores, run_id)
            removed = await remove_sandboxes(self.settings, run_id) if sandboxes else []
        finally:
            beat.cancel()
        return {"instances": len(instances), "sandboxes": len(removed), **ended}

    async def _gateway(self):
        from agent_env.steps import StepContext

        return await StepContext(run_id="", task_id="", step_id="", attempt=1, settings=self.settings).gateway()

    @activity.defn(name=contract.WORLD_ACTION.name)
    async def world_action(
        self, instance: str, action: dict[str, Any], key: str, cause: str, at: str | None = None
    ) -> dict[str, Any]:
        """A trigger's action on an environment, once per key. Returns its outcome and the hits it caused.
        A refusal by the gateway is the action's outcome, not a reason to retry."""
        from agent_env.gateway_client import GatewayRefused

        try:
            outcome = await self._world_action(instance, action, key, cause, at)
        except GatewayRefused as e:
            if e.status >= 500:
                raise
            outcome = {"error": str(e), "hits": []}
        hits = clipped_hits(outcome.pop("hits", []))
        return {**clip_fields(outcome), "hits": hits}  # it is logged in the world's events, carried in history

    async def _world_action(
        self, instance: str, action: dict[str, Any], key: str, cause: str, at: str | None
    ) -> dict[str, Any]:
        gateway = await self._gateway()
        kind = action["type"]
        if kind == "set_tools":
            tools = await gateway.change_role(instance, action["role"], action["enable"], action["disable"])
            return {"role": action["role"], "tools": tools, "hits": []}
        said = None
        if kind == "instruct" and action.get("deployed"):
            said = await self._instruct_agent(gateway, action, key)
            if not said.get("fallback"):
                return {"instruction": action["instruction"], "agent": action["agent"], "hits": [], **said}
        call = action["reply"] if kind == "instruct" else action
        if call is None:
            return {"instruction": action["instruction"], "agent": action["agent"], "hits": [], **(said or {})}
        agent = action["agent"] if kind == "instruct" else call.get("agent")
        outcome = await gateway.call_as(
            instance,
            call["tool"],
            call.get("arguments") or {},
            role=call.get("role"),
            agent=agent,
            idempotency_key=key,
            cause=cause,
            at=at,
        )
        out: dict[str, Any] = {
            "tool": call["tool"],
            "agent": agent or call.get("role"),
            "hits": outcome.get("hits", []),
        }
        out.update({"result": outcome["result"]} if "result" in outcome else {"error": outcome["error"]})
        if kind == "instruct":
            out["instruction"] = action["instruction"]
            if said:
                out["fallback"] = said["fallback"]
        return out

    async def _instruct_agent(self, gateway, action: dict[str, Any], key: str) -> dict[str, Any]:
        """Hand an instruction to a deployed agent (it acts with its tools). Answered once per key."""
        from agent_env.agents.client import AgentReplyInvalid, AgentTimedOut, AgentUnreachable, ask_deployed

        try:
            reply = await ask_deployed(
                self.settings,
                gateway,
                action["deployed"],
                action["instruction"],
                run_id=key.split("/world/")[0],
                turn=0,
                deadline_s=240,
                context_id=key,
                message_id=key,
            )
        except (AgentUnreachable, AgentReplyInvalid, AgentTimedOut) as e:
            return {"fallback": str(e)}
        if reply.failed or reply.data.get("fallback"):
            return {"fallback": reply.data.get("fallback") or reply.text[:500], "answer": reply.text[:2000]}
        used = {"usage": reply.data["usage"]} if reply.data.get("usage") else {}  # summed by `runs show`
        return {"answer": reply.text[:2000], "tool_calls": len(reply.data.get("tool_calls") or []), **used}

    # -- prompts with a side played by a trainer: the workflow holds the conversation, these do the I/O --

    @activity.defn(name=contract.PROMPT_MARKS.name)
    async def prompt_marks(self, agent: Who, partner: Who) -> dict[str, int]:
        from agent_env.steps.builtin.agents import trajectory_marks

        return await trajectory_marks(await self._gateway(), agent, partner)

    @activity.defn(name=contract.AGENT_ASK.name)
    async def agent_ask(self, ask: AgentAsk) -> AgentAnswer:
        """One turn of a hosted or A2A agent in a prompt the workflow holds. Answered once per turn."""
        from agent_env.agents.client import AgentTimedOut
        from agent_env.steps.builtin import agents

        # Beats while the agent thinks: the workflow's heartbeat timeout notices a dead worker, and a slow
        # turn is not taken for one (and asked again).
        beat = asyncio.create_task(_keep_heartbeating(HEARTBEAT_EVERY))
        try:
            entry, reply = await agents.ask(
                self.settings,
                await self._gateway(),
                ask.who,
                side=ask.side,
                transcript=ask.transcript,
                run_id=ask.run_id,
                step_id=ask.step_id,
                system_prompt=ask.system_prompt,
                deadline=ask.deadline,
                seed=ask.seed,
                turn=ask.turn,
            )
        except AgentTimedOut as e:
            return AgentAnswer(timed_out=str(e))
        except StepFailed as e:
            raise _step_failed(e) from None
        finally:
            beat.cancel()
        if reply.failed:
            raise _fatal(f"{ask.who['name']} could not answer ({reply.state}): {reply.text[:500]}", "StepFailed")
        turn = ask.turn if ask.turn is not None else turn_number(ask.transcript, ask.side)
        key = agents.message_key(ask.run_id, ask.step_id, ask.side, turn)
        return AgentAnswer(entry=agents.kept_apart(self.stores, entry, key))

    @activity.defn(name=contract.PROMPT_FINISH.name)
    async def prompt_finish(self, done: PromptFinish) -> dict[str, Any]:
        from agent_env.steps.builtin.agents import finish_prompt

        return await finish_prompt(
            self.stores,
            await self._gateway(),
            done.run_id,
            done.step_id,
            done.transcript,
            done.marks,
            done.agent,
            done.partner,
            done.timed_out,
            done.seconds,
        )

    @activity.defn(name=contract.PUSH_WORLD.name)
    async def push_world(self, pushes: list[tuple[str, WorldPush]]) -> list[Hit]:
        """Tell each instance's gateway the run's clock and the conditions it must watch. Returns the
        hits of state conditions that are already true."""
        gateway = await self._gateway()
        hits: list[dict[str, Any]] = []
        for instance, push in pushes:
            hits += await gateway.push_world(instance, push.model_dump(mode="json"))
        return clipped_hits(hits)

    @activity.defn(name=contract.PACE.name)
    async def pace(self, seconds: float, pushes: list[tuple[str, WorldPush]]) -> Paced:
        """Renew the clock's lease at the gateway, then wait `seconds` precisely (no sub-second timers
        exist on the server). Returns the real time at the end (for the workflow's clock) and hits."""
        hits = await self.push_world(pushes) if pushes else []
        if seconds > 0:
            await asyncio.sleep(seconds)
        return Paced(real=datetime.now(UTC).isoformat(), hits=hits)


async def _keep_heartbeating(every: float) -> None:
    """Heartbeats let Temporal notice a dead worker quickly and deliver cancellation to the step."""
    with contextlib.suppress(asyncio.CancelledError):
        while True:
            activity.heartbeat()
            await asyncio.sleep(every)
