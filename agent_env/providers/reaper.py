"""The reaper: removes sandboxes whose run is over (or unknown to Temporal) and sandboxes past their TTL.

A run removes its own sandboxes when it ends, fails or is cancelled; the reaper is for what that cannot
cover: a run terminated or timed out by Temporal, a deploy step whose worker was SIGKILLed and whose run
then ended elsewhere, a cluster reset. Workers run it every `[sandboxes] reap_every` seconds;
`agent-env sandboxes reap` runs it once.

It judges only sandboxes labelled with its own install's id (`providers.base.install_id`): a run another
install started is unknown to our Temporal, and would otherwise look over.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_env.gateway import embedded
from agent_env.gateway.release import retire_instance
from agent_env.providers import by_name
from agent_env.providers.base import SandboxInfo, install_id
from agent_env.stores import in_thread, open_stores

if TYPE_CHECKING:
    from temporalio.client import Client

    from agent_env.config import Settings


@dataclass
class Verdict:
    sandbox: SandboxInfo
    reason: str | None  # why it goes; None = it stays

    @property
    def doomed(self) -> bool:
        return self.reason is not None


async def run_statuses(client: Client | None, run_ids: set[str]) -> dict[str, str]:
    """Each run's workflow status ('running', 'completed', 'terminated', ..., 'unknown' when Temporal
    has never heard of it); empty when there is no client."""
    if client is None:
        return {}
    from temporalio.service import RPCError, RPCStatusCode

    async def one(run_id: str) -> tuple[str, str]:
        try:
            described = await client.get_workflow_handle(run_id).describe()
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return run_id, "unknown"
            raise
        return run_id, (described.status.name.lower() if described.status else "running")

    return dict(await asyncio.gather(*(one(r) for r in run_ids)))


def judge(
    sandboxes: list[SandboxInfo], statuses: dict[str, str], *, now: float | None = None, everything: bool = False
) -> list[Verdict]:
    now = now or time.time()
    verdicts = []
    for box in sandboxes:
        status = statuses.get(box.run_id)
        if everything:
            reason = "asked to remove every sandbox"
        elif box.expired(now):
            reason = "past its TTL"
        elif status is not None and status != "running":
            reason = f"its run is {status}" if status != "unknown" else "its run is unknown to Temporal"
        else:
            reason = None
        verdicts.append(Verdict(box, reason))
    return verdicts


async def reap(
    settings: Settings, client: Client | None, *, dry_run: bool = False, everything: bool = False
) -> list[Verdict]:
    """Judge this install's sandboxes on every usable provider (`everything`: all of them are doomed); remove
    the doomed ones (unless dry_run), and retire the gateway's instances that were served by sandboxes of
    runs that are over."""
    providers = {p.name: p for p in await by_name.usable(settings)}
    ours = install_id(settings)
    # Providers list only their install's sandboxes; checked again here for plugins that do not.
    sandboxes = [box for p in providers.values() for box in await p.list() if box.install == ours]
    statuses = await run_statuses(client, {b.run_id for b in sandboxes if b.run_id})
    verdicts = judge(sandboxes, statuses, everything=everything)
    if not dry_run:
        for v in verdicts:
            if v.doomed:
                await providers[v.sandbox.provider].remove(v.sandbox.id)
        if client is not None:
            await retire_orphaned_instances(settings, client)
    return verdicts


async def retire_orphaned_instances(settings: Settings, client: Client) -> list[str]:
    """Instances served by remote apps (sandboxes, URLs) of a run that is over, which the run could not
    retire itself: keep their trajectories and stop serving them. Only a gateway that runs is asked."""
    if not settings.gateway.urls() and not embedded.status(settings).running:
        return []
    retired = []
    async with embedded.connect(settings, start_daemon=False) as gateway:
        instances = [
            i
            for i in await gateway.list_instances()
            if i.get("run_id") and any(app.get("url") for app in i.get("apps", []))
        ]
        if not instances:
            return []
        statuses = await run_statuses(client, {i["run_id"] for i in instances})
        stores = await in_thread(open_stores, settings)
        try:
            for inst in instances:
                if statuses.get(inst["run_id"], "running") != "running":
                    await retire_instance(gateway, stores, inst["run_id"], inst["id"])
                    retired.append(inst["id"])
        finally:
            stores.close()
    return retired


async def reap_forever(settings: Settings, client: Client, every: float, log) -> None:
    """A worker's background reaper. Errors are logged, never fatal: the next pass tries again."""
    while True:
        try:
            for v in await reap(settings, client):
                if v.doomed:
                    log(f"reaped sandbox {v.sandbox.provider}:{v.sandbox.id} ({v.reason})")
        except Exception as e:  # noqa: BLE001 - a reaper that dies would leak silently
            log(f"sandbox reaper pass failed: {e}")
        await asyncio.sleep(every)
