"""`install_agent`, the framework's: install an A2A agent into a sandbox that is already running, by the commands
its card declares in `urn:agentenv:install/v1`, and start it there; later steps talk to it as to a deployed one
(`prompt_agent` names this step).

The fields are the framework's. `a2a_agent_id` names an `a2a` agent of the bundle (agents/NAME/agent.toml) whose
`sandbox.build` folder holds its files, the framework's build context, pinned when the run is planned. The step
puts them in the sandbox as `{agent_ctx_tar}` (a .tar.gz) under `{work_dir}`, reads the agent's card there by
running its entry point (`sandbox.command`, Python with our SDK: `agent_env.agents.card_of`) as the framework
reads its cards from its images, and runs the declared commands with every `{placeholder}` filled in, quoted:

- on the sandbox's host (`install_commands_host`, `required_params_host`): the sandbox must be a `vm` sandbox of
  the `local` provider, whose host is this machine; `{a2a_port}` is a free port here, where the agent's card must
  then answer. What the commands leave running is stopped with the sandbox (the local provider keeps each
  exec'd command's process group);
- into a container (`container_name`, `install_commands`, `required_params`): a run_docker_container container
  beside a local `vm` sandbox, whose host runs Docker (the Docker tier). `{container}` names it; the agent serves
  on the container's published port (`ports`), which must be its `a2a_port`.

The model endpoint's parameters (`litellm_*`) are the configured `agent` endpoint, its key resolved in the
activity and kept out of outputs and errors. `trust_env` is empty here; `host_workdir`/`host_user` come only
with the framework's proxy install, which is refused, as is `a2a_agent_version` (a registry agent).
"""

from __future__ import annotations

import gzip
import json
import posixpath
import shlex

from pydantic import Field, model_validator

from agent_env import waiting
from agent_env.agents.client import AgentReplyInvalid, agent_client, forget_agent
from agent_env.agents.extension_ops import INSTALL, InstallDeclaration
from agent_env.bundles import find_agent
from agent_env.errors import AgentEnvError, BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.ports import free_port
from agent_env.providers import apps
from agent_env.providers.base import Sandbox
from agent_env.spec.agent import AgentRecord
from agent_env.spec.run import PlannedConfig
from agent_env.spec.task import upstream
from agent_env.steps import PlanContext, StepContext, StepFailed, step_type
from agent_env.steps.builtin.bare_sandboxes import InSandbox, deploying_step, prepare_in_sandbox, sandbox_of
from agent_env.steps.builtin.sandbox_steps import heartbeating
from agent_env.stores import in_thread, open_secrets

DEFAULT_AGENT_NAME = "default-agent"  # the framework's
START_TIMEOUT = 120.0  # from the last command to the agent's card answering
COMMAND_TIMEOUT = 600.0  # one install command
PYTHONS = ("python", "python3")


class InstallAgentConfig(InSandbox):
    sandbox_name: str | None = Field(None, description="the deploy_sandbox sandbox (vm mode) to install into")
    container_name: str | None = Field(
        None, description="install into this run_docker_container container (else onto the sandbox's host)"
    )
    a2a_agent_id: str | None = Field(None, description="an a2a agent of the bundle (agents/NAME/agent.toml)")
    a2a_agent_version: int | None = Field(None, description="not supported yet: the bundle's agent")
    agent_name: str = Field(DEFAULT_AGENT_NAME, pattern=r"^[A-Za-z0-9_.@\-]{1,64}$", description="its name here")
    a2a_port: int | None = Field(None, ge=1, le=65535, description="its port (default: the card's a2a_port)")
    workspace_dir: str | None = Field(None, description="`{workspace_dir}` for commands that name it")
    record: AgentRecord | None = Field(None, description="filled in when the run is planned")
    build: str | None = Field(None, description="filled in when the run is planned: its files' object key")
    container: JsonObject | str | None = Field(None, description="filled in when the run is planned")
    container_port: int | None = Field(None, description="filled in when the run is planned: its published port")

    @model_validator(mode="after")
    def _check(self) -> InstallAgentConfig:
        if self.sandbox_name is None:
            raise ValueError("give `sandbox_name`: the deploy_sandbox sandbox to install the agent into")
        if self.a2a_agent_version is not None:
            raise ValueError("`a2a_agent_version`: installing a registry agent is not supported yet; remove it")
        if self.a2a_agent_id is None:
            raise ValueError("give `a2a_agent_id`: an a2a agent of the bundle (there is no configured default)")
        return self


def prepare_install(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """Pin the agent's record and files; check the sandbox (and container) can take a host (container) install."""
    checked = InstallAgentConfig.model_validate({k: v for k, v in config.items() if k not in ("deployed",)})
    config = prepare_in_sandbox("install_agent")(config, plan)
    where = f"install_agent {plan.step_id!r}"
    task = plan.task
    deploy = next(s for s in task.steps if s.id == deploying_step(config, plan, "install_agent")) if task else None
    if deploy is not None and deploy.config.get("sandbox_mode") != "vm":
        raise BadInput(
            f"{where}: sandbox {checked.sandbox_name!r} is a container-mode sandbox; an agent installs into a vm one",
            f"set sandbox_mode = 'vm' on step {deploy.id!r}",
        )
    chain = str((deploy.config.get("sandbox_type") if deploy else None) or plan.settings.sandboxes.envs)
    if {p.strip() for p in chain.split(",")} != {"local"}:
        raise BadInput(
            f"{where}: sandbox {checked.sandbox_name!r} is on {chain!r}; an agent is installed on a local sandbox, "
            "whose host is this machine (where the agent's port is reached, and where Docker runs its containers)",
            f"set sandbox_type = 'local' on step {deploy.id if deploy else checked.sandbox_name!r}",
        )
    record, folder = find_agent(plan.bundle, str(checked.a2a_agent_id), with_folder=True)
    box = record.sandbox() if record.type == "a2a" else None
    if box is None or not box.build or folder is None:
        raise BadInput(
            f"{where}: a2a_agent_id {checked.a2a_agent_id!r} is a {record.type} agent without a sandbox `build` "
            "folder: install/v1 installs an agent's files",
            "name an a2a agent of the bundle whose [config.sandbox] has `build` (its files) and `command`",
        )
    if not box.command or box.command[0] not in PYTHONS:
        raise BadInput(
            f"{where}: agent {record.name!r} is started by {box.command!r}; its card is read by running its Python "
            "entry point with our SDK",
            "give its [config.sandbox] a command = ['python3', 'agent.py'] (or ['python3', '-m', 'module'])",
        )
    config["record"] = record.model_dump(mode="json")
    config["build"] = apps.pin_build(plan.stores, folder, box.build)
    if checked.container_name is not None:
        step = _container_step(checked, plan)
        ports = next(s for s in task.steps if s.id == step).config.get("ports") if task else None
        config["container"] = "${steps." + step + ".outputs.container}"
        config["container_port"] = (ports or [8000])[0]  # (run_docker_container's default)
    return config


def _container_step(config: InstallAgentConfig, plan: PlanContext) -> str:
    task = plan.task
    steps = task.steps if task else []
    found = [
        s.id
        for s in steps
        if s.type == "run_docker_container"
        and s.config.get("container_name", "task-container") == config.container_name
        and s.config.get("sandbox_name") == config.sandbox_name
    ]
    if len(found) != 1 or found[0] not in upstream(str(plan.step_id), {s.id: s.depends_on for s in steps}):
        raise BadInput(
            f"install_agent {plan.step_id!r}: container_name {config.container_name!r} on sandbox "
            f"{config.sandbox_name!r} is run by {len(found)} earlier run_docker_container steps",
            "run it with one run_docker_container step before this one (same container_name and sandbox_name)",
        )
    return found[0]


async def _sh(ctx: StepContext, sandbox: Sandbox, script: str, what: str) -> str:
    try:
        done = await heartbeating(ctx, sandbox.exec(["sh", "-c", script], timeout=COMMAND_TIMEOUT))
    except TimeoutError:
        raise StepFailed(f"{what} ran over {COMMAND_TIMEOUT:g}s") from None
    except AgentEnvError as e:
        raise StepFailed(f"{what}: {e}") from None
    if done.exit_code != 0:
        raise StepFailed(f"{what} exited {done.exit_code}: {sandbox.redact(done.stderr + done.stdout)[-2000:]}")
    return done.stdout


def _declaration(card: JsonObject, name: str) -> InstallDeclaration:
    found = [e for e in card.get("capabilities", {}).get("extensions", []) if e.get("uri") == INSTALL]
    if not found:
        raise StepFailed(
            f"agent {name!r} declares no {INSTALL} on its card: nothing says how to install it — declare it "
            "(our SDK: `install = InstallDeclaration(...)` on the Agent class)"
        )
    try:
        return InstallDeclaration.model_validate(found[0].get("params") or {})
    except ValueError as e:
        raise StepFailed(f"agent {name!r}: its {INSTALL} params are not the protocol's: {e}") from None


def _model_params(ctx: StepContext, sandbox: Sandbox) -> dict[str, str]:
    endpoint = ctx.settings.model("agent")
    key = open_secrets(ctx.settings).resolve(endpoint.api_key) if endpoint.api_key else ""
    if key:
        sandbox.secrets += (key,)
    return {"litellm_api_key": key, "litellm_base_url": endpoint.base_url or "", "litellm_extra_headers": "{}"}


@step_type(
    "install_agent",
    config=InstallAgentConfig,
    timeout="30m",
    prepare=prepare_install,
    deploys_agent=True,
)
async def install_agent(ctx: StepContext, config: InstallAgentConfig) -> JsonObject:
    """Install an A2A agent into a running sandbox (onto its host, or into a container beside it) by the commands
    its card's install/v1 declares, and start it there."""
    record = config.record
    box = record.sandbox() if record else None
    if record is None or box is None or not box.command:
        raise StepFailed("install_agent was not planned: run the task through `agent-env run`")
    sandbox = await sandbox_of(ctx, config)
    if (config.deployed or {}).get("sandbox", {}).get("provider") != "local":
        raise StepFailed(f"sandbox {config.sandbox_name!r} is not a local one: an agent is installed on local")
    container = config.container if isinstance(config.container, dict) else None
    host_mode = config.container_name is None
    work_dir = f"/tmp/install-agent-{config.agent_name}"
    here = sandbox.inside(work_dir)
    tar = posixpath.join(here, "agent-ctx.tar.gz")
    await _sh(ctx, sandbox, f"rm -rf {shlex.quote(here)} && mkdir -p -m 0700 {shlex.quote(here)}/card", "work_dir")
    data = await ctx.stores.aio.objects.get(str(config.build))
    await sandbox.put_file(posixpath.join(work_dir, "agent-ctx.tar.gz"), await in_thread(gzip.compress, data))
    await _sh(ctx, sandbox, f"tar -xzf {shlex.quote(tar)} -C {shlex.quote(here)}/card", "unpacking the agent")
    card_read = ["python3", "-m", "agent_env.agents.card_of", posixpath.join(here, "card"), *box.command]
    stdout = await _sh(ctx, sandbox, shlex.join(card_read), f"reading agent {record.name!r}'s card")
    try:
        card = json.loads(stdout)
    except ValueError:
        raise StepFailed(f"agent {record.name!r}'s entry point printed no card: {stdout[-500:]!r}") from None
    declared = _declaration(card, record.name)
    commands = declared.install_commands_host if host_mode else declared.install_commands
    required = declared.required_params_host if host_mode else declared.required_params
    key = "install_commands_host" if host_mode else "install_commands"
    if not commands:
        raise StepFailed(
            f"agent {record.name!r} declares no {key} in {INSTALL}: it cannot be installed "
            + ("onto a sandbox's host (give container_name to install into a container)" if host_mode else "there")
        )
    port = config.a2a_port or declared.a2a_port
    if port is None:
        raise StepFailed(f"agent {record.name!r} declares no a2a_port and the step gives none: set `a2a_port`")
    if host_mode:
        served_on, url = free_port(), None
    else:
        served_on, url = port, str((container or {}).get("url") or "")
        if not url or config.container_port != port:
            raise StepFailed(
                f"container {config.container_name!r} does not publish port {port}, which agent "
                f"{record.name!r} serves on: give its run_docker_container step ports = [{port}]"
            )
    values: JsonObject = {
        "container": (container or {}).get("id"),
        "work_dir": here,
        "agent_ctx_tar": tar,
        "a2a_port": served_on,
        "agent_name": config.agent_name,
        "workspace_dir": config.workspace_dir,
        "trust_env": "",
    }
    if any(p.startswith("litellm_") for p in required):
        values |= await in_thread(_model_params, ctx, sandbox)
    resolved = {}
    for name in required:
        if values.get(name) is None:
            raise StepFailed(
                f"agent {record.name!r} needs {{{name}}} in its {key}, which this install does not give"
                + (" (set `workspace_dir`)" if name == "workspace_dir" else "")
            )
        resolved[name] = shlex.quote(str(values[name]))
    for i, command in enumerate(commands):
        try:
            filled = command.format(**resolved)
        except (KeyError, IndexError, ValueError) as e:
            raise StepFailed(f"{key}[{i}] names a placeholder its required params do not declare: {e}") from None
        await _sh(ctx, sandbox, filled, f"{key}[{i}] ({command.splitlines()[0][:100]})")
    url = url or f"http://127.0.0.1:{served_on}/"
    await _answering(ctx, url, record.name)
    return {
        "agent": record.name,
        "type": record.type,
        "name": config.agent_name,
        "role": None,
        "env": None,
        "url": url,
        "hosted": False,
        "mcp_url": None,
        "installed": {
            "sandbox_name": config.sandbox_name,
            "container_name": config.container_name,
            "mode": "host" if host_mode else "container",
            "a2a_port": served_on,
            "commands": len(commands),
        },
    }


async def _answering(ctx: StepContext, url: str, name: str) -> None:
    forget_agent(url)  # an earlier agent may have had this port
    client = agent_client(ctx.settings, url, hosted=False)

    async def heartbeat() -> None:
        ctx.heartbeat()

    try:
        await waiting.until(
            client.card,
            what=f"installed agent {name!r}",
            timeout=START_TIMEOUT,
            interval=0.25,
            give_up_on=(AgentReplyInvalid,),
            check=heartbeat,
        )
    except (AgentReplyInvalid, waiting.TimedOut) as e:
        forget_agent(url)
        raise StepFailed(f"installed agent {name!r} did not answer with its A2A card at {url}: {e}") from None
