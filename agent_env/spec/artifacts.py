"""Artifacts that carry an environment's data, as the registry records them (an artifact version's `record`).

- An **environment artifact** (`type = "environment"`) is one app's data: `environment_name` names the app it
  seeds, and its one JSON file holds that app's tables (`{table: [rows]}`).
- A **universe** (`type = "environment_universe"`) is a named set of environment artifacts pinned to their
  versions (`environment_artifact_refs`), one per app: loaded together into one composed environment (each
  app its own data), and exported back as environment artifacts again.

The field names are the framework's (its `EnvironmentArtifact` and `EnvironmentUniverseArtifact`). A version
made by a run says so in `lineage`: the run and step that made it, and the versions it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ENVIRONMENT = "environment"
UNIVERSE = "environment_universe"
FILE_UNIVERSE = "file_artifact_universe"  # files collect_artifacts took out of a sandbox, together
AGENT_STATE = "agent_state"  # an agent's saved state (snapshot/v1's objects), as snapshot_agent_state made it
DATA_FILE = "data.json"  # the file an environment artifact's data is kept in


class ArtifactPin(BaseModel):
    """One version of an artifact: `id` is its name in the registry, `version` its label."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(min_length=1)
    version: str = Field(min_length=1)

    def __str__(self) -> str:
        return f"{self.id}@{self.version}"


class Lineage(BaseModel):
    """Where a version came from: the run and step that made it, and the versions it was made from."""

    model_config = ConfigDict(extra="forbid")
    run_id: str | None = None
    step: str | None = None
    source: str | None = Field(None, description="what of the run it was made from (an object key or prefix)")
    parents: list[ArtifactPin] = Field(default_factory=list)


class EnvironmentArtifactRecord(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["environment"] = "environment"
    environment_name: str = Field(min_length=1, description="the app whose data this is")
    description: str | None = None
    lineage: Lineage | None = None


class UniverseRecord(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["environment_universe"] = "environment_universe"
    environment_artifact_refs: list[ArtifactPin] = Field(min_length=1)
    description: str | None = None
    lineage: Lineage | None = None

    @model_validator(mode="after")
    def _distinct(self) -> UniverseRecord:
        ids = [pin.id for pin in self.environment_artifact_refs]
        if len(set(ids)) != len(ids):
            raise ValueError(f"an environment artifact is named twice: {', '.join(sorted(ids))}")
        return self


def artifact_type(record: Mapping[str, object]) -> str | None:
    """The `type` an artifact's record gives (None for a plain artifact: files only)."""
    found = record.get("type")
    return found if isinstance(found, str) else None
