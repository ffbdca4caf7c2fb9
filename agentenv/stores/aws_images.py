"""Images in Amazon ECR: image NAME at VERSION is the tag VERSION of the repository `<prefix>NAME` (default
prefix `agentenv/`), so every install with access to the registry can run the same env and agent images.

Two planes: the control plane (repositories, which tags exist) is ECR's API through boto3; the bytes move
between the local Docker daemon and the registry (`docker push` / `docker pull` with ECR's temporary login).
The `docker` package is imported on the first push or pull only.
"""

from __future__ import annotations

import base64
import contextlib
import re
from typing import Any

from botocore.exceptions import ClientError

from agentenv.errors import BadInput, NotFound
from agentenv.stores.aws import error_code, refused
from agentenv.stores.base import ImageStore, check_image, version_order

_PREFIX = re.compile(r"^([a-z0-9]+([._-][a-z0-9]+)*/)*$")


class EcrImageStore(ImageStore):
    def __init__(self, client: Any, prefix: str = "agentenv/") -> None:
        if not _PREFIX.match(prefix):
            raise BadInput(
                f"[stores.images] prefix {prefix!r} is not a repository prefix",
                "use lowercase path segments ending in '/', like 'agentenv/' (or '' for none)",
            )
        self.client = client
        self.prefix = prefix

    def _repository(self, name: str) -> str:
        return self.prefix + name

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
            uri = self._ensure_repository(self._repository(name))
            image.tag(uri, version)
            self._upload(docker, uri, version)
        if not self.exists(name, version):
            raise BadInput(
                f"pushed {local_ref} to {uri}:{version}, but ECR does not list that tag",
                "check the registry's tag immutability and lifecycle rules, then push again",
            )
        return f"{uri}:{version}"

    def pull(self, name: str, version: str) -> str:
        if not self.exists(name, version):
            raise NotFound(f"no image {name}:{version} in ECR ({self._repository(name)})", "push it first")
        uri = self._repository_uri(self._repository(name))
        with self._docker() as docker:
            self._download(docker, uri, version)
        return f"{uri}:{version}"

    def exists(self, name: str, version: str) -> bool:
        check_image(name, version)
        try:
            self.client.describe_images(repositoryName=self._repository(name), imageIds=[{"imageTag": version}])
            return True
        except ClientError as e:
            if error_code(e) in {"ImageNotFoundException", "RepositoryNotFoundException"}:
                return False
            raise refused(e, f"looking up the image {name}:{version}") from None

    def versions(self, name: str) -> list[str]:
        check_image(name, "0")
        tags: set[str] = set()
        pages = self.client.get_paginator("list_images").paginate(
            repositoryName=self._repository(name), filter={"tagStatus": "TAGGED"}
        )
        try:
            for page in pages:
                tags |= {image["imageTag"] for image in page["imageIds"] if "imageTag" in image}
        except ClientError as e:
            if error_code(e) == "RepositoryNotFoundException":
                return []
            raise refused(e, f"listing the versions of {name}") from None
        return sorted(tags, key=version_order)

    def _ensure_repository(self, repository: str) -> str:
        """The repository's URI (`<registry>/<repository>`), creating the repository on first push."""
        try:
            created = self.client.create_repository(repositoryName=repository)
            return str(created["repository"]["repositoryUri"])
        except ClientError as e:
            if error_code(e) != "RepositoryAlreadyExistsException":
                raise refused(e, f"creating the ECR repository {repository!r}") from None
        return self._repository_uri(repository)

    def _repository_uri(self, repository: str) -> str:
        found = self.client.describe_repositories(repositoryNames=[repository])["repositories"]
        return str(found[0]["repositoryUri"])

    def _upload(self, docker: Any, uri: str, version: str) -> None:
        """Push the layers of the image tagged `uri:version` to the registry (the data plane)."""
        for line in docker.images.push(uri, tag=version, auth_config=self._login(), stream=True, decode=True):
            if "error" in line:
                raise BadInput(f"pushing {uri}:{version} failed: {line['error']}", "check the registry's login")

    def _download(self, docker: Any, uri: str, version: str) -> None:
        """Pull `uri:version` into the local daemon (the data plane)."""
        docker.images.pull(uri, tag=version, auth_config=self._login())

    def _login(self) -> dict[str, str]:
        """ECR's temporary registry credentials (12 hours), as Docker's auth_config."""
        data = self.client.get_authorization_token()["authorizationData"][0]
        user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
        return {"username": user, "password": password}

    def _docker(self) -> Any:
        """A client of the local Docker daemon (a context manager: it closes its connections)."""
        try:
            import docker
        except ImportError:
            raise BadInput(
                "pushing and pulling ECR images needs the docker package", "pip install 'agentenv[docker]'"
            ) from None
        try:
            return contextlib.closing(docker.from_env())
        except docker.errors.DockerException as e:
            raise BadInput(f"cannot reach the Docker daemon: {e}", "start Docker, or set DOCKER_HOST") from None
