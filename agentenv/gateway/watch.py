"""What the gateway watches for a run, on one instance: conditions over calls and over state.

Matching is on the call's hot path, so conditions are indexed by tool name: a call to a tool nothing
watches costs a dictionary lookup, however many triggers are registered.
"""

from __future__ import annotations

from typing import Any

from agentenv.spec.predicates import test, walk
from agentenv.spec.world import CallMatch, Predicate, StateWhen
from agentenv.spec.world_run import Watch


class Watcher:
    def __init__(self, watches: list[Watch]) -> None:
        self.by_tool: dict[str, list[tuple[Watch, CallMatch]]] = {}
        self.states: list[tuple[Watch, StateWhen]] = []
        for watch in watches:
            if watch.kind == "state":
                self.states.append((watch, StateWhen.model_validate(watch.spec)))
                continue
            match = CallMatch.model_validate({k: v for k, v in watch.spec.items() if k in CallMatch.model_fields})
            for tool in match.tools:
                self.by_tool.setdefault(tool, []).append((watch, match))
        self.truth: dict[str, bool] = {}

    def calls(self, call: dict[str, Any]) -> list[Watch]:
        """The watches this completed call satisfies. `call`: agent, role, tool, arguments, result|error."""
        candidates = self.by_tool.get(call["tool"])
        if not candidates:
            return []
        ok = "error" not in call
        return [watch for watch, match in candidates
                if (match.outcome == "any" or (match.outcome == "success") == ok)
                and (match.roles is None or call["role"] in match.roles)
                and (match.agents is None or call["agent"] in match.agents)
                and all(_holds(p, call) for p in match.where)]

    def state_edges(self, values: dict[str, Any]) -> list[Watch]:
        """Given each state watch's current value, the watches whose test just became true."""
        fired = []
        for watch, when in self.states:
            if watch.trigger not in values:
                continue
            op, expected = when.operator
            now_true, _ = test(op, values[watch.trigger], expected)
            if now_true and not self.truth.get(watch.trigger, False):
                fired.append(watch)
            self.truth[watch.trigger] = now_true
        return fired


def _holds(predicate: Predicate, call: dict[str, Any]) -> bool:
    try:
        actual = walk(call, predicate.path)
    except KeyError:
        return False
    op, expected = predicate.operator
    return test(op, actual, expected)[0]
