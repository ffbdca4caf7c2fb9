"""Talking to deployed agents over A2A: `prompt_agent`, its turns (`ask`), its transcript and its end.

An agent is deployed by a `deploy_agent` step (`agent_deploy`) and later steps name that step.
Turns are sent with stable message ids, so a step retried after a crash gets the answers the agent
already gave instead of making it work twice (hosted agents guarantee it; your own agents may use the id).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]  # (it comes with mcp)
from jsonschema.validators import validator_for  # type: ignore[import-untyped]

from agent_env.agents.conversation import (  # noqa: F401 - StopWhen, Conversation, tail: imported from here too
    URL_PARTNER,
    Conversation,
    OutputFormat,
    PromptAgentConfig,
    StopWhen,
    agent_turns,
    conversation_view,
    next_side,
    opening,
    system_prompt_for,
    tail,
    timeout_score,
    turn_number,
)
from agent_env.agents.extension_ops import TRIGGERS
from agent_env.agents.extension_table import AGENT_CONFIG
from agent_env.agents.extensions import ExtensionClient, ExtensionRefused
from agent_env.agents.usage import summed
from agent_env.spec.run import PlannedConfig
from agent_env.spec.templates import ref
from agent_env.spec.world_state import MAX_FIELD_BYTES, clip
from agent_env.steps import PlanContext, StepContext, StepFailed, StepResult, step_type
from agent_env.steps.builtin.agent_extensions import partner_decision
from agent_env.steps.builtin.agent_state import capture_state
from agent_env.stores import in_thread, keys

if TYPE_CHECKING:
    from agent_env.agents.client import AgentReply
    from agent_env.config import Settings
    from agent_env.gateway_client import GatewayClient
    from agent_env.gateway_client.wire import JsonObject
    from agent_env.stores import Stores

MAX_ANSWER_CHARS = 16_000  # answers in step outputs (run history) are cut here; transcripts keep all


def transcript_key(run_id: str, step: str) -> str:
    return keys.transcript(run_id, step)


def message_key(run_id: str, step: str, side: str, turn: int) -> str:
    return keys.message(run_id, step, side, turn)


def kept_apart(stores: Stores, entry: dict[str, Any], key: str) -> dict[str, Any]:
    """A transcript entry small enough for history: a long text goes to the object store (`text_key`) and
    the entry keeps its start; large data is clipped. finish_prompt puts the whole text back."""
    out = dict(entry)
    if len(entry["text"]) > MAX_ANSWER_CHARS:
        stores.objects.put(key, entry["text"].encode())
        out.update(text=entry["text"][:MAX_ANSWER_CHARS], text_key=key, text_chars=len(entry["text"]))
    for large in ("data", "trajectory"):
        if large in out:
            out[large] = clip(out[large], 4 * MAX_FIELD_BYTES)
    return out


def expanded(stores: Stores, transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript with the texts kept apart put back."""
    out = []
    for entry in transcript:
        if entry.get("text_key"):
            text = stores.objects.get(entry["text_key"]).decode()
            entry = {k: v for k, v in entry.items() if k not in ("text_key", "text_chars")} | {"text": text}
        out.append(entry)
    return out


# -- prompt --

# The prompt's config and the conversation's rules (who speaks next, what each side sees) live in
# agent_env.agents.conversation: the workflow holds prompts a trainer plays with the same functions.


def prepare_prompt(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """The deploy steps' outputs, resolved by the workflow when this step starts."""
    config["deployed"] = ref(f"steps.{config['agent']}.outputs")
    config["seed"] = ref("run.seed")
    conversation = config.get("conversation")
    partner = (conversation.get("partner") if isinstance(conversation, dict) else None) or config.get("user_agent")
    if isinstance(partner, str):
        config["partner_deployed"] = ref(f"steps.{partner}.outputs")
    return config


def reached_at(url: str) -> JsonObject:
    """A partner the task did not deploy, as a deployed one is described: not hosted (so it gets no credential
    of ours), in no environment (so it gets no role token)."""
    return {"name": URL_PARTNER, "url": url, "hosted": False}


def said_as(format_given: bool, text: str) -> tuple[str, bool, JsonObject]:
    """A partner's reply asked for in a format: (what it says, whether it is done, its other fields). A reply that
    is not such a JSON object is what it says, as the framework takes it."""
    if format_given:
        try:
            reply = json.loads(text)
        except ValueError:
            reply = None
        if isinstance(reply, dict) and isinstance(reply.get("message"), str):
            fields = {k: v for k, v in reply.items() if k not in ("message", "done")}
            return reply["message"], reply.get("done") is True, fields
    return text, False, {}


@step_type(
    "prompt_agent",
    config=PromptAgentConfig,
    timeout="2h",
    prepare=prepare_prompt,
    step_refs=("agent",),
    conversation=True,
)
async def prompt_agent(ctx: StepContext, config: PromptAgentConfig) -> StepResult:
    """Give an agent a task, or hold a conversation with it; records the transcript and its tool calls."""
    from agent_env.agents.client import AgentTimedOut, agent_client

    agent, partner, talk = config.deployed, config.partner_deployed, config.conversation
    if not agent:
        raise StepFailed(f"step {config.agent!r} did not deploy an agent")
    if talk and talk.partner_url:
        partner = reached_at(talk.partner_url)
    if talk and not partner:
        raise StepFailed(f"step {talk.partner!r} did not deploy an agent")
    if agent.get("trainer") or partner.get("trainer"):
        raise StepFailed("a trainer plays this agent: its turns are offered by the run (start it as an episode)")
    gateway = await ctx.gateway()
    configured: list[str] = []
    if config.sent() and AGENT_CONFIG in agent.get("extensions", ()):
        client = await agent_client(ctx.settings, agent["url"], hosted=bool(agent.get("hosted"))).extensions()
        configured = await configure_listed(client, config.sent())
    marks = await trajectory_marks(gateway, agent, partner)
    deadline = config.turn_deadline.total_seconds()
    transcript: list[dict[str, Any]] = [opening(config)]
    # `context_id`: the earlier prompts of that conversation are what this one's turns see said before
    earlier = await earlier_in_context(ctx.stores, ctx.run_id, config.context_id, ctx.step_id)
    started = time.perf_counter()

    async def finish(timed_out: str | None) -> dict[str, Any]:
        if config.context_id:
            await keep_in_context(ctx.stores, ctx.run_id, config.context_id, ctx.step_id, earlier, transcript)
        outputs = await finish_prompt(
            ctx.stores,
            gateway,
            ctx.run_id,
            ctx.step_id,
            transcript,
            marks,
            agent,
            partner,
            timed_out,
            time.perf_counter() - started,
            also_under=config.trajectory_output_prefix,
        )
        checked = shape_check(outputs["answer"], config.output_format) if config.output_format else {}
        return outputs | checked | ({"configured": configured} if configured else {})

    timed_out, shots = None, config.snapshot_config
    taken: list[JsonObject] = []  # the agent's state saved as the prompt runs (snapshot_config)
    try:
        while (side := next_side(config, transcript)) is not None:
            who = agent if side == "agent" else partner
            if side == "partner" and shots and shots.per_turn and len(taken) < shots.max_snapshots:
                taken.append(await snapshot(ctx, agent, f"turn-{agent_turns(transcript)}", shots.timeout_seconds))
            if side == "partner" and TRIGGERS in who.get("extensions", ()):  # its rules may answer for it
                client = await agent_client(ctx.settings, who["url"], hosted=bool(who.get("hosted"))).extensions()
                decision = await partner_decision(
                    client,
                    who["name"],
                    turn=agent_turns(transcript),
                    said=transcript[-1]["text"],
                    context_id=f"{ctx.run_id}/{ctx.step_id}",
                )
                if decision is not None and (decision.fired or decision.done):
                    if said := decision.text():
                        transcript.append({"side": side, "speaker": who["name"], "text": said, "fired": decision.fired})
                    if decision.done:
                        break
                    if said:
                        continue
            rules = talk if side == "partner" else None  # the conversation's, for the partner's turn
            walks_away = rules.partner_deadline if rules else None
            try:
                entry, reply = await ask(
                    ctx.settings,
                    gateway,
                    who,
                    side=side,
                    transcript=earlier + transcript,
                    run_id=ctx.run_id,
                    step_id=ctx.step_id,
                    system_prompt=system_prompt_for(config, side),
                    deadline=walks_away.total_seconds() if walks_away else deadline,
                    seed=config.seed,
                    turn=turn_number(transcript, side),
                    conversation_id=config.context_id,
                    prompt_settings=partner_settings(rules) if rules else config.sent(),
                )
            except AgentTimedOut as e:
                if walks_away is None:
                    raise
                # past its own deadline the user walked away, as the framework has it: the conversation ends
                transcript.append({"side": side, "speaker": who["name"], "text": "", "timed_out": str(e)})
                break
            done = False
            if rules:
                entry["text"], done, fields = said_as(bool(rules.partner_output_format), entry["text"])
                entry.update({"fields": fields} if fields else {})
                entry.update({"done": True} if done else {})
            transcript.append(entry)
            if done:
                break
            if reply.failed:
                await finish(None)
                raise StepFailed(f"{who['name']} could not answer ({reply.state}): {reply.text[:500]}")
    except AgentTimedOut as e:
        timed_out = str(e)
        if config.on_timeout == "fail":
            await finish(timed_out)
            raise StepFailed(timed_out) from None
    if shots and shots.at_end:
        taken.append(final := await snapshot(ctx, agent, "end", shots.timeout_seconds))
    outputs = await finish(timed_out) | ({"snapshots": taken} if shots else {})
    if shots and shots.at_end and "error" in final:  # the framework's rule: the prompt's last point is its grade
        raise StepFailed(f"the snapshot at the prompt's end was not taken: {final['error']}")
    return StepResult(outputs=outputs, score=timeout_score(timed_out))


async def snapshot(ctx: StepContext, agent: JsonObject, at: str, timeout: float) -> JsonObject:
    """The agent's state of this prompt saved (snapshot_config) as the run's snapshot STEP.AT; or why not."""
    try:
        saved = await capture_state(ctx, agent, f"{ctx.run_id}/{ctx.step_id}/agent", f"{ctx.step_id}.{at}", timeout)
    except StepFailed as e:
        return {"at": at, "error": str(e)[:1000]}
    return {"at": at, **saved}


async def ask(
    settings: Settings,
    gateway: GatewayClient,
    who: dict[str, Any],
    *,
    side: str,
    transcript: list[dict[str, Any]],
    run_id: str,
    step_id: str,
    system_prompt: str | None,
    deadline: float,
    seed: int | None = None,
    turn: int | None = None,
    conversation_id: str | None = None,
    prompt_settings: JsonObject | None = None,
) -> tuple[JsonObject, AgentReply]:
    """One turn of a hosted or A2A agent: it answers the transcript's last message. Returns (entry, reply);
    raises StepFailed for agents that cannot be reached or answer nonsense, AgentTimedOut past the deadline.
    `turn`: the side's turn number, when `transcript` is only the conversation's tail (or begins with earlier
    prompts'); `conversation_id`: the A2A context's, when prompts share one (their `context_id`); `prompt_settings`:
    the prompt's (model, effort... : PromptSettings), sent with the turn."""
    from agent_env.agents.client import AgentReplyInvalid, AgentUnreachable, ask_deployed

    turn = turn_number(transcript, side) if turn is None else turn
    context_id = f"{run_id}/{step_id}"
    said = transcript[-1]
    try:
        reply = await ask_deployed(
            settings,
            gateway,
            who,
            said["text"],
            run_id=run_id,
            turn=turn,
            deadline_s=deadline,
            context_id=f"{run_id}/{conversation_id or step_id}/{side}",
            message_id=f"{context_id}/{side}/{turn}",
            attachments=said.get("attachments", ()),
            system_prompt=system_prompt,
            conversation=conversation_view(transcript, side),
            seed=seed,
            prompt_settings=prompt_settings,
        )
    except AgentUnreachable as e:
        raise StepFailed(str(e), retryable=True) from None
    except AgentReplyInvalid as e:
        raise StepFailed(str(e)) from None
    entry = {
        "side": side,
        "speaker": who["name"],
        "text": reply.text,
        "seconds": round(reply.seconds, 3),
        **({"data": reply.data} if reply.data else {}),
    }
    if "urn:agentenv:trajectory/v1" in who.get("extensions", ()):  # the agent's own account of the turn
        from agent_env.steps.builtin.agent_state import agent_trajectory

        kept_at = keys.message(run_id, step_id, side, turn).removesuffix(".txt") + ".trajectory.json"
        trajectory = await agent_trajectory(settings, who, reply.task_id, kept_at)
        if trajectory is not None:
            entry["trajectory"] = trajectory
    return entry, reply


def partner_settings(talk: Conversation) -> JsonObject:
    """What the partner's turns carry for this conversation (their `settings`, as a prompt's are sent to its agent):
    the model it answers with, the format it is asked to answer in."""
    config = {"model": talk.partner_model, "output_format": talk.partner_output_format}
    return {k: v for k, v in config.items() if v is not None}


async def trajectory_marks(gateway: GatewayClient, agent: dict[str, Any], partner: dict[str, Any]) -> dict[str, int]:
    """Where each environment's trajectory ends now: the prompt's tool calls are what comes after."""
    marks: dict[str, int] = {}
    for who in filter(None, (agent, partner)):
        if who.get("env") and who["env"] not in marks:
            marks[who["env"]] = await gateway.last_seq(who["env"])
    return marks


async def configure_listed(client: ExtensionClient, prompt_settings: JsonObject) -> list[str]:
    """A prompt's settings also set through the agent's agent-config/v1, those its card lists (the framework's
    agents read a prompt's model, effort... there, not from the turn). The names set."""
    try:
        return await client.set_listed(prompt_settings)
    except ExtensionRefused as e:
        raise StepFailed(str(e)) from None


def context_key(run_id: str, context_id: str) -> str:
    """Where the messages of the prompts sharing a `context_id` are kept, in the order they were said."""
    return f"{keys.transcripts(run_id)}contexts/{context_id}.json"


async def earlier_in_context(stores: Stores, run_id: str, context_id: str | None, step_id: str) -> list[JsonObject]:
    """What the other prompts of this conversation said (none without a `context_id`, or before its first)."""
    if not context_id or not await stores.aio.objects.exists(context_key(run_id, context_id)):
        return []
    kept = json.loads(await stores.aio.objects.get(context_key(run_id, context_id)))
    return [{k: v for k, v in m.items() if k != "attachments"} for m in kept if m.get("step") != step_id]


async def keep_in_context(
    stores: Stores, run_id: str, context_id: str, step_id: str, earlier: list[JsonObject], said: list[JsonObject]
) -> None:
    """The conversation with this prompt's messages after the earlier ones (a retried prompt's replace its own)."""
    mine = [{**m, "step": step_id} for m in await in_thread(expanded, stores, said)]
    body = json.dumps(earlier + mine, ensure_ascii=False).encode()
    await stores.aio.objects.put(context_key(run_id, context_id), body)


def shape_check(answer: str, output_format: OutputFormat) -> JsonObject:
    """The answer's JSON object checked against the prompt's `output_format` schema: the object (None when the
    answer holds none) and whether it matches, with the first problem when not."""
    found = last_json_object(answer)
    problem = None
    if found is None:
        problem = "the answer holds no JSON object"
    else:
        try:
            validator = validator_for(output_format.schema_)(output_format.schema_)
            validator.check_schema(output_format.schema_)
            error = next(iter(validator.iter_errors(found)), None)
        except SchemaError as e:
            error, problem = None, f"the output_format schema is not valid JSON Schema: {e.message}"
        if error is not None:
            where = "/".join(map(str, error.absolute_path)) or "(the object)"
            problem = f"at {where}: {error.message}"[:1000]
    return {
        "structured_output": None if found is None else clip(found, MAX_FIELD_BYTES),
        "output_matches_format": problem is None,
        "output_format_problem": problem,
    }


def last_json_object(text: str) -> JsonObject | None:
    """The answer as a JSON object, else the last JSON object written in it (agents put theirs at the end)."""
    decoder, found, at = json.JSONDecoder(), None, text.find("{")
    while at != -1:
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            at = text.find("{", at + 1)
            continue
        if isinstance(value, dict):
            found = value
        at = text.find("{", end)
    return found


def _not_applied(transcript: list[JsonObject]) -> JsonObject:
    said: JsonObject = {}
    for m in transcript:
        given = (m.get("data") or {}).get("settings_not_applied") if m["side"] == "agent" else None
        said.update({str(k): str(v)[:300] for k, v in given.items()} if isinstance(given, dict) else {})
    return dict(list(said.items())[:20])


def _agent_trajectories(transcript: list[dict[str, Any]]) -> list[Any]:
    return [m["trajectory"] for m in transcript if m["side"] == "agent" and "trajectory" in m]


async def finish_prompt(
    stores: Stores,
    gateway: GatewayClient,
    run_id: str,
    step_id: str,
    transcript: list[JsonObject],
    marks: dict[str, int],
    agent: JsonObject,
    partner: JsonObject | None,
    timed_out: str | None,
    seconds: float,
    also_under: str | None = None,
) -> dict[str, Any]:
    """Keep the conversation and the tool calls both sides made meanwhile; the step's outputs. `also_under`: a
    folder of the run's (the framework's trajectory_output_prefix) that keeps a copy too."""
    if any(entry.get("text_key") for entry in transcript):  # (a thread only when there are texts to read)
        transcript = await in_thread(expanded, stores, transcript)
    names = {agent.get("name"), partner.get("name") if partner else None}
    calls = []
    for instance, after in marks.items():
        calls += [e for e in await gateway.trajectory(instance, after) if e.get("agent") in names]
    doc = {
        "run_id": run_id,
        "step": step_id,
        "agent": agent.get("name"),
        "partner": partner.get("name") if partner else None,
        "messages": transcript,
        "tool_calls": calls,
        "timed_out": timed_out,
    }
    body = json.dumps(doc, ensure_ascii=False).encode()
    await stores.aio.objects.put(transcript_key(run_id, step_id), body)
    copy = f"{keys.run(run_id)}{also_under.rstrip('/')}/{step_id}.json" if also_under else None
    if copy:
        await stores.aio.objects.put(copy, body)
    answers = [m["text"] for m in transcript if m["side"] == "agent"]
    answer = answers[-1] if answers else ""
    return {
        "answer": answer[:MAX_ANSWER_CHARS],
        "truncated": len(answer) > MAX_ANSWER_CHARS,
        "turns": len(answers),
        "messages": len(transcript),
        "transcript": transcript_key(run_id, step_id),
        **({"transcript_copy": copy} if copy else {}),
        "tool_calls": sum(1 for c in calls if c["agent"] == agent["name"]),
        "refused": sum(1 for c in calls if c["agent"] == agent["name"] and c.get("refused")),
        "seconds": round(seconds, 3),
        "timed_out": bool(timed_out),
        # the agent's last turn as its trajectory/v1 told it (whole in the transcript), for checks to grade
        **({"trajectory": clip(kept[-1], MAX_FIELD_BYTES)} if (kept := _agent_trajectories(transcript)) else {}),
        # the tokens hosted agents' model calls used, per model (`runs show` sums them)
        **({"usage": used} if (used := summed((m.get("data") or {}).get("usage") for m in transcript)) else {}),
        # the prompt's settings the agent said it could not apply (a cli agent's CLI with no option for one)
        **({"settings_not_applied": unapplied} if (unapplied := _not_applied(transcript)) else {}),
    }
