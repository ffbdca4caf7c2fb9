"""Images in Amazon ECR: image NAME at VERSION is the tag VERSION of the repository `<prefix>NAME` (default
prefix `agentenv/`), so every install with access to the registry can run the same env and agent images.

The control plane (repositories, which tags exist) is ECR's API through boto3; the bytes move through the local
Docker daemon with ECR's temporary login (stores/daemon_images.py).
"""

from __future__ import annotations

import base64
import re
from typing import Any

from botocore.exceptions import ClientError

from agent_env.errors import BadInput
from agent_env.stores.aws import error_code, refused
from agent_env.stores.base import check_image, version_order
from agent_env.stores.daemon_images import DaemonImageStore

_PREFIX = re.compile(r"^([a-z0-9]+([._-][a-z0-9]+)*/)*$")


class EcrImageStore(DaemonImageStore):
    registry = "ECR"
    tag_rules = "the registry's tag immutability and lifecycle rules"

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

    def _uri(self, name: str, *, for_push: bool) -> str:
        repository = self._repository(name)
        return self._ensure_repository(repository) if for_push else self._repository_uri(repository)

    def _where(self, name: str) -> str:
        return self._repository(name)

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

    def _login(self) -> dict[str, str]:
        """ECR's temporary registry credentials (12 hours), as Docker's auth_config."""
        data = self.client.get_authorization_token()["authorizationData"][0]
        user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
        return {"username": user, "password": password}
