"""The built-in agents: scripted, llm, persona, human."""

from __future__ import annotations

import asyncio
import html
from collections.abc import Sequence
from typing import Any

from agent_env.agents.models import Endpoints, ModelError, mcp_tools_as_functions
from agent_env.agents.sdk import Agent, Answer, ToolFailed, Turn
from agent_env.agents.wire import Wire
from agent_env.errors import BadInput
from agent_env.spec.agent import AgentRecord, HumanConfig, InlineSkill, LlmConfig, PersonaConfig, ScriptedConfig

SKILLS_HEADING = (
    "# Skills\n\nYou have these skills: instructions for particular kinds of work. Each one is between its own "
    "<skill> and </skill> tags; when a task calls for a skill, follow its instructions. Only their text is here "
    "(files a skill mentions are not)."
)


def with_skills(system_prompt: str, skills: Sequence[InlineSkill]) -> str:
    """The system prompt with the agent's skills after it, each fenced by its own tags (name and description on
    the opening one), so a model can tell where each skill begins and ends."""
    if not skills:
        return system_prompt
    fenced = [
        f'<skill name="{s.name}" description="{html.escape(s.description)}">\n{s.skill_md.strip()}\n</skill>'
        for s in skills
    ]
    return "\n\n".join(filter(None, [system_prompt.strip(), SKILLS_HEADING, *fenced]))


class ScriptedAgent(Agent):
    """Plays its Nth turn on its Nth prompt (the last one again if asked more). Deterministic."""

    config_fields = ()  # no model: a system prompt would not be followed, so its card does not take one

    def __init__(self, record: AgentRecord) -> None:
        self.name, self.description = record.name, record.description or "A scripted agent."
        self.config: ScriptedConfig = record.typed_config()

    async def answer(self, turn: Turn) -> Answer:
        actions = self.config.turns[min(turn.number, len(self.config.turns) - 1)]
        said, calls = "", []
        if any(a.tool for a in actions):
            async with turn.tools() as tools:
                for action in actions:
                    if action.tool:
                        try:
                            await tools.call(action.tool, action.arguments)
                        except ToolFailed:
                            pass  # recorded in calls, as a real agent would see it
                    else:
                        said = action.say  # type: ignore[assignment]  # ScriptedAction: no tool, so a `say`
                calls = tools.calls
        else:
            said = next(a.say for a in actions if a.say is not None)
        return Answer(text=said.replace("${prompt}", turn.prompt), data={"tool_calls": calls})


class LlmAgent(Agent):
    """A chat model using the environment's tools in a loop, within a tool-call and a time budget."""

    def __init__(self, record: AgentRecord, endpoints: Endpoints, skills: Sequence[InlineSkill] = ()) -> None:
        self.name, self.description = record.name, record.description or "A model-driven agent."
        self.config: LlmConfig = record.typed_config()
        self.endpoints, self.skills = endpoints, skills

    async def answer(self, turn: Turn) -> Answer:
        model = self.endpoints.open("agent", turn.settings)
        messages: list[Wire] = [
            {"role": "system", "content": with_skills(turn.system_prompt or self.config.system_prompt, self.skills)}
        ]
        for m in turn.conversation:
            messages.append({"role": "assistant" if m.get("from") == "agent" else "user", "content": m.get("text", "")})
        messages.append({"role": "user", "content": turn.prompt})
        try:
            async with asyncio.timeout(self.config.time_budget.total_seconds()):
                if turn.mcp_url:
                    async with turn.tools() as tools:
                        return await tool_loop(model, messages, tools, self.config.max_tool_calls, self.name, turn.seed)
                return await tool_loop(model, messages, None, self.config.max_tool_calls, self.name, turn.seed)
        except TimeoutError:
            said = f"out of time ({self.config.time_budget.total_seconds():g}s budget)"
            return Answer(text=said, data={"usage": model.usage}, failed=True)
        finally:
            await model.aclose()


async def tool_loop(model, messages: list[Wire], tools, max_calls: int, user: str, seed: int | None = None) -> Answer:
    """Ask the model; run the tool calls it makes; repeat until it answers (or its calls run out)."""
    functions = mcp_tools_as_functions(await tools.list()) if tools else None
    calls = 0
    while True:
        reply = await model.complete(messages, functions if calls < max_calls else None, user=user, seed=seed)
        if not reply.tool_calls:
            calls_made = tools.calls if tools else []
            return Answer(text=reply.content or "", data={"tool_calls": calls_made, "usage": model.usage})
        messages.append(
            {
                "role": "assistant",
                "content": reply.content,
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _json(c.arguments)}}
                    for c in reply.tool_calls
                ],
            }
        )
        for call in reply.tool_calls:
            calls += 1
            try:
                result = await tools.call(call.name, call.arguments) if tools else "no tools here"
            except ToolFailed as e:
                result = f"error: {e}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": _json(result)})


PERSONA_TOOL_CALLS = 10  # a person replying to something does a few things, not a project


class PersonaAgent(Agent):
    """A simulated person: a model playing them from their brief, or (and as a fallback) templated replies.
    Given an environment (a world trigger's instruction), the model acts in it with the person's tools."""

    def __init__(self, record: AgentRecord, endpoints: Endpoints, skills: Sequence[InlineSkill] = ()) -> None:
        self.name, self.description = record.name, record.description or "A simulated person."
        self.config: PersonaConfig = record.typed_config()
        self.endpoints, self.skills = endpoints, skills

    async def answer(self, turn: Turn) -> Answer:
        if self.config.llm:
            try:
                return await self._model_answer(turn)
            except (ModelError, BadInput) as e:
                templated = self._templated(turn.prompt)
                return Answer(text=templated, data={"fallback": str(e)})
        return Answer(text=self._templated(turn.prompt))

    def _templated(self, said: str) -> str:
        for reply in self.config.replies:
            if reply.hit(said):
                return reply.say.replace("${message}", said)
        return self.config.default_reply.replace("${message}", said)

    async def _model_answer(self, turn: Turn) -> Answer:
        model = self.endpoints.open("persona", turn.settings)
        try:
            messages = [
                {
                    "role": "system",
                    "content": with_skills(
                        f"You are playing this person. Stay in character.\n\n"
                        f"{self.config.brief}\n\n{turn.system_prompt}".strip(),
                        self.skills,
                    ),
                }
            ]
            for m in turn.conversation:
                messages.append({"role": "assistant" if m.get("from") == "agent" else "user", "content": m["text"]})
            messages.append({"role": "user", "content": turn.prompt})
            if turn.mcp_url:
                async with turn.tools() as tools:
                    return await tool_loop(model, messages, tools, PERSONA_TOOL_CALLS, self.name, turn.seed)
            reply = await model.complete(messages, user=self.name, seed=turn.seed)
            if not reply.content:
                raise ModelError("the model said nothing")
            return Answer(text=reply.content, data={"usage": model.usage})
        finally:
            await model.aclose()


class HumanAgent(Agent):
    """A person answers through the CLI: `agent-env agents answer AGENT TEXT` (see `agents pending`)."""

    def __init__(self, record: AgentRecord, inbox) -> None:
        self.name, self.description = record.name, record.description or "A person at a terminal."
        self.config: HumanConfig = record.typed_config()
        self.inbox = inbox

    async def answer(self, turn: Turn) -> Answer:
        key = self.inbox.ask(self.name, turn)
        while (answer := self.inbox.answer(key)) is None:
            await asyncio.sleep(0.2)
        return Answer(text=answer)


def build_agent(record: AgentRecord, endpoints: Endpoints, inbox, skills: Sequence[InlineSkill] = ()) -> Agent:
    """`skills` reach the agents whose model reads them (llm, persona); a scripted agent plays its script."""
    if record.type == "scripted":
        return ScriptedAgent(record)
    if record.type == "llm":
        return LlmAgent(record, endpoints, skills)
    if record.type == "persona":
        return PersonaAgent(record, endpoints, skills)
    if record.type == "human":
        return HumanAgent(record, inbox)
    raise ValueError(f"agents of type {record.type!r} are not hosted by agent-env")


def _json(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
