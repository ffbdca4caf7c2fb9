"""Where a pool placed each instance of a run (`keys.placement`: its spec, its gateway, its deploy-time data,
its last snapshot), and rebuilding an instance on another gateway when its own has left the pool."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel

from agent_env.gateway_client.wire import JsonObject
from agent_env.stores import in_thread, keys, open_stores
from agent_env.stores.base import MissingObject

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agent_env.config import Settings
    from agent_env.gateway_client.single import SingleGateway
    from agent_env.stores import Stores

log = logging.getLogger("agent_env.gateway_client.pool")


class Restored(BaseModel):
    """An instance rebuilt on another gateway after its own left the pool."""

    lost: str  # the gateway it was on
    on: str  # the gateway it is on now
    snapshot: str | None  # the snapshot it was restored from (None: its deploy-time data)
    at: str


class Placement(BaseModel):
    """Where an instance of a run was placed, and what rebuilds it elsewhere (`keys.placement`)."""

    spec: JsonObject  # what deploy_env put (no secrets: apps, roles, agents)
    gateway: str
    data: list[str] = []  # the object keys of its deploy-time data
    last_snapshot: str | None = None
    restored: list[Restored] = []


def find(stores: Stores, instance: str) -> tuple[str, Placement] | None:
    """The instance's placement record and its key; None when a pool never placed it (no run, no record)."""
    run_id = instance.rpartition(".")[0]
    key = keys.placement(run_id, instance) if run_id else None
    try:
        return (key, Placement.model_validate_json(stores.objects.get(key))) if key else None
    except MissingObject:
        return None


def snapshot_taken(stores: Stores, instance: str, snapshot: str) -> None:
    """Note `snapshot` as the state another gateway would restore `instance` from."""
    found = find(stores, instance)
    if found is not None:
        key, placement = found
        placement.last_snapshot = snapshot
        stores.objects.put(key, placement.model_dump_json().encode())


async def take_over(
    settings: Settings | None,
    instance: str,
    members: set[str],
    place: Callable[[str | None], Awaitable[SingleGateway]],
) -> SingleGateway | None:
    """Rebuild an instance whose gateway is no longer in the pool (`members`: the base URLs of those that are)
    on the one `place` picks: its spec, then its last snapshot (or its deploy-time data). None when it was never
    placed by a pool, or its gateway still is in the pool (then it was deleted, not lost)."""
    if settings is None:  # no stores that hold placement records: nothing is restored
        return None
    stores = await in_thread(open_stores, settings)
    try:
        found = await in_thread(find, stores, instance)
        if found is None or found[1].gateway in members:
            return None
        key, placement = found
        target = await place(placement.spec.get("run_id"))
        await target.put_instance(placement.spec)
        if placement.last_snapshot:
            await target.restore(instance, await stores.aio.objects.get(placement.last_snapshot))
        elif placement.data:
            parts = [{"kind": "data", "data": json.loads(await stores.aio.objects.get(k))} for k in placement.data]
            await target.load(instance, parts, idempotency_key=f"{instance}/restored", reset=True)
        placement.restored.append(
            Restored(
                lost=placement.gateway,
                on=target.base_url,
                snapshot=placement.last_snapshot,
                at=datetime.now(UTC).isoformat(timespec="seconds"),
            )
        )
        placement.gateway = target.base_url
        await stores.aio.objects.put(key, placement.model_dump_json().encode())
    finally:
        stores.close()
    log.warning(
        "instance %s: its gateway %s left the pool; restored on %s from %s",
        instance,
        placement.restored[-1].lost,
        target.base_url,
        placement.last_snapshot or "its deploy-time data",
    )
    return target
