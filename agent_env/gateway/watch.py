"""What the gateway watches for a run, on one instance: conditions over calls and over state.

Matching is on the call's hot path, so conditions are indexed by tool name: a call to a tool nothing
watches costs a dictionary lookup, however many triggers are registered.
"""

from __future__ import annotations

from typing import Any

from agent_env.spec.paths import PathError, split, walk_parts
from agent_env.spec.predicates import passes, test
from agent_env.spec.world import CallMatch, StateWhen
from agent_env.spec.world_state import Watch

UNMET = object()  # a state condition's value when a read before its own failed: the condition is false


class _Compiled:
    """A call condition as plain data: checked on every call, so no model access on the hot path."""

    __slots__ = ("watch", "outcome", "roles", "agents", "where")

    def __init__(self, watch: Watch, match: CallMatch) -> None:
        self.watch = watch
        self.outcome = match.outcome
        self.roles = frozenset(match.roles) if match.roles is not None else None
        self.agents = frozenset(match.agents) if match.agents is not None else None
        self.where = [(split(p.path), *p.operator) for p in match.where]

    def matches(self, call: dict[str, Any], ok: bool) -> bool:
        if self.outcome != "any" and (self.outcome == "success") != ok:
            return False
        if self.roles is not None and call["role"] not in self.roles:
            return False
        if self.agents is not None and call["agent"] not in self.agents:
            return False
        for parts, op, expected in self.where:
            try:
                actual = walk_parts(call, parts)
            except PathError:
                return False
            if not passes(op, actual, expected):
                return False
        return True


class Watcher:
    def __init__(self, watches: list[Watch]) -> None:
        self.by_tool: dict[str, list[_Compiled]] = {}
        self.states: list[tuple[Watch, StateWhen]] = []
        for watch in watches:
            if watch.kind == "state":
                self.states.append((watch, StateWhen.model_validate(watch.spec)))
                continue
            match = CallMatch.model_validate({k: v for k, v in watch.spec.items() if k in CallMatch.model_fields})
            for tool in match.tools:
                self.by_tool.setdefault(tool, []).append(_Compiled(watch, match))
        self.truth: dict[str, bool] = {}

    def calls(self, call: dict[str, Any]) -> list[Watch]:
        """The watches this completed call satisfies. `call`: agent, role, tool, arguments, result|error."""
        candidates = self.by_tool.get(call["tool"])
        if not candidates:
            return []
        ok = "error" not in call
        return [c.watch for c in candidates if c.matches(call, ok)]

    def state_edges(self, values: dict[str, Any]) -> list[Watch]:
        """Given each state watch's current value, the watches whose test just became true."""
        fired = []
        for watch, when in self.states:
            if watch.trigger not in values:
                continue
            op, expected = when.operator
            value = values[watch.trigger]
            now_true = value is not UNMET and test(op, value, expected)[0]
            if now_true and not self.truth.get(watch.trigger, False):
                fired.append(watch)
            self.truth[watch.trigger] = now_true
        return fired
