"""`apply_server_config`, the framework's: configure a deployed env's apps through the extensions their cards declare.

Each directive names an app of the env (`service`: its name in the env, or `*` for every app), an extension's URI
(e.g. `urn:agentenv:set-errors/v1`, which makes a tool fail on purpose) and `args`, the body its operation takes.
The step reads the instance's card as the admin (every app is a child there, with the extensions it declares and
their paths rooted where the gateway relays them to that app) and calls the operation there; only the run does:
agents never reach these paths. An app that does not declare the extension fails the step naming what it declares,
unless `tolerate_unadvertised` (then the directive is skipped and said so in the outputs). Directives apply in order;
a failure stops the step, and what was applied before it stays applied.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import Field, model_validator

from agent_env.errors import AgentEnvError
from agent_env.gateway.composition import operations
from agent_env.gateway_client.wire import JsonObject
from agent_env.steps import StepConfig, StepContext, StepFailed, step_type
from agent_env.steps.builtin.envs import env_step_of, instance_id

EVERY_APP = "*"


class ConfigDirective(StepConfig):
    service: str = Field(min_length=1, description="the app's name in the env, or * for every app")
    uri: str = Field(min_length=1, description="the extension's URI on the app's card, e.g. urn:agentenv:set-errors/v1")
    args: JsonObject = Field(default_factory=dict, description="the body the extension's operation takes")
    method: str | None = Field(None, description="the extension's method, when it declares several")

    @model_validator(mode="before")
    @classmethod
    def _environment_is_service(cls, data: Any) -> Any:
        """The framework writes the app's name as `service` and, in what it exports, `environment` too."""
        if isinstance(data, dict) and "environment" in data:
            data = dict(data)
            named = data.pop("environment")
            if data.setdefault("service", named) != named:
                raise ValueError(f"`environment` ({named!r}) and `service` ({data['service']!r}) name different apps")
        return data


class ApplyServerConfigConfig(StepConfig):
    env: str | None = Field(None, description="the id of the deploy_env step whose environment this step acts on")
    env_id: str | None = Field(None, description="or the env a deploy_env step of this task deploys")
    directives: list[ConfigDirective] = Field(min_length=1, max_length=100)
    timeout_seconds: float = Field(30, gt=0, le=600, description="for each directive's call")
    tolerate_unadvertised: bool = Field(False, description="skip a directive its app's card does not declare")

    @model_validator(mode="after")
    def _one_env(self) -> ApplyServerConfigConfig:
        if (self.env is None) == (self.env_id is None):
            raise ValueError("give exactly one of `env` (a deploy_env step's id) or `env_id` (the env it deploys)")
        return self


@step_type(
    "apply_server_config",
    config=ApplyServerConfigConfig,
    local=True,
    timeout="5m",
    step_refs=("env",),
    prepare=env_step_of,
)
async def apply_server_config(ctx: StepContext, config: ApplyServerConfigConfig) -> JsonObject:
    """Configure a deployed env's apps through the extensions their cards declare (e.g. set-errors/v1)."""
    if config.env is None:
        raise StepFailed("the step's env_id was not resolved when the run was planned: plan the task again")
    gateway, instance = await ctx.gateway(), instance_id(ctx, config.env)
    card = await gateway.env_card(instance)
    apps = {c["name"]: c for c in card.get("children_environments") or [] if isinstance(c, dict) and "name" in c}
    applied: list[JsonObject] = []
    skipped: list[JsonObject] = []
    for index, directive in enumerate(config.directives):
        for service in list(apps) if directive.service == EVERY_APP else [directive.service]:
            where = f"directives[{index}] ({directive.uri} on {service!r})"
            if service not in apps:
                raise StepFailed(f"{where}: env {config.env!r} has no app {service!r}; its apps: {sorted(apps)}")
            extension = _declared(apps[service], directive.uri)
            if extension is None:
                if config.tolerate_unadvertised:
                    skipped.append({"service": service, "uri": directive.uri, "reason": "extension_not_advertised"})
                    continue
                raise StepFailed(
                    f"{where}: app {service!r} does not declare {directive.uri}; it declares "
                    f"{_uris(apps[service]) or 'no extensions'} (or set tolerate_unadvertised to skip it)"
                )
            verb, path = _operation(extension, directive, where)
            try:
                result = await asyncio.wait_for(
                    gateway.invoke_extension(instance, verb, path, directive.args), config.timeout_seconds
                )
            except TimeoutError:
                raise StepFailed(f"{where}: no answer within {config.timeout_seconds:g}s") from None
            except AgentEnvError as e:
                raise StepFailed(f"{where}: the app refused it: {e}") from None
            applied.append({"service": service, "uri": directive.uri, "args": directive.args, "result": result})
    return {"applied": applied, "skipped": skipped}


def _declared(app: JsonObject, uri: str) -> JsonObject | None:
    extensions = (app.get("capabilities") or {}).get("extensions") or []
    return next((e for e in extensions if isinstance(e, dict) and e.get("uri") == uri), None)


def _uris(app: JsonObject) -> list[str]:
    return [str(e.get("uri")) for e in (app.get("capabilities") or {}).get("extensions") or [] if isinstance(e, dict)]


def _operation(extension: JsonObject, directive: ConfigDirective, where: str) -> tuple[str, str]:
    """The HTTP verb and path of the extension's operation the directive invokes: its only one, or `method`'s."""
    ops = operations(extension.get("params") or {})
    if directive.method is not None:
        ops = [op for op in ops if op[0] == directive.method]
    if len(ops) != 1:
        names = [op[0] for op in operations(extension.get("params") or {})]
        raise StepFailed(
            f"{where}: "
            + (f"the extension has no method {directive.method!r}" if directive.method else "it has several methods")
            + f" (its methods: {names}); name one in the directive's `method`"
        )
    _, _, _, verb, path = ops[0]
    if not path.startswith("/"):
        raise StepFailed(f"{where}: the extension's endpoint {path!r} is not a path under the env")
    return verb, path
