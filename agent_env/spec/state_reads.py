"""The reads a state condition makes before its own (the AgentEnv Framework's multi-step `check`): each may bind
its value to a name that later reads' arguments use as `${name}`, and may test it. The gateway makes them
(agent_env.gateway.world), in order, after every call that may write."""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from agent_env.spec.predicates import Operators, operators_given
from agent_env.spec.templates import referenced_names

MAX_STATE_READS = 8  # each runs after every call that may write


class StateRead(Operators):
    """One read: failing, binding null, "" or [], or failing its test, it makes the condition false."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    arguments: dict[str, object] = Field(default_factory=dict)
    path: str = ""
    bind: str | None = Field(None, pattern=r"^[A-Za-z_]\w*$", description="the name later arguments use as ${name}")

    @model_validator(mode="after")
    def _at_most_one_operator(self) -> StateRead:
        if operators_given(self):
            self.require_one_operator(f"read of {self.tool}", f"read of {self.tool}: matches")
        return self


def unbound_reference(before: list[StateRead], tool: str, arguments: dict[str, object]) -> str | None:
    """Why a read's arguments use a `${name}` no read before them binds (the last read: `tool`, `arguments`)."""
    bound: set[str] = set()
    for read_tool, read_arguments, bind in [(r.tool, r.arguments, r.bind) for r in before] + [(tool, arguments, None)]:
        if unbound := sorted(referenced_names(read_arguments) - bound):
            return f"arguments of {read_tool} use ${{{unbound[0]}}}, which no read before binds"
        bound |= {bind} if bind else set()
    return None
