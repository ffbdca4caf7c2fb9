"""The A2A agent extension validators as step types (the framework's names): `verify_a2a_peer_agents`,
`verify_a2a_install`, `verify_a2a_skill_config`, `verify_a2a_snapshot`, `verify_a2a_trajectory`.

Each checks the agent at `url` over HTTP (checks in `agent_env.validators.a2a_extensions` and
`a2a_extension_tasks`), with no credential of ours; the object transfers (snapshot/v1's round trip, skill
bundles, trajectory task_objects) through grants on the run's object store, under
`runs/RUN/validators/STEP/`. Its score is the report's (a required check that fails fails the step), its outputs
`report` (each check with its problem and fix, as `agent-env a2a-agent validate` prints it) and `passed`. A
validator whose extension the card does not declare reports one optional finding, `<extension>.declared`, and
passes. Made as the other A2A validators are (`a2a_validators.a2a_validator`).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from agent_env.steps.builtin.a2a_validator_links import LinkedChecks
from agent_env.steps.builtin.a2a_validators import A2AAgentCheck, a2a_validator
from agent_env.validators.a2a_extension_tasks import TRAJECTORY_PROMPT, verify_snapshot, verify_trajectory
from agent_env.validators.a2a_extensions import verify_install, verify_peer_agents, verify_skill_config

_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")


def is_key_prefix(value: str) -> bool:
    """A relative key prefix of the object store ending in '/', each segment a plain name (no '..', no scheme)."""
    segments = value.split("/")
    return value.endswith("/") and all(_SEGMENT.match(s) and s not in (".", "..") for s in segments[:-1])


class A2AAgentUrl(LinkedChecks):
    refused_fields = A2AAgentCheck.refused_fields


class SkillConfigValidation(A2AAgentUrl):
    refused_fields = {k: v for k, v in A2AAgentUrl.refused_fields.items() if k != "skill_bundle_object_url"}

    skill_bundle_object_url: str | None = Field(
        None,
        max_length=512,
        description="a key prefix of the run's object store holding a skill bundle (SKILL.md at its top) to add "
        "as the bundle probe, instead of the validator's own",
    )

    @field_validator("skill_bundle_object_url")
    @classmethod
    def _a_key_prefix(cls, value: str | None) -> str | None:
        if value is not None and not is_key_prefix(value):
            raise ValueError(
                f"{value!r} is not a key prefix of the run's object store: write it relative, ending in '/', "
                "without '..' or a scheme (only this install's store is read)"
            )
        return value


class SnapshotValidation(A2AAgentUrl):
    timeout_seconds: float = Field(120.0, gt=0, le=3600, description="how long the agent may take a turn or a transfer")


class TrajectoryValidation(SnapshotValidation):
    prompt: str = Field(TRAJECTORY_PROMPT, min_length=1, max_length=4000, description="the task's turn")


verify_a2a_peer_agents = a2a_validator(
    "verify_a2a_peer_agents",
    lambda c: verify_peer_agents(c.agent),
    "Validate an agent's peer-agents/v1: set a probe peer, list shows it (then its peers are set back).",
    config=A2AAgentUrl,
    timeout="3m",
    retries=0,
)
verify_a2a_install = a2a_validator(
    "verify_a2a_install",
    lambda c: verify_install(c.agent),
    "Validate an agent's install/v1 declaration: commands, the parameters they use, its port.",
    config=A2AAgentUrl,
    timeout="1m",
    retries=0,
)
verify_a2a_skill_config = a2a_validator(
    "verify_a2a_skill_config",
    lambda c: verify_skill_config(c.agent, rooms=c.room, bundle=c.config.skill_bundle_object_url),
    "Validate an agent's skill-config/v1: add a probe skill inline (and as a bundle by a grant), list shows it.",
    config=SkillConfigValidation,
    timeout="3m",
    retries=0,
)
verify_a2a_snapshot = a2a_validator(
    "verify_a2a_snapshot",
    lambda c: verify_snapshot(c.agent, rooms=c.room, deadline_s=c.config.timeout_seconds),
    "Validate an agent's snapshot/v1: save a conversation by grants, load it into a fresh one, it goes on from it.",
    config=SnapshotValidation,
    timeout="65m",
    retries=0,
)
verify_a2a_trajectory = a2a_validator(
    "verify_a2a_trajectory",
    lambda c: verify_trajectory(c.agent, prompt=c.config.prompt, deadline_s=c.config.timeout_seconds, rooms=c.room),
    "Validate an agent's trajectory/v1: after one task, get answers a well-formed trajectory of it.",
    config=TrajectoryValidation,
    timeout="65m",
    retries=0,
)
