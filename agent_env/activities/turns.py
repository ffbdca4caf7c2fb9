"""Agents' turns in prompts a trainer plays: the workflow holds the conversation, these do the I/O (where the
trajectories begin, a hosted or A2A agent's turn, the transcript kept and the step's outputs made)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity

from agent_env.activities.shared import HEARTBEAT_EVERY, Activities, fatal, keep_heartbeating, step_failed
from agent_env.agents.conversation import turn_number
from agent_env.steps import StepFailed
from agent_env.workflows import contract
from agent_env.workflows.contract import AgentAnswer, AgentAsk, PromptFinish, Who

# The agents' step type loads as the step registry loads step types, with its first use, and the agents' client
# loads the A2A SDK: both are imported with the first turn, not with the worker.


class TurnActivities(Activities):
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
        beat = asyncio.create_task(keep_heartbeating(HEARTBEAT_EVERY))
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
            raise step_failed(e) from None
        finally:
            beat.cancel()
        if reply.failed:
            raise fatal(f"{ask.who['name']} could not answer ({reply.state}): {reply.text[:500]}", "StepFailed")
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
