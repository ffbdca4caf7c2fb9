"""The local image store: the Docker daemon on this machine. `push` tags an image `agentenv/NAME:VERSION`;
`pull` hands that tag back, since the daemon that runs it already holds it.

The `docker` package is imported, and the daemon reached, on first use: opening the stores never needs Docker.
"""

from __future__ import annotations

import threading
from typing import Any

from agent_env.errors import BadInput, NotFound
from agent_env.stores.base import ImageStore, check_image, version_order

REPOSITORY = "agentenv/"  # every image this store keeps is tagged agentenv/NAME:VERSION


class DockerImageStore(ImageStore):
    def __init__(self) -> None:
        self._client: Any = None
        self._lock = threading.Lock()

    def _docker(self) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    import docker
                except ImportError:
                    raise BadInput(
                        "the local image store needs the docker package",
                        "reinstall agentenv-framework (the Docker SDK comes with it), or configure [stores.images] with another backend",
                    ) from None
                try:
                    client = docker.from_env()
                    client.ping()
                except docker.errors.DockerException as e:
                    raise BadInput(
                        f"the local image store cannot reach the Docker daemon: {e}",
                        "start Docker (or set DOCKER_HOST), or configure [stores.images] with another backend",
                    ) from None
                self._client = client
            return self._client

    def push(self, local_ref: str, name: str, version: str) -> str:
        tag = _tag(name, version)
        import docker

        client = self._docker()
        try:
            image = client.images.get(local_ref)
        except docker.errors.ImageNotFound:
            raise NotFound(
                f"no local image {local_ref!r} to push as {tag}", "build it first (docker build -t ...)"
            ) from None
        if tag not in image.tags:  # already tagged (a worker sharing what it built): nothing to do
            image.tag(REPOSITORY + name, version)
        return tag

    def pull(self, name: str, version: str) -> str:
        if not self.exists(name, version):
            raise NotFound(f"no image {name}:{version} in the local image store", f"push it first as {name}:{version}")
        return _tag(name, version)

    def exists(self, name: str, version: str) -> bool:
        import docker

        tag = _tag(name, version)
        try:
            self._docker().images.get(tag)
        except docker.errors.ImageNotFound:
            return False
        return True

    def versions(self, name: str) -> list[str]:
        check_image(name, "0")
        repository = REPOSITORY + name
        found = set()
        for image in self._docker().images.list(name=repository):
            for tag in image.tags:
                repo, _, version = tag.rpartition(":")
                if repo == repository:
                    found.add(version)
        return sorted(found, key=version_order)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def _tag(name: str, version: str) -> str:
    check_image(name, version)
    return f"{REPOSITORY}{name}:{version}"
