"""Starting a sandboxed agent for `deploy_agent`: its sandbox as the step sizes it, its pinned skills put in, and
its A2A card awaited (an agent that exits first, or whose card names another URL, fails the deploy with why)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from agent_env import waiting
from agent_env.agents.client import AgentReplyInvalid, agent_client, forget_agent
from agent_env.gateway_client.wire import JsonObject
from agent_env.providers import apps
from agent_env.spec.agent import AgentRecord
from agent_env.spec.env import AgentSandbox
from agent_env.steps import StepContext, StepFailed
from agent_env.steps.builtin.agent_deploy_fields import sandbox_for
from agent_env.steps.builtin.sandbox_steps import put_pinned

if TYPE_CHECKING:
    from agent_env.providers.base import Sandbox, SandboxProvider
    from agent_env.steps.builtin.agent_deploy import DeployAgentConfig

AGENT_START_TIMEOUT = 60.0  # a sandboxed agent has this long from its sandbox's start to answer with its card


async def start_agent_sandbox(
    ctx: StepContext, config: DeployAgentConfig, record: AgentRecord, box: AgentSandbox
) -> tuple[JsonObject, str, JsonObject]:
    """Start (or, on a retry, find) the agent's sandbox, as the step sizes it, and wait for its card; returns
    (sandbox, agent URL, what the step asked of it). The sandbox is the run's: its end (or the reaper) removes it."""
    owner = f"{ctx.run_id}.{ctx.step_id}"  # (deploy_agent's agent_id)
    chain = config.provider or box.provider or ctx.settings.sandboxes.agents
    box, asked = sandbox_for(box, config, chain, ctx.settings)
    provider, sandbox = await apps.start(
        ctx.settings,
        ctx.stores,
        run_id=ctx.run_id,
        owner=owner,
        name=record.name,
        box=box,
        build_key=config.build,
        chain=chain,
        label=f"agent {record.name!r}",
    )
    if config.skill_files:  # under /skills/NAME/ (put again on a retry: the same bytes)
        await put_pinned(ctx, sandbox, config.skill_files)
    url = sandbox.url.rstrip("/") + box.path
    where = f"agent {record.name!r} (a {provider.name} sandbox, {sandbox.info.id})"
    forget_agent(url)  # an earlier sandbox may have had this port: forget its card
    client = agent_client(ctx.settings, url, hosted=False)
    misses = itertools.count(1)

    async def still_running() -> None:
        if next(misses) % 4 == 0 and await _exited(provider, ctx.run_id, sandbox.info.id):  # ~1/s: lists cost
            raise StepFailed(f"{where} exited before serving A2A; its last output:\n{await _output_tail(sandbox)}")

    try:  # still starting: ask again until it exits or time is up
        card = await waiting.until(
            client.card,
            what=where,
            timeout=AGENT_START_TIMEOUT,
            interval=0.25,
            give_up_on=(AgentReplyInvalid,),
            check=still_running,
        )
    except AgentReplyInvalid as e:  # it answered, with a card pointing elsewhere: waiting will not help
        forget_agent(url)
        raise StepFailed(f"{where}: {e}") from None
    except waiting.TimedOut as e:
        raise StepFailed(
            f"{where} did not answer with an A2A card at {url} within {AGENT_START_TIMEOUT:g}s "
            f"({e.last}); its last output:\n{await _output_tail(sandbox)}"
        ) from None
    advertised = [i.url for i in card.supported_interfaces]  # resolved, and on the agent's origin (the client's rule)
    if not any(u.rstrip("/") == url.rstrip("/") for u in advertised):  # clients would send turns there
        forget_agent(url)
        raise StepFailed(
            f"{where} answers at {url}, but its card advertises {', '.join(advertised) or 'no URL'} "
            "— serve the card with the URL it is reached at (agent_env.agents.sdk.serve on all interfaces "
            "names a URL relative to its card; behind a proxy give it public_url or $AGENT_ENV_PUBLIC_URL)"
        )
    box_info = {"provider": provider.name, "id": sandbox.info.id, "url": sandbox.url, "image_id": sandbox.info.image_id}
    return box_info, url, asked


async def _exited(provider: SandboxProvider, run_id: str, sandbox_id: str) -> bool:
    return not any(i.id == sandbox_id and i.status not in ("exited", "dead") for i in await provider.list(run_id))


async def _output_tail(sandbox: Sandbox, lines: int = 20) -> str:
    """What the sandbox printed last, where its provider keeps it (it is gone once the run's sandboxes are
    removed, so errors carry it)."""
    try:
        text = sandbox.redact(await sandbox.logs(lines))
    except Exception:  # noqa: BLE001 - the output is a courtesy; the error stands without it
        text = ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:]) or "    (none)"
