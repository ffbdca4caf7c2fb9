"""Seals: what proves that a run's plan, an update to it, or an activity it scheduled came from this install.

A plan is code (it names commands, images, URLs), and whoever reaches Temporal can start a workflow or send an
update. So everything that makes a worker act carries a seal in a Temporal header: an HMAC-SHA256, under the
install's plan key, of what it is (a start, an update, an activity), the namespace and workflow id it is for,
its name, a digest of its arguments and when it was made. Planners (the CLI, the episode API, the gateway's
trigger hits) seal what they send; workers verify before anything runs, and seal the activities and the
continue-as-new of runs they verified. The key never enters history: only seals do, and a seal is bound to its
workflow id, so one copied from history is worth nothing elsewhere.

The key is the state directory's `plan.key` (0600, made on first use), or for installs whose planners and
workers are on several machines, a secret in the shared secret store (`[temporal] plan_key_secret`).
This module does no Temporal I/O: it makes and checks seals.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_env.errors import AgentEnvError
from agent_env.stores import hex_secret
from agent_env.stores.base import MissingSecret
from agent_env.stores.local import create_private_once, read_private

if TYPE_CHECKING:
    from temporalio.api.common.v1 import Payload

    from agent_env.config import Settings

HEADER = "agentenv-seal"
KEY_BYTES = 32
VERSION = "agentenv-seal/1"
# How far a start's or an update's seal may be from the server's time when it arrives: a copied seal is
# worthless after this (and before it, only with the very workflow id and arguments it was made for).
FRESH = timedelta(minutes=10)
SKEW = timedelta(minutes=5)  # the planner's clock ahead of the server's

START, UPDATE, ACTIVITY = "start", "update", "activity"
# An activity's result, sealed by the worker that ran it (`extra`: its arguments' digest, so a result is worth
# nothing for another call); an activity whose subject has this `extra` wants its result sealed.
RESULT = "result"


class BrokenSeal(AgentEnvError):
    """A plan key that cannot be trusted, or one that is missing where it must be shared."""


@dataclass(frozen=True)
class PlanKey:
    secret: bytes
    # When this install began sealing: runs started before it were started unsealed, by older code, and keep
    # replaying. None: no run is exempt (a shared key: drain runs before turning it on).
    since: datetime | None


def digest(args: Sequence[Any]) -> bytes:
    """SHA-256 of the arguments' JSON. Both sides hold the same values (the sender's, and the receiver's decoded
    from what was sent), and a JSON round trip keeps key order, so both spell them alike. A model's fields at
    their default are left out, so a field added with a default does not change an old sender's digest."""
    from pydantic import BaseModel
    from pydantic_core import to_json

    hashed = hashlib.sha256()
    for arg in args:
        if isinstance(arg, BaseModel):
            hashed.update(arg.__pydantic_serializer__.to_json(arg, exclude_defaults=True))
        else:
            hashed.update(to_json(arg))
        hashed.update(b"\x00")
    return hashed.digest()


@dataclass(frozen=True)
class Subject:
    """What a seal is for: a start, an update or an activity (`what`) of one workflow, by name."""

    what: str
    namespace: str
    workflow_id: str
    name: str  # the workflow type, the update's or the activity's name
    extra: str = ""  # an update's id: a copy sent under another id does not hold


def _mac(key: PlanKey, subject: Subject, at: int, args: bytes) -> str:
    s = subject
    message = "\x00".join((VERSION, s.what, s.namespace, s.workflow_id, s.name, s.extra, str(at))).encode()
    return hmac.new(key.secret, message + b"\x00" + args, hashlib.sha256).hexdigest()


def seal(key: PlanKey, subject: Subject, args: Sequence[Any], at: datetime) -> dict[str, Any]:
    """The seal of `args` for `subject`, made at `at`."""
    stamp = int(at.timestamp())
    return {"at": stamp, "mac": _mac(key, subject, stamp, digest(args))}


def make(key: PlanKey, subject: Subject, args: Sequence[Any], at: datetime) -> Payload:
    """The header value sealing `args` for `subject`, made at `at`."""
    from temporalio.api.common.v1 import Payload

    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(seal(key, subject, args, at)).encode())


def problem(
    key: PlanKey, headers: Mapping[str, Payload] | None, subject: Subject, args: Sequence[Any], now: datetime | None
) -> str | None:
    """Why the seal in `headers` does not hold for `subject` and `args` (None: it does). `now`: the server's time
    the seal is judged by (None: no freshness, for activities, whose seal stays valid across their retries)."""
    payload = (headers or {}).get(HEADER)
    if payload is None:
        return "it carries no seal"
    try:
        sealed = json.loads(payload.data[:512])
    except ValueError:
        return "its seal is malformed"
    return check(key, sealed, subject, args, now)


def check(key: PlanKey, sealed: Any, subject: Subject, args: Sequence[Any], now: datetime | None) -> str | None:
    """Why `sealed` (as `seal` made it) does not hold for `subject` and `args` (None: it does)."""
    if not isinstance(sealed, dict) or not isinstance(sealed.get("at"), int) or not isinstance(sealed.get("mac"), str):
        return "its seal is malformed"
    stamp, mac = sealed["at"], sealed["mac"]
    if not hmac.compare_digest(mac.encode("ascii", "replace"), _mac(key, subject, stamp, digest(args)).encode()):
        return (
            "its seal does not match: it was forged, altered, sealed for another workflow id, or sealed "
            "with another plan key"
        )
    if now is not None:
        made = datetime.fromtimestamp(stamp, UTC)
        if not now - FRESH <= made <= now + SKEW:
            return f"its seal was made at {made.isoformat()}, too far from the server's time {now.isoformat()}"
    return None


# -- the key --


def load(settings: Settings) -> PlanKey:
    """The install's plan key: the shared secret `[temporal] plan_key_secret` names, else the state dir's file."""
    name = settings.temporal.plan_key_secret
    if name:
        return _shared(settings, name)
    return _file(settings.state_dir / "plan.key")


def _file(path: Path) -> PlanKey:
    remake = (
        f"delete {path} and stop this install's background services (`agent-env server stop`, `agent-env "
        "gateway stop`): the next command makes a new key, and runs in flight go on unchecked; or restore it "
        "from a backup"
    )
    try:
        raw = read_private(path, what="the plan key file", remake=remake, error=BrokenSeal)
    except FileNotFoundError:
        now = datetime.now(UTC).replace(microsecond=0)
        create_private_once(path, f"{secrets.token_hex(KEY_BYTES)}\n{now.isoformat()}\n".encode())
        raw = read_private(path, what="the plan key file", remake=remake, error=BrokenSeal)
    lines = raw.decode("ascii", "replace").split()
    try:
        secret = bytes.fromhex(lines[0])
        since = datetime.fromisoformat(lines[1])
    except (IndexError, ValueError):
        secret, since = b"", None
    if len(secret) < KEY_BYTES or since is None or since.tzinfo is None:
        raise BrokenSeal(
            f"the plan key file {path} is damaged (it holds {KEY_BYTES * 2} hex digits and the time it was made, "
            "one per line)",
            remake,
        )
    return PlanKey(secret, since)


def _shared(settings: Settings, name: str) -> PlanKey:
    try:
        secret = hex_secret(settings, name)
    except MissingSecret:
        secret = b""
    if len(secret) < KEY_BYTES:
        raise BrokenSeal(
            f"secret:{name} ([temporal] plan_key_secret: the key every planner and worker of this install seals "
            f"and checks runs with) is missing or not {KEY_BYTES * 2} or more hex digits",
            f"set it once for the install: `python -c 'import secrets; print(secrets.token_hex(32))' | "
            f"agent-env secrets set {name}`",
        )
    return PlanKey(secret, None)
