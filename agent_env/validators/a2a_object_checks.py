"""The A2A extension checks that move objects through grants on the run's object store (`stores.grants`):
snapshot/v1's save → load round trip, skill-config/v1's bundle variant, trajectory/v1's `task_objects` variant.

Each hands the agent grants as a run would (`agents.transfers`: the same calls `snapshot_agent_state`,
`deploy_agent` and `prompt_agent` make), under a key prefix of the validating step's own, and checks what the
agent did with them in our store, not what it says. A check with no store to grant on (a validator called
outside a run, a store that issues no grants) is reported as not checked, optional.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from agent_env.agents.client import AgentClient, AgentReplyInvalid, AgentTimedOut, AgentUnreachable
from agent_env.agents.extensions import SKILL_CONFIG, ExtensionClient, ExtensionRefused
from agent_env.agents.transfers import (
    TransferFailed,
    TransferRefused,
    add_skill_bundles,
    load_snapshot,
    save_snapshot,
    trajectory_object,
)
from agent_env.errors import BadInput
from agent_env.stores import Stores
from agent_env.stores.grants import ObjectGrants
from agent_env.validators.report import Finding

PLANT = "Remember this code word for later: {token}. Reply with one short sentence."
RECALL = "What was the code word you were asked to remember? Answer with the code word only."
AGENT_FAILED = (AgentUnreachable, AgentTimedOut, AgentReplyInvalid)
TRANSFER_FAILED = (TransferFailed, ExtensionRefused, httpx.HTTPError)


@dataclass(frozen=True)
class GrantRoom:
    """Where a validator's probe objects go: grants on the run's store, under a key prefix of its own."""

    grants: ObjectGrants
    stores: Stores
    prefix: str  # ends with '/'
    trust: str = ""  # how an agent trusts the grants' URLs, when not by the public roots (the local store's CA)

    def failed(self, name: str, problem: str, fix: str, error: Exception) -> Finding:
        """A transfer that failed. Refused (an error status) or broken off while the grants are the local store's
        is optional: those URLs are on this machine's loopback, signed by this install's own CA, which an agent
        elsewhere cannot reach and one here trusts only when told. An agent that claimed success is always held
        to what it wrote."""
        refused = isinstance(error, httpx.HTTPError | TransferRefused)
        if self.trust:
            fix += f" (an agent that cannot fetch the grants' https URLs: {self.trust})"
        return Finding.failed(name, problem, fix, required=not (self.trust and refused))


Room = GrantRoom | str  # a str: why no grants can be issued here
Rooms = Callable[[], Awaitable[Room]]  # asked only by a check that moves objects (a local store starts a server)


async def outside_a_run() -> Room:
    return "called outside a run: no object store to issue grants on"


def not_checked(name: str, what: str, why: str) -> Finding:
    return Finding.failed(
        name,
        f"not checked: {what} ({why})",
        "run the validator as a step of a run whose object store issues grants (the local store, S3 over https)",
        required=False,
    )


def _id(kind: str) -> str:
    return f"agent-env-validator-{kind}-{uuid.uuid4().hex[:12]}"


# -- snapshot/v1 --


async def snapshot_round_trip(agent: AgentClient, rooms: Rooms, deadline_s: float) -> list[Finding]:
    """Plant a code word in a conversation, save it through write grants, load it through read grants into a
    fresh conversation, and ask there for the word: the agent must answer from the restored state."""
    room = await rooms()
    if isinstance(room, str):
        return [not_checked("snapshot.round_trip", "save then load through object grants", room)]
    token = uuid.uuid4().hex[:10]
    planted = _id("planted")
    try:
        await agent.ask(PLANT.format(token=token), {}, context_id=planted, deadline_s=deadline_s)
    except AGENT_FAILED as e:
        return [Finding.failed("snapshot.plant", f"the turn planting the state did not end: {e}", "answer A2A turns")]
    client = await agent.extensions()
    prefix = room.prefix + "snapshot/"
    found = []
    try:
        saved = await save_snapshot(client, room.grants, room.stores, prefix, planted, timeout=deadline_s)
        found.append(Finding.ok("snapshot.save_objects"))
    except TRANSFER_FAILED as e:
        return [
            room.failed(
                "snapshot.save_objects",
                f"save {{context_id, objects}} with write grants: {e}",
                "on save, write the conversation's state through objects.trajectory (an HTTP PUT to its grant's "
                "url with its headers), and answer {context_id, objects}",
                e,
            )
        ]
    fresh = _id("restored")
    try:
        restored = await load_snapshot(client, room.grants, room.stores, prefix, fresh, timeout=deadline_s)
        found.append(Finding.ok("snapshot.load_objects"))
    except TRANSFER_FAILED as e:
        found.append(
            room.failed(
                "snapshot.load_objects",
                f"load {{objects, target_context_id}} with read grants of what it saved: {e}",
                "on load, read the objects through their grants and restore them as target_context_id; answer "
                "{context_id}",
                e,
            )
        )
        return found
    try:
        recalled = await agent.ask(RECALL, {}, context_id=restored or fresh, deadline_s=deadline_s)
    except AGENT_FAILED as e:
        found.append(Finding.failed("snapshot.recall", f"the turn after load did not end: {e}", "answer A2A turns"))
        return found
    found.append(
        Finding.ok("snapshot.recall")
        if token in recalled.text
        else Finding.failed(
            "snapshot.recall",
            f"saved conversation {planted!r} (told the code word {token}), loaded it as {restored!r}, asked there for "
            f"the word: the agent answered {recalled.text[:200]!r}",
            "restore on load what save wrote (the conversation's state), so a turn in the restored context goes on "
            "from it",
        )
    )
    for name in saved["objects"]:  # (the probe's objects: nothing to keep once checked)
        await room.stores.aio.objects.delete(prefix + name)
    return found


# -- skill-config/v1 bundle --

BUNDLE_SKILL_MD = (
    "---\nname: {name}\ndescription: {description}\n---\nA skill the agent-env validator added; ignore it.\n"
)


async def bundle_skill(agent: AgentClient, rooms: Rooms, source: str | None = None) -> list[Finding]:
    """Add a probe skill as a bundle (its SKILL.md an object of our store, handed over by a read grant); list
    must then show it. `source`: a key prefix of the store holding the bundle to add instead (its SKILL.md at
    the top), bounded in files and bytes; those objects are the caller's and stay."""
    room = await rooms()
    if isinstance(room, str):
        return [not_checked("skill_config.add_bundle", "the bundle variant (files as object read grants)", room)]
    name = _id("bundle")
    description = "A probe skill the agent-env validator added as a bundle"
    key = f"{room.prefix}skills/{name}/SKILL.md"
    if source is None:
        await room.stores.aio.objects.put(key, BUNDLE_SKILL_MD.format(name=name, description=description).encode())
        files = {f"/skills/{name}/SKILL.md": key}
    else:
        files = await bundle_files(room.stores, source, name)
    client = await agent.extensions()
    try:
        given = await add_skill_bundles(client, room.grants, room.stores, {name: description}, files)
    except TRANSFER_FAILED as e:
        return [
            room.failed(
                "skill_config.add_bundle",
                f"add {{name, description, skill_bundle}} with read grants: {e}",
                "take the bundle variant the card lists: read each file through its grant and answer 2xx {name}",
                e,
            )
        ]
    finally:
        if source is None:
            await room.stores.aio.objects.delete(key)
    if given != [name]:
        return [
            Finding.failed(
                "skill_config.add_bundle",
                "the card's add request lists skill_bundle, but not as the protocol's bundle variant (name, "
                "description, skill_bundle required)",
                'declare the bundle variant as the protocol does: {"required": ["name", "description", "skill_bundle"]}',
            )
        ]
    listed = await _skills(client)
    return [
        Finding.ok("skill_config.add_bundle"),
        Finding.ok("skill_config.list_shows_bundled")
        if listed is not None and name in listed
        else Finding.failed(
            "skill_config.list_shows_bundled",
            f"after adding {name!r} as a bundle, list shows {sorted(listed or [])[:10]}",
            "list every skill added, the bundled ones too",
        ),
    ]


MAX_BUNDLE_FILES = 64
MAX_BUNDLE_BYTES = 4 * 1024 * 1024


async def bundle_files(stores: Stores, source: str, name: str) -> dict[str, str]:
    """The files of the skill bundle under the key prefix `source`, as `/skills/NAME/PATH` -> key."""
    keys = [k for k in await stores.aio.objects.list(source) if k.startswith(source)]
    fix = f"put the skill's files (SKILL.md at the top, at most {MAX_BUNDLE_FILES}) under {source!r}"
    if f"{source}SKILL.md" not in keys:
        raise BadInput(f"skill_bundle_object_url {source!r}: the object store holds no SKILL.md there", fix)
    if len(keys) > MAX_BUNDLE_FILES:
        raise BadInput(f"skill_bundle_object_url {source!r} holds {len(keys)} objects", fix)
    total = 0
    for key in keys:
        total += len(await stores.aio.objects.get(key))
        if total > MAX_BUNDLE_BYTES:
            raise BadInput(f"skill_bundle_object_url {source!r} holds over {MAX_BUNDLE_BYTES} bytes", fix)
    return {f"/skills/{name}/{k.removeprefix(source)}": k for k in keys}


async def _skills(client: ExtensionClient) -> list[str] | None:
    try:
        answer = await client.call(SKILL_CONFIG, "list", "GET")
        skills = answer.json().get("skills") if answer.is_success else None
    except (ExtensionRefused, httpx.HTTPError, ValueError, AttributeError):
        return None
    return list(skills) if isinstance(skills, dict) else None


# -- trajectory/v1 task_objects --


async def task_objects(agent: AgentClient, rooms: Rooms, task_id: str) -> Finding:
    """The objects variant: the ended task's trajectory, written by the agent through a write grant, lands in our
    store as a JSON list of events."""
    room = await rooms()
    if isinstance(room, str):
        return not_checked(
            "trajectory.task_objects", "the objects variant (the trajectory written to a write grant)", room
        )
    key = f"{room.prefix}trajectory/{task_id[:64]}.json"
    fix = (
        'on get {"task_id", "objects": {"trajectory": <write grant>}}, PUT the task\'s events as one JSON list '
        "to the grant's url with its headers, and answer {objects}"
    )
    try:
        written = await trajectory_object(await agent.extensions(), room.grants, room.stores, key, task_id)
    except TRANSFER_FAILED as e:
        return room.failed("trajectory.task_objects", f"get {{task_id, objects}} with a write grant: {e}", fix, e)
    finally:
        if await room.stores.aio.objects.exists(key):
            await room.stores.aio.objects.delete(key)
    if isinstance(written, list):
        return Finding.ok("trajectory.task_objects")
    return Finding.failed(
        "trajectory.task_objects", f"the agent wrote {str(written)[:200]!r} through the grant: not a JSON list", fix
    )
