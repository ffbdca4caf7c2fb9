"""The object-transfer bodies of protocol v1's agent extensions, our own models wire-identical to the reference's
(`agentenv_protocol.a2a_agent.extensions`, which we only read: it belongs to the reference's `agent` extra, whose
pins conflict with ours, and importing it loads the old A2A SDK).

- `urn:agentenv:snapshot/v1` save (POST) and load (PUT) at `/ext/snapshot`: grants for the state's objects.
- `urn:agentenv:trajectory/v1` get (POST at `/ext/trajectory`), `task_objects` variant: a grant for the trajectory.
- `urn:agentenv:skill-config/v1` add (POST at `/ext/skill-config`), `bundle` variant: read grants for a skill's files.

The grants themselves (`ReadObject`, `WriteObject`, `Uploaded`) are the protocol's base package, which imports
beside our pins. A card's request contract is read the reference's way (`card_request_accepts`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, TypeVar

from agentenv_protocol.transfers import ReadObject, RelativePath, Uploaded, WriteObject
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from agent_env.agents.extension_table import OPERATIONS, SKILL_CONFIG, SNAPSHOT, TRAJECTORY  # noqa: F401
from agent_env.gateway_client.wire import JsonObject

OPAQUE = "application/octet-stream"
SNAPSHOT_DESCRIPTION = "Save and restore agent-native state."


class _Body(BaseModel):
    """A request or answer body: closed and immutable, as the protocol's are."""

    model_config = ConfigDict(extra="forbid", frozen=True)


_SkillName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
_Objects = TypeVar("_Objects", "SnapshotWriteObjects", "SnapshotReadObjects")


def _opaque(objects: _Objects) -> _Objects:
    for name in ("trajectory", "workspace"):
        descriptor = getattr(objects, name)
        if descriptor is not None and descriptor.media_type != OPAQUE:
            raise ValueError(f"snapshot {name} media_type must be {OPAQUE}")
    return objects


class SnapshotWriteObjects(_Body):
    trajectory: WriteObject
    workspace: WriteObject | None = None

    _opaque_media_types = model_validator(mode="after")(_opaque)


class SnapshotReadObjects(_Body):
    trajectory: ReadObject
    workspace: ReadObject | None = None

    _opaque_media_types = model_validator(mode="after")(_opaque)


class ObjectSnapshotSaveRequest(_Body):
    context_id: str
    objects: SnapshotWriteObjects


class ObjectSnapshotLoadRequest(_Body):
    objects: SnapshotReadObjects
    target_context_id: str | None = None


class SnapshotUploadedObjects(_Body):
    trajectory: Uploaded
    workspace: Uploaded | None = None


class ObjectSnapshotSaveResponse(_Body):
    context_id: str
    objects: SnapshotUploadedObjects


class ObjectSnapshotLoadResponse(_Body):
    context_id: str


class TaskTrajectoryRequest(_Body):
    task_id: str


class TrajectoryWriteObjects(_Body):
    trajectory: WriteObject

    @model_validator(mode="after")
    def _json_trajectory(self) -> TrajectoryWriteObjects:
        if self.trajectory.media_type != "application/json":
            raise ValueError("trajectory object media_type must be application/json")
        return self


class TaskObjectTrajectoryRequest(_Body):
    task_id: str
    objects: TrajectoryWriteObjects


class TrajectoryUploadedObjects(_Body):
    trajectory: Uploaded


class TrajectoryObjectsResponse(_Body):
    objects: TrajectoryUploadedObjects


class SkillBundleFile(_Body):
    path: RelativePath
    object: ReadObject


class SkillBundle(_Body):
    max_total_bytes: PositiveInt
    files: list[SkillBundleFile]

    @model_validator(mode="after")
    def _valid_bundle(self) -> SkillBundle:
        paths = [item.path for item in self.files]
        if len(paths) != len(set(paths)):
            raise ValueError("skill bundle paths must be unique")
        if "SKILL.md" not in paths:
            raise ValueError("skill bundle must contain root SKILL.md")
        if sum(item.object.max_bytes for item in self.files) > self.max_total_bytes:
            raise ValueError("skill bundle file limits exceed max_total_bytes")
        return self


class BundleSkillRequest(_Body):
    name: _SkillName
    description: str
    skill_bundle: SkillBundle


def card_fields(model: type[BaseModel]) -> JsonObject:
    """A body model's fields as a card declares them: `required`, then `optional` (each only if any)."""
    required = [name for name, info in model.model_fields.items() if info.is_required()]
    optional = [name for name, info in model.model_fields.items() if not info.is_required()]
    return {key: names for key, names in (("required", required), ("optional", optional)) if names}


def card_request_accepts(request: Mapping[str, Any], fields: Iterable[str]) -> bool:
    """Whether a card's request contract takes a body of exactly `fields`: the contract's own `required` and
    one branch of its `oneOf` (if any) are all sent, and all sent are declared there (`required`, `optional`,
    or `supported`, a hand-written card's word)."""
    sent = set(fields)
    required, declared = _declared(request)
    for branch in request.get("oneOf") or [{}]:
        branch_required, branch_declared = _declared(branch)
        if required | branch_required <= sent <= declared | branch_declared:
            return True
    return False


def required_fields(model: type[BaseModel]) -> list[str]:
    return [name for name, info in model.model_fields.items() if info.is_required()]


def _declared(schema: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    required = set(schema.get("required") or ())
    return required, required.union(schema.get("optional") or (), schema.get("supported") or ())


def snapshot_card_params() -> JsonObject:
    """snapshot/v1's card params: its endpoint, and each operation's method with its request and answer fields."""
    operations: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
        "save": (ObjectSnapshotSaveRequest, ObjectSnapshotSaveResponse),
        "load": (ObjectSnapshotLoadRequest, ObjectSnapshotLoadResponse),
    }
    methods = {
        name: {"method": OPERATIONS[SNAPSHOT, name][0], "request": card_fields(ask), "response": card_fields(answer)}
        for name, (ask, answer) in operations.items()
    }
    return {"endpoint": OPERATIONS[SNAPSHOT, "save"][1], "methods": methods}
