"""Folders read into archives and objects, and archives written into folders, never through a link.

Everything that packs a folder goes through here: `agent-env registry push`, a sandbox's build context pinned
when a run is planned, `put_files` and skills from a bundle, an env record's `data` files, `load_data`'s
`file` and `rubric_judge`'s `reference_file`. So does `agent-env registry pull`, which writes a folder, and
the unpacking of a pinned build context.

- A symbolic link below the folder is refused, naming it, wherever it points, inside the folder too: a link
  means something else on each machine that reads it, registry versions carry bytes (not links), and a link
  that is checked and then followed can be swapped in between. The fix is a copy of what it points to.
- Each entry is opened relative to its parent folder's descriptor with O_NOFOLLOW, so a file or folder
  swapped for a link while the folder is read is refused too, not followed. The folder named itself is
  opened as given (the operator chose it; /tmp is a link on some systems).
- A hard link is read as the regular file it is: it has no path to follow, and making one to someone else's
  file takes the right to write that file (Linux's fs.protected_hardlinks).
- FIFOs, sockets and devices are refused before they are opened: reading one blocks or reads a device.
- Unpacking takes regular files and folders at relative paths that stay inside; any other member is refused,
  naming it.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import stat
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from agent_env.errors import BadInput

LINK_FIX = (
    "replace the link with a copy of what it points to (remove PATH, then copy its target there), or move it out "
    "of the folder: a folder is packed without following links"
)
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotInside(BadInput):
    """A path that is absolute or climbs out with '..': callers say which path of theirs it was."""


@dataclass(frozen=True)
class Entry:
    """A folder or regular file found by `walk`."""

    path: str  # relative to the walked root, '/'-separated
    folder: bool
    size: int
    executable: bool


def walk(root: Path, under: str = "", *, skip: Callable[[str], bool] | None = None) -> list[Entry]:
    """What `under` (a path below `root`; `root` itself when empty) holds, depth first in name order: the file
    itself when it is a file, else every folder and regular file below it. Names `skip` answers True for are left
    out with all they hold. BadInput naming the first link, special file or missing path."""
    parts = _parts(root, under)
    entries: list[Entry] = []
    with _parent(root, parts) as parent:
        if not parts:
            _walk(root, parent, "", skip, entries)
            return entries
        info = _lstat(root, parts, parent)
        if stat.S_ISREG(info.st_mode):
            return [_entry("/".join(parts), info)]
        with _child(root, parts, parent) as fd:
            _walk(root, fd, "/".join(parts), skip, entries)
    return entries


def check_file(root: Path, relative: str) -> Entry:
    """The regular file at `relative` below `root`, checked as `read` checks it (nothing is read)."""
    parts = _parts(root, relative)
    with _parent(root, parts) as parent:
        info = _lstat(root, parts, parent) if parts else os.fstat(parent)
    if not stat.S_ISREG(info.st_mode):
        raise BadInput(f"{_shown(root, parts)} is a folder, not a file", "name a file")
    return _entry(relative, info)


def read(root: Path, relative: str) -> bytes:
    """The bytes of the regular file at `relative` below `root`, no link followed on the way."""
    parts = _parts(root, relative)
    if not parts:
        raise BadInput(f"{root} is a folder, not a file", "name a file inside it")
    with _parent(root, parts) as parent:
        info = _lstat(root, parts, parent)
        if stat.S_ISDIR(info.st_mode):
            raise BadInput(f"{_shown(root, parts)} is a folder, not a file", "name a file")
        try:  # lstat said a regular file; O_NOFOLLOW and fstat make sure it still is one
            fd = os.open(
                parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=parent
            )
        except OSError as e:
            raise _refusal(root, parts, parent, e) from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(mode := os.fstat(f.fileno()).st_mode):
            raise _not_regular(root, parts, mode)
        return f.read()


def write(root: Path, relative: str, data: bytes) -> Path:
    """Write `data` at `relative` below `root` (created with its folders as needed), atomically: a temporary
    file (0600) renamed into place. Refused, naming it, where the path below `root` runs through a link."""
    parts = _parts(root, relative)
    if not parts:
        raise BadInput(f"{root} is a folder, not a file", "name a file inside it")
    root.mkdir(parents=True, exist_ok=True)
    with _parent(root, parts, create=True) as parent:
        temporary = f".{parts[-1][:200]}.{secrets.token_hex(6)}"
        fd = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent
        )
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(temporary, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=parent)
            if isinstance(e, OSError):  # e.g. a folder where the file goes
                raise BadInput(f"cannot write {_shown(root, parts)}: {e.strerror}", "check the path") from None
            raise
    return root.joinpath(*parts)


def member_problem(member: tarfile.TarInfo) -> str | None:
    """Why an archive member may not be unpacked into a folder (None when it may): only regular files and folders,
    at relative paths that stay inside."""
    name = member.name
    if name.startswith("/"):
        return f"member {name!r} has an absolute path"
    if ".." in PurePosixPath(name).parts:
        return f"member {name!r} leads out of the folder ('..')"
    if member.issym():
        return f"member {name!r} is a symbolic link (to {member.linkname!r})"
    if member.islnk():
        return f"member {name!r} is a hard link (to {member.linkname!r})"
    if not (member.isreg() or member.isdir()):
        return f"member {name!r} is a device, FIFO or other special file"
    return None


def unpack(archive: bytes, destination: Path, what: str, fix: str) -> None:
    """Unpack a tar into `destination`, every member checked first: BadInput naming the first one refused."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = tar.getmembers()
        for member in members:
            if problem := member_problem(member):
                raise BadInput(f"{what}: {problem}; nothing was unpacked", fix)
        tar.extractall(destination, members=members, filter="data")


# --- descriptors ---


def _parts(root: Path, relative: str) -> tuple[str, ...]:
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts or "\x00" in relative:
        raise NotInside(
            f"{relative!r} is not a path inside {root}",
            "name it by its path relative to the folder, without '..' (and not absolute)",
        )
    return path.parts


@contextlib.contextmanager
def _parent(root: Path, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
    """A descriptor of the folder holding `parts[-1]` (of `root` itself when `parts` is empty), each folder on
    the way opened without following a link."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BadInput(f"no folder at {root}", "check the path") from None
    except NotADirectoryError:
        raise BadInput(f"{root} is not a folder", "check the path") from None
    try:
        for n in range(len(parts) - 1):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(parts[n], dir_fd=fd)
            try:
                child = os.open(parts[n], _DIRECTORY, dir_fd=fd)
            except OSError as e:
                raise _refusal(root, parts[: n + 1], fd, e) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _child(root: Path, parts: tuple[str, ...], parent: int) -> Iterator[int]:
    try:
        fd = os.open(parts[-1], _DIRECTORY, dir_fd=parent)
    except OSError as e:
        raise _refusal(root, parts, parent, e) from None
    try:
        yield fd
    finally:
        os.close(fd)


def _walk(root: Path, fd: int, prefix: str, skip: Callable[[str], bool] | None, entries: list[Entry]) -> None:
    with os.scandir(fd) as listing:
        names = sorted(entry.name for entry in listing)
    for name in names:
        if skip is not None and skip(name):
            continue
        path = f"{prefix}/{name}" if prefix else name
        parts = tuple(path.split("/"))
        info = _lstat(root, parts, fd)
        entries.append(_entry(path, info))
        if stat.S_ISDIR(info.st_mode):
            with _child(root, parts, fd) as child:
                _walk(root, child, path, skip, entries)


def _entry(path: str, info: os.stat_result) -> Entry:
    folder = stat.S_ISDIR(info.st_mode)
    return Entry(path=path, folder=folder, size=0 if folder else info.st_size, executable=bool(info.st_mode & 0o111))


def _lstat(root: Path, parts: tuple[str, ...], parent: int) -> os.stat_result:
    """The entry's own status; BadInput unless it is a folder or a regular file."""
    try:
        info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
    except OSError as e:
        raise _refusal(root, parts, parent, e) from None
    if stat.S_ISLNK(info.st_mode):
        raise _link(root, parts, parent)
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        raise _not_regular(root, parts, info.st_mode)
    return info


def _refusal(root: Path, parts: tuple[str, ...], parent: int, error: OSError) -> BadInput:
    """What an open or stat of `parts[-1]` that failed ran into."""
    if isinstance(error, FileNotFoundError):
        return BadInput(f"{_shown(root, parts)} does not exist", "check the path, or add the file")
    try:
        mode = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode
    except OSError:
        return BadInput(f"cannot read {_shown(root, parts)}: {error.strerror}", "check the path and its permissions")
    if stat.S_ISLNK(mode):
        return _link(root, parts, parent)
    if not stat.S_ISDIR(mode) and isinstance(error, NotADirectoryError):
        return BadInput(f"{_shown(root, parts)} is not a folder", "check the path")
    return BadInput(f"cannot read {_shown(root, parts)}: {error.strerror}", "check the path and its permissions")


def _link(root: Path, parts: tuple[str, ...], parent: int) -> BadInput:
    try:
        target = f" (to {os.readlink(parts[-1], dir_fd=parent)!r})"
    except OSError:
        target = ""
    return BadInput(f"{_shown(root, parts)} is a symbolic link{target}", LINK_FIX.replace("PATH", _shown(root, parts)))


def _not_regular(root: Path, parts: tuple[str, ...], mode: int) -> BadInput:
    kind = (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a special file"
    )
    return BadInput(
        f"{_shown(root, parts)} is {kind}, not a regular file or folder", "remove it from the folder that is packed"
    )


def _shown(root: Path, parts: tuple[str, ...]) -> str:
    return str(root.joinpath(*parts))
