"""What a run leaves on the gateway, released: an instance retired (its trajectory kept in the object store
first), and at the run's end everything else (instances closed, hosted agents deleted). Used by the
teardown_env step, the run's release activity and the reaper. Both are idempotent: a retry finds the
work done."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agent_env.gateway_client import GatewayRefused
from agent_env.stores import keys

if TYPE_CHECKING:
    from agent_env.gateway_client import GatewayClient
    from agent_env.stores import Stores


def trajectory_key(run_id: str, instance: str) -> str:
    return keys.trajectory(run_id, instance)


def _jsonl(entries: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(e) + "\n" for e in entries).encode()


async def retire_instance(
    gateway: GatewayClient, stores: Stores, run_id: str, instance: str, *, keep_data: bool = False
) -> dict[str, Any]:
    """Keep the instance's trajectory in the object store, then stop serving it."""
    key = trajectory_key(run_id, instance)
    try:
        entries = await gateway.trajectory(instance)
    except GatewayRefused as e:
        if e.status != 404:
            raise
        return {"instance": instance, "trajectory": key if await stores.aio.objects.exists(key) else None}
    await stores.aio.objects.put(key, _jsonl(entries))
    await gateway.delete_instance(instance, keep_data=keep_data)
    return {"instance": instance, "trajectory": key, "calls": len(entries)}


async def end_run(gateway: GatewayClient, stores: Stores, run_id: str) -> dict[str, Any]:
    """The run is over: the gateway closes its instances and deletes its hosted agents; the instances'
    trajectories are then kept in the object store (complete: closing wrote all). The end's answer carries the
    trajectories a page holds whole; the others (and all, from a gateway older than that) are read after it."""
    ended = await gateway.end_run(run_id, trajectories=True)
    whole = ended.get("trajectories", {})
    for instance in ended["instances"]:
        entries = whole[instance] if instance in whole else await gateway.trajectory(instance)
        if entries:
            await stores.aio.objects.put(trajectory_key(run_id, instance), _jsonl(entries))
    return {"closed": len(ended["instances"]), "agents_deleted": len(ended["agents"])}
