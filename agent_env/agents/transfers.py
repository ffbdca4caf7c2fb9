"""The object-transfer forms of protocol v1's agent extensions, as a run calls them: the run hands the agent
short-lived grants on our object store (`stores.grants`) and the agent moves the objects itself.

- `urn:agentenv:snapshot/v1` save (`snapshot_agent_state`): grants to write its state's objects (`trajectory`,
  and `workspace` if it keeps one) under `runs/RUN/agent_snapshots/NAME/`; load (`deploy_agent`'s
  `agent_snapshot`): grants to read them back.
- `urn:agentenv:trajectory/v1` get, `task_objects` variant: a grant to write the turn's trajectory as one JSON
  object, which the run then reads from its own store (taken when the agent's card lists the variant's fields).

The bodies are our models of the protocol's request shapes (`transfer_wire`), the grants the protocol's own
(`agentenv_protocol.transfers`), and a card's request contract is read the protocol's way (`card_request_accepts`).
The grants are on the run's store when they reach the agent, else on the agent's own staging/v1 (`handover`: the
local store's grants are served on this host's loopback). An agent's answer is a claim: what it wrote is checked
in the store (present, within its grant's size) before anything is recorded. Grants never enter a run's history;
keys do.
"""

from __future__ import annotations

import contextlib
import json
import mimetypes
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urljoin

import httpx
from agentenv_protocol.transfers import ReadObject
from pydantic import BaseModel, ValidationError

from agent_env.agents.extensions import ExtensionClient, ExtensionRefused, operation
from agent_env.agents.handover import Handover, HandoverFailed
from agent_env.agents.transfer_wire import (
    OPAQUE,
    OPERATIONS,
    SKILL_CONFIG,
    SNAPSHOT,
    TRAJECTORY,
    BundleSkillRequest,
    ObjectSnapshotLoadRequest,
    ObjectSnapshotLoadResponse,
    ObjectSnapshotSaveRequest,
    ObjectSnapshotSaveResponse,
    SkillBundle,
    SkillBundleFile,
    SnapshotReadObjects,
    SnapshotWriteObjects,
    TaskObjectTrajectoryRequest,
    TaskTrajectoryRequest,
    TrajectoryWriteObjects,
    card_request_accepts,
    required_fields,
)
from agent_env.config import url_origin
from agent_env.gateway_client.wire import JsonObject
from agent_env.stores import Stores, in_thread
from agent_env.stores.grants import Grant, ObjectGrants
from agent_env.stores.transfer import GrantNotWritten, written

SNAPSHOT_OBJECTS = {"trajectory": 256 << 20, "workspace": 1 << 30}  # what each object may hold, at most
MAX_TRAJECTORY_OBJECT_BYTES = 64 << 20  # a trajectory written through a grant (read back whole by the run)
MAX_ANSWER_BYTES = 64 * 1024  # an agent's answer to a transfer call is small: its objects went to the store
TRANSFER_TIMEOUT_S = 600.0  # a call during which the agent moves objects


class TransferFailed(Exception):
    """The agent refused or failed a transfer, or did not write what it said it wrote."""


class TransferRefused(TransferFailed):
    """The agent answered a transfer's operation with an error status."""


def snapshot_prefix(run_id: str, name: str) -> str:
    return f"runs/{run_id}/agent_snapshots/{name}/"


def accepts(client: ExtensionClient, uri: str, name: str, model: type[BaseModel]) -> bool:
    """Whether the agent's card lists `uri` `name` taking exactly the fields `model` requires."""

    method = ((client.extensions.get(uri) or {}).get("methods") or {}).get(name) or {}
    request = method.get("request")
    return isinstance(request, dict) and card_request_accepts(request, required_fields(model))


async def call(
    client: ExtensionClient, uri: str, name: str, body: BaseModel, *, timeout: float, done: tuple[int, ...] = ()
) -> httpx.Response:
    """One extension call carrying grants, on the agent's origin only; its answer read within a bound. Statuses
    in `done` count as success (a 409: already there, for a retried step)."""

    method, path = operation(client.extensions[uri], name, *OPERATIONS[uri, name])
    url = urljoin(client.agent_url, path)
    if url_origin(url) != url_origin(client.agent_url):
        raise ExtensionRefused(
            f"the agent at {client.agent_url} names {uri} {name} at {url}: another origin, refused (grants go only "
            "to the agent) — serve the extension on the agent's own origin"
        )
    request = client.http.build_request(
        method, url, json=body.model_dump(mode="json", exclude_none=True), timeout=timeout
    )
    response = await client.http.send(request, stream=True)
    try:
        content = bytearray()
        async for chunk in response.aiter_bytes():
            content += chunk
            if len(content) > MAX_ANSWER_BYTES:
                break
    finally:
        await response.aclose()
    if (
        not response.is_success and response.status_code not in done
    ):  # never quote the answer: an agent may echo its grants back
        raise TransferRefused(f"the agent at {client.agent_url} answered {uri} {name} with HTTP {response.status_code}")
    return httpx.Response(response.status_code, content=bytes(content), request=request)


async def _written(grants: ObjectGrants, stores: Stores, grant: Grant) -> int | None:
    """The size of what the agent wrote through `grant` (see `stores.transfer.written`), as TransferFailed."""
    try:
        return await written(grants, stores.objects, grant)
    except GrantNotWritten as e:
        raise TransferFailed(e.problem.replace("the holder of a grant", "the agent")) from None


@contextlib.asynccontextmanager
async def _handover(client: ExtensionClient, grants: ObjectGrants, stores: Stores) -> AsyncIterator[Handover]:
    """The grants of one call (on the store, or the agent's staging: `handover`); what the agent staged is in the
    store when the block ends well, and its staging removed however it ends."""
    handover = Handover(client, grants, stores)
    try:
        try:
            yield handover
        except BaseException:
            await handover.finish(pull=False)
            raise
        await handover.finish()
    except HandoverFailed as e:
        raise TransferFailed(str(e)) from None


def _parsed(model: type[BaseModel], response: httpx.Response, what: str) -> Any:
    try:
        return model.model_validate(json.loads(response.content), extra="ignore")
    except (ValueError, ValidationError):
        raise TransferFailed(f"the agent's answer to {what} is not the protocol's {model.__name__}") from None


async def save_snapshot(
    client: ExtensionClient, grants: ObjectGrants, stores: Stores, prefix: str, context_id: str, *, timeout: float
) -> JsonObject:
    """Ask the agent to save its state of `context_id` under `prefix`; what it wrote, by object."""

    async with _handover(client, grants, stores) as handover:
        issued = {name: await handover.write(prefix + name, OPAQUE, most) for name, most in SNAPSHOT_OBJECTS.items()}
        objects = SnapshotWriteObjects(**{name: wire for name, (_, wire) in issued.items()})
        body = ObjectSnapshotSaveRequest(context_id=context_id, objects=objects)
        answered = await call(client, SNAPSHOT, "save", body, timeout=timeout)
        answer = _parsed(ObjectSnapshotSaveResponse, answered, "save")
    sizes = {name: size for name, (g, _) in issued.items() if (size := await _written(grants, stores, g)) is not None}
    if "trajectory" not in sizes:
        raise TransferFailed(f"the agent answered snapshot save, but wrote no trajectory object at {prefix}trajectory")
    return {
        "snapshot": prefix,
        "context_id": answer.context_id,
        "objects": {name: prefix + name for name in sizes},
        "bytes": sizes,
    }


async def load_snapshot(
    client: ExtensionClient,
    grants: ObjectGrants,
    stores: Stores,
    prefix: str,
    target_context_id: str | None,
    *,
    timeout: float,
) -> str:
    """Hand the agent the snapshot saved under `prefix` to load; the context id it restored it as."""

    read: dict[str, ReadObject] = {}
    async with _handover(client, grants, stores) as handover:
        for name in SNAPSHOT_OBJECTS:
            key = prefix + name
            if await in_thread(grants.size, key) is None:
                if name == "trajectory":
                    raise TransferFailed(
                        f"no agent snapshot at {prefix} (no {key}): take one with snapshot_agent_state"
                    )
                continue
            read[name] = await handover.read(key, OPAQUE)
        body = ObjectSnapshotLoadRequest(objects=SnapshotReadObjects(**read), target_context_id=target_context_id)
        answered = await call(client, SNAPSHOT, "load", body, timeout=timeout)
    answer = _parsed(ObjectSnapshotLoadResponse, answered, "load")
    return str(answer.context_id)


async def trajectory_object(
    client: ExtensionClient, grants: ObjectGrants, stores: Stores, key: str, task_id: str, *, timeout: float = 120.0
) -> Any:
    """The agent's trajectory of one task, written by the agent through a grant at `key` and read from our store."""

    async with _handover(client, grants, stores) as handover:
        grant, wire = await handover.write(key, "application/json", MAX_TRAJECTORY_OBJECT_BYTES)
        body = TaskObjectTrajectoryRequest(task_id=task_id, objects=TrajectoryWriteObjects(trajectory=wire))
        await call(client, TRAJECTORY, "get", body, timeout=timeout)
    if await _written(grants, stores, grant) is None:
        raise TransferFailed(f"the agent answered its trajectory's task_objects, but wrote nothing at {key}")
    try:
        return json.loads(await stores.aio.objects.get(key))
    except ValueError:
        raise TransferFailed(f"the trajectory the agent wrote at {key} is not JSON") from None


def takes_task_objects(client: ExtensionClient) -> bool:
    """Whether the agent's card lists trajectory/v1 get's `task_objects` variant (`task_id` + `objects`)."""

    return accepts(client, TRAJECTORY, "get", TaskObjectTrajectoryRequest)


def takes_inline_trajectory(client: ExtensionClient) -> bool:
    """Whether the agent answers trajectory/v1 get's `task` variant (its card declares it, or no request at all)."""

    method = ((client.extensions.get(TRAJECTORY) or {}).get("methods") or {}).get("get") or {}
    return "request" not in method or accepts(client, TRAJECTORY, "get", TaskTrajectoryRequest)


async def add_skill_bundles(
    client: ExtensionClient, grants: ObjectGrants, stores: Stores, skills: dict[str, str], files: dict[str, str]
) -> list[str]:
    """Give the agent skills as bundles of objects (skill-config/v1 add, `bundle` variant) when its card takes
    them: every file of each skill's folder, which the agent reads through a read grant. `skills`: name ->
    description; `files`: `/skills/NAME/PATH` -> object key. Returns the names given (the rest go inline)."""

    if not accepts(client, SKILL_CONFIG, "add", BundleSkillRequest):
        return []
    folders: defaultdict[str, dict[str, str]] = defaultdict(dict)
    for path, key in files.items():
        skill, _, rest = path.removeprefix("/skills/").partition("/")
        if skill in skills and rest:
            folders[skill][rest] = key
    given = []
    for skill, folder in sorted(folders.items()):
        if "SKILL.md" not in folder:
            continue
        bundled = []
        async with _handover(client, grants, stores) as handover:
            for rest, key in sorted(folder.items()):
                data = await stores.aio.objects.get(key)  # (a skill's files: small, and pinned by the run's plan)
                media_type = mimetypes.guess_type(rest)[0] or OPAQUE
                bundled.append(SkillBundleFile(path=rest, object=await handover.read(key, media_type, data)))
            bundle = SkillBundle(max_total_bytes=sum(f.object.max_bytes for f in bundled), files=bundled)
            body = BundleSkillRequest(name=skill, description=skills[skill], skill_bundle=bundle)
            await call(client, SKILL_CONFIG, "add", body, timeout=TRANSFER_TIMEOUT_S, done=(409,))
        given.append(skill)
    return given
