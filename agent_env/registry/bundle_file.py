"""One file that carries tasks from one install's registry to another's, whatever stores each uses.

`agent-env bundle export` writes a gzip'd tar: `manifest.json` first (the versions: every task named plus what
it uses, and the size of every blob), then each distinct blob once, as `blobs/<sha256>`. Content is stored once
however many versions use it, so 200 tasks sharing one env cost about one env plus 200 small records.

`agent-env bundle import` reads the file as a stream (nothing is extracted to disk by name) and verifies all of
it before writing anything: every version's digest against its record, every blob against its name, every
label against the target registry. A digest proves the file was not damaged or altered since export; it is not
a signature, so names and paths are checked too, as for anything from a shared store: a member that is a link,
has an absolute path or climbs out with '..' is refused, naming it (`packing.member_problem`). Images are not carried:
an env that runs a sandbox by `build` carries its build context as files; one by `image` keeps the reference.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import BaseModel, Field, StringConstraints, ValidationError

from agent_env.errors import BadInput
from agent_env.packing import member_problem
from agent_env.registry.bundle_items import NAME
from agent_env.registry.manifest import canonical_json, digest, file_sha256
from agent_env.registry.models import Kind, PushResult, Version
from agent_env.registry.resolve import split_ref
from agent_env.registry.store import Registry
from agent_env.stores import keys
from agent_env.stores.base import check_object_key, version_order

FORMAT: Final = "agentenv-bundle/1"
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 * 2**20  # about 100,000 versions; more is not a file we wrote
BLOB_MEMBER = re.compile(r"^blobs/([0-9a-f]{64})$")
DEPENDENCIES_FIRST: tuple[Kind, ...] = ("artifacts", "envs", "agents", "tasks", "evals")
CHUNK = 2**20
NOT_A_BUNDLE_FIX = "give a file written by `agent-env bundle export` (a .tar.gz whose first member is manifest.json)"
DAMAGED_FIX = "export the bundle again from its source registry, and copy the file whole"

Progress = Callable[[str], None]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class BundleManifest(BaseModel):
    """`manifest.json`: the versions a bundle file carries and the size of each blob they name."""

    format: Literal["agentenv-bundle/1"]
    versions: list[Version]
    blobs: dict[Sha256, Annotated[int, Field(ge=0)]]


class ExportSummary(BaseModel):
    """What an export wrote."""

    path: str
    versions: list[str]  # refs, dependencies first
    blobs: int  # distinct blobs, each stored once
    blob_bytes: int  # their total size, before compression
    file_bytes: int  # the bundle file's size


# --- export ---


def export_bundle(
    registry: Registry,
    tasks: list[str],
    out: Path,
    *,
    overwrite: bool = False,
    progress: Progress | None = None,
    evals: list[str] | None = None,
) -> ExportSummary:
    """Write the tasks named (`NAME` for the latest version, or `NAME@VERSION`) and what they use to `out`,
    atomically (a temp file renamed): `out` is the whole bundle or untouched. Each eval named (`NAME[@VERSION]`)
    goes too, with the tasks it names (at its pins, else their latest) and what they use."""
    if not tasks and not evals:
        raise BadInput(
            "no task or eval to export",
            "name one or more tasks or evals: `agent-env bundle export TASK[@VERSION]... [--eval EVAL[@VERSION]]`",
        )
    out = out.expanduser()
    if out.exists() and not overwrite:
        raise BadInput(f"{out} already exists", "choose another --out, or pass --force to replace it")
    eval_versions = [registry.version("evals", *split_ref(target)) for target in evals or []]
    for v in eval_versions:
        registry.eval(v.name, v.label)  # checked against its digest
    eval_tasks = [str(ref) for v in eval_versions for ref in registry.eval(v.name, v.label).tasks]
    versions = _collect(registry, [*tasks, *eval_tasks], progress)
    versions = sorted(
        {(v.kind, v.name, v.label): v for v in [*versions, *eval_versions]}.values(),
        key=lambda v: (DEPENDENCIES_FIRST.index(v.kind), v.name, version_order(v.label)),
    )
    blobs = _blob_sizes(versions)
    manifest = BundleManifest(format=FORMAT, versions=versions, blobs=blobs)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial")
    try:
        # Fixed timestamps and order: the same versions always make the same bytes.
        with (
            os.fdopen(fd, "wb") as raw,
            gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=6, mtime=0) as zipped,
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            _add(tar, MANIFEST, canonical_json(manifest.model_dump(mode="json")))
            for n, (sha, size) in enumerate(blobs.items(), 1):
                if progress and n % 1000 == 0:
                    progress(f"[{n}/{len(blobs)}] blobs written")
                _add(tar, f"blobs/{sha}", _stored_blob(registry, sha, size))  # one blob in memory at a time
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return ExportSummary(
        path=str(out),
        versions=[v.ref for v in versions],
        blobs=len(blobs),
        blob_bytes=sum(blobs.values()),
        file_bytes=out.stat().st_size,
    )


def _collect(registry: Registry, tasks: list[str], progress: Progress | None) -> list[Version]:
    """The union of the tasks' snapshots, each version once and checked against its digest."""
    chosen: dict[tuple[str, str, str], Version] = {}
    for n, target in enumerate(tasks, 1):
        name, label = split_ref(target)
        task = registry.version("tasks", name, label)
        if (task.kind, task.name, task.label) in chosen:
            continue
        for v in registry.snapshot(task):
            if (v.kind, v.name, v.label) not in chosen:
                if _recomputed(v) != v.digest:
                    raise BadInput(
                        f"the registry's record of {v.ref} does not match its digest {v.digest}: it was altered; "
                        "nothing was exported",
                        "push the item again from its original folder under a new version",
                    )
                chosen[(v.kind, v.name, v.label)] = v
        if progress:
            progress(f"[{n}/{len(tasks)}] {task.ref}: {len(chosen)} versions so far")
    return sorted(chosen.values(), key=lambda v: (DEPENDENCIES_FIRST.index(v.kind), v.name, version_order(v.label)))


def _blob_sizes(versions: list[Version]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for v in versions:
        for f in v.files:
            if sizes.setdefault(f.sha256, f.size) != f.size:
                raise BadInput(
                    f"the registry records two sizes for blob sha256:{f.sha256} ({v.ref}: {f.path})",
                    "push the item again from its original folder under a new version",
                )
    return dict(sorted(sizes.items()))


def _stored_blob(registry: Registry, sha: str, size: int) -> bytes:
    data = registry.objects.get(keys.registry_blob(sha))
    if len(data) != size or file_sha256(data) != sha:
        raise BadInput(
            f"the registry's blob sha256:{sha} does not match its digest (it was altered or damaged); "
            "nothing was exported",
            "push the items using it again from their original folders, or ask whoever manages the object store",
        )
    return data


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


# --- import ---


def import_bundle(
    registry: Registry, source: Path, spool_dir: Path, progress: Progress | None = None
) -> list[PushResult]:
    """Load a bundle file into `registry`. Everything is verified first; a damaged file, or a label the registry
    holds with other content, imports nothing. Blobs are spooled to a temporary folder under `spool_dir` (the
    state dir): nothing may be written before all is verified, and blobs may be larger than memory."""
    spool_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=spool_dir, prefix=".bundle-import-") as spooled:
        manifest = _read(source.expanduser(), Path(spooled))
        stored = _check_against(registry, manifest.versions, source)
        for sha in manifest.blobs:
            blob = keys.registry_blob(sha)
            if not registry.objects.exists(blob):
                # Streamed rather than a conditional create: the key is the bytes' digest, so a racer writes the same.
                registry.objects.put_file(blob, Path(spooled) / sha)
        results = []
        for n, v in enumerate(manifest.versions, 1):
            if progress:
                progress(f"[{n}/{len(manifest.versions)}] {v.ref}")
            key = keys.registry_version(v.kind, v.name, v.label)
            outcome: Literal["imported", "unchanged"] = "unchanged"
            if key in stored:
                pass
            elif registry.documents.create(keys.REGISTRY, key, v.model_dump(mode="json")):
                outcome = "imported"
            elif (registry.documents.get(keys.REGISTRY, key) or {}).get("digest") != v.digest:
                raise BadInput(  # another install stored other content under this label since the check
                    f"{v.ref} was stored with other content while importing {source}",
                    "import the bundle again: it stops before writing anything and lists the conflicts",
                )
            results.append(PushResult(kind=v.kind, name=v.name, label=v.label, digest=v.digest, outcome=outcome))
    return results


def _read(source: Path, spooled: Path) -> BundleManifest:
    """The file's manifest, checked, with every blob it lists spooled under `spooled` and checked."""
    try:
        raw = source.open("rb")
    except OSError as e:
        raise BadInput(f"cannot read the bundle file {source}: {e.strerror}", NOT_A_BUNDLE_FIX) from None
    manifest: BundleManifest | None = None
    seen: set[str] = set()
    with raw:
        try:
            with tarfile.open(fileobj=raw, mode="r|gz") as tar:
                for member in tar:
                    if problem := member_problem(member):  # links, absolute paths, '..': named, before any check
                        raise _damaged(source, problem)
                    if manifest is None:
                        if member.name != MANIFEST:
                            raise BadInput(
                                f"{source} is not an agent-env bundle file: it starts with {member.name!r}, "
                                f"not {MANIFEST}",
                                NOT_A_BUNDLE_FIX,
                            )
                        manifest = _manifest(source, _manifest_bytes(tar, member, source))
                        _check_room(manifest, spooled, source)
                        continue
                    seen.add(_spool_blob(tar, member, manifest, seen, spooled, source))
        except (tarfile.TarError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError: see below
            raise BadInput(
                f"{source} is not an agent-env bundle file, or it is truncated: {e}", NOT_A_BUNDLE_FIX
            ) from None
        except gzip.BadGzipFile as e:
            raise BadInput(f"{source} is not an agent-env bundle file: {e}", NOT_A_BUNDLE_FIX) from None
    if manifest is None:
        raise BadInput(f"{source} is not an agent-env bundle file: it is empty", NOT_A_BUNDLE_FIX)
    if missing := sorted(set(manifest.blobs) - seen):
        raise _damaged(source, f"{len(missing)} blob(s) it lists are missing (sha256:{missing[0]}, ...)")
    return manifest


def _manifest_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo, source: Path) -> bytes:
    if not member.isreg():
        raise _damaged(source, f"{member.name} is not a regular file")
    if member.size > MAX_MANIFEST_BYTES:
        raise _damaged(source, f"its manifest is {member.size} bytes, more than the {MAX_MANIFEST_BYTES} allowed")
    data = tar.extractfile(member)
    assert data is not None  # a regular file
    return data.read()


def _manifest(source: Path, data: bytes) -> BundleManifest:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise _damaged(source, f"its manifest is not JSON ({type(e).__name__}: {e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else None
        raise BadInput(
            f"{source} is not an agent-env bundle file of format {FORMAT} (its manifest says {found!r})",
            "export it again with this version of agent-env" if found else NOT_A_BUNDLE_FIX,
        )
    try:
        manifest = BundleManifest.model_validate(doc)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise _damaged(source, f"its manifest is invalid at {where}: {first['msg']}") from None
    versions: dict[tuple[str, str, str], Version] = {}
    for v in manifest.versions:
        _check_version(v, manifest.blobs, source)
        if versions.setdefault((v.kind, v.name, v.label), v).digest != v.digest:
            raise _damaged(source, f"it holds {v.ref} twice, with different content")
    manifest.versions = list(versions.values())
    return manifest


def _check_version(v: Version, blobs: dict[str, int], source: Path) -> None:
    """A version is what its digest says, names nothing outside its folder, and every blob it names is in the file."""
    if _recomputed(v) != v.digest:
        raise _damaged(source, f"the record of {v.ref} does not match its digest {v.digest}")
    if not NAME.match(v.name):  # names become file names where a task runs from the registry
        raise _damaged(source, f"it names an item {v.name!r}, not a registry name")
    for f in v.files:
        try:
            check_object_key(f.path)
        except BadInput:
            raise _damaged(source, f"{v.ref} names a file {f.path!r} outside its folder") from None
        if blobs.get(f.sha256) != f.size:
            raise _damaged(source, f"{v.ref}: blob sha256:{f.sha256} of {f.path} is not listed with its size")


def _check_room(manifest: BundleManifest, spooled: Path, source: Path) -> None:
    needed, free = sum(manifest.blobs.values()), shutil.disk_usage(spooled).free
    if needed > free:
        raise BadInput(
            f"{source} holds {needed} bytes of blobs; the state dir has {free} bytes free; nothing was imported",
            "free some space in the state dir (AGENT_ENV_HOME) and import again",
        )


def _spool_blob(
    tar: tarfile.TarFile, member: tarfile.TarInfo, manifest: BundleManifest, seen: set[str], spooled: Path, source: Path
) -> str:
    """Copy one `blobs/<sha256>` member to `spooled/<sha256>`, refused unless it is exactly what its name says."""
    match = BLOB_MEMBER.fullmatch(member.name)
    if not match:
        raise _damaged(source, f"it holds a member named {member.name!r} (only {MANIFEST} and blobs/<sha256>)")
    sha = match[1]
    if sha not in manifest.blobs or sha in seen:
        raise _damaged(source, f"blob {sha} is {'there twice' if sha in seen else 'not in its manifest'}")
    if not member.isreg() or member.size != manifest.blobs[sha]:
        raise _damaged(source, f"blob {sha} is not a regular file of the {manifest.blobs[sha]} bytes its manifest says")
    data = tar.extractfile(member)
    assert data is not None  # a regular file
    hashed = hashlib.sha256()
    with (spooled / sha).open("wb") as out:
        while chunk := data.read(CHUNK):
            hashed.update(chunk)
            out.write(chunk)
    if hashed.hexdigest() != sha:
        raise _damaged(source, f"blob {sha} does not match its digest")
    return sha


def _check_against(registry: Registry, versions: list[Version], source: Path) -> dict[str, str]:
    """Every label either absent here or holding the same digest, and everything a version uses either in the file
    or here; the digests already stored, by key. Every conflict is listed at once."""
    stored: dict[str, str] = {}
    conflicts = []
    for v in versions:
        key = keys.registry_version(v.kind, v.name, v.label)
        if (doc := registry.documents.get(keys.REGISTRY, key)) is not None:
            stored[key] = str(doc.get("digest"))
            if stored[key] != v.digest:
                conflicts.append(f"{v.ref}: here {stored[key]}, in the file {v.digest}")
    if conflicts:
        raise BadInput(
            f"{source}: {len(conflicts)} conflict(s) with this registry; nothing was imported\n" + "\n".join(conflicts),
            "a version never changes: bump `version` of the items named where the bundle was made, push and export "
            "again (or import into a registry without them)",
        )
    carried = {(v.kind, v.name, v.label) for v in versions}
    for v in versions:
        for kind, named in v.uses.items():
            for name, label in named.items():
                if (kind, name, label) not in carried and registry.documents.get(
                    keys.REGISTRY, keys.registry_version(kind, name, label)
                ) is None:
                    raise _damaged(
                        source, f"{v.ref} uses {kind} {name}@{label}, which neither it nor this registry holds"
                    )
    return stored


def _recomputed(v: Version) -> str:
    return digest(v.kind, v.name, v.record, v.files, v.uses)


def _damaged(source: Path, problem: str) -> BadInput:
    return BadInput(f"the bundle file {source} was altered or damaged: {problem}; nothing was imported", DAMAGED_FIX)
