"""`docker`: sandboxes are containers on a Docker daemon (`DOCKER_HOST`, default the local socket).

- Images come from `image`, or are built from a `build` folder with a Dockerfile, tagged by the hash of
  the build context so an unchanged context is never rebuilt. Built images are shared through the configured
  image store (`build-NAME` at the context's digest): a worker on another machine pulls what one built. The
  store is a cache: when it cannot be reached, the worker builds locally and warns.
- A sandbox's info carries the id of the image it runs (`sha256:...`), so a run records exactly what ran.
- A container's `port` is published on 127.0.0.1 (a free host port unless `host_port` is given).
- Network: `open` (the default bridge), `none` (an internal network: no route out; the host reaches the
  container by its address), an allowlist (a bridge network whose egress is dropped in iptables'
  DOCKER-USER chain except to the listed addresses; needs iptables on the daemon's host, as root), or
  `host` (the host's network: it reaches services on the host's loopback, such as the gateway, and
  serves on a free port of it; files and processes stay isolated, the network does not).
- Labels carry the run id and expiry, so `list` and the reaper find every container we started.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import re
import shlex
import subprocess
import tarfile
import threading
import time
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from agent_env.errors import BadInput, NotFound
from agent_env.providers import sdk_wheels
from agent_env.providers.base import (
    LABEL_INSTALL,
    LABEL_NAME,
    LABEL_RUN,
    Capabilities,
    ExecResult,
    Provider,
    ProviderUnavailable,
    Sandbox,
    SandboxFailed,
    SandboxInfo,
    SandboxSpec,
    free_port,
    install_id,
    port_taken,
)

if TYPE_CHECKING:
    from agent_env.stores.base import ImageStore

log = logging.getLogger("agent_env.providers.docker")

NETWORK_NONE = "agentenv-none"
NETWORK_ALLOWLIST = "agentenv-allowlist"
ALLOWLIST_SUBNET = "172.30.0.0/16"
BASE_IMAGE = "agentenv/base:bookworm"
BASE_IMAGE_FIX = "build it with `scripts/docker-base-image` (images cannot be pulled on machines without internet)"


def context_tar(root: Path, under: str = "") -> bytes:
    """The build context `under` the folder `root` (all of it when empty) as a reproducible tar: sorted, no owners
    or times, so equal trees hash equal. Read through `agent_env.packing`: a link in it is refused, never followed
    (so no file outside the folder is packed), as are FIFOs, sockets and devices."""
    from agent_env import packing

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


class DockerSandbox(Sandbox):
    def __init__(self, info: SandboxInfo, container: Any) -> None:
        super().__init__(info)
        self.container = container

    async def exec(self, command: list[str], *, timeout: float = 60) -> ExecResult:
        def run() -> ExecResult:
            code, (out, err) = self.container.exec_run(command, demux=True)
            return ExecResult(
                exit_code=code,
                stdout=(out or b"").decode(errors="replace"),
                stderr=(err or b"").decode(errors="replace"),
            )

        return await asyncio.wait_for(asyncio.to_thread(run), timeout)

    async def put_file(self, path: str, data: bytes) -> None:
        target = Path("/") / path.lstrip("/")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(target.name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        await asyncio.to_thread(self.container.exec_run, ["mkdir", "-p", str(target.parent)])
        if not await asyncio.to_thread(self.container.put_archive, str(target.parent), buf.getvalue()):
            raise SandboxFailed(f"could not write {target} in sandbox {self.info.name}")

    async def get_file(self, path: str) -> bytes:
        def read() -> bytes:
            stream, _ = self.container.get_archive(path)
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.next()
                if member is None or not member.isfile():
                    raise BadInput(f"{path} is not a file in sandbox {self.info.name}", "name a file")
                return tar.extractfile(member).read()  # type: ignore[union-attr]  # (a regular file: checked above)

        return await asyncio.to_thread(read)

    async def stop(self) -> None:
        await asyncio.to_thread(_remove_container, self.container)

    async def logs(self, lines: int = 20) -> str:
        return (await asyncio.to_thread(self.container.logs, tail=lines)).decode(errors="replace")

    async def snapshot(self) -> str:
        """Commit the container's filesystem as an image (`agentenv-snapshot/NAME:TIME`), labelled with the run."""
        tag = f"{int(time.time() * 1000)}"
        repository = f"agentenv-snapshot/{self.info.name}"[:128]
        await asyncio.to_thread(
            self.container.commit, repository=repository, tag=tag, conf={"Labels": {LABEL_RUN: self.info.run_id}}
        )
        return f"{repository}:{tag}"


def _remove_container(container: Any) -> None:
    import docker.errors

    try:
        container.remove(force=True)  # sandboxes are disposable: their state was exported before teardown
    except docker.errors.NotFound:
        pass
    _drop_rules(container.name)


class DockerProvider(Provider):
    name = "docker"
    capabilities = Capabilities(
        isolated=True, build=True, network=["open", "none", "allowlist", "host"], resources=True, snapshot=True
    )

    def __init__(self, settings) -> None:
        self.settings = settings
        self.install = install_id(settings)
        self._client = None
        self._image_store: ImageStore | None = None
        self._image_store_tried = False
        self._image_store_lock = threading.Lock()

    @property
    def client(self):
        if self._client is None:
            try:
                import docker
            except ImportError:
                raise ProviderUnavailable(
                    "the docker provider needs the Docker SDK for Python",
                    "reinstall agentenv-framework (the Docker SDK comes with it)",
                ) from None
            try:
                self._client = docker.from_env(timeout=120)
            except docker.errors.DockerException as e:
                raise _no_daemon(e) from None
        return self._client

    async def check(self) -> None:
        try:
            await asyncio.to_thread(self.client.ping)
        except ProviderUnavailable:
            raise
        except Exception as e:  # noqa: BLE001 - any failure to talk to the daemon means "not usable"
            raise _no_daemon(e) from None

    # -- images --

    async def image_for(self, spec: SandboxSpec) -> str:
        if spec.build:
            return await asyncio.to_thread(self._build, Path(spec.build))
        if not spec.image:
            raise BadInput(
                f"sandbox {spec.name!r} names neither an `image` nor a `build` folder",
                "set `image` (e.g. agentenv/base:bookworm) or `build` (a folder with a Dockerfile)",
            )
        return spec.image

    def _build(self, folder: Path) -> str:
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
                from agent_env.stores.backends import open_store

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
        """Release the image store and the daemon's connections (the provider can be used again after)."""
        with self._image_store_lock:
            if self._image_store is not None:
                self._image_store.close()
            self._image_store, self._image_store_tried = None, False
        if self._client is not None:
            self._client.close()
            self._client = None

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

    # -- sandboxes --

    async def create(self, spec: SandboxSpec) -> Sandbox:
        return await asyncio.to_thread(self._create, spec, await self.image_for(spec))

    def _create(self, spec: SandboxSpec, image: str) -> DockerSandbox:
        import docker.errors

        name = container_name(spec.name)
        try:
            existing = self.client.containers.get(name)
            if existing.labels.get(LABEL_INSTALL) != self.install:  # container names are the daemon's, not ours
                raise SandboxFailed(
                    f"a container named {name!r} that this agent-env install did not start exists on the Docker daemon",
                    f"remove it (`docker rm -f {name}`) if it is a leftover",
                )
            if existing.status == "running":
                return self._sandbox(existing, spec.port)
            _remove_container(existing)  # a retry after a crash: start it afresh
        except docker.errors.NotFound:
            pass
        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            raise SandboxFailed(
                f"image {image!r} is not on the Docker daemon",
                BASE_IMAGE_FIX
                if image == BASE_IMAGE
                else f"build or load it first (`docker build -t {image} ...`); images are not pulled",
            ) from None
        mode = spec.network.mode
        host, port = "0.0.0.0", spec.port
        if mode == "host" and spec.port:  # it listens on the host itself: on loopback, on a free host port
            host, port = "127.0.0.1", spec.host_port or free_port()
            if spec.host_port and port_taken(port):
                raise SandboxFailed(
                    f"port 127.0.0.1:{port} is already in use",
                    "free that port, or leave `host_port` unset to get a free one",
                )
        kwargs: dict[str, Any] = {
            "name": name,
            "detach": True,
            "labels": {**spec.labels(self.install), "agentenv": "1"},
            "environment": {**spec.env, "HOST": host, **({"PORT": str(port)} if port else {})},
            "init": True,  # PID 1 forwards signals and reaps zombies, so stop is quick
        }
        if spec.command:
            kwargs["command"] = spec.command
        if spec.cpus:
            kwargs["nano_cpus"] = int(spec.cpus * 1e9)
        if spec.memory_mb:
            kwargs["mem_limit"] = f"{spec.memory_mb}m"
        if mode == "open" and spec.port:
            kwargs["ports"] = {f"{spec.port}/tcp": ("127.0.0.1", spec.host_port)}
        elif mode == "none":
            kwargs["network"] = self._network(NETWORK_NONE, internal=True)
        elif mode == "allowlist":
            kwargs["network"] = self._network(NETWORK_ALLOWLIST, subnet=ALLOWLIST_SUBNET)
        elif mode == "host":
            kwargs["network_mode"] = "host"
        if mode in ("none", "allowlist") and spec.host_port:
            raise BadInput(
                '`host_port` needs network "open" (closed networks are reached by the container\'s address)',
                "remove host_port or open the network",
            )
        try:
            container = self.client.containers.run(image, **kwargs)
        except docker.errors.APIError as e:
            message = str(e.explanation or e)
            self._cleanup_failed(name)
            if "port is already allocated" in message or "address already in use" in message:
                raise SandboxFailed(
                    f"port 127.0.0.1:{spec.host_port} is already in use: {message}",
                    "free that port, or leave `host_port` unset to get a free one",
                ) from None
            raise SandboxFailed(
                f"Docker could not start sandbox {spec.name!r}: {message}",
                "check the image and command (`docker logs` shows what it printed)",
            ) from None
        if mode == "allowlist":
            container.reload()
            _allow(container.name, _address(container), spec.network.allow)
        return self._sandbox(container, spec.port)

    def _cleanup_failed(self, name: str) -> None:
        import docker.errors

        try:
            _remove_container(self.client.containers.get(name))
        except docker.errors.NotFound:
            pass

    def _network(self, name: str, *, internal: bool = False, subnet: str | None = None) -> str:
        import docker.errors
        from docker.types import IPAMConfig, IPAMPool

        if not self.client.networks.list(names=[name]):
            ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=subnet)]) if subnet else None
            try:
                self.client.networks.create(
                    name, driver="bridge", internal=internal, ipam=ipam, labels={"agentenv": "1"}, check_duplicate=True
                )
            except docker.errors.APIError as e:
                if "already exists" not in str(e):
                    raise
            if subnet:  # nothing leaves this network unless a sandbox's own rules allow it
                _iptables(
                    ["-I", "DOCKER-USER", "-s", subnet, "-j", "DROP", "-m", "comment", "--comment", f"agentenv:{name}"],
                    check_exists=True,
                )
        return name

    def _sandbox(self, container: Any, port: int | None) -> DockerSandbox:
        container.reload()
        url = None
        if port and container.attrs["HostConfig"].get("NetworkMode") == "host":
            env = dict(item.split("=", 1) for item in container.attrs["Config"].get("Env") or [] if "=" in item)
            url = f"http://127.0.0.1:{env['PORT']}"
        elif port:
            published = (container.attrs["NetworkSettings"].get("Ports") or {}).get(f"{port}/tcp")
            url = (
                f"http://127.0.0.1:{published[0]['HostPort']}" if published else f"http://{_address(container)}:{port}"
            )
        return DockerSandbox(
            SandboxInfo.from_labels(
                self.name,
                container.name,
                container.labels,
                url=url,
                status=container.status,
                image_id=container.attrs.get("Image"),  # the id it was created from: exactly what runs
            ),
            container,
        )

    async def list(self, run_id: str | None = None) -> list[SandboxInfo]:
        def run() -> list[SandboxInfo]:
            labels = [f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN, f"{LABEL_INSTALL}={self.install}"]
            return [
                SandboxInfo.from_labels(self.name, c.name, c.labels, status=c.status)
                for c in self.client.containers.list(all=True, filters={"label": labels})
            ]

        return await asyncio.to_thread(run)

    async def remove(self, sandbox_id: str) -> bool:
        import docker.errors

        def run() -> bool:
            try:
                container = self.client.containers.get(sandbox_id)
            except docker.errors.NotFound:
                _drop_rules(sandbox_id)
                return False
            if LABEL_NAME not in container.labels:
                raise BadInput(f"container {sandbox_id!r} is not an agent-env sandbox", "leave it alone")
            _remove_container(container)
            return True

        return await asyncio.to_thread(run)

    async def sandbox(self, sandbox_id: str, port: int | None = None) -> DockerSandbox:
        return await asyncio.to_thread(lambda: self._sandbox(self.client.containers.get(sandbox_id), port))

    async def attach(self, sandbox_id: str) -> Sandbox:
        import docker.errors

        try:
            box = await self.sandbox(sandbox_id)
        except docker.errors.NotFound:
            box = None
        if box is None or box.info.install != self.install:
            raise NotFound(f"no docker sandbox {sandbox_id!r} of this install", "it was removed: deploy it again")
        return box


def container_name(name: str) -> str:
    return "ae-" + name


def _address(container: Any) -> str:
    networks = container.attrs["NetworkSettings"]["Networks"]
    return next(iter(networks.values()))["IPAddress"]


def _no_daemon(error: Exception) -> ProviderUnavailable:
    import os

    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return ProviderUnavailable(
        f"no Docker daemon answers at {where} ({str(error).splitlines()[0][:200]})",
        "start it (`sudo dockerd &`, `sudo systemctl start docker`, or agent-env's "
        "`scripts/docker-setup`), or point DOCKER_HOST at one",
    )


# -- allowlists, as iptables rules tagged with the container's name --


def _iptables(args: list[str], *, check_exists: bool = False) -> None:
    if check_exists:
        probe = ["-C" if a == "-I" else a for a in args]
        if subprocess.run(["iptables", *probe], capture_output=True).returncode == 0:
            return
    try:
        done = subprocess.run(["iptables", *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise SandboxFailed(
            "network allowlists need iptables on this host", 'install iptables, or use network "none" / "open"'
        ) from None
    if done.returncode != 0:
        raise SandboxFailed(
            f"iptables {' '.join(args)} failed: {done.stderr.strip()}",
            'allowlists need root on the Docker daemon\'s host; or use network "none" / "open"',
        )


def _allow(name: str, address: str, allow: list[str]) -> None:
    tag = ["-m", "comment", "--comment", f"agentenv:{name}"]
    # Inserted above the network-wide DROP: replies to the sandbox, then each allowed destination.
    _iptables(
        [
            "-I",
            "DOCKER-USER",
            "-d",
            address,
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
            *tag,
        ]
    )
    for cidr in allow:
        _iptables(["-I", "DOCKER-USER", "-s", address, "-d", cidr, "-j", "ACCEPT", *tag])


def _drop_rules(name: str) -> None:
    try:
        listed = subprocess.run(["iptables", "-S", "DOCKER-USER"], capture_output=True, text=True)
    except FileNotFoundError:
        return
    for line in listed.stdout.splitlines():
        if f"agentenv:{name}" in line and line.startswith("-A "):
            subprocess.run(["iptables", "-D", *shlex.split(line)[1:]], capture_output=True)
