"""The world as a run drives it: the clock's real time, due events and trigger actions, hits, pushes to the gateway,
pacing. `World` (world_rules.py) decides; this issues the Temporal commands those decisions need.

The clock is workflow state (docs/architecture.md §4). Due events fire at their exact virtual times, in the order
they were scheduled. Event-driven clocks jump to the next event only when no step is in flight; paced clocks
advance in real time, waited out by short activities that also renew the gateway's lease on the clock (the
server fires no timer sooner than ~1 s). Hits from the run's own calls come back in the call's answer; hits from
agents arrive as `trigger_hit` updates. The gateway holds a copy of the clock and of the conditions to watch:
`push_needed` says it is behind, `watches_added` that it would miss calls that now matter.

Deterministic workflow code: the order of what it awaits is the order of the run's commands.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow

if TYPE_CHECKING:
    from agent_env.workflows.world_awaits import Awaits

with workflow.unsafe.imports_passed_through():
    from agent_env.spec.duration import checked_seconds
    from agent_env.spec.run import StepOutcome, StepPlan
    from agent_env.spec.templates import TemplateError, resolve
    from agent_env.spec.times import iso, iso_or_none
    from agent_env.spec.verbs import VERBS
    from agent_env.spec.world_state import HitAck, Scheduled, TriggerHit, WorldPush
    from agent_env.workflows.contract import (
        PACE,
        PATCH_NAMED_ACTIVITIES,
        PUSH_WORLD,
        QUICK_RETRY,
        WORLD_ACTION,
        Hit,
        Paced,
        world_activity,
    )
    from agent_env.workflows.dag import Dag
    from agent_env.workflows.details import summary
    from agent_env.workflows.scope import ClockView, Scope
    from agent_env.workflows.world_rules import World, WorldError, checked_time

PACE_CHUNK = 0.5  # real seconds per pacing wait: each renews the gateway's lease on the clock
EARLY = 0.010  # paced: an event this close (real seconds) counts as reached; it absorbs the wake-up hop


class WorldDriver:
    """The run's world (None when the task declares no clock or triggers: then hits are refused, world steps fail).
    It reads and ends steps through the run's DAG, asks `busy` whether steps are in flight (an event-driven clock
    jumps only when none is) and `scope` what templates see."""

    def __init__(
        self,
        run_id: str,
        dag: Dag,
        world: World | None,
        busy: Callable[[], bool],
        scope: Callable[[], Scope],
        changed: Callable[[str], bool],
    ) -> None:
        self.run_id = run_id
        self.changed = changed  # whether the run takes a patched behaviour (continuation.changed)
        self.dag = dag
        self.busy = busy
        self.scope = scope
        self.world = world
        self.waiting: set[str] = set()  # wait_clock steps, completed by the world's queue
        self.pace: asyncio.Task[Paced] | None = None
        self._real = workflow.info().start_time
        self.push_needed = False  # the gateway's copy of the clock or watches is behind
        self.watches_added = False  # ... and it would miss calls that now matter
        self._pushing: asyncio.Task[None] | None = None  # a push that steps starting now wait for
        self.step_hits: list[Hit] = []  # hits of steps' own calls, applied before dependents start

    def now_real(self) -> datetime:
        self._real = max(self._real, workflow.now())
        return self._real

    @property
    def ended(self) -> str | None:
        return self.world.state.ended if self.world else None

    def can_go_on(self) -> bool:
        """Whether scheduled events can still come due on their own (a frozen clock never gets there)."""
        if self.world is None or not self.world.state.queue:
            return False
        clock = self.world.state.clock
        return clock is not None and clock.mode != "frozen"

    def clock_scope(self) -> ClockView | None:
        """`${clock.now}` and `${clock.start}` for templates."""
        if self.world is None or self.world.state.clock is None:
            return None
        return {"now": iso(self.world.now(self.now_real())), "start": iso_or_none(self.world.start)}

    # -- pacing: a paced clock's waits are short activities --

    def pacing(self) -> asyncio.Task[Paced] | None:
        """The pacing wait the run's loop also waits for (started if the clock is paced and none runs)."""
        clock = self.world.state.clock if self.world else None
        if clock is not None and clock.mode == "paced" and self.pace is None:
            assert self.world is not None  # (a clock comes from the world)
            real = self.now_real()
            horizon = self.world.horizon()
            seconds = PACE_CHUNK
            if horizon is not None:
                seconds = min(
                    seconds, max((horizon - self.world.now(real)).total_seconds() / clock.rate - EARLY / 2, 0.0)
                )
            self.world.reanchor(real)  # renews the lease
            self.pace = asyncio.create_task(self._pace_for(seconds, self.world.now(real)))
        return self.pace

    async def paced(self) -> None:
        """After the loop's wait: a pacing wait that ended moves real time on and brings its hits."""
        if self.pace is not None and self.pace.done():
            paced = self.pace.result()
            self.pace = None
            self._real = max(self._real, datetime.fromisoformat(paced.real))
            for hit in paced.hits:
                await self.on_hit(TriggerHit.model_validate(hit))

    async def _pace_for(self, seconds: float, virtual: datetime) -> Paced:
        # A regular activity, not a local one: a workflow task running local activities back to back
        # holds back every other event (step completions, agents' hits) until it heartbeats (~8 s).
        self.push_needed = self.watches_added = False
        paced: Paced = await workflow.execute_activity(
            PACE.name,
            args=[seconds, self._pushes()],
            result_type=PACE.returns,
            start_to_close_timeout=timedelta(seconds=seconds + 2),
            retry_policy=QUICK_RETRY,
            summary=f"pace the clock {seconds:.2f}s from virtual {iso(virtual)}",
        )
        return paced

    def stop_pacing(self) -> None:
        if self.pace is not None:
            self.pace.cancel()

    # -- due events --

    async def advance(self) -> None:
        """Fire what is due (jumping an event-driven clock when no step is in flight), then tell the gateway."""
        if self.world is None:
            return
        dag = self.dag
        if self.push_needed:
            await self.push()
        while not self.world.state.ended and not dag.error:
            real = self.now_real()
            self.world.arrive_early(real, EARLY)
            item = self.world.due(real)
            if item is None:
                if self.busy() or not self.world.jump(real):
                    break
                self.push_needed = True
                continue
            try:
                await self._handle(item)
            except WorldError as e:
                dag.fail_run(f"the world failed: {e}")
        if self.push_needed and not dag.error:
            await self.push()

    async def _handle(self, item: Scheduled) -> None:
        assert self.world is not None  # items are scheduled only in a run with a world
        clock = self.world.state.clock
        if clock is not None and clock.mode == "paced":
            # The clock stalls at the event while its actions run (agents see no time past an event
            # whose effects are not all there yet), then resumes from its anchor: it catches up the
            # stall instead of losing it, never passing the next event.
            self.world.hold = item.at
            clock.horizon = self.world.horizon()
            self.push_needed = True
            try:
                await self._apply(item)
            finally:
                self.world.hold = None
                clock.horizon = self.world.horizon()
                self.push_needed = True
        else:
            await self._apply(item)

    async def _apply(self, item: Scheduled) -> None:
        if item.kind == "wake":
            assert item.step is not None  # (a wake names its step)
            self.waiting.discard(item.step)
            self.dag.succeed(item.step, workflow.now(), {"now": iso(item.at)})
        elif item.kind == "trigger":
            assert self.world is not None and item.trigger is not None  # (a trigger item: a run with a world)
            firing, immediate = self.world.fire(item.trigger, item.at, {"at": iso(item.at)})
            self.push_needed = True
            for index in immediate:
                await self._run_action(item.trigger, firing, index, {"at": iso(item.at)})
        else:
            assert (
                item.trigger is not None and item.firing is not None and item.action is not None
            )  # (a delayed action's)
            await self._run_action(item.trigger, item.firing, item.action, item.match or {})

    # -- hits and actions --

    async def on_hit(self, hit: TriggerHit) -> HitAck:
        if self.world is None:
            return HitAck(accepted=False, reason="this run has no triggers")
        real = self.now_real()
        if hit.trigger.endswith("#unless"):
            cancelled = self.world.cancel([hit.trigger.removesuffix("#unless")], real, cause=f"unless: {hit.match}")
            self.push_needed = True
            return HitAck(accepted=bool(cancelled))
        reason = self.world.accepts(hit.trigger)
        if reason is not None:
            return HitAck(accepted=False, reason=reason)
        firing, immediate = self.world.fire(hit.trigger, hit.virtual_time, hit.match)
        self.push_needed = True
        for index in immediate:
            await self._run_action(hit.trigger, firing, index, hit.match)
        if self.push_needed:
            await self.push()
        return HitAck(accepted=True, firing=firing)

    async def apply_step_hits(self) -> None:
        hits, self.step_hits = self.step_hits, []
        for hit in hits:
            await self.on_hit(TriggerHit.model_validate(hit))

    async def _run_action(self, trigger: str, firing: int, index: int, match: Mapping[str, Any]) -> None:
        world = self.world
        assert world is not None  # actions run only in a run with a world
        action = world.triggers[trigger].actions[index]
        real = self.now_real()
        at = world.now(real)
        scope = {
            **self.scope(),
            "match": match,
            "trigger": {"id": trigger, "fires": world.state.triggers[trigger].fires},
        }
        detail: dict[str, Any] = {"type": action.type, "index": index}
        hits: list[Hit] = []
        try:
            spec = resolve(action.model_dump(mode="json", exclude={"delay"}), scope)
            if not VERBS[action.type].in_workflow:  # an effect on an environment: an activity does it
                instance = world.state.instances.get(spec["env"])
                if instance is None:
                    raise WorldError(f"environment {spec['env']!r} is not deployed (yet)")
                if action.type == "instruct" and spec.get("by"):
                    spec["deployed"] = self.dag.deployed_agent(spec["by"], spec["agent"])
                if self.watches_added or (spec.get("deployed") and self.push_needed):
                    await self.push()  # conditions the gateway does not know yet; the clock an agent reads
                key, named = f"{self.run_id}/world/{firing}/{index}", self.changed(PATCH_NAMED_ACTIVITIES)
                answer = await _act_on_env(action.type, instance, spec, key, trigger, at, named=named)
                hits = answer.pop("hits", [])
                detail.update(answer)
            elif action.type == "set_clock":
                world.set_clock(
                    real,
                    time=spec.get("time"),
                    rate=spec.get("rate"),
                    mode=spec.get("mode"),
                    cause=f"trigger {trigger}",
                )
                self.push_needed = True
            elif action.type == "register_triggers":
                detail["registered"] = world.register(spec["triggers"], real)
                self.push_needed = self.watches_added = True
            elif action.type == "cancel_triggers":
                detail["cancelled"] = world.cancel(spec["triggers"], real, cause=f"trigger {trigger}")
                self.push_needed = True
            elif action.type == "end_run":
                world.state.ended = spec["reason"]
                world.log("ended", at, trigger=trigger, firing=firing, detail={"reason": spec["reason"]})
        except (TemplateError, WorldError, ValueError) as e:
            detail["error"] = str(e)
        world.log("action", at, trigger=trigger, firing=firing, detail=detail)
        for hit in hits:
            await self.on_hit(TriggerHit.model_validate(hit))

    # -- the gateway's copy --

    def _pushes(self) -> list[tuple[str, WorldPush]]:
        assert self.world is not None  # pushed only in a run with a world
        return [
            (
                instance,
                WorldPush(run_id=self.run_id, clock=self.world.state.clock, watches=self.world.watches(step)),
            )
            for step, instance in self.world.state.instances.items()
        ]

    async def watches_pushed(self) -> None:
        """A step that starts right after triggers were registered waits until the gateway watches for
        them: its calls (say, an email to a persona) must be able to fire them."""
        if self.watches_added and self._pushing is None:
            self._pushing = asyncio.create_task(self.push())
        if self._pushing is not None:
            pushing = self._pushing
            await pushing
            if self._pushing is pushing:
                self._pushing = None

    async def push(self) -> None:
        """Tell every instance of the run the world's clock and the conditions to watch."""
        self.push_needed = self.watches_added = False
        pushes = self._pushes()
        if pushes:
            hits = await workflow.execute_local_activity(
                PUSH_WORLD.name,
                pushes,
                result_type=PUSH_WORLD.returns,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=QUICK_RETRY,
                summary=f"push the clock and watches to {len(pushes)} instance(s)",
            )
            for hit in hits:
                await self.on_hit(TriggerHit.model_validate(hit))

    # -- steps and the world --

    def step_succeeded(self, plan: StepPlan, outcome: StepOutcome) -> None:
        """A step's own calls may have fired triggers (applied before its dependents start); a step that deploys
        an environment makes its instance the world's to watch."""
        self.step_hits += outcome.hits
        if self.world is not None and plan.deploys_env and "instance" in outcome.outputs:
            self.world.state.instances[plan.id] = outcome.outputs["instance"]
            self.push_needed = self.watches_added = True

    def cancel_waits(self, reason: str | None) -> None:
        """The run stops: steps waiting for the clock are cancelled."""
        for step_id in list(self.waiting):
            self.dag.cancel(step_id, workflow.now(), reason)
        self.waiting.clear()


def world_step(driver: WorldDriver, plan: StepPlan, config: Mapping[str, Any], awaits: Awaits | None = None) -> None:
    """Steps that change the world's rules run in the workflow, at once: they are decisions (a register_env_triggers
    step with `await_fired` ends once its triggers have fired: `awaits` holds it)."""
    dag, world = driver.dag, driver.world
    if world is None:
        dag.fail(plan.id, f"{plan.type} needs the task to declare a [clock] or [[triggers]]", workflow.now())
        return
    real = driver.now_real()
    world.begin(real)
    try:
        if plan.verb == "sync_env_clock":
            world.set_clock(
                real,
                time=config.get("time"),
                rate=config.get("rate"),
                mode=config.get("mode"),
                cause=f"step {plan.id}",
            )
            outputs: dict[str, Any] = {"now": iso(world.now(real))}
        elif plan.verb == "register_env_triggers":
            outputs = {"registered": world.register(config.get("triggers") or ["*"], real)}
            driver.watches_added = True
            if awaits is not None and awaits.start(plan.id, config, real, outputs["registered"]):
                driver.push_needed = True
                return  # the step ends when they have fired (the run's loop settles it), or at its deadline
        elif plan.verb == "cancel_triggers":
            outputs = {"cancelled": world.cancel(config["triggers"], real, cause=f"step {plan.id}")}
        elif plan.verb == "wait_clock":
            now = world.now(real)
            # `seconds` or `until` may come from outputs (a tool's result): checked before date arithmetic.
            target = (
                checked_time(config["until"], world.start)
                if config.get("until") is not None
                else now + timedelta(seconds=checked_seconds(config.get("seconds"), "`seconds`"))
            )
            world.wake_at(plan.id, max(target, now), real)
            driver.waiting.add(plan.id)
            return
        else:
            raise WorldError(f"unknown world step type {plan.type!r}")
    except (WorldError, ValueError, ArithmeticError) as e:
        dag.fail(plan.id, str(e), workflow.now())
        return
    driver.push_needed = True
    dag.succeed(plan.id, workflow.now(), outputs)


async def _act_on_env(
    verb: str, instance: str, spec: Mapping[str, Any], key: str, trigger: str, at: datetime, *, named: bool
) -> Any:  # (WORLD_ACTION.returns: its outcome as logged, plus `hits`)
    """A trigger's action on an environment, a local activity: under its verb's activity type when `named`
    (`agentenv.world.call_tool`, what the Temporal UI's timeline shows), else as runs before the
    named-activities patch did (`agentenv.world_action`)."""
    return await workflow.execute_local_activity(
        world_activity(verb) if named else WORLD_ACTION.name,
        args=[instance, spec, key, f"trigger {trigger}", iso(at)],
        result_type=WORLD_ACTION.returns,
        retry_policy=QUICK_RETRY,
        start_to_close_timeout=timedelta(minutes=5) if spec.get("deployed") else timedelta(seconds=60),
        summary=_action_summary(trigger, verb, spec, at),
    )


def _action_summary(trigger: str, action_type: str, spec: Mapping[str, Any], at: datetime) -> str:
    """`call_tool send_email on desk (trigger morning_rush, virtual 2026-03-02T14:30:00Z)`: names, never arguments."""
    target = str(spec.get("tool") or spec.get("agent") or spec.get("role") or "")[:80]  # what it acts on or as
    on = f" on {str(spec['env'])[:80]}" if spec.get("env") else ""
    return summary(f"{action_type} {target}{on} (trigger {trigger}, virtual {iso(at)})")
