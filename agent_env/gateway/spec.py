"""What an instance is made of: its apps, roles and agents. Pushed to the gateway by the run."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_env.spec.env import NAME, AppRef, RoleSpec

INSTANCE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
__all__ = ["AppRef", "InstanceSpec", "RoleSpec"]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InstanceSpec(_Spec):
    id: str = Field(description="unique id; paths are /envs/{id}/...")
    run_id: str | None = None
    env: str = Field("env", description="the environment's name, shown on its card")
    apps: list[AppRef] = Field(min_length=1)
    roles: dict[str, RoleSpec] = Field(default_factory=lambda: {"agent": RoleSpec()})
    agents: dict[str, str] = Field(
        default_factory=dict, description="agent name -> role; default: one agent per role, named like it"
    )
    now: datetime | None = Field(None, description="a fixed virtual time (until the clock arrives); default: UTC now")
    expires_at: datetime | None = Field(
        None,
        description="the gateway deletes the instance at this (real) time, whoever forgot it: a group's prototype "
        "is gone even if its trainer died; default: never",
    )
    gateway_mode: Literal["performance", "consistent"] = Field(
        "performance",
        description="consistent: its tool calls are served one at a time, in the order they arrive (the "
        "trajectory's order is the order they ran in); performance: concurrently",
    )
    ended_at: datetime | None = Field(
        None,
        description="when its run ended (the gateway sets it): from then on its agents' role tokens are refused "
        "(410), while the run's records stay readable with the admin token",
    )

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not INSTANCE_ID.match(value):
            raise ValueError("instance ids are letters, digits, '.', '_' and '-' (max 128), starting alnum")
        return value

    @field_validator("roles")
    @classmethod
    def _roles(cls, roles: dict[str, RoleSpec]) -> dict[str, RoleSpec]:
        for name in roles:
            if not re.match(NAME, name):
                raise ValueError(f"role name {name!r} must be lowercase letters, digits, '_' or '-'")
        if not roles:
            raise ValueError("an instance needs at least one role")
        return roles

    def agent_roles(self) -> dict[str, str]:
        agents = dict(self.agents) or {role: role for role in self.roles}
        for agent, role in agents.items():
            if role not in self.roles:
                raise ValueError(f"agent {agent!r} has role {role!r}, which is not one of: {', '.join(self.roles)}")
        return agents
