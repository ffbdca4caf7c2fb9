"""Images in a cloud registry, moved through the local Docker daemon.

Two planes: the cloud's API answers which repositories and tags exist (the subclass); the bytes move between the
local daemon and the registry by `docker push` / `docker pull` with the cloud's login (here, once for every
cloud). The `docker` package is imported on the first push or pull only.
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from typing import Any

from agent_env.errors import BadInput, NotFound
from agent_env.stores.base import ImageStore, check_image


class DaemonImageStore(ImageStore):
    """A subclass says where an image lives (`_uri`, creating its repository for a push), how to log in, and
    answers `exists` and `versions` from its cloud's API."""

    registry = "the registry"  # as messages name it: "ECR", "Artifact Registry"
    tag_rules = "the registry's tag rules"  # what to check when a pushed tag does not show up

    @abstractmethod
    def _uri(self, name: str, *, for_push: bool) -> str:
        """`<registry host>/<repository path>` of image `name` (a push may create its repository)."""

    @abstractmethod
    def _where(self, name: str) -> str:
        """Where `name` is looked for, as a message says it."""

    @abstractmethod
    def _login(self) -> dict[str, str]:
        """Docker's auth_config for the registry."""

    def push(self, local_ref: str, name: str, version: str) -> str:
        check_image(name, version)
        with self._docker() as docker:
            from docker.errors import ImageNotFound

            try:
                image = docker.images.get(local_ref)
            except ImageNotFound:
                raise NotFound(
                    f"no local image {local_ref!r} to push", "build it first (docker build -t ...)"
                ) from None
            uri = self._uri(name, for_push=True)
            image.tag(uri, version)
            self._upload(docker, uri, version)
        if not self.exists(name, version):
            raise BadInput(
                f"pushed {local_ref} to {uri}:{version}, but {self.registry} does not list that tag",
                f"check {self.tag_rules}, then push again",
            )
        return f"{uri}:{version}"

    def pull(self, name: str, version: str) -> str:
        if not self.exists(name, version):
            raise NotFound(f"no image {name}:{version} in {self.registry} ({self._where(name)})", "push it first")
        uri = self._uri(name, for_push=False)
        with self._docker() as docker:
            self._download(docker, uri, version)
        return f"{uri}:{version}"

    def _upload(self, docker: Any, uri: str, version: str) -> None:
        """Push the layers of the image tagged `uri:version` to the registry (the data plane)."""
        for line in docker.images.push(uri, tag=version, auth_config=self._login(), stream=True, decode=True):
            if "error" in line:
                raise BadInput(f"pushing {uri}:{version} failed: {line['error']}", "check the registry's login")

    def _download(self, docker: Any, uri: str, version: str) -> None:
        """Pull `uri:version` into the local daemon (the data plane)."""
        docker.images.pull(uri, tag=version, auth_config=self._login())

    def _docker(self) -> Any:
        """A client of the local Docker daemon (a context manager: it closes its connections)."""
        try:
            import docker
        except ImportError:
            raise BadInput(
                f"pushing and pulling {self.registry} images needs the docker package",
                "reinstall agentenv-framework (the Docker SDK comes with it)",
            ) from None
        try:
            return contextlib.closing(docker.from_env())
        except docker.errors.DockerException as e:
            raise BadInput(f"cannot reach the Docker daemon: {e}", "start Docker, or set DOCKER_HOST") from None
