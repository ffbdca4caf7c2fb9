"""`urn:agentenv:triggers/v1`, agent side: rules registered on an agent that plays a user (a customer, a
colleague), which decide deterministic replies on a conversation's turns instead of its model.

A rule is `{"id", "once", "when", "actions"}`: `when` is a `step` (the agent's turn number, `eq` or `gte`), an
`env_trigger` (an environment's trigger reached a status), a `conversational` test of the other side's message
(`regex`, `equals` or `exists`), or `all` / `any` of those; `actions` say a text or end the conversation. The
models validate a rule where it is written (a task's `register_agent_triggers` step, when the run is planned) and
where it is registered (our SDK's agents), so both refuse the same rules, naming the field.

Patterns run on RE2 (linear in the text whatever the pattern): one that needs backtracking is refused when it is
registered, so a decision never stalls. Everything the engine keeps is bounded: rules, conversations (the least
recently used is forgotten first) and its log.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_env.agents.extension_ops import MAX_SAID, MAX_TRIGGERS, DecideRequest
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec import patterns

MAX_CONTEXTS = 1024
MAX_LOG = 1024
MAX_RULE_BYTES = 16 * 1024
MAX_NESTING = 8  # all/any inside one another


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OnTurn(_Rule):
    type: Literal["step"]
    turn: int = Field(1, ge=1, description="the agent's turn (1 for its first answer)")
    cmp: Literal["eq", "gte"] = "eq"


class OnEnvTrigger(_Rule):
    type: Literal["env_trigger"]
    env_id: str = Field(min_length=1, max_length=256)
    trigger_id: str = Field(min_length=1, max_length=128)
    status: str = Field("fired", min_length=1, max_length=128)


class MessageTest(_Rule):
    """Exactly one of: `regex` (RE2, found anywhere), `equals` (the whole message), `exists` (said anything)."""

    regex: str | None = Field(None, max_length=4096)
    equals: str | None = None
    exists: bool | None = None

    @model_validator(mode="after")
    def _one(self) -> MessageTest:
        if sum(v is not None for v in (self.regex, self.equals, self.exists)) != 1:
            raise ValueError("a message test has exactly one of `regex`, `equals`, `exists`")
        patterns.check_pattern(self.regex, "where.message.regex")
        return self

    def holds(self, message: str) -> bool:
        if self.regex is not None:
            return patterns.search(self.regex, message)
        if self.equals is not None:
            return message == self.equals
        return bool(message) == self.exists


class OnMessage(_Rule):
    type: Literal["conversational"]
    where: dict[Literal["message"], MessageTest] = Field(min_length=1)


class AllOf(_Rule):
    type: Literal["all"]
    of: list[When] = Field(min_length=1, max_length=32)


class AnyOf(_Rule):
    type: Literal["any"]
    of: list[When] = Field(min_length=1, max_length=32)


When = Annotated[OnTurn | OnEnvTrigger | OnMessage | AllOf | AnyOf, Field(discriminator="type")]


AllOf.model_rebuild()
AnyOf.model_rebuild()


class Say(_Rule):
    type: Literal["say"]
    text: str = Field(min_length=1, max_length=MAX_SAID)


class End(_Rule):
    type: Literal["end"]


class AgentTrigger(_Rule):
    id: str | None = Field(None, min_length=1, max_length=128, description="default: from the rule's content")
    once: bool = Field(True, description="fires at most once per conversation")
    when: When
    actions: list[Annotated[Say | End, Field(discriminator="type")]] = Field(min_length=1, max_length=16)

    @field_validator("when")
    @classmethod
    def _shallow(cls, when: When) -> When:
        if _depth(when) > MAX_NESTING:
            raise ValueError(f"`all`/`any` nest at most {MAX_NESTING} deep")
        return when

    @model_validator(mode="after")
    def _small(self) -> AgentTrigger:
        if len(self.spec_json()) > MAX_RULE_BYTES:
            raise ValueError(f"a trigger is at most {MAX_RULE_BYTES} bytes of JSON")
        return self

    def spec_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude={"id"}), sort_keys=True, separators=(",", ":"))

    def key(self) -> str:
        """Its id, or one made from what it says: registering the same rule twice (a retried step) is a no-op."""
        return self.id or "trg_" + hashlib.sha256(self.spec_json().encode()).hexdigest()[:12]


def _depth(when: When) -> int:
    return 1 + max((_depth(w) for w in when.of), default=0) if isinstance(when, (AllOf, AnyOf)) else 1


def env_trigger_refs(when: When) -> set[tuple[str, str]]:
    """The (env_id, trigger_id) pairs a rule's `when` waits for."""
    if isinstance(when, OnEnvTrigger):
        return {(when.env_id, when.trigger_id)}
    if isinstance(when, (AllOf, AnyOf)):
        return set().union(*(env_trigger_refs(w) for w in when.of))
    return set()


class TriggerConflict(ValueError):
    """A rule registered again, under the same id, saying something else."""


@dataclass
class _Seen:
    fired: set[str] = field(default_factory=set)
    last_turn: int = 0


@dataclass
class TriggerEngine:
    """One agent's rules and what fired in each conversation (bounded: module doc)."""

    rules: dict[str, AgentTrigger] = field(default_factory=dict)
    contexts: OrderedDict[str, _Seen] = field(default_factory=OrderedDict)
    log: deque[JsonObject] = field(default_factory=lambda: deque(maxlen=MAX_LOG))
    sequence: int = 0

    def register(self, triggers: list[AgentTrigger]) -> list[str]:
        """Adds the rules (all or none); the ids added. TriggerConflict for an id taken by another rule."""
        batch = {}
        for rule in triggers:
            key = rule.key()
            if key in batch:
                raise TriggerConflict(f"trigger {key!r} is twice in this registration")
            known = self.rules.get(key)
            if known is not None and known.spec_json() != rule.spec_json():
                raise TriggerConflict(f"trigger {key!r} is already registered saying something else — give it a new id")
            batch[key] = rule
        if len(set(self.rules) | set(batch)) > MAX_TRIGGERS:
            raise TriggerConflict(f"an agent holds at most {MAX_TRIGGERS} triggers")
        self.rules.update(batch)
        self._note("registered", added=list(batch))
        return list(batch)

    def decide(self, request: DecideRequest) -> JsonObject:
        """The rules that fire on this turn, what they say, whether the conversation ends. A turn number that
        does not move forward starts the conversation over (its once-rules may fire again)."""
        seen = self.contexts.get(request.context_id)
        restarted = seen is not None and request.turn <= seen.last_turn
        fired_before = set() if seen is None or restarted else seen.fired
        envs = request.env_triggers or {}
        fired, said, done = [], [], False
        for key, rule in self.rules.items():
            if rule.once and key in fired_before:
                continue
            if _holds(rule.when, request.turn, request.solver_message, envs):
                fired.append(key)
                said += [a.text for a in rule.actions if isinstance(a, Say)]
                done = done or any(isinstance(a, End) for a in rule.actions)
        seen = self._context(request.context_id)
        if restarted:
            seen.fired.clear()
            self._note("reset", context_id=request.context_id, turn=request.turn)
        seen.last_turn = request.turn
        seen.fired.update(fired)
        for key in fired:
            self._note("fired", trigger_id=key, turn=request.turn, context_id=request.context_id)
        return {"parts": [{"kind": "text", "text": "\n".join(said)}] if said else [], "done": done, "fired": fired}

    def state(self) -> JsonObject:
        return {
            "triggers": [{"id": k, "when_type": r.when.type, "once": r.once} for k, r in self.rules.items()],
            "firing_log": list(self.log),
        }

    def _context(self, context_id: str) -> _Seen:
        seen = self.contexts.pop(context_id, None) or _Seen()
        self.contexts[context_id] = seen  # the most recently used last
        while len(self.contexts) > MAX_CONTEXTS:
            self.contexts.popitem(last=False)
        return seen

    def _note(self, kind: str, **detail: object) -> None:
        self.sequence += 1
        self.log.append({"seq": self.sequence, "ts": datetime.now(UTC).isoformat(), "kind": kind, **detail})


def _holds(when: When, turn: int, message: str, envs: dict[str, dict[str, str]]) -> bool:
    if isinstance(when, OnTurn):
        return turn == when.turn if when.cmp == "eq" else turn >= when.turn
    if isinstance(when, OnEnvTrigger):
        return envs.get(when.env_id, {}).get(when.trigger_id) == when.status
    if isinstance(when, OnMessage):
        return all(test.holds(message) for test in when.where.values())
    if isinstance(when, AllOf):
        return all(_holds(w, turn, message, envs) for w in when.of)
    return any(_holds(w, turn, message, envs) for w in when.of)
