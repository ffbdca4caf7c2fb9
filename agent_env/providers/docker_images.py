"""The images Docker sandboxes run: built from a `build` folder with a Dockerfile, tagged by the hash of the build
context (an unchanged context is never rebuilt), and shared through the configured image store (`build-NAME` at
the context's digest), so a worker on another machine pulls what one built. The store is a cache: when it cannot
be reached, the worker builds locally and warns.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from agent_env import packing
from agent_env.errors import BadInput, NotFound
from agent_env.providers import sdk_wheels
from agent_env.providers.base import SandboxFailed
from agent_env.stores.backends import open_store

if TYPE_CHECKING:
    from agent_env.config import Settings
    from agent_env.stores.base import ImageStore

log = logging.getLogger("agent_env.providers.docker")  # the provider's log: its warnings are the docker provider's

BASE_IMAGE = "agentenv/base:bookworm"
BASE_IMAGE_FIX = "build it with `scripts/docker-base-image` (images cannot be pulled on machines without internet)"


def context_tar(root: Path, under: str = "") -> bytes:
    """The build context `under` the folder `root` (all of it when empty) as a reproducible tar: sorted, no owners
    or times, so equal trees hash equal. Read through `agent_env.packing`: a link in it is refused, never followed
    (so no file outside the folder is packed), as are FIFOs, sockets and devices."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for entry in packing.walk(root, under):
            info = tarfile.TarInfo(PurePosixPath(entry.path).relative_to(PurePosixPath(under)).as_posix())
            info.mode = 0o755 if entry.folder or entry.executable else 0o644
            if entry.folder:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:  # a regular file, also when hard-linked: its bytes, never a link member
                data = packing.read(root, entry.path)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def with_files(context: bytes, files: dict[str, Path]) -> bytes:
    """A build context (a tar from `context_tar`) with more regular files added at the given paths."""
    buf = io.BytesIO(context)
    with tarfile.open(fileobj=buf, mode="a") as tar:
        for name, path in files.items():
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_tag(folder: Path, context: bytes) -> str:
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in folder.name.lower()).strip("-.") or "app"
    return f"agentenv-build/{name}:{hashlib.sha256(context).hexdigest()[:16]}"


def shared_build_image(tag: str) -> tuple[str, str]:
    """The (name, version) under which the image store keeps the image of build tag `tag`: `build-NAME` at the
    context's digest, valid as a repository and a tag on every backend (see `check_image`)."""
    repository, _, digest = tag.rpartition(":")
    name = re.sub(r"[^a-z0-9]+", "-", repository.rsplit("/", 1)[-1].lower())
    return f"build-{name}"[:128].strip("-"), digest


def _tail(lines: list[str], count: int = 20) -> str:
    return "\n".join("    " + line for line in lines[-count:])


class DockerImages:
    """A Docker provider's built images: `build` makes (or finds, here or in the image store) the image of a
    folder. `client` gives the provider's Docker client (opened on first use)."""

    def __init__(self, settings: Settings, client: Callable[[], Any]) -> None:
        self.settings = settings
        self._client = client
        self._image_store: ImageStore | None = None
        self._image_store_tried = False
        self._image_store_lock = threading.Lock()

    @property
    def client(self) -> Any:
        return self._client()

    def build(self, folder: Path) -> str:
        import docker.errors

        if not (folder / "Dockerfile").is_file():
            raise BadInput(f"{folder} has no Dockerfile", "put a Dockerfile in the app's `build` folder")
        context = context_tar(folder)
        wheels = self._sdk_wheels(folder)  # (fingerprint, the distributions) when the Dockerfile installs agent-env
        tag = build_tag(folder, context + (f"\0{sdk_wheels.FOLDER}\0{wheels[0]}".encode() if wheels else b""))
        try:
            self.client.images.get(tag)
            return tag  # built before from the very same context
        except docker.errors.ImageNotFound:
            pass
        if self._fetch_built(tag):
            return tag  # built by another worker, shared through the image store
        if wheels:
            made = sdk_wheels.made(Path(self.settings.state_dir) / "sandboxes" / "wheels", wheels[1], wheels[0])
            context = with_files(context, {f"{sdk_wheels.FOLDER}/{p.name}": p for p in sorted(made.glob("*.whl"))})
        lines: list[str] = []
        try:
            for chunk in self.client.api.build(
                fileobj=io.BytesIO(context),
                custom_context=True,
                tag=tag,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                labels={"agentenv.context": tag.rsplit(":", 1)[1]},
            ):
                if "stream" in chunk:
                    lines.extend(chunk["stream"].rstrip("\n").splitlines())
                if "error" in chunk:
                    lines.append(chunk["error"].rstrip("\n"))
                    raise SandboxFailed(
                        f"building the image from {folder}/Dockerfile failed: "
                        f"{chunk['error'].strip()}\n  build log (last lines):\n{_tail(lines)}",
                        self._build_fix(chunk["error"], wheels=bool(wheels)),
                    )
        except docker.errors.APIError as e:
            raise SandboxFailed(
                f"building the image from {folder}/Dockerfile failed: {e.explanation or e}\n"
                f"  build log (last lines):\n{_tail(lines)}",
                self._build_fix(str(e), wheels=bool(wheels)),
            ) from None
        self._share_built(tag)
        return tag

    # -- built images in the image store: a cache shared by every worker; without it, each one builds --

    def _shared_images(self) -> ImageStore | None:
        """The configured image store, opened on first use; None (after a warning) when it cannot be opened."""
        with self._image_store_lock:
            if not self._image_store_tried:
                self._image_store_tried = True
                try:
                    self._image_store = open_store("images", self.settings)
                except Exception as e:  # noqa: BLE001 - a missing extra or bad options: build locally, say why
                    self._store_warning("could not be opened", e, "images are built here, and not shared")
            return self._image_store

    def _fetch_built(self, tag: str) -> bool:
        """Pull the image of build tag `tag` from the image store and tag it here; False if it is not there."""
        store = self._shared_images()
        if store is None:
            return False
        name, version = shared_build_image(tag)
        try:
            ref = store.pull(name, version)
            repository, _, digest = tag.rpartition(":")
            self.client.images.get(ref).tag(repository, digest)
        except NotFound:
            return False  # nobody built this context yet
        except Exception as e:  # noqa: BLE001 - the store is a cache: an unreachable one costs a build, not the run
            self._store_warning(f"could not provide {name}:{version}", e, "it is built here")
            return False
        log.info("pulled %s from the image store as %s (not rebuilt)", ref, tag)
        return True

    def _share_built(self, tag: str) -> None:
        """Push a freshly built image to the image store, so the next worker anywhere pulls it."""
        store = self._shared_images()
        if store is None:
            return
        name, version = shared_build_image(tag)
        try:
            store.push(tag, name, version)
        except Exception as e:  # noqa: BLE001 - the image is built and runs here; other workers will build it too
            self._store_warning(f"could not store {tag} as {name}:{version}", e, "other workers will build it too")

    def _store_warning(self, what: str, error: Exception, consequence: str) -> None:
        log.warning(
            "the image store ([stores.images] backend = %r) %s (%s), so %s; check [stores.images] in the config",
            self.settings.stores.images.backend,
            what,
            (str(error).splitlines() or [type(error).__name__])[0][:300],
            consequence,
        )

    def close(self) -> None:
        """Release the image store (opened again on next use)."""
        with self._image_store_lock:
            if self._image_store is not None:
                self._image_store.close()
            self._image_store, self._image_store_tried = None, False

    @staticmethod
    def _sdk_wheels(folder: Path) -> tuple[str, list] | None:
        """The fingerprint and distributions of the agent-env wheels its Dockerfile installs (None if it does not,
        or brings its own folder of them)."""
        dockerfile = (folder / "Dockerfile").read_text(errors="replace")
        if not sdk_wheels.wanted(dockerfile) or (folder / sdk_wheels.FOLDER).exists():
            return None
        try:
            dists = sdk_wheels.distributions()
            return sdk_wheels.fingerprint(dists), dists
        except sdk_wheels.WheelsUnavailable as e:
            raise SandboxFailed(f"{folder}/Dockerfile installs {sdk_wheels.FOLDER}: {e.problem}", e.fix) from None

    @staticmethod
    def _build_fix(error: str, *, wheels: bool = False) -> str:
        if "pull access denied" in error or "not found" in error and "manifest" in error or "no such host" in error:
            return f"the FROM image is not on this daemon; for {BASE_IMAGE}, {BASE_IMAGE_FIX}"
        if wheels and "is not a supported wheel on this platform" in error:
            return (
                f"the wheels in {sdk_wheels.FOLDER} are this install's, for {sdk_wheels.interpreter()}: base the image "
                f"on one with that Python (as {BASE_IMAGE} is for CPython 3.11), or run agent-env with the image's Python"
            )
        return "fix the Dockerfile at the step the log shows, then run again (unchanged contexts are not rebuilt)"
