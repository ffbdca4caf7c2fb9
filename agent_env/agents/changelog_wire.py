"""snapshot/v1's optional `changelog` feature on the wire: our own models, wire-identical to the reference's
(`NamespaceChangelogEnableRequest` ... in `agentenv_protocol.a2a_agent.extensions`, which we only read).

- enable-changelog (POST /ext/snapshot/changelog): a namespace grant; from then on the agent writes one increment
  (opaque bytes) per step into it, named by a strictly increasing sequence (`000000.state`, `000001.state`, ...).
- apply-changelog (PUT /ext/snapshot/changelog): read grants for increments, in sequence order; the agent replays
  them (into `target_context_id` if given) and answers how many it applied.
"""

from __future__ import annotations

import re

from agentenv_protocol.transfers import ReadObject, WriteNamespaceGrant
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_env.agents.extension_table import OPERATIONS, SNAPSHOT
from agent_env.agents.transfer_wire import OPAQUE, card_fields
from agent_env.gateway_client.wire import JsonObject

ENABLE, APPLY = "enable-changelog", "apply-changelog"
FEATURE = "changelog"
_INCREMENT = re.compile(r"^(?P<sequence>[0-9]{6})(?:\.[A-Za-z0-9][A-Za-z0-9._-]*)?$")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NamespaceChangelogEnableRequest(_Body):
    write_namespace: WriteNamespaceGrant
    roots: list[str] | None = None


class NamespaceChangelogEnableResponse(_Body):
    roots: list[str]


class ChangelogIncrement(_Body):
    sequence: int = Field(ge=0)
    object: ReadObject

    @model_validator(mode="after")
    def _opaque(self) -> ChangelogIncrement:
        if self.object.media_type != OPAQUE:
            raise ValueError(f"changelog increment media_type must be {OPAQUE}")
        return self


class ObjectChangelogApplyRequest(_Body):
    increments: list[ChangelogIncrement]
    resume_conversation: bool = False
    target_context_id: str | None = None

    @model_validator(mode="after")
    def _ordered(self) -> ObjectChangelogApplyRequest:
        sequences = [increment.sequence for increment in self.increments]
        if sequences != sorted(set(sequences)):
            raise ValueError("changelog increment sequences must be strictly increasing")
        return self


class ObjectChangelogApplyResponse(_Body):
    count: int = Field(ge=0)
    context_id: str | None = None


def increment_name(sequence: int) -> str:
    return f"{sequence:06d}.state"


def increment_sequence(path: str) -> int | None:
    """The sequence an increment's path (below its namespace) names; None for anything else there."""
    match = _INCREMENT.fullmatch(path)
    return None if match is None else int(match["sequence"])


def changelog_card_methods() -> JsonObject:
    """The feature's operations as a snapshot/v1 card lists them (beside save and load), the reference's way: each
    with its method, its own endpoint (not the extension's), and its request and answer fields."""
    models: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
        ENABLE: (NamespaceChangelogEnableRequest, NamespaceChangelogEnableResponse),
        APPLY: (ObjectChangelogApplyRequest, ObjectChangelogApplyResponse),
    }
    methods: JsonObject = {}
    for name, (ask, answer) in models.items():
        method, path = OPERATIONS[SNAPSHOT, name]
        methods[name] = {
            "method": method,
            "endpoint": path,
            "request": card_fields(ask),
            "response": card_fields(answer),
        }
    return methods
