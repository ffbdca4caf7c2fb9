"""snapshot_env's `include_env_changes`: an environment's changelog (changes/v1: who changed what) kept as JSON lines
beside its snapshot, with the counts the framework records (rows; attributed: one actor; ambiguous: several).

What the step outputs under `env_changes` is the framework's entry (`captured_at_utc`, `capture_step_id`, the counts,
or `error`), with the object's store key as `object_key`. A capture that fails leaves the snapshot standing and says
why, as the framework's does: the changelog is an account of the state, not the state. `include_env_trajectory` keeps
the instance's trajectory (every call made in it) beside the snapshot the same way (`env_trajectory`).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

from agent_env.errors import AgentEnvError
from agent_env.gateway.changes import PAGE_MAX
from agent_env.gateway_client import GatewayClient
from agent_env.gateway_client.wire import JsonObject
from agent_env.steps import StepContext

CAPTURE_BUDGET_S = 300  # as the framework's; the changelog is bounded (envs/changelog.py), so this is slack


async def capture(ctx: StepContext, gateway: GatewayClient, instance: str, key: str) -> JsonObject:
    entry: JsonObject = {"captured_at_utc": datetime.now(UTC).isoformat(), "capture_step_id": ctx.step_id}
    try:
        entry.update(await asyncio.wait_for(_capture(ctx, gateway, instance, key), CAPTURE_BUDGET_S))
    except (AgentEnvError, TimeoutError, OSError) as e:
        entry["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return entry


async def _capture(ctx: StepContext, gateway: GatewayClient, instance: str, key: str) -> JsonObject:
    lines: list[bytes] = []
    counts = {"change_count": 0, "attributed_count": 0, "ambiguous_count": 0}
    after_id, more = 0, True
    while more:
        page = await gateway.changes(instance, after_id, PAGE_MAX)
        for change in page["changes"]:
            lines.append(json.dumps(change).encode() + b"\n")
            counts["change_count"] += 1
            counts["attributed_count"] += len(change["actors"]) == 1
            counts["ambiguous_count"] += len(change["actors"]) > 1
            after_id = change["id"]
        more = page["has_more"] and bool(page["changes"])
    await ctx.stores.aio.objects.put(key, b"".join(lines))
    return {"object_key": key, **counts}


async def capture_trajectory(ctx: StepContext, gateway: GatewayClient, instance: str, key: str) -> JsonObject:
    """The instance's trajectory as JSON lines at `key`: its key and count, or the error that stopped it."""
    entry: JsonObject = {"captured_at_utc": datetime.now(UTC).isoformat(), "capture_step_id": ctx.step_id}
    try:
        entries = await asyncio.wait_for(gateway.trajectory(instance), CAPTURE_BUDGET_S)
        lines = b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in entries)
        await ctx.stores.aio.objects.put(key, lines)
        entry |= {"object_key": key, "event_count": len(entries)}
    except (AgentEnvError, TimeoutError, OSError) as e:
        entry["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return entry
