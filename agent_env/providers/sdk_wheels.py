"""Wheels of agent-env's SDK for an image, made from this install: no manual step, no package index.

Containers cannot reach PyPI on many machines (not on ours), and need not: a Dockerfile that names the folder
`agent-env-wheels` (outside comments) finds it in its build context, holding a wheel of the agent-env this worker
runs and of every package its SDKs need (`SDK`: an agent served over A2A, an app over MCP), at the versions
installed here; it installs them with `pip install --no-index --no-deps agent-env-wheels/*.whl`.

The wheels are repacked from the installed files (each distribution's RECORD; the source folder of an editable
agent-env), so they need no network and no build backend, and they are exactly what runs here. Binary ones are
for this interpreter: an image with another Python or libc refuses them, and the build's error says so.

They are made once per content (`fingerprint`: every distribution's name, version and RECORD, and an editable
agent-env's source) under the state dir, which keeps the last few; the image built with them is tagged with the
fingerprint too, so another agent-env builds another image and an unchanged one is never rebuilt.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import tempfile
import time
import zipfile
from importlib import metadata
from pathlib import Path, PurePosixPath

from agent_env.errors import AgentEnvError

FOLDER = "agent-env-wheels"  # in the build context, where a Dockerfile finds them
OWN = "agentenv-framework"  # installed without its dependencies: the SDKs need only those below
PACKAGES = ("agent_env",)  # what its wheel holds (pyproject's [tool.hatch.build.targets.wheel])
# What the SDKs import beyond agent-env itself (agent_env.agents.sdk serves A2A and calls tools over MCP;
# agent_env.envs serves an app over MCP), with everything these require, as installed.
SDK = ("a2a-sdk[http-server]", "starlette", "uvicorn", "mcp", "agentenv-framework-protocol")
STALE_TMP_S = 3600.0  # a half-made set this old was left by a build that crashed
KEEP = 3  # wheel sets kept under the state dir (a replaced worker may still be building with the last one)
FORMAT = "1"  # bump when what goes into a wheel changes: every set is made anew
_INSTALLER_FILES = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "RECORD.jws", "RECORD.p7s"}


class WheelsUnavailable(AgentEnvError):
    """The install cannot give an image the SDK's wheels (a package missing, or installed editable)."""


def wanted(dockerfile: str) -> bool:
    """Whether a Dockerfile uses the wheels: it names the folder in an instruction (comments do not count)."""
    return any(FOLDER in line for line in dockerfile.splitlines() if not line.lstrip().startswith("#"))


def interpreter() -> str:
    """What the wheels are for, as a person reads it: `CPython 3.11 on Linux x86_64 (glibc 2.36)`."""
    libc, version = platform.libc_ver()
    where = f" ({libc} {version})" if libc else ""
    return f"{platform.python_implementation()} {platform.python_version()} on {platform.system()} {platform.machine()}{where}"


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions() -> list[metadata.Distribution]:
    """agent-env, and the SDK's requirements with all they require (the markers and extras that apply here)."""
    from packaging.requirements import Requirement

    found = {_key(OWN): _installed(OWN, "agent-env itself")}
    done: set[tuple[str, str]] = set()
    todo = [(Requirement(line), "agent-env's SDK") for line in SDK]
    while todo:
        requirement, needed_by = todo.pop()
        key = _key(requirement.name)
        extras = {""} | set(requirement.extras)
        if {(key, extra) for extra in extras} <= done:
            continue
        done |= {(key, extra) for extra in extras}
        dist = found.get(key) or _installed(requirement.name, needed_by)
        found[key] = dist
        if key == _key(OWN):
            continue
        for line in dist.requires or []:
            needed = Requirement(line)
            if needed.marker is None or any(needed.marker.evaluate({"extra": extra}) for extra in extras):
                todo.append((needed, dist.metadata["Name"]))
    return sorted(found.values(), key=lambda d: _key(d.metadata["Name"]))


def _installed(name: str, needed_by: str) -> metadata.Distribution:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        raise WheelsUnavailable(
            f"{name} (needed by {needed_by}) is not installed beside agent-env, so the image's agent-env-wheels "
            "cannot be made",
            f"install it where agent-env runs (`pip install {name}`), or reinstall agent-env",
        ) from None


def fingerprint(dists: list[metadata.Distribution]) -> str:
    """What the wheels hold, cheaply (no file of an installed package is read, only its RECORD of hashes)."""
    digest = hashlib.sha256(f"{FORMAT}\0".encode())
    for dist in dists:
        digest.update(f"{dist.metadata['Name']}\0{dist.version}\0".encode())
        source = _editable_source(dist)
        if source is None:
            digest.update((dist.read_text("RECORD") or "").encode())
        else:
            for arcname, path in _tree(source):
                digest.update(arcname.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:32]


def _editable_source(dist: metadata.Distribution) -> list[tuple[str, Path]] | None:
    """For an editable agent-env, its package folders (name in the wheel, folder here); None when installed."""
    try:
        editable = json.loads(dist.read_text("direct_url.json") or "{}").get("dir_info", {}).get("editable")
    except ValueError:
        editable = False
    if not editable:
        return None
    if _key(dist.metadata["Name"]) != _key(OWN):
        name = dist.metadata["Name"]
        raise WheelsUnavailable(
            f"{name} is installed editable (pip install -e), so the image's agent-env-wheels cannot be made of it",
            f"install it normally where agent-env runs (`pip install {name}`)",
        )
    folders = []
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        locations = list(spec.submodule_search_locations or []) if spec else []
        if not locations:
            raise WheelsUnavailable(f"agent-env's package {package} is not importable here", "reinstall agent-env")
        folders.append((package, Path(locations[0])))
    return folders


def _tree(source: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """The files of a package source folder as its built wheel holds them, in name order: no caches, compiled
    files or wheels (git ignores them, so the build backend leaves them out), and no hidden files or folders (a
    checkout's `.env` is never packed into an image)."""
    files = []
    for package, root in source:
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(names):
                if not name.startswith(".") and not name.endswith((".pyc", ".pyo", ".whl")):
                    path = Path(folder) / name
                    files.append(((PurePosixPath(package) / path.relative_to(root).as_posix()).as_posix(), path))
    return files


def made(cache: Path, dists: list[metadata.Distribution], key: str) -> Path:
    """The folder of wheels for `key` (= `fingerprint(dists)`) under `cache`, made now unless it was before."""
    folder = cache / key
    if (folder / ".complete").is_file():
        return folder
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Its own folder per call: two sandboxes of one worker may build at once (threads of one process).
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=".tmp", dir=cache))
    try:
        for dist in dists:
            _repack(dist, tmp)
        (tmp / ".complete").write_text(key)
        try:
            tmp.rename(folder)
        except OSError:  # made meanwhile by another worker
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _prune(cache, keep=folder)
    return folder


def _prune(cache: Path, keep: Path) -> None:
    """Keep the newest `KEEP` sets (each agent-env version or edit makes one), and the contexts copied with
    them: the cache does not grow."""
    sets = sorted(
        (p for p in cache.iterdir() if (p / ".complete").is_file()), key=lambda p: (p / ".complete").stat().st_mtime_ns
    )
    for old in sets[:-KEEP]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)
    stale = time.time() - STALE_TMP_S
    for tmp in cache.glob(".*.tmp"):  # left by a build that crashed
        with contextlib.suppress(OSError):
            if tmp.stat().st_mtime < stale:
                shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(cache / "contexts" / old.name, ignore_errors=True)  # build contexts holding them


def _repack(dist: metadata.Distribution, into: Path) -> Path:
    """One installed distribution as the wheel it was installed from: its files in site-packages and its
    .dist-info (less what the installer wrote), with a RECORD of their hashes. Files installed outside
    site-packages (scripts, data) are left out: pip makes the console scripts again from entry_points.txt."""
    files = [f for f in dist.files or [] if ".." not in f.parts and "__pycache__" not in f.parts]
    info = next((f.parts[0] for f in files if f.parts[0].endswith(".dist-info") and f.name == "METADATA"), None)
    if info is None:
        raise WheelsUnavailable(
            f"{dist.metadata['Name']} is installed without a RECORD of its files, so no wheel can be made of it",
            f"reinstall it with pip (`pip install --force-reinstall {dist.metadata['Name']}=={dist.version}`)",
        )
    members: list[tuple[str, Path]] = []
    source = _editable_source(dist)
    if source is not None:
        members = _tree(source)
    else:
        members = [
            (f.as_posix(), Path(str(dist.locate_file(f))))
            for f in files
            if f.parts[0] != info and not f.name.endswith((".pyc", ".pyo"))
        ]
    members += [
        (f.as_posix(), Path(str(dist.locate_file(f))))
        for f in files
        if f.parts[0] == info and len(f.parts) > 1 and f.name not in _INSTALLER_FILES
    ]
    name, version = info.removesuffix(".dist-info").rsplit("-", 1)
    path = into / f"{name}-{version}-{_tags(dist)}.whl"
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as wheel:
        for arcname, file in members:
            data = file.read_bytes()
            member = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
            member.external_attr = (0o755 if os.access(file, os.X_OK) else 0o644) << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(member, data)
            hashed = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arcname},sha256={hashed},{len(data)}")
        record.append(f"{info}/RECORD,,")
        wheel.writestr(zipfile.ZipInfo(f"{info}/RECORD", date_time=(1980, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    return path


def _tags(dist: metadata.Distribution) -> str:
    """The compressed tag set of its WHEEL file (`cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64`)."""
    tags = [
        line.split(":", 1)[1].strip()
        for line in (dist.read_text("WHEEL") or "").splitlines()
        if line.startswith("Tag:")
    ]
    if not tags:
        raise WheelsUnavailable(
            f"{dist.metadata['Name']} has no WHEEL file (installed from an sdist by an old pip?), so no wheel can be "
            "made of it",
            f"reinstall it with pip (`pip install --force-reinstall {dist.metadata['Name']}=={dist.version}`)",
        )
    parts: list[list[str]] = [[], [], []]
    for tag in tags:
        for part, value in zip(parts, tag.split("-", 2), strict=True):
            if value not in part:
                part.append(value)
    return "-".join(".".join(part) for part in parts)


def context_folder(build: Path, cache: Path) -> Path:
    """`build` as a builder that reads a folder sees it (Modal's): itself, or, when its Dockerfile installs the
    wheels and it has none of its own, a copy with them beside its files (made once per context and wheels)."""
    dockerfile = (build / "Dockerfile").read_text(errors="replace") if (build / "Dockerfile").is_file() else ""
    if not wanted(dockerfile) or (build / FOLDER).exists():
        return build
    dists = distributions()
    key = fingerprint(dists)
    wheels = made(cache, dists, key)
    context = cache / "contexts" / key / hashlib.sha256(str(build.resolve()).encode()).hexdigest()[:32]
    if not (context / FOLDER).is_dir():
        context.parent.mkdir(parents=True, exist_ok=True)
        # Its own folder per call, as `made`'s: two builds of one worker may copy at once.
        scratch = Path(tempfile.mkdtemp(prefix=f".{context.name}.", suffix=".tmp", dir=context.parent))
        try:
            tmp = scratch / "context"
            shutil.copytree(build, tmp, symlinks=True)
            (tmp / FOLDER).mkdir()
            for wheel in wheels.glob("*.whl"):
                shutil.copy2(wheel, tmp / FOLDER / wheel.name)
            with contextlib.suppress(OSError):  # made meanwhile
                tmp.rename(context)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return context


def main(argv: list[str] | None = None) -> int:
    """`python -m agent_env.providers.sdk_wheels DIR`: the same wheels into DIR (exactly these: its other wheels
    are removed), for an image built outside agent-env (scripts/cli-agent-image)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m agent_env.providers.sdk_wheels", description=main.__doc__)
    parser.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    try:
        dists = distributions()
        fingerprint(dists)  # an editable package other than agent-env is refused here, before anything is written
    except WheelsUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    for old in args.dir.glob("*.whl"):
        old.unlink()
    for dist in dists:
        _repack(dist, args.dir)
    print(f"{len(dists)} wheels in {args.dir} for {interpreter()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
