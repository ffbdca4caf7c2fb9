"""deploy_agent's part in snapshot/v1's optional `changelog` feature, as the framework's deploy_agent has it:

- `enable_agent_changelog`: the agent writes an increment of its state after each turn, through a namespace grant
  below `runs/RUN/agent_changelog/NAME/` on the run's object store (the step's outputs name the prefix).
- `agent_changelog_object_url` (a capture's prefix: an earlier run's outputs name it) and
  `agent_changelog_toolcall_position_exclusive`: replay that capture's increments before the position into the new
  agent, which then answers from the state they rebuild.

An agent whose card does not list the feature is refused, naming the field that asked for it.
"""

from __future__ import annotations

from agent_env.agents import changelog_transfers
from agent_env.agents.changelog_wire import APPLY, ENABLE
from agent_env.agents.extension_table import SNAPSHOT
from agent_env.agents.extensions import ExtensionClient, ExtensionRefused
from agent_env.agents.transfers import TransferFailed
from agent_env.errors import BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.steps import StepContext, StepFailed
from agent_env.steps.builtin.agent_extensions import deployed_extension
from agent_env.stores.grant_issuers import object_grants

TIMEOUT_S = 600.0


async def changelog_on_deploy(
    ctx: StepContext,
    deployed: JsonObject,
    *,
    enable: bool,
    source: str | None,
    before: int | None,
    target_context_id: str | None,
) -> JsonObject:
    """Replay `source` (if given) into the deployed agent, then start its own capture (if `enable`); what the step's
    outputs add."""
    out: JsonObject = {}
    if not enable and not source:
        return out
    name = str(deployed.get("name") or "")
    asked = "agent_changelog_object_url" if source else "enable_agent_changelog"
    client = await deployed_extension(
        ctx,
        deployed,
        SNAPSHOT,
        step=name,
        fix=f"`{asked}` needs its changelog feature: serve it (our SDK: give the agent save_state and load_state), "
        f"or remove `{asked}`",
        hosted_refusal=f"it serves no {SNAPSHOT} changelog: remove `{asked}`",
    )
    try:
        grants = object_grants(ctx.stores.objects, ctx.settings)
        if source:
            _require(client, name, APPLY, "agent_changelog_object_url")
            prefix = source.rstrip("/") + "/"
            out["changelog_applied"] = await changelog_transfers.apply(
                client,
                grants,
                ctx.stores,
                prefix,
                before=before,
                target_context_id=target_context_id,
                timeout=TIMEOUT_S,
            )
        if enable:
            _require(client, name, ENABLE, "enable_agent_changelog")
            prefix = changelog_transfers.changelog_prefix(ctx.run_id, name)
            out["agent_changelog"] = await changelog_transfers.enable(client, grants, prefix, timeout=TIMEOUT_S)
    except (TransferFailed, ExtensionRefused, BadInput) as e:
        raise StepFailed(f"agent {name!r}: its changelog ({asked}): {e}") from None
    return out


def _require(client: ExtensionClient, name: str, operation: str, field: str) -> None:
    if not changelog_transfers.declares(client, operation):
        raise StepFailed(
            f"agent {name!r}: `{field}` needs {SNAPSHOT}'s optional changelog feature, and its card lists no "
            f"{operation!r} operation — serve the feature (our SDK: give the agent save_state and load_state), or "
            f"remove `{field}`"
        )
