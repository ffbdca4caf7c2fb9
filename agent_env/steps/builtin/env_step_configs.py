"""The configs of steps that act on one deployed env: which env (the id of the deploy_env step, or the framework's
`env_id` for the env it deploys), as whom, and snapshot_env's (which may capture the env's data as a universe of the
registry: `snapshot_id`, see env_snapshots)."""

from __future__ import annotations

from pydantic import Field, model_validator

from agent_env.steps import StepConfig

ARTIFACT_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"  # a registry artifact's name


class EnvStep(StepConfig):
    framework_names = {"env_id": ("env", "env_step"), "env_step_id": ("env", "same")}

    env: str = Field(description="the id of the deploy_env step whose environment this step acts on")


class ActorStep(EnvStep):
    role: str | None = Field(None, description="act as this role (default: the environment's first role)")
    agent: str | None = Field(None, description="act as this agent (with its current role)")


class SnapshotConfig(EnvStep):
    refused_fields = {
        "gateway_url": "the env is reached through this install's own gateway, never a URL a task names: the step "
        "sends the run's credentials, and a credential goes only to its own origin",
    }

    env: str | None = Field(  # type: ignore[assignment]  # (or env_instance_id)
        None, description="the id of the deploy_env step whose environment this step acts on"
    )
    env_instance_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.${}\-]{1,256}$",
        description="the env instance instead of `env`: one this run deployed (RUN_ID.STEP, e.g. ${run.id}.notes)",
    )
    export_timeout_seconds: float | None = Field(
        None, gt=0, le=600, description="how long saving and exporting the env's state may take (default: the step's)"
    )
    include_env_trajectory: bool = Field(
        False,
        description="also keep the env's trajectory (every call made in it) as JSON lines beside the snapshot; "
        "outputs `env_trajectory`: its key and count, or the error that stopped it (the snapshot stands)",
    )
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.\-]{1,64}$", description="default: the step's id")
    include_env_changes: bool = Field(
        False,
        description="also keep who changed what (the environment's changelog, changes/v1) as JSON lines beside the "
        "snapshot; outputs `env_changes`: its key and counts, or the error that stopped it (the snapshot stands)",
    )
    snapshot_id: str | None = Field(
        None,
        pattern=ARTIFACT_NAME,
        description="also capture each app's data as the next version of this universe in the registry",
    )
    original_universe_artifact_id: str | None = Field(
        None,
        pattern=ARTIFACT_NAME[:-1] + r"(@[A-Za-z0-9._-]+)?$",
        description="the universe the env started from (NAME or NAME@VERSION): the capture's parent, pinned when "
        "the run is planned",
    )

    @model_validator(mode="after")
    def _capture(self) -> SnapshotConfig:
        if (self.env is None) == (self.env_instance_id is None):
            raise ValueError("name the env: give `env` (or the framework's `env_id`) or `env_instance_id`, one of them")
        if self.original_universe_artifact_id is not None and self.snapshot_id is None:
            raise ValueError("`original_universe_artifact_id` goes with `snapshot_id` (the universe captured into)")
        return self
