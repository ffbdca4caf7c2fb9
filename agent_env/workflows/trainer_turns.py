"""Episodes: a trainer plays agents from its own loop, and the run holds their conversations.

A prompt step with a side played by a trainer is not an activity: the conversation is workflow state
(`RunState.trainer`, carried across continue-as-new). The trainer's turns travel as updates: `next_turn`
waits for a turn to be offered, `end_turn` answers it, `abandon` gives the episode up. Hosted and A2A agents
on the other side answer through activities. Validators refuse what does not belong to the run or is too big,
before it reaches history.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Container, Mapping
from datetime import timedelta
from typing import Any, TypedDict

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from agent_env.agents import conversation
    from agent_env.spec.run import StepOutcome, StepPlan, StepStatus, TrainerProgress, TurnOffer
    from agent_env.workflows.contract import (
        AGENT_ASK,
        PROMPT_FINISH,
        PROMPT_MARKS,
        QUICK_RETRY,
        AgentAsk,
        PromptFinish,
        Who,
    )
    from agent_env.workflows.dag import Dag
    from agent_env.workflows.details import summary

MAX_RESPONSE_BYTES = 64 * 1024
MAX_REASON_CHARS = 2000
MAX_NAME_CHARS = 256
MAX_ASK_TRANSCRIPT_BYTES = 256 * 1024  # the recent conversation an agent asked by the run is sent
PATCH_ASK_TAIL = "agent-ask-tail"  # (workflow.patched) agents are asked with the conversation's tail


class EndTurnReply(TypedDict, total=False):
    """`end_turn`'s answer: the turn answered (`duplicate`: it already was, the answer sent again changed nothing)."""

    turn: str
    duplicate: bool


class TurnReply(TypedDict, total=False):
    """`next_turn`'s answer: the turn waiting (a TurnOffer as JSON), or why none will come ("ended", "continued");
    `answer` adds the answer it took first (`ended`)."""

    turn: dict[str, object]
    closing: str | None
    ended: EndTurnReply


class AbandonReply(TypedDict):
    abandoned: str | None  # the reason the episode was given up for


def played_by_trainer(plan: StepPlan, config: dict[str, Any]) -> bool:
    return plan.conversation and conversation.played_by_trainer(config)


class TrainerTurns:
    """The conversations are the run's state (`RunState.trainer`, through its DAG); `wake` tells the run's loop to
    look again, `changed` whether the run takes a patched behaviour (continuation.changed)."""

    def __init__(self, run_id: str, dag: Dag, wake: asyncio.Event, changed: Callable[[str], bool]) -> None:
        self.run_id = run_id
        self.dag = dag
        self.wake = wake
        self.changed = changed
        self.closing: str | None = None  # "continued" or "ended": trainers waiting for a turn are told
        self.abandoned: str | None = None  # the trainer's reason, when it abandoned the episode

    # -- the updates (their handlers and validators are declared on TaskRun) --

    async def next_turn(self, agent: str | None) -> TurnReply:
        self.wake.set()
        await workflow.wait_condition(lambda: self._offer(agent) is not None or self.closing is not None)
        offer = self._offer(agent) if self.closing is None else None
        return {"turn": offer.model_dump(mode="json")} if offer else {"closing": self.closing}

    @staticmethod
    def check_agent(agent: str | None) -> None:
        if agent is not None and (not isinstance(agent, str) or not agent or len(agent) > MAX_NAME_CHARS):
            raise ValueError(f"`agent` is an agent's name (at most {MAX_NAME_CHARS} characters), or none")

    def end_turn(self, turn_id: str, response: str) -> EndTurnReply:
        progress = self._progress_of(turn_id)
        if turn_id in progress.answers:
            return {"turn": turn_id, "duplicate": True}
        progress.answers[turn_id] = response
        self.wake.set()
        return {"turn": turn_id}

    def check_answer(self, turn_id: str, response: str) -> None:
        if not isinstance(turn_id, str) or len(turn_id) > MAX_NAME_CHARS:
            raise ValueError(f"a turn id is text of at most {MAX_NAME_CHARS} characters")
        self._progress_of(turn_id)  # refused before it reaches history when no such turn is (or was) offered
        if not isinstance(response, str):
            raise ValueError("the response must be text")
        if len(response.encode(errors="replace")) > MAX_RESPONSE_BYTES:
            raise ValueError(f"the response is over the limit of {MAX_RESPONSE_BYTES} bytes: shorten it")

    def abandon(self, reason: str) -> AbandonReply:
        if self.abandoned is None and not self.dag.state.status.finished:
            self.abandoned = reason or "no reason given"
            self.wake.set()
        return {"abandoned": self.abandoned}

    @staticmethod
    def check_reason(reason: str) -> None:
        if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
            raise ValueError(f"the reason is text of at most {MAX_REASON_CHARS} characters")

    def close(self, how: str) -> None:
        """No more turns in this run: "continued" (trainers ask the next run) or "ended" (offers withdrawn)."""
        self.closing = how
        if how == "ended":
            for progress in self.dag.state.trainer.values():
                progress.offer = None

    def _offer(self, agent: str | None) -> TurnOffer | None:
        for progress in self.dag.state.trainer.values():
            offer = progress.offer
            if offer is not None and offer.id not in progress.answers and (agent is None or offer.agent == agent):
                return offer
        return None

    def _progress_of(self, turn_id: str) -> TrainerProgress:
        step = turn_id.split("/", 1)[0]
        progress = self.dag.state.trainer.get(step)
        if progress is None or (
            turn_id not in progress.answers and (progress.offer is None or progress.offer.id != turn_id)
        ):
            raise ValueError(f"no turn {turn_id!r} is waiting for an answer")
        return progress

    # -- the prompts a trainer plays --

    def carried(self, running: Container[str]) -> list[StepPlan]:
        """After a continue-as-new: the prompts a trainer was playing, to go on from their carried progress."""
        dag = self.dag
        return [
            dag.plans[step_id]
            for step_id in dag.state.trainer
            if dag.step(step_id).status is StepStatus.RUNNING and step_id not in running
        ]

    async def prompt(self, plan: StepPlan, raw: Mapping[str, Any]) -> StepOutcome:
        """A prompt step with a side played by a trainer: the conversation is held here; the trainer's turns are
        offered (next_turn) and answered (end_turn); hosted agents answer through activities."""
        state = self.dag.state
        config = conversation.PromptAgentConfig.model_validate(raw)
        agent, partner = config.deployed, config.partner_deployed
        deadline = config.turn_deadline.total_seconds()
        progress = state.trainer.get(plan.id)
        if progress is None:
            marks = await workflow.execute_local_activity(
                PROMPT_MARKS.name,
                args=[agent, partner],
                result_type=PROMPT_MARKS.returns,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=QUICK_RETRY,
                summary=summary(f"{plan.id} ({plan.type}): mark where the trajectories begin"),
            )
            progress = state.trainer[plan.id] = TrainerProgress(transcript=[conversation.opening(config)], marks=marks)
        started = workflow.now()
        timed_out = None
        while (side := conversation.next_side(config, progress.transcript)) is not None:
            who = agent if side == "agent" else partner
            if who.get("trainer"):
                entry = await self._answer(plan.id, progress, who, side, config, deadline)
            else:
                ask = AgentAsk(
                    who=who,
                    side=side,
                    transcript=progress.transcript,
                    run_id=self.run_id,
                    step_id=plan.id,
                    system_prompt=conversation.system_prompt_for(config, side),
                    deadline=deadline,
                    seed=config.seed,
                )
                if self.changed(PATCH_ASK_TAIL):  # not the whole transcript on every turn
                    ask.transcript = conversation.tail(progress.transcript, MAX_ASK_TRANSCRIPT_BYTES)
                    ask.turn = conversation.turn_number(progress.transcript, side)
                answer = await workflow.execute_activity(
                    AGENT_ASK.name,
                    ask,
                    result_type=AGENT_ASK.returns,
                    start_to_close_timeout=timedelta(seconds=deadline + 30),
                    heartbeat_timeout=timedelta(seconds=30),
                    retry_policy=QUICK_RETRY,
                    summary=summary(f"{plan.id} ({plan.type}): {str(who.get('name'))[:80]} answers as {side}"),
                )
                entry = answer.entry
                timed_out = answer.timed_out
            if entry is None:
                timed_out = timed_out or f"{who['name']} did not answer within {deadline:g}s"
                break
            progress.transcript.append(entry)
        outputs = await workflow.execute_local_activity(
            PROMPT_FINISH.name,
            PromptFinish(
                run_id=self.run_id,
                step_id=plan.id,
                transcript=progress.transcript,
                marks=progress.marks,
                agent=agent,
                partner=partner,
                timed_out=timed_out,
                seconds=(workflow.now() - started).total_seconds(),
            ),
            result_type=PROMPT_FINISH.returns,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=QUICK_RETRY,
            summary=summary(f"{plan.id} ({plan.type}): keep the transcript"),
        )
        del state.trainer[plan.id]
        if timed_out and config.on_timeout == "fail":
            raise ApplicationError(timed_out, type="StepFailed", non_retryable=True)
        return StepOutcome(outputs=outputs, score=conversation.timeout_score(timed_out))

    async def _answer(
        self,
        step_id: str,
        progress: TrainerProgress,
        who: Who,
        side: str,
        config: conversation.PromptAgentConfig,
        deadline: float,
    ) -> dict[str, Any] | None:
        """Offer the turn to the trainer and wait for its answer (None past the deadline)."""
        turn = conversation.turn_number(progress.transcript, side)
        turn_id = f"{step_id}/{side}/{turn}"
        if progress.offer is None or progress.offer.id != turn_id:
            progress.offer = TurnOffer(
                id=turn_id,
                step=step_id,
                agent=who["name"],
                role=who.get("role"),
                env=who.get("env"),
                mcp_url=who.get("mcp_url"),
                prompt=progress.transcript[-1]["text"],
                system_prompt=conversation.system_prompt_for(config, side),
                conversation=conversation.conversation_view(
                    conversation.tail(progress.transcript, MAX_ASK_TRANSCRIPT_BYTES), side
                ),
                deadline_s=deadline,
            )
        offered = workflow.now()
        try:
            await workflow.wait_condition(
                lambda: turn_id in progress.answers,
                timeout=deadline,
                timeout_summary=summary(f"the trainer's turn {turn_id} ({deadline:g}s deadline)"),
            )
        except builtins.TimeoutError:  # (not Temporal's TimeoutError)
            progress.offer = None
            return None
        progress.offer = None
        return {
            "side": side,
            "speaker": who["name"],
            "text": progress.answers[turn_id],
            "seconds": round((workflow.now() - offered).total_seconds(), 3),
        }
