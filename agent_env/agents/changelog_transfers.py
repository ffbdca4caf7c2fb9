"""The run's side of snapshot/v1's optional `changelog` feature (`changelog_wire`), with grants on the run's object
store: `enable` hands the agent a namespace grant below a prefix it writes its increments into; `apply` hands it
read grants for a capture's increments before a position, in sequence order, and checks it applied them all.

An agent whose card lists snapshot/v1 without the feature's operation is refused before anything is issued.
"""

from __future__ import annotations

from agent_env.agents.changelog_wire import (
    APPLY,
    ENABLE,
    ChangelogIncrement,
    NamespaceChangelogEnableRequest,
    NamespaceChangelogEnableResponse,
    ObjectChangelogApplyRequest,
    ObjectChangelogApplyResponse,
    increment_sequence,
)
from agent_env.agents.extension_table import SNAPSHOT
from agent_env.agents.extensions import ExtensionClient
from agent_env.agents.transfers import TransferFailed, _handover, _parsed, accepts, call
from agent_env.gateway_client.wire import JsonObject
from agent_env.stores import Stores, in_thread
from agent_env.stores.grants import MAX_TTL_S, NamespaceLimits, ObjectGrants
from agent_env.stores.transfer import OPAQUE, namespace_wire, reaches

LIMITS = NamespaceLimits(max_objects=10_000, max_object_bytes=256 << 20, max_total_bytes=10 << 30)
CAPTURE_TTL_S = MAX_TTL_S  # the grant the agent writes with for the rest of the run: the longest a grant lasts


def changelog_prefix(run_id: str, name: str) -> str:
    return f"runs/{run_id}/agent_changelog/{name}/"


def declares(client: ExtensionClient, operation: str) -> bool:
    """Whether the card's snapshot/v1 lists the changelog feature's `operation` (enable-changelog, apply-changelog)."""
    model = NamespaceChangelogEnableRequest if operation == ENABLE else ObjectChangelogApplyRequest
    return SNAPSHOT in client.extensions and accepts(client, SNAPSHOT, operation, model)


async def enable(client: ExtensionClient, grants: ObjectGrants, prefix: str, *, timeout: float) -> JsonObject:
    """Start the agent's capture below `prefix`; what it answered (its roots) and where its increments go."""
    grant = grants.namespace(prefix.rstrip("/"), limits=LIMITS, ttl_s=CAPTURE_TTL_S)
    if not reaches(grant.url, client.agent_url):
        raise TransferFailed(
            f"the run's object store serves its grants on this host's loopback, which the agent at "
            f"{client.agent_url} cannot reach, and a changelog's namespace grant is not staged — use an object store the "
            "agent reaches (S3 or Cloud Storage over https), or serve the agent on this host"
        )
    body = NamespaceChangelogEnableRequest(write_namespace=namespace_wire(grant))
    answer = _parsed(
        NamespaceChangelogEnableResponse, await call(client, SNAPSHOT, ENABLE, body, timeout=timeout), ENABLE
    )
    return {"changelog": prefix, "roots": list(answer.roots), "expires_at": grant.expires_at.isoformat()}


async def increments(grants: ObjectGrants, stores: Stores, prefix: str, before: int | None) -> list[tuple[int, str]]:
    """(sequence, key) of the capture's increments below `prefix` with a sequence under `before`, in order."""
    found = []
    for key in await in_thread(stores.objects.list, prefix):
        sequence = increment_sequence(key.removeprefix(prefix))
        if sequence is not None and (before is None or sequence < before):
            found.append((sequence, key))
    return sorted(found)


async def apply(
    client: ExtensionClient,
    grants: ObjectGrants,
    stores: Stores,
    prefix: str,
    *,
    before: int | None,
    target_context_id: str | None,
    timeout: float,
) -> JsonObject:
    """Replay the capture below `prefix` up to position `before` (exclusive) into the agent; what it applied."""
    chosen = await increments(grants, stores, prefix, before)
    if len(chosen) > LIMITS.max_objects:  # a store that cannot count a namespace's objects (S3's POST policies)
        raise TransferFailed(f"the changelog at {prefix} has {len(chosen)} increments, over {LIMITS.max_objects}")
    async with _handover(client, grants, stores) as handover:
        wire = []
        for sequence, key in chosen:
            size = await in_thread(grants.size, key)
            if size is None or size > LIMITS.max_object_bytes:
                raise TransferFailed(f"the changelog increment {key} is gone or over {LIMITS.max_object_bytes} bytes")
            wire.append(ChangelogIncrement(sequence=sequence, object=await handover.read(key, OPAQUE)))
        body = ObjectChangelogApplyRequest(
            increments=wire, resume_conversation=True, target_context_id=target_context_id
        )
        answered = await call(client, SNAPSHOT, APPLY, body, timeout=timeout)
    answer = _parsed(ObjectChangelogApplyResponse, answered, APPLY)
    if answer.count != len(wire):
        raise TransferFailed(f"the agent applied {answer.count} changelog increments; {len(wire)} were sent")
    return {"changelog": prefix, "applied": answer.count, "context_id": answer.context_id}
