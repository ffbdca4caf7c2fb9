"""One run of a task: execute its DAG of steps as activities, apply the world's rules (clock, triggers),
record status, outputs, scores, timings and the world's events.

Independent steps run concurrently. A step starts when everything it depends on has finished; its
config's ${...} references are resolved here, deterministically, from earlier results. History
carries only step inputs and outcomes and the world's decisions, never the traffic of environments.

The world: the clock is workflow state (docs/architecture.md §4). Due events fire at their exact virtual times, in
the order they were scheduled. Event-driven clocks jump to the next event only when no step is in
flight; paced clocks advance in real time, waited out by short activities that also renew the
gateway's lease on the clock, in short activities (the server fires no timer sooner than ~1 s). Hits
from the run's own calls come back in the call's answer; hits from agents arrive as `trigger_hit`
updates.
"""

from __future__ import annotations

import asyncio
import builtins
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from agentenv.spec.duration import checked_seconds, format_duration
    from agentenv.spec.run import (
        RunInput,
        RunState,
        RunStatus,
        StepCall,
        StepOutcome,
        StepPlan,
        StepStatus,
        TrainerProgress,
        TurnOffer,
    )
    from agentenv.spec.task import FailurePolicy
    from agentenv.spec.templates import TemplateError, resolve
    from agentenv.spec.world_run import (
        MAX_FIELD_BYTES,
        MAX_HIT_BYTES,
        MAX_ID_CHARS,
        HitAck,
        Scheduled,
        TriggerHit,
        WorldPush,
        clip,
        json_size,
    )
    from agentenv.steps.builtin import agents as prompts
    from agentenv.workflows import attributes
    from agentenv.workflows.world import World, WorldError, checked_time

RUN_STEP = "agentenv.run_step"
RECORD_RUN = "agentenv.record_run"
WORLD_ACTION = "agentenv.world_action"
PUSH_WORLD = "agentenv.push_world"
PACE = "agentenv.pace"
PROMPT_MARKS = "agentenv.prompt_marks"
AGENT_ASK = "agentenv.agent_ask"
PROMPT_FINISH = "agentenv.prompt_finish"
RELEASE_SANDBOXES = "agentenv.release_sandboxes"
UPDATES_PER_RUN = 1500  # continue-as-new before this many updates (Temporal takes at most 2,000 per run)
QUICK_RETRY = RetryPolicy(maximum_attempts=10, maximum_interval=timedelta(seconds=10))
PACE_CHUNK = 0.5  # real seconds per pacing wait: each renews the gateway's lease on the clock
EARLY = 0.010  # paced: an event this close (real seconds) counts as reached; it absorbs the wake-up hop
# Updates come from outside (the gateway for agents' calls, trainers): validators refuse what does not belong
# to the run or is too big, before it reaches history. These bound the trainer's updates.
MAX_RESPONSE_BYTES = 64 * 1024
MAX_REASON_CHARS = 2000
MAX_NAME_CHARS = 256
# What bad data raises in the workflow's own code (a number from a tool result meeting date arithmetic...).
# It fails the run with a message instead of failing the workflow task forever; nondeterminism (Temporal's own
# errors) still fails the workflow task, which is what that is for.
DATA_ERRORS = (ArithmeticError, ValueError, TypeError, LookupError, WorldError)
# The state goes into history (continue-as-new input, the run's result): bounded far below Temporal's 2 MB.
MAX_STATE_BYTES = 1024 * 1024
MAX_CARRIED_EVENTS = 1000  # world events carried across continue-as-new (the rest are counted by kind)
MAX_ASK_TRANSCRIPT_BYTES = 256 * 1024  # the recent conversation an agent asked by the run is sent
# Patches (workflow.patched) keep histories recorded before these changes replaying.
PATCH_BOUNDS = "poison-bounds"  # bounded state, events, hit updates counted
PATCH_ASK_TAIL = "agent-ask-tail"
PATCH_RELEASE_ALL = "release-all-at-end"  # a run's end releases its instances and hosted agents, not only sandboxes


@workflow.defn(name="agentenv.TaskRun", sandboxed=False)
class TaskRun:
    @workflow.init
    def __init__(self, inp: RunInput) -> None:
        self.inp = inp
        self.plans: dict[str, StepPlan] = {s.id: s for s in inp.steps}
        # After a continue-as-new, the run goes on from the state it carried.
        self.state = inp.carried or RunState.start(inp, workflow.info().start_time)
        self.running: dict[str, asyncio.Task[StepOutcome]] = {}
        self.waiting: set[str] = set()  # wait_clock steps, completed by the world's queue
        self.world = World(inp.world, self.state.world) if inp.world and self.state.world is not None else None
        self._wake = asyncio.Event()
        self._pace: asyncio.Task | None = None
        self._real = workflow.info().start_time
        self._push_needed = False  # the gateway's copy of the clock or watches is behind
        self._watches_added = False  # ... and it would miss calls that now matter
        self._pushing: asyncio.Task | None = None  # a push that steps starting now wait for
        self._step_hits: list[dict[str, Any]] = []  # hits of steps' own calls, applied before dependents start
        self._closing: str | None = None  # "continued" or "ended": trainers waiting for a turn are told
        self._abandoned: str | None = None  # the trainer's reason, when it abandoned the episode
        self._updates = 0  # updates this run has taken

    @workflow.query(name="state")
    def get_state(self) -> RunState:
        return self.state

    @workflow.update(name="trigger_hit")
    async def trigger_hit(self, hit: TriggerHit) -> HitAck:
        """A condition an agent's call made true (sent by the gateway)."""
        if workflow.patched(PATCH_BOUNDS):
            self._updates += 1  # counted toward the run's update budget, so it continues as new in time
        try:
            ack = await self._on_hit(hit)
        except DATA_ERRORS as e:
            self._bad_data(e, f"trigger hit {hit.trigger!r}")
            ack = HitAck(accepted=False, reason=self.state.error or "")
        self._wake.set()
        return ack

    def _bad_data(self, e: BaseException, where: str) -> None:
        if not self.state.error:
            self.state.error = f"{where} failed on bad data: {type(e).__name__}: {str(e)[:1000]}"

    @trigger_hit.validator
    def _hit_is_this_runs(self, hit: TriggerHit) -> None:
        """Anyone who can reach Temporal can send a hit: refuse one for a trigger this run does not declare, an
        instance that is not this run's, or one too big for history. (Validators do not run on replay.)"""
        if self.world is None:
            raise ValueError(f"run {self.inp.run_id} has no triggers: it takes no trigger hits")
        if len(hit.trigger) > MAX_ID_CHARS or hit.trigger.removesuffix("#unless") not in self.world.triggers:
            raise ValueError(f"run {self.inp.run_id} has no trigger {hit.trigger[:MAX_ID_CHARS]!r}")
        if len(hit.instance) > MAX_ID_CHARS or hit.instance not in self.world.state.instances.values():
            raise ValueError(f"environment instance {hit.instance[:MAX_ID_CHARS]!r} is not one of run "
                             f"{self.inp.run_id}'s")
        size = len(hit.model_dump_json().encode())
        if size > MAX_HIT_BYTES:
            raise ValueError(f"a trigger hit of {size} bytes is over the limit of {MAX_HIT_BYTES}: "
                             "send less in `match` (e.g. a shortened result)")

    # -- episodes: a trainer plays agents from its own loop; its turns travel as updates --

    @workflow.update(name="next_turn")
    async def next_turn(self, agent: str | None = None) -> dict[str, Any]:
        """The next turn waiting for the trainer (`agent`: only that agent's), once there is one; or
        {"closing": "ended"} when no more will come, {"closing": "continued"} to ask the next run."""
        self._updates += 1
        self._wake.set()
        await workflow.wait_condition(lambda: self._offer(agent) is not None or self._closing is not None)
        offer = self._offer(agent) if self._closing is None else None
        return {"turn": offer.model_dump(mode="json")} if offer else {"closing": self._closing}

    @next_turn.validator
    def _agent_is_a_name(self, agent: str | None = None) -> None:
        if agent is not None and (not isinstance(agent, str) or not agent or len(agent) > MAX_NAME_CHARS):
            raise ValueError(f"`agent` is an agent's name (at most {MAX_NAME_CHARS} characters), or none")

    @workflow.update(name="end_turn")
    async def end_turn(self, turn_id: str, response: str) -> dict[str, Any]:
        """The trainer's answer to a turn. Sent again (a retried call), it changes nothing."""
        self._updates += 1
        progress = self._progress_of(turn_id)
        if turn_id in progress.answers:
            return {"turn": turn_id, "duplicate": True}
        progress.answers[turn_id] = response
        self._wake.set()
        return {"turn": turn_id}

    @end_turn.validator
    def _turn_is_waiting(self, turn_id: str, response: str) -> None:
        if not isinstance(turn_id, str) or len(turn_id) > MAX_NAME_CHARS:
            raise ValueError(f"a turn id is text of at most {MAX_NAME_CHARS} characters")
        self._progress_of(turn_id)  # refused before it reaches history when no such turn is (or was) offered
        if not isinstance(response, str):
            raise ValueError("the response must be text")
        if len(response.encode(errors="replace")) > MAX_RESPONSE_BYTES:
            raise ValueError(f"the response is over the limit of {MAX_RESPONSE_BYTES} bytes: shorten it")

    @workflow.update(name="abandon")
    async def abandon(self, reason: str) -> dict[str, Any]:
        """The trainer gives the episode up: running steps are cancelled, the run ends as cancelled."""
        self._updates += 1
        if self._abandoned is None and not self.state.status.finished:
            self._abandoned = reason or "no reason given"
            self._wake.set()
        return {"abandoned": self._abandoned}

    @abandon.validator
    def _reason_is_short(self, reason: str) -> None:
        if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
            raise ValueError(f"the reason is text of at most {MAX_REASON_CHARS} characters")

    def _offer(self, agent: str | None) -> TurnOffer | None:
        for progress in self.state.trainer.values():
            offer = progress.offer
            if offer is not None and offer.id not in progress.answers and (agent is None or offer.agent == agent):
                return offer
        return None

    def _progress_of(self, turn_id: str) -> TrainerProgress:
        step = turn_id.split("/", 1)[0]
        progress = self.state.trainer.get(step)
        if progress is None or (turn_id not in progress.answers and (progress.offer is None
                                                                    or progress.offer.id != turn_id)):
            raise ValueError(f"no turn {turn_id!r} is waiting for an answer")
        return progress

    @workflow.run
    async def run(self, inp: RunInput) -> RunState:
        try:
            # The run's record was written by whoever started it (runner.start_run); it is rewritten at the end.
            if inp.carried is None and self.world is not None:
                self.world.start_clock(self._now_real())
            try:
                await self._execute_within_timeout()
            except DATA_ERRORS as e:
                self._bad_data(e, "the run")
                await self._stop_quietly()
        except asyncio.CancelledError:
            await self._stop_running()
            self.state.status = RunStatus.CANCELLED
            await self._conclude()
            raise
        await self._conclude()
        if self.state.status is RunStatus.ERROR:
            # Fail the workflow so the UI shows it red; the details carry the full run state.
            raise ApplicationError(self.state.error or "run failed", self.state, type="RunError", non_retryable=True)
        return self.state

    async def _stop_quietly(self) -> None:
        try:
            await self._stop_running()
        except DATA_ERRORS as e:  # settling what ran may meet the same bad data: the run is ending anyway
            workflow.logger.warning("stopping the run's steps: %s", e)

    async def _execute_within_timeout(self) -> None:
        if self.inp.timeout is None:
            return await self._execute()
        left = (self.state.started_at + self.inp.timeout - workflow.now()).total_seconds()
        try:
            await asyncio.wait_for(self._execute(), timeout=max(left, 0.001))  # a durable timer
        except builtins.TimeoutError:  # (TimeoutError in this module is Temporal's)
            await self._stop_running()
            self.state.error = f"the run timed out (its limit is {format_duration(self.inp.timeout)})"
            self.state.status = RunStatus.ERROR

    # -- the main loop --

    async def _execute(self) -> None:
        self._resume_trainer_steps()
        while True:
            if self._history_is_long():
                await self._drain_and_continue_as_new()
            if self._abandoned is not None:
                await self._stop_running()
                self.state.status = RunStatus.CANCELLED
                self.state.error = f"abandoned by the trainer: {self._abandoned}"
                return
            self._start_ready_steps()
            await self._advance_world()
            self._start_ready_steps()  # the world may have finished waits that others depend on
            if self.state.error or (self.world and self.world.state.ended):
                await self._stop_running()
                return
            if not self.running and not self.waiting and not self._world_can_go_on():
                return
            await self._wait()
            for step_id in [sid for sid, task in self.running.items() if task.done()]:
                self._settle(step_id, self.running.pop(step_id))
            await self._apply_step_hits()

    def _world_can_go_on(self) -> bool:
        """Whether scheduled events can still come due on their own (a frozen clock never gets there)."""
        if self.world is None or not self.world.state.queue:
            return False
        clock = self.world.state.clock
        return clock is not None and clock.mode != "frozen"

    def _now_real(self) -> datetime:
        self._real = max(self._real, workflow.now())
        return self._real

    async def _wait(self) -> None:
        """Until a step finishes, an update arrives, or (paced) the clock may have reached an event."""
        waiters: list[asyncio.Future] = list(self.running.values())
        clock = self.world.state.clock if self.world else None
        if clock is not None and clock.mode == "paced" and self._pace is None:
            assert self.world is not None  # (a clock comes from the world)
            real = self._now_real()
            horizon = self.world.horizon()
            seconds = PACE_CHUNK
            if horizon is not None:
                seconds = min(seconds, max((horizon - self.world.now(real)).total_seconds() / clock.rate - EARLY / 2, 0.0))
            self.world.reanchor(real)  # renews the lease
            self._pace = asyncio.create_task(self._pace_for(seconds))
        if self._pace is not None:
            waiters.append(self._pace)
        self._wake.clear()
        wake = asyncio.create_task(self._wake.wait())
        waiters.append(wake)
        await workflow.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if not wake.done():
            wake.cancel()
        if self._pace is not None and self._pace.done():
            paced = self._pace.result()
            self._pace = None
            self._real = max(self._real, datetime.fromisoformat(paced["real"]))
            for hit in paced["hits"]:
                await self._on_hit(TriggerHit.model_validate(hit))

    async def _pace_for(self, seconds: float) -> dict[str, Any]:
        # A regular activity, not a local one: a workflow task running local activities back to back
        # holds back every other event (step completions, agents' hits) until it heartbeats (~8 s).
        self._push_needed = self._watches_added = False
        return await workflow.execute_activity(
            PACE, args=[seconds, self._pushes()], result_type=dict,
            start_to_close_timeout=timedelta(seconds=seconds + 2), retry_policy=QUICK_RETRY)

    # -- steps --

    def _start_ready_steps(self) -> None:
        progressed = True
        while progressed and not self.state.error:
            progressed = False
            for step_id, step in self.state.steps.items():
                if step.status is not StepStatus.PENDING:
                    continue
                deps = [self.state.steps[d] for d in step.depends_on]
                if not all(d.status.finished for d in deps):
                    continue
                progressed = True
                blocker = next((d for d in deps if self._blocks_dependents(d.id)), None)
                if blocker is not None:
                    step.status = StepStatus.SKIPPED
                    step.error = f"skipped: '{blocker.id}' {blocker.status.value}"
                    continue
                plan = self.plans[step_id]
                try:
                    config = resolve(plan.config, self._scope())
                except TemplateError as e:
                    self._fail(step_id, f"config: {e}")
                    continue
                step.status = StepStatus.RUNNING
                step.started_at = workflow.now()
                if plan.in_workflow:
                    self._world_step(plan, config)
                elif _played_by_trainer(plan, config):
                    self.running[step_id] = asyncio.create_task(self._trainer_prompt(plan, config))
                else:
                    self.running[step_id] = asyncio.create_task(self._call(plan, config))

    def _blocks_dependents(self, step_id: str) -> bool:
        status = self.state.steps[step_id].status
        if status is StepStatus.FAILED:
            return self.plans[step_id].on_failure is not FailurePolicy.CONTINUE
        return status in (StepStatus.SKIPPED, StepStatus.CANCELLED)

    def _scope(self) -> dict[str, Any]:
        scope: dict[str, Any] = {
            "steps": {
                sid: {"outputs": s.outputs, "status": s.status.value, "score": s.score.value if s.score else None,
                      "passed": s.score.passed if s.score else None}
                for sid, s in self.state.steps.items()
            },
            "run": {"id": self.inp.run_id, "seed": self.inp.pins.get("seed", 0)},
            "task": {"id": self.inp.task_id, "version": self.inp.task_version},
        }
        if self.world is not None and self.world.state.clock is not None:
            scope["clock"] = {"now": _iso(self.world.now(self._now_real())), "start": _iso(self.world.start)}
        return scope

    async def _call(self, plan: StepPlan, config: dict[str, Any]) -> StepOutcome:
        await self._watches_pushed()
        call = StepCall(
            run_id=self.inp.run_id, task_id=self.inp.task_id, step_id=plan.id, type=plan.type,
            config=config, heartbeat_timeout=plan.heartbeat_timeout,
        )
        retry = RetryPolicy(
            maximum_attempts=plan.retries + 1,
            initial_interval=timedelta(seconds=1),
            maximum_interval=timedelta(seconds=30),
        )
        if plan.local:
            return await workflow.execute_local_activity(
                RUN_STEP, call, result_type=StepOutcome, start_to_close_timeout=plan.timeout,
                retry_policy=retry, activity_id=plan.id, summary=f"{plan.id} ({plan.type})",
            )
        return await workflow.execute_activity(
            RUN_STEP, call, result_type=StepOutcome, start_to_close_timeout=plan.timeout,
            heartbeat_timeout=plan.heartbeat_timeout, retry_policy=retry,
            activity_id=plan.id, summary=f"{plan.id} ({plan.type})",
        )

    def _resume_trainer_steps(self) -> None:
        """After a continue-as-new: prompts a trainer was playing go on from their carried progress."""
        for step_id in self.state.trainer:
            if self.state.steps[step_id].status is StepStatus.RUNNING and step_id not in self.running:
                plan = self.plans[step_id]
                config = resolve(plan.config, self._scope())
                self.running[step_id] = asyncio.create_task(self._trainer_prompt(plan, config))

    async def _trainer_prompt(self, plan: StepPlan, raw: dict[str, Any]) -> StepOutcome:
        """A prompt_agent step with a side played by a trainer: the conversation is held here; the trainer's
        turns are offered (next_turn) and answered (end_turn); hosted agents answer through activities."""
        config = prompts.PromptAgentConfig.model_validate(raw)
        agent, partner = config.deployed, config.partner_deployed
        deadline = config.turn_deadline.total_seconds()
        progress = self.state.trainer.get(plan.id)
        if progress is None:
            marks = await workflow.execute_local_activity(
                PROMPT_MARKS, args=[agent, partner], result_type=dict, start_to_close_timeout=timedelta(seconds=30),
                retry_policy=QUICK_RETRY)
            progress = self.state.trainer[plan.id] = TrainerProgress(transcript=[prompts.opening(config)], marks=marks)
        started = workflow.now()
        timed_out = None
        while (side := prompts.next_side(config, progress.transcript)) is not None:
            who = agent if side == "agent" else partner
            if who.get("trainer"):
                entry = await self._trainer_answer(plan.id, progress, who, side, config, deadline)
            else:
                ask = {"who": who, "side": side, "transcript": progress.transcript, "run_id": self.inp.run_id,
                       "step_id": plan.id, "system_prompt": prompts.system_prompt_for(config, side),
                       "deadline": deadline, "seed": config.seed}
                if workflow.patched(PATCH_ASK_TAIL):  # not the whole transcript on every turn
                    ask.update(transcript=prompts.tail(progress.transcript, MAX_ASK_TRANSCRIPT_BYTES),
                               turn=prompts.turn_number(progress.transcript, side))
                answer = await workflow.execute_activity(
                    AGENT_ASK, ask,
                    result_type=dict, start_to_close_timeout=timedelta(seconds=deadline + 30),
                    heartbeat_timeout=timedelta(seconds=30), retry_policy=QUICK_RETRY)
                entry = answer.get("entry")
                timed_out = answer.get("timed_out")
            if entry is None:
                timed_out = timed_out or f"{who['name']} did not answer within {deadline:g}s"
                break
            progress.transcript.append(entry)
        outputs = await workflow.execute_local_activity(
            PROMPT_FINISH, {"run_id": self.inp.run_id, "step_id": plan.id, "transcript": progress.transcript,
                            "marks": progress.marks, "agent": agent, "partner": partner, "timed_out": timed_out,
                            "seconds": (workflow.now() - started).total_seconds()},
            result_type=dict, start_to_close_timeout=timedelta(seconds=30), retry_policy=QUICK_RETRY)
        del self.state.trainer[plan.id]
        if timed_out and config.on_timeout == "fail":
            raise ApplicationError(timed_out, type="StepFailed", non_retryable=True)
        return StepOutcome(outputs=outputs, score=prompts.timeout_score(timed_out))

    async def _trainer_answer(self, step_id: str, progress: TrainerProgress, who: dict[str, Any], side: str,
                              config: Any, deadline: float) -> dict[str, Any] | None:
        """Offer the turn to the trainer and wait for its answer (None past the deadline)."""
        turn = prompts.turn_number(progress.transcript, side)
        turn_id = f"{step_id}/{side}/{turn}"
        if progress.offer is None or progress.offer.id != turn_id:
            progress.offer = TurnOffer(
                id=turn_id, step=step_id, agent=who["name"], role=who.get("role"), env=who.get("env"),
                mcp_url=who.get("mcp_url"), prompt=progress.transcript[-1]["text"],
                system_prompt=prompts.system_prompt_for(config, side),
                conversation=prompts.conversation_view(prompts.tail(progress.transcript, MAX_ASK_TRANSCRIPT_BYTES),
                                                       side), deadline_s=deadline)
        offered = workflow.now()
        try:
            await workflow.wait_condition(lambda: turn_id in progress.answers, timeout=deadline)
        except builtins.TimeoutError:  # (the module's TimeoutError is Temporal's)
            progress.offer = None
            return None
        progress.offer = None
        return {"side": side, "speaker": who["name"], "text": progress.answers[turn_id],
                "seconds": round((workflow.now() - offered).total_seconds(), 3)}

    def _deployed_agent(self, step_id: str, agent: str) -> dict[str, Any]:
        """The outputs of the deploy_agent step an instruction goes to (it must have deployed `agent`)."""
        step = self.state.steps.get(step_id)
        if step is None or step.type != "deploy_agent":
            raise WorldError(f"`by` names {step_id!r}, which is not a deploy_agent step")
        if step.status is not StepStatus.SUCCEEDED:
            raise WorldError(f"step {step_id!r} has not deployed its agent (it is {step.status.value})")
        if step.outputs.get("name") != agent:
            raise WorldError(f"step {step_id!r} deployed {step.outputs.get('name')!r}, not agent {agent!r}")
        return step.outputs

    def _world_step(self, plan: StepPlan, config: dict[str, Any]) -> None:
        """Steps that change the world's rules run here, in the workflow: they are decisions."""
        step = self.state.steps[plan.id]
        if self.world is None:
            self._fail(plan.id, f"{plan.type} needs the task to declare a [clock] or [[triggers]]")
            return
        real = self._now_real()
        self.world.begin(real)
        try:
            if plan.type == "set_clock":
                self.world.set_clock(real, time=config.get("time"), rate=config.get("rate"),
                                     mode=config.get("mode"), cause=f"step {plan.id}")
                outputs: dict[str, Any] = {"now": _iso(self.world.now(real))}
            elif plan.type == "register_triggers":
                outputs = {"registered": self.world.register(config.get("triggers") or ["*"], real)}
                self._watches_added = True
            elif plan.type == "cancel_triggers":
                outputs = {"cancelled": self.world.cancel(config["triggers"], real, cause=f"step {plan.id}")}
            elif plan.type == "wait_clock":
                now = self.world.now(real)
                # `seconds` or `until` may come from outputs (a tool's result): checked before date arithmetic.
                target = (checked_time(config["until"], self.world.start) if config.get("until") is not None
                          else now + timedelta(seconds=checked_seconds(config.get("seconds"), "`seconds`")))
                self.world.wake_at(plan.id, max(target, now), real)
                self.waiting.add(plan.id)
                return
            else:
                raise WorldError(f"unknown world step type {plan.type!r}")
        except (WorldError, ValueError, ArithmeticError) as e:
            self._fail(plan.id, str(e))
            return
        self._push_needed = True
        step.status, step.finished_at, step.outputs, step.attempts = StepStatus.SUCCEEDED, workflow.now(), outputs, 1

    def _settle(self, step_id: str, task: asyncio.Task[StepOutcome]) -> None:
        step = self.state.steps[step_id]
        try:
            outcome = task.result()
        except asyncio.CancelledError:
            step.status, step.finished_at = StepStatus.CANCELLED, workflow.now()
            return
        except FailureError as e:  # activities wrap the cause in ActivityError; local activities may not
            cause = e.cause if isinstance(e, ActivityError) else e
            if isinstance(cause, CancelledError):
                step.status, step.finished_at = StepStatus.CANCELLED, workflow.now()
            else:
                self._fail(step_id, _describe(cause, self.plans[step_id]))
            return
        step.status = StepStatus.SUCCEEDED
        step.finished_at = workflow.now()
        step.attempts = outcome.attempt
        step.duration_ms = round(outcome.duration_ms, 3)
        step.outputs = outcome.outputs
        step.score = outcome.score
        self._step_hits += outcome.hits
        if self.world is not None and self.plans[step_id].type == "deploy_env" and "instance" in outcome.outputs:
            self.world.state.instances[step_id] = outcome.outputs["instance"]
            self._push_needed = self._watches_added = True

    def _fail(self, step_id: str, message: str) -> None:
        step = self.state.steps[step_id]
        step.status, step.error, step.finished_at = StepStatus.FAILED, message, workflow.now()
        if self.plans[step_id].on_failure is FailurePolicy.FAIL and not self.state.error:
            self.state.error = f"step '{step_id}' failed: {message}"

    async def _stop_running(self) -> None:
        """Cancel steps still running and mark everything not started as skipped."""
        for task in self.running.values():
            task.cancel()
        if self.running:
            await asyncio.gather(*self.running.values(), return_exceptions=True)
        for step_id in list(self.running):
            self._settle(step_id, self.running.pop(step_id))
        reason = f"the world ended: {self.world.state.ended}" if self.world and self.world.state.ended else None
        for step_id in list(self.waiting):
            step = self.state.steps[step_id]
            step.status, step.finished_at = StepStatus.CANCELLED, workflow.now()
            step.error = reason
        self.waiting.clear()
        for step in self.state.steps.values():
            if step.status is StepStatus.PENDING:
                step.status = StepStatus.SKIPPED
                step.error = f"skipped: {reason}" if reason else "skipped: the run stopped"

    # -- the world --

    async def _advance_world(self) -> None:
        if self.world is None:
            return
        if self._push_needed:
            await self._push()
        while not self.world.state.ended and not self.state.error:
            real = self._now_real()
            self.world.arrive_early(real, EARLY)
            item = self.world.due(real)
            if item is None:
                if self.running or not self.world.jump(real):
                    break
                self._push_needed = True
                continue
            try:
                await self._handle(item)
            except WorldError as e:
                self.state.error = f"the world failed: {e}"
        if self._push_needed and not self.state.error:
            await self._push()

    async def _handle(self, item: Scheduled) -> None:
        assert self.world is not None  # items are scheduled only in a run with a world
        clock = self.world.state.clock
        if clock is not None and clock.mode == "paced":
            # The clock stalls at the event while its actions run (agents see no time past an event
            # whose effects are not all there yet), then resumes from its anchor: it catches up the
            # stall instead of losing it, never passing the next event.
            self.world.hold = item.at
            clock.horizon = self.world.horizon()
            self._push_needed = True
            try:
                await self._apply(item)
            finally:
                self.world.hold = None
                clock.horizon = self.world.horizon()
                self._push_needed = True
        else:
            await self._apply(item)

    async def _apply(self, item: Scheduled) -> None:
        if item.kind == "wake":
            assert item.step is not None  # (a wake names its step)
            step = self.state.steps[item.step]
            self.waiting.discard(item.step)
            step.status, step.finished_at = StepStatus.SUCCEEDED, workflow.now()
            step.outputs, step.attempts = {"now": _iso(item.at)}, 1
        elif item.kind == "trigger":
            assert self.world is not None and item.trigger is not None  # (a trigger item: a run with a world)
            firing, immediate = self.world.fire(item.trigger, item.at, {"at": _iso(item.at)})
            self._push_needed = True
            for index in immediate:
                await self._run_action(item.trigger, firing, index, {"at": _iso(item.at)})
        else:
            assert item.trigger is not None and item.firing is not None and item.action is not None  # (a delayed action's)
            await self._run_action(item.trigger, item.firing, item.action, item.match or {})

    async def _on_hit(self, hit: TriggerHit) -> HitAck:
        if self.world is None:
            return HitAck(accepted=False, reason="this run has no triggers")
        real = self._now_real()
        if hit.trigger.endswith("#unless"):
            cancelled = self.world.cancel([hit.trigger.removesuffix("#unless")], real, cause=f"unless: {hit.match}")
            self._push_needed = True
            return HitAck(accepted=bool(cancelled))
        reason = self.world.accepts(hit.trigger)
        if reason is not None:
            return HitAck(accepted=False, reason=reason)
        firing, immediate = self.world.fire(hit.trigger, hit.virtual_time, hit.match)
        self._push_needed = True
        for index in immediate:
            await self._run_action(hit.trigger, firing, index, hit.match)
        if self._push_needed:
            await self._push()
        return HitAck(accepted=True, firing=firing)

    async def _run_action(self, trigger: str, firing: int, index: int, match: dict[str, Any]) -> None:
        world = self.world
        assert world is not None  # actions run only in a run with a world
        action = world.triggers[trigger].actions[index]
        real = self._now_real()
        at = world.now(real)
        scope = {**self._scope(), "match": match, "trigger": {"id": trigger, "fires": world.state.triggers[trigger].fires}}
        detail: dict[str, Any] = {"type": action.type, "index": index}
        hits: list[dict[str, Any]] = []
        try:
            spec = resolve(action.model_dump(mode="json", exclude={"delay"}), scope)
            if action.type in ("call_tool", "set_tools", "instruct"):
                instance = world.state.instances.get(spec["env"])
                if instance is None:
                    raise WorldError(f"environment {spec['env']!r} is not deployed (yet)")
                if action.type == "instruct" and spec.get("by"):
                    spec["deployed"] = self._deployed_agent(spec["by"], spec["agent"])
                if self._watches_added or (spec.get("deployed") and self._push_needed):
                    await self._push()  # conditions the gateway does not know yet; the clock an agent reads
                answer = await workflow.execute_local_activity(
                    WORLD_ACTION, args=[instance, spec, f"{self.inp.run_id}/world/{firing}/{index}",
                                        f"trigger {trigger}", _iso(at)],
                    result_type=dict, retry_policy=QUICK_RETRY,
                    start_to_close_timeout=timedelta(minutes=5) if spec.get("deployed") else timedelta(seconds=60))
                hits = answer.pop("hits", [])
                detail.update(answer)
            elif action.type == "set_clock":
                world.set_clock(real, time=spec.get("time"), rate=spec.get("rate"), mode=spec.get("mode"),
                                cause=f"trigger {trigger}")
                self._push_needed = True
            elif action.type == "register_triggers":
                detail["registered"] = world.register(spec["ids"], real)
                self._push_needed = self._watches_added = True
            elif action.type == "cancel_triggers":
                detail["cancelled"] = world.cancel(spec["ids"], real, cause=f"trigger {trigger}")
                self._push_needed = True
            elif action.type == "end_run":
                world.state.ended = spec["reason"]
                world.log("ended", at, trigger=trigger, firing=firing, detail={"reason": spec["reason"]})
        except (TemplateError, WorldError, ValueError) as e:
            detail["error"] = str(e)
        world.log("action", at, trigger=trigger, firing=firing, detail=detail)
        for hit in hits:
            await self._on_hit(TriggerHit.model_validate(hit))

    def _pushes(self) -> list[tuple[str, WorldPush]]:
        assert self.world is not None  # pushed only in a run with a world
        return [(instance, WorldPush(run_id=self.inp.run_id, clock=self.world.state.clock,
                                     watches=self.world.watches(step)))
                for step, instance in self.world.state.instances.items()]

    async def _apply_step_hits(self) -> None:
        hits, self._step_hits = self._step_hits, []
        for hit in hits:
            await self._on_hit(TriggerHit.model_validate(hit))

    async def _watches_pushed(self) -> None:
        """A step that starts right after triggers were registered waits until the gateway watches for
        them: its calls (say, an email to a persona) must be able to fire them."""
        if self._watches_added and self._pushing is None:
            self._pushing = asyncio.create_task(self._push())
        if self._pushing is not None:
            pushing = self._pushing
            await pushing
            if self._pushing is pushing:
                self._pushing = None

    async def _push(self) -> None:
        """Tell every instance of the run the world's clock and the conditions to watch."""
        self._push_needed = self._watches_added = False
        pushes = self._pushes()
        if pushes:
            hits = await workflow.execute_local_activity(
                PUSH_WORLD, pushes, result_type=list, start_to_close_timeout=timedelta(seconds=30),
                retry_policy=QUICK_RETRY)
            for hit in hits:
                await self._on_hit(TriggerHit.model_validate(hit))

    # -- continue-as-new, conclusion, records --

    def _history_is_long(self) -> bool:
        info = workflow.info()
        return (info.is_continue_as_new_suggested() or info.get_current_history_length() >= self.inp.continue_as_new_at
                or self._updates >= UPDATES_PER_RUN)

    async def _drain_and_continue_as_new(self) -> None:
        """Let running steps finish (no new ones start), then continue in a fresh history. Prompts played
        by a trainer are not waited for: their progress is carried and they go on in the next run."""
        for step_id in [sid for sid in self.running if sid in self.state.trainer]:
            task = self.running.pop(step_id)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        while self.running:
            await workflow.wait(list(self.running.values()), return_when=asyncio.FIRST_COMPLETED)
            for step_id in [sid for sid, task in self.running.items() if task.done()]:
                self._settle(step_id, self.running.pop(step_id))
        await self._apply_step_hits()
        if self.state.error:
            return  # the run is ending anyway
        if self._pace is not None:
            self._pace.cancel()
        self._closing = "continued"  # trainers waiting for a turn ask the next run
        await workflow.wait_condition(workflow.all_handlers_finished)
        if workflow.patched(PATCH_BOUNDS):
            self._bound_state(MAX_CARRIED_EVENTS)
        workflow.continue_as_new(self.inp.model_copy(update={"carried": self.state}))

    async def _conclude(self) -> None:
        if self._pace is not None:
            self._pace.cancel()
        self._closing = "ended"
        for progress in self.state.trainer.values():
            progress.offer = None
        await workflow.wait_condition(workflow.all_handlers_finished)  # hits being applied finish first
        self.state.finished_at = workflow.now()
        self.state.conclude()
        if self.inp.search_attributes:
            updates: list[SearchAttributeUpdate[Any]] = [attributes.STATUS.value_set(self.state.status.value)]
            if self.state.score is not None:
                updates.append(attributes.SCORE.value_set(self.state.score))
            workflow.upsert_search_attributes(updates)
        result: dict[str, Any] = {
            "status": self.state.status.value,
            "score": self.state.score,
            "steps": {sid: s.status.value for sid, s in self.state.steps.items()},
        }
        if self.world is not None and self.world.state.clock is not None:
            result["virtual_time"] = _iso(self.world.now(self._now_real()))
            result["events"] = len(self.world.state.events) + sum(self.world.state.dropped.values())
        workflow.upsert_memo({"result": result})
        await self._release_sandboxes()
        if workflow.patched(PATCH_BOUNDS):
            self._bound_state()
        await self._record()

    def _bound_state(self, keep_events: int | None = None) -> None:
        """Before the state enters history (continue-as-new, the result): the event log keeps its latest
        `keep_events`, and past MAX_STATE_BYTES the largest parts are clipped, and the state says so."""
        world = self.state.world
        if world is not None and keep_events is not None:
            world.trim_events(keep_events)
        size = json_size(self.state.model_dump(mode="json"))
        if size <= MAX_STATE_BYTES:
            return
        parts = sorted(self._clippable(), key=lambda p: -p[0])
        for part_size, what, get, put in parts:
            if size <= MAX_STATE_BYTES:
                break
            clipped = clip(get(), MAX_FIELD_BYTES)
            put(clipped)
            size -= part_size - json_size(clipped)
            self.state.clipped.append(f"{what}: {part_size} bytes clipped to a preview (the run's state is "
                                      f"bounded at {MAX_STATE_BYTES} bytes)")
        if size > MAX_STATE_BYTES and world is not None:
            dropped = world.trim_events(min(len(world.events), 100))
            self.state.clipped.append(f"{dropped} more world events dropped from the log (counted in `dropped`)")

    def _clippable(self) -> list[tuple[int, str, Any, Any]]:
        """The state's parts that can be clipped: (size, name, get, put)."""
        parts: list[tuple[int, str, Any, Any]] = []
        for sid, step in self.state.steps.items():
            for key in list(step.outputs):
                parts.append((json_size(step.outputs[key]), f"steps.{sid}.outputs.{key}",
                              lambda o=step.outputs, k=key: o[k], lambda v, o=step.outputs, k=key: o.__setitem__(k, v)))
        if self.state.world is not None:
            for event in self.state.world.events:
                parts.append((json_size(event.detail), f"world event {event.seq}",
                              lambda e=event: e.detail, lambda v, e=event: setattr(e, "detail", v)))
        for sid, progress in self.state.trainer.items():
            for i, entry in enumerate(progress.transcript[:-1]):  # the last one is being answered
                parts.append((json_size(entry), f"steps.{sid} transcript entry {i}",
                              lambda t=progress.transcript, i=i: t[i]["text"],
                              lambda v, t=progress.transcript, i=i: t[i].__setitem__("text", str(v))))
        return parts

    async def _release_sandboxes(self) -> None:
        """Sandboxes never outlive their run; if this fails the reaper removes them (their run is over)."""
        ran = [sid for sid in self.plans if self.state.steps[sid].status not in (StepStatus.PENDING, StepStatus.SKIPPED)]
        started = [sid for sid in ran if _has_sandboxes(self.plans[sid].type, self.plans[sid].config)]
        # Whatever else the run holds on the gateway (instances, hosted agents) is released too.
        used_gateway = any(self.plans[sid].type in ("deploy_env", "deploy_agent") for sid in ran)
        if not started and not (used_gateway and workflow.patched(PATCH_RELEASE_ALL)):
            return
        # Env instances are retired on the gateway too; agents' sandboxes are only removed (with all the run's).
        instances = [f"{self.inp.run_id}.{sid}" for sid in started if self.plans[sid].type == "deploy_env"]
        try:
            await workflow.execute_activity(
                RELEASE_SANDBOXES, args=[self.inp.run_id, instances, bool(started)], result_type=dict,
                start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=timedelta(seconds=20),
                retry_policy=RetryPolicy(maximum_attempts=5))
        except ActivityError as e:
            workflow.logger.warning("releasing sandboxes failed (the reaper will remove them): %s", e.cause or e)

    async def _record(self) -> None:
        await workflow.execute_local_activity(
            RECORD_RUN, self.state, start_to_close_timeout=timedelta(seconds=30), retry_policy=QUICK_RETRY
        )


def _has_sandboxes(step_type: str, config: dict[str, Any]) -> bool:
    """The step starts sandboxes: a deploy_env with sandboxed apps, or a deploy_agent of a sandboxed a2a agent."""
    record = config.get("record") or {}
    if step_type == "deploy_agent":
        return record.get("type") == "a2a" and bool((record.get("config") or {}).get("sandbox"))
    return step_type == "deploy_env" and any(isinstance(app, dict) and app.get("sandbox")
                                             for app in record.get("apps", []))


def _played_by_trainer(plan: StepPlan, config: dict[str, Any]) -> bool:
    if plan.type != "prompt_agent":
        return False
    sides = (config.get("deployed"), config.get("partner_deployed"))
    return any(isinstance(who, dict) and who.get("trainer") for who in sides)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def _describe(cause: BaseException | None, plan: StepPlan) -> str:
    if isinstance(cause, TimeoutError):
        kind = cause.type.name.lower().replace("_", "-") if cause.type else "timeout"
        limit = format_duration(plan.heartbeat_timeout if "heartbeat" in kind and plan.heartbeat_timeout else plan.timeout)
        return f"timed out ({kind}, limit {limit})"
    if isinstance(cause, ApplicationError):
        return cause.message
    return str(cause)
