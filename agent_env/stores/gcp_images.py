"""Images in Google Artifact Registry: image NAME at VERSION is the tag VERSION of the package NAME in one Docker
repository (`repository`, default `agentenv`, created on the first push) of a project and location, so its
reference is `LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/NAME:VERSION`.

The control plane (the repository, which tags exist) is Artifact Registry's API; the bytes move through the local
Docker daemon, logged in with an OAuth access token of the store's credentials (stores/daemon_images.py).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from google.api_core import exceptions

from agent_env.errors import BadInput
from agent_env.stores.base import check_image, version_order
from agent_env.stores.daemon_images import DaemonImageStore
from agent_env.stores.gcp import explained

_REPOSITORY = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


class ArtifactRegistryImageStore(DaemonImageStore):
    registry = "Artifact Registry"
    tag_rules = "the repository's immutable-tags and cleanup policies"

    def __init__(
        self,
        client: Any,
        project: str,
        location: str,
        repository: str = "agentenv",
        *,
        credentials: Any = None,
        address: str = "artifactregistry.googleapis.com",
    ) -> None:
        if not _REPOSITORY.match(repository):
            raise BadInput(
                f"[stores.images] repository {repository!r} is not an Artifact Registry repository ID",
                "use lowercase letters, digits and '-', starting with a letter, like 'agentenv'",
            )
        self.client = client
        self.credentials = credentials
        self.address = address
        self.repository = f"projects/{project}/locations/{location}/repositories/{repository}"
        self.host = f"{location}-docker.pkg.dev"
        self.uri_prefix = f"{self.host}/{project}/{repository}/"

    def _explained(self, what: str) -> Any:
        return explained("Artifact Registry", self.address, what)

    def _package(self, name: str) -> str:
        return f"{self.repository}/packages/{urllib.parse.quote(name, safe='')}"

    def _uri(self, name: str, *, for_push: bool) -> str:
        if for_push:
            self._ensure_repository()
        return self.uri_prefix + name

    def _where(self, name: str) -> str:
        return self.repository

    def exists(self, name: str, version: str) -> bool:
        check_image(name, version)
        with self._explained(f"looking up the image {name}:{version}"):
            try:
                self.client.get_tag(request={"name": f"{self._package(name)}/tags/{version}"})
                return True
            except exceptions.NotFound:
                return False

    def versions(self, name: str) -> list[str]:
        check_image(name, "0")
        with self._explained(f"listing the versions of {name}"):
            try:
                tags = {
                    tag.name.rsplit("/", 1)[1] for tag in self.client.list_tags(request={"parent": self._package(name)})
                }
            except exceptions.NotFound:
                return []
        return sorted(tags, key=version_order)

    def _ensure_repository(self) -> None:
        """Create the Docker repository on first push (another install may create it first: that is fine)."""
        from google.cloud import artifactregistry_v1

        with self._explained(f"creating the repository {self.repository}"):
            try:
                self.client.get_repository(request={"name": self.repository})
                return
            except exceptions.NotFound:
                pass
            parent, _, repository_id = self.repository.rpartition("/repositories/")
            try:
                self.client.create_repository(
                    request={
                        "parent": parent,
                        "repository_id": repository_id,
                        "repository": {"format_": artifactregistry_v1.Repository.Format.DOCKER},
                    }
                ).result(timeout=120)
            except exceptions.AlreadyExists:
                pass

    def _login(self) -> dict[str, str]:
        """Docker's auth_config for the registry: an OAuth access token of the store's credentials."""
        import google.auth.transport.requests

        if self.credentials is None or not hasattr(self.credentials, "refresh"):
            raise BadInput(
                f"no Google credentials to log in to {self.host}",
                "set GOOGLE_APPLICATION_CREDENTIALS or run `gcloud auth application-default login`",
            )
        self.credentials.refresh(google.auth.transport.requests.Request())
        return {"username": "oauth2accesstoken", "password": str(self.credentials.token)}
