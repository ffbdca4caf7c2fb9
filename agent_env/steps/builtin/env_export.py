"""An environment's data exported into the run's store (`collect_artifacts`), the open protocol's way when it can.

The run asks the gateway for `data/get` with a namespace grant (data-objects/v1's `write_namespace`: an upload
policy on the run's own store, below `runs/RUN/artifacts/ENV/data/`). Each app whose card declares data-objects/v1,
and which the grant reaches (`stores.transfer.reaches`), uploads its export itself, below a folder of its own; the
rest answer inline as before. What was uploaded is then held to the grant's limits before it is kept
(`check_namespace`: a store that cannot bound an upload deletes what is over, unread).

Without a grant that reaches the gateway's apps (a store that issues none, the local store with a gateway on
another host, a grant the protocol cannot carry), or when an upload through it fails, the export is inline only.
"""

from __future__ import annotations

import json
import logging

from agentenv_protocol.types import GetDataResponse, uploaded_object_path

from agent_env.errors import BadInput
from agent_env.gateway_client import GatewayClient, GatewayRefused
from agent_env.gateway_client.wire import JsonObject
from agent_env.steps import StepContext
from agent_env.stores import in_thread, keys
from agent_env.stores.grant_issuers import object_grants
from agent_env.stores.grants import NamespaceGrant, NamespaceLimits
from agent_env.stores.transfer import check_namespace, namespace_wire, reaches

log = logging.getLogger(__name__)

DATA_LIMITS = NamespaceLimits(max_objects=64, max_object_bytes=256 << 20, max_total_bytes=1 << 30)
GRANT_TTL_S = 600.0  # the step's own timeout: the export of a big env may take it


async def export_data(ctx: StepContext, gateway: GatewayClient, env: str, instance: str) -> list[str]:
    """Keep the data of `instance` (the deploy_env step `env`): `data.json` (the answer) and the objects its apps
    uploaded, under `artifacts/ENV/`; the keys kept."""
    root = keys.artifact(ctx.run_id, env, "data")
    grant = await _grant(ctx, gateway, instance, root)
    exported: JsonObject | None = None
    if grant is not None:
        wire = namespace_wire(grant).model_dump(mode="json", exclude_none=True)
        try:
            exported = await gateway.data(instance, "data/get", {"write_namespace": wire})
        except GatewayRefused as e:  # (an app the grant looked to reach and did not: ask again, inline)
            log.warning("the export of %s through a namespace grant failed (%s); exporting it inline", env, e)
    if exported is None:
        exported = await gateway.data(instance, "data/get")
    kept = [keys.artifact(ctx.run_id, env, "data.json")]
    await ctx.stores.aio.objects.put(kept[0], json.dumps(exported, ensure_ascii=False, indent=1).encode())
    named = [p for p in map(uploaded_object_path, GetDataResponse.model_validate(exported).parts) if p is not None]
    if grant is not None and named:
        grants = object_grants(ctx.stores.objects, ctx.settings)
        written = await check_namespace(grants, ctx.stores.objects, grant)
        missing = sorted(set(named) - set(written))
        if missing:
            raise BadInput(
                f"the environment {env} answered data/get naming uploads it did not make: {', '.join(missing[:5])}",
                "an env's data/get names only what it uploaded through its write_namespace grant",
            )
        kept += [grant.key(path) for path in sorted(written)]
    return kept


async def _grant(ctx: StepContext, gateway: GatewayClient, instance: str, root: str) -> NamespaceGrant | None:
    """A namespace grant below `root` that the gateway's apps can reach, or None (see the module's doc)."""
    try:
        grants = object_grants(ctx.stores.objects, ctx.settings)
        grant = await in_thread(grants.namespace, root, limits=DATA_LIMITS, ttl_s=GRANT_TTL_S)
        namespace_wire(grant)  # (one the protocol can carry: https)
    except BadInput as e:
        log.info("no namespace grant for the export of %s (%s): exporting it inline", instance, e.problem)
        return None
    return grant if reaches(grant.url, await gateway.url_for(instance)) else None
