"""`urn:agentenv:data-objects/v1`: the data plane moves an app's data as objects in the caller's store.

- data/get with `write_namespace` (a namespace grant: an upload policy under `root_path`, with limits and an
  expiry): the export is uploaded as one object, `<app>.json`, under the grant, and the answer is the file part
  naming it (`uploaded_file_part`: its path relative to `root_path`, under this URI in the part's metadata).
- data/add of a file part that names an object: a read grant (`ReadObject`) under this URI in its metadata, or an
  https `file.uri` (a signed URL), is fetched, within the grant's `max_bytes` and this server's own limit, its size
  and checksum checked when the grant gives them, and loaded as the JSON it holds.

A grant is checked before anything moves, and a refusal names the field: an invalid grant (its fields, never
their values, which carry its signature), an expired one, or an export over its limits.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypeGuard
from urllib.parse import urlsplit

from agentenv_protocol.transfers import ReadObject, WriteNamespaceGrant
from agentenv_protocol.types import (
    DATA_OBJECTS_EXTENSION_URI,
    EnvironmentExtension,
    FilePart,
    FileWithUri,
    Part,
    uploaded_file_part,
    uploaded_object_path,
)
from pydantic import ValidationError

from agent_env.envs.dataplane import MAX_LISTED_PROBLEMS, InvalidParams
from agent_env.errors import format_loc
from agent_env.stores import transfer

URI = DATA_OBJECTS_EXTENSION_URI
GRANT = "write_namespace"  # data/get's param
MEDIA_TYPE = "application/json"
CARD = EnvironmentExtension(
    uri=URI,
    description=(
        "data/get takes a write_namespace grant and uploads the export under it, answering with the part that names "
        "the object; data/add reads file parts that name an object (a read grant under this URI, or an https uri)."
    ),
)


def _fields(error: ValidationError, *where: str | int) -> str:
    """Each invalid field and what is wrong with it; never a value (a grant's values are its credential)."""
    problems = [f"{format_loc((*where, *e['loc']))}: {e['msg']}" for e in error.errors(include_url=False)]
    if len(problems) > MAX_LISTED_PROBLEMS:
        problems[MAX_LISTED_PROBLEMS:] = [f"and {len(problems) - MAX_LISTED_PROBLEMS} more"]
    return "; ".join(problems)


def _expired(expires_at: datetime) -> bool:
    return expires_at <= datetime.now(UTC)


def parse_grant(raw: object) -> WriteNamespaceGrant:
    try:
        return WriteNamespaceGrant.model_validate(raw)
    except ValidationError as e:
        raise InvalidParams(
            f"{GRANT} is not a namespace grant: {_fields(e, GRANT)} (a grant is {{root_path, expires_at, max_objects, "
            "max_object_bytes, max_total_bytes, write: {kind: http-post-policy, url (https), fields, path_field, "
            "file_field}})"
        ) from None


async def upload_export(grant: WriteNamespaceGrant, app: str, body: bytes) -> Part:
    """Upload an app's export (`body`, JSON) under the grant; the part that names where it went."""
    if _expired(grant.expires_at):
        raise InvalidParams(f"{GRANT}.expires_at has passed: ask for a fresh grant")
    for field in ("max_object_bytes", "max_total_bytes"):
        limit = getattr(grant, field)
        if len(body) > limit:
            raise InvalidParams(
                f"the export of {app} is {len(body)} bytes, over {GRANT}.{field} ({limit}): grant at least "
                f"{len(body)} bytes, or call data/get without a grant to have it inline"
            )
    path = f"{app}.json"
    await transfer.post_to_namespace(grant, f"{grant.root_path}/{path}", body, MEDIA_TYPE)
    return uploaded_file_part(path, name=path, mime_type=MEDIA_TYPE)


def below(part: Part, folder: str) -> Part:
    """An answer's part naming an upload (its path relative to a grant's root) as seen from the root above it,
    `folder` being where that grant's root was below it; a part naming no upload as it is."""
    path = uploaded_object_path(part)
    if path is None or not isinstance(part, FilePart):
        return part
    return uploaded_file_part(f"{folder}/{path}", name=part.file.name, mime_type=part.file.mimeType)


def names_object(part: Part) -> TypeGuard[FilePart]:
    """Whether data/add must fetch this part's bytes: a read grant under this URI, or an https file.uri."""
    if not isinstance(part, FilePart):
        return False
    marker = (part.metadata or {}).get(URI)
    if isinstance(marker, dict) and "read" in marker:
        return True
    return isinstance(part.file, FileWithUri) and urlsplit(part.file.uri).scheme == "https"


async def read_object(part: FilePart, index: int, limit: int) -> bytes:
    """The bytes a part names (see `names_object`), at most `limit` (this server's) and the grant's max_bytes."""
    marker = (part.metadata or {}).get(URI)
    if isinstance(marker, dict) and "read" in marker:
        where = f"parts[{index}].metadata[{URI!r}]"
        try:
            grant = ReadObject.model_validate(marker["read"])
        except ValidationError as e:
            raise InvalidParams(
                f"{where}.read is not a read grant: {_fields(e)} (a read grant is {{media_type, max_bytes, size_bytes?, "
                "sha256?, read: {kind: http-get, url (https), expires_at, headers?}})"
            ) from None
        return await _read(grant.read.url, grant.read.headers, grant, f"{where}.read", min(limit, grant.max_bytes))
    if not isinstance(part.file, FileWithUri):
        raise InvalidParams(f"parts[{index}] names no object: give a read grant under metadata[{URI!r}].read")
    return await _read(part.file.uri, None, None, f"parts[{index}].file.uri", limit)


async def _read(url: str, headers: dict[str, str] | None, grant: ReadObject | None, where: str, limit: int) -> bytes:
    over = f"{where} names an object over {limit} bytes (the grant's max_bytes or this server's limit)"
    if grant is not None:
        if _expired(grant.read.expires_at):
            raise InvalidParams(f"{where}.read.expires_at has passed: hand a fresh grant")
        if grant.size_bytes is not None and grant.size_bytes > limit:
            raise InvalidParams(f"{over}: its size_bytes is {grant.size_bytes}")
    try:
        body, sha256 = await transfer.fetch(url, headers, limit)
    except transfer.TooLarge:
        raise InvalidParams(f"{over}: send a smaller object, or split the data over several parts") from None
    except transfer.ObjectMoveFailed as e:
        raise transfer.ObjectMoveFailed(f"{where}: {e}") from None
    if grant is not None and grant.size_bytes is not None and len(body) != grant.size_bytes:
        raise InvalidParams(f"{where}.size_bytes is {grant.size_bytes}, but the object has {len(body)} bytes")
    if grant is not None and grant.sha256 is not None and sha256 != grant.sha256:
        raise InvalidParams(f"{where}.sha256 does not match the object's bytes")
    return body
