"""`build_mcp_cli`, the framework's: a command-line client for a deployed environment's MCP tools.

The framework generates a script from the env's tools and keeps it as a CLI artifact (`cli_artifact_id`), which a
later step installs for an agent. Ours is the command `agent-env tools` already is (flags made from each tool's
JSON Schema, `agent_env.cli.tools_cmd`), not a second generator: the artifact is `bin/COMMAND_NAME`, a few lines
that run it for this environment, kept content-addressed in the object store and named in the step's outputs.

With `sandbox_name` (ours) the step also installs it in that deploy_sandbox sandbox at `/opt/cli/COMMAND_NAME/`,
beside a `bin/.env` (0600) holding where the gateway is, the instance and the token of one of the env's agents
(`agent`, default its first): the command acts as that agent, so the gateway shows and allows only what the
agent's role may, with its limits, and the token goes nowhere else (never into outputs or history). The tools
are listed when the command runs, so a role changed mid-run is what it sees next.
"""

from __future__ import annotations

import posixpath

from pydantic import Field

from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.run import PlannedConfig
from agent_env.steps import PlanContext, StepContext, StepFailed, step_type
from agent_env.steps.builtin.bare_sandboxes import InSandbox, prepare_in_sandbox, sandbox_of
from agent_env.steps.builtin.envs import deploying_env_step
from agent_env.stores import keys

INSTALL_ROOT = "/opt/cli"  # the framework's: /opt/cli/COMMAND_NAME/bin/COMMAND_NAME

SCRIPT = '''#!/usr/bin/env python3
"""{command}: the MCP tools of environment {env!r}, as the agent named in .env beside this file.
`{command}` lists them; `{command} TOOL --name value ...` calls one. Made by agent-env's build_mcp_cli."""
import sys

from agent_env.cli.tools_cmd import installed_cli

sys.exit(installed_cli({command!r}, __file__, sys.argv[1:]))
'''


class BuildMcpCliConfig(InSandbox):
    env_id: str = Field(min_length=1, description="the env a deploy_env step of this task deploys")
    command_name: str = Field(pattern=r"^[a-zA-Z][a-zA-Z0-9_-]{0,63}$", description="the command's name")
    cli_artifact_id: str | None = Field(None, min_length=1, description="the CLI artifact's id (default ENV_ID-cli)")
    agent: str | None = Field(None, description="with sandbox_name: the env's agent it acts as (default its first)")
    env_deployed: JsonObject | str | None = Field(None, description="filled in when the run is planned")


def prepare_build_mcp_cli(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    checked = BuildMcpCliConfig.model_validate(config)
    config["env_deployed"] = f"${{steps.{deploying_env_step(checked.env_id, plan)}.outputs}}"
    return prepare_in_sandbox("build_mcp_cli")(config, plan)


@step_type("build_mcp_cli", config=BuildMcpCliConfig, timeout="5m", prepare=prepare_build_mcp_cli)
async def build_mcp_cli(ctx: StepContext, config: BuildMcpCliConfig) -> JsonObject:
    """Make a command-line client of a deployed env's MCP tools (a CLI artifact); with sandbox_name, install it
    there, acting as one of the env's agents."""
    deployed = config.env_deployed if isinstance(config.env_deployed, dict) else {}
    instance, agents = deployed.get("instance"), deployed.get("agents") or {}
    if not instance:
        raise StepFailed(f"env {config.env_id!r} was not deployed as an instance on the gateway")
    name = config.command_name
    script = SCRIPT.format(command=name, env=config.env_id).encode()
    key = keys.content(script, "py")
    if not await ctx.stores.aio.objects.exists(key):
        await ctx.stores.aio.objects.put(key, script)
    entrypoint = f"bin/{name}"
    out: JsonObject = {
        "cli_artifact": {
            "id": config.cli_artifact_id or f"{config.env_id}-cli",
            "type": "cli",
            "command_name": name,
            "entrypoint": entrypoint,
            "files": {entrypoint: key},
            "env": instance,
        }
    }
    if config.sandbox_name is None:
        return out
    agent = config.agent or next(iter(agents), None)
    if agent is None or agent not in agents:
        raise StepFailed(f"env {config.env_id!r} has no agent {agent!r} to act as; it has: {', '.join(agents)}")
    role = agents[agent]["role"] if isinstance(agents[agent], dict) else agents[agent]
    gateway = await ctx.gateway()
    token = await gateway.token(str(instance), agent)
    sandbox = await sandbox_of(ctx, config)
    sandbox.secrets += (token,)
    root = posixpath.join(INSTALL_ROOT, name)
    path, settings = posixpath.join(root, entrypoint), posixpath.join(root, "bin", ".env")
    lines = {
        "gateway_url": await gateway.url_for(str(instance)),
        "instance": instance,
        "agent": agent,
        "role": role,
        "token": token,
    }
    await sandbox.put_file(settings, "".join(f"{k}={v}\n" for k, v in lines.items()).encode())
    await sandbox.put_file(path, script)
    done = await sandbox.exec(["chmod", "0600", sandbox.inside(settings)])
    if done.exit_code == 0:
        done = await sandbox.exec(["chmod", "0755", sandbox.inside(path)])
    if done.exit_code != 0:
        raise StepFailed(f"could not make {path} runnable in sandbox {config.sandbox_name!r}: {done.stderr[-500:]}")
    out["installed"] = {
        "sandbox_name": config.sandbox_name,
        "path": path,
        "command": sandbox.inside(path),  # where a command run in the sandbox finds it
        "agent": agent,
        "role": role,
    }
    return out
