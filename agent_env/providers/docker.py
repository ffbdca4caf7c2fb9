"""`docker`: sandboxes are containers on a Docker daemon (`DOCKER_HOST`, default the local socket).

- Images come from `image`, or are built from a `build` folder with a Dockerfile and shared through the image
  store (docker_images.py).
- A sandbox's info carries the id of the image it runs (`sha256:...`), so a run records exactly what ran.
- A container's `port` is published on 127.0.0.1 (a free host port unless `host_port` is given).
- Network: `open` (the default bridge), `none` (an internal network: no route out; the host reaches the
  container by its address), an allowlist (a bridge network whose egress is dropped in iptables'
  DOCKER-USER chain except to the listed addresses: docker_egress.py), or
  `host` (the host's network: it reaches services on the host's loopback, such as the gateway, and
  serves on a free port of it; files and processes stay isolated, the network does not).
- Labels carry the run id and expiry, so `list` and the reaper find every container we started.
"""

from __future__ import annotations

import asyncio
import io
import logging
import tarfile
import time
from pathlib import Path
from typing import Any

from agent_env.errors import BadInput, NotFound
from agent_env.ports import free_port, port_taken
from agent_env.providers import docker_egress as egress
from agent_env.providers.base import (
    LABEL_INSTALL,
    LABEL_NAME,
    LABEL_RUN,
    Capabilities,
    ExecResult,
    ProviderUnavailable,
    Sandbox,
    SandboxFailed,
    SandboxInfo,
    SandboxProvider,
    SandboxSpec,
    install_id,
)
from agent_env.providers.docker_egress import ALLOWLIST_SUBNET, NETWORK_ALLOWLIST
from agent_env.providers.docker_images import BASE_IMAGE, BASE_IMAGE_FIX, DockerImages

log = logging.getLogger("agent_env.providers.docker")

NETWORK_NONE = "agentenv-none"


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
    egress.drop_rules(container.name)


class DockerProvider(SandboxProvider):
    name = "docker"
    capabilities = Capabilities(
        isolated=True, build=True, network=["open", "none", "allowlist", "host"], resources=True, snapshot=True
    )

    def __init__(self, settings) -> None:
        self.settings = settings
        self.install = install_id(settings)
        self._client = None
        self.images = DockerImages(settings, lambda: self.client)

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

    # -- images (docker_images.py) --

    async def image_for(self, spec: SandboxSpec) -> str:
        if spec.build:
            return await asyncio.to_thread(self.images.build, Path(spec.build))
        if not spec.image:
            raise BadInput(
                f"sandbox {spec.name!r} names neither an `image` nor a `build` folder",
                "set `image` (e.g. agentenv/base:bookworm) or `build` (a folder with a Dockerfile)",
            )
        return spec.image

    def close(self) -> None:
        """Release the image store and the daemon's connections (the provider can be used again after)."""
        self.images.close()
        if self._client is not None:
            self._client.close()
            self._client = None

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
            egress.allow(container.name, _address(container), spec.network.allow)
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
            if subnet:
                egress.drop_all_from(subnet, name)
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
                egress.drop_rules(sandbox_id)
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
