"""deploy_agent's `sandbox_name`: serve the agent in a sandbox a deploy_sandbox step of the task already runs, as the
framework places an agent on a linked sandbox, instead of in a sandbox of its own.

The framework runs the agent as a second container on a VM sandbox. Here the sandbox must be a `vm` sandbox of the
`local` provider, whose processes run on this machine: the agent's build context is unpacked in a folder of the
sandbox and its `sandbox.command` is started there in the background, with $HOST and $PORT (a free port here, where
its card must then answer) and its environment (the record's and the step's `env_vars`, `secret:` references resolved
here, written to a file private to the sandbox's folder, never onto a command line). The agent stops with the
sandbox: the run's end, or a teardown, removes it.
"""

from __future__ import annotations

import gzip
import itertools
import posixpath
import shlex
from typing import TYPE_CHECKING

from agent_env import waiting
from agent_env.agents.client import AgentReplyInvalid, agent_client, forget_agent
from agent_env.errors import AgentEnvError
from agent_env.gateway_client.wire import JsonObject
from agent_env.ports import free_port
from agent_env.providers import apps
from agent_env.providers.base import Sandbox
from agent_env.spec.agent import AgentRecord
from agent_env.spec.env import AgentSandbox
from agent_env.steps import StepContext, StepFailed
from agent_env.steps.builtin.agent_deploy_fields import requested, sandbox_for
from agent_env.steps.builtin.sandbox_steps import SandboxStep, attach, heartbeating, put_pinned
from agent_env.stores import in_thread

if TYPE_CHECKING:
    from agent_env.steps.builtin.agent_deploy import DeployAgentConfig

START_TIMEOUT = 60.0  # from its start to its card answering
LOG = "agent.log"


async def start_in_deployed_sandbox(
    ctx: StepContext, config: DeployAgentConfig, record: AgentRecord, box: AgentSandbox
) -> tuple[JsonObject, str, JsonObject]:
    """Start the agent in the deploy_sandbox step's sandbox and wait for its card; returns (where it runs, its
    URL, what the step asked of it)."""
    name = str(config.sandbox_name)
    deployed = (config.sandbox_deployed or {}).get("sandbox") or {}
    if deployed.get("provider") != "local" or deployed.get("mode") != "vm":
        raise StepFailed(
            f"agent {record.name!r}: sandbox {name!r} is a {deployed.get('mode')} sandbox of the "
            f"{deployed.get('provider')} provider; an agent is placed only on a local vm sandbox here (its "
            'processes run on this machine) — deploy it with sandbox_type = "local" and sandbox_mode = "vm", or '
            "leave sandbox_name out to give the agent a sandbox of its own"
        )
    sandbox = await attach(ctx, SandboxStep(sandbox=name, deployed=config.sandbox_deployed))
    label = f"agent {record.name!r} (in sandbox {name!r})"
    work = f"/tmp/agent-{ctx.step_id}"
    here = sandbox.inside(work)
    await _sh(ctx, sandbox, f"rm -rf {shlex.quote(here)} && mkdir -p -m 0700 {shlex.quote(here)}", label)
    if config.build:  # the pinned context, as the agent's own sandbox would start from it
        data = await ctx.stores.aio.objects.get(config.build)
        await sandbox.put_file(posixpath.join(work, "context.tar.gz"), await in_thread(gzip.compress, data))
        await _sh(ctx, sandbox, f"cd {shlex.quote(here)} && tar -xzf context.tar.gz && rm context.tar.gz", label)
    if config.skill_files:  # under /skills/NAME/, as in a sandbox of its own
        await put_pinned(ctx, sandbox, config.skill_files)
    sized, _ = sandbox_for(box, config, "local", ctx.settings)
    port = free_port()
    env = await in_thread(apps.resolve_env, ctx.settings, sized, label)
    sandbox.secrets += tuple(env[var] for var in apps.env_secrets(sized) if env[var])  # kept out of errors
    env |= {"HOST": "127.0.0.1", "PORT": str(port)}
    await sandbox.put_file(posixpath.join(work, ".env"), _env_file(env))
    command = shlex.join(box.command or [])
    await _sh(
        ctx,
        sandbox,
        f"cd {shlex.quote(here)} && set -a && . ./.env && set +a && rm .env && "
        f"(nohup {command} > {LOG} 2>&1 < /dev/null & echo $! > agent.pid)",
        label,
    )
    url = f"http://127.0.0.1:{port}{box.path}"
    forget_agent(url)
    client = agent_client(ctx.settings, url, hosted=False)

    misses = itertools.count(1)

    async def still_running() -> None:
        ctx.heartbeat()
        if next(misses) % 4 == 0:  # ~1/s
            alive = await sandbox.exec(["sh", "-c", f"kill -0 $(cat {shlex.quote(here)}/agent.pid)"], timeout=10)
            if alive.exit_code != 0:
                raise StepFailed(f"{label} exited before serving A2A; its last output:\n{await _tail(sandbox, here)}")

    try:
        await waiting.until(
            client.card,
            what=label,
            timeout=START_TIMEOUT,
            interval=0.25,
            give_up_on=(AgentReplyInvalid,),
            check=still_running,
        )
    except (AgentReplyInvalid, waiting.TimedOut) as e:
        forget_agent(url)
        raise StepFailed(
            f"{label} did not answer with an A2A card at {url}: {e}; its last output:\n{await _tail(sandbox, here)}"
        ) from None
    where = {"provider": "local", "id": sandbox.info.id, "url": url.removesuffix(box.path), "sandbox_name": name}
    return where, url, requested(config, False)


async def _tail(sandbox: Sandbox, here: str, lines: int = 20) -> str:
    """What the agent printed last (its secrets redacted)."""
    try:
        done = await sandbox.exec(["tail", "-n", str(lines), posixpath.join(here, LOG)], timeout=10)
    except Exception:  # noqa: BLE001 - the output is a courtesy; the error stands without it
        return "    (none)"
    return "\n".join("    " + line for line in sandbox.redact(done.stdout).splitlines()) or "    (none)"


def _env_file(env: dict[str, str]) -> bytes:
    return "".join(f"{name}={shlex.quote(value)}\n" for name, value in env.items()).encode()


async def _sh(ctx: StepContext, sandbox: Sandbox, script: str, label: str) -> None:
    try:
        done = await heartbeating(ctx, sandbox.exec(["sh", "-c", script], timeout=120))
    except AgentEnvError as e:
        raise StepFailed(f"{label}: {e}") from None
    if done.exit_code != 0:
        raise StepFailed(f"{label}: exited {done.exit_code}: {sandbox.redact(done.stderr + done.stdout)[-1000:]}")
