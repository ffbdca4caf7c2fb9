"""Images in Google Artifact Registry: image NAME at VERSION is the tag VERSION of the package NAME in one Docker
repository (`repository`, default `agentenv`, created on the first push) of a project and location, so its
reference is `LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/NAME:VERSION`.

Two planes: the control plane (the repository, which tags exist) is Artifact Registry's API; the bytes move
between the local Docker daemon and the registry (`docker push` / `docker pull`, logged in with an OAuth access
token of the store's credentials). The `docker` package is imported on the first push or pull only.
"""

from __future__ import annotations

import contextlib
import re
import urllib.parse
from typing import Any

from google.api_core import exceptions

from agentenv.errors import BadInput, NotFound
from agentenv.stores.base import ImageStore, check_image, version_order
from agentenv.stores.gcp import explained

_REPOSITORY = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


class ArtifactRegistryImageStore(ImageStore):
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

    def push(self, local_ref: str, name: str, version: str) -> str:
        check_image(name, version)
        uri = self.uri_prefix + name
        with self._docker() as docker:
            from docker.errors import ImageNotFound

            try:
                image = docker.images.get(local_ref)
            except ImageNotFound:
                raise NotFound(
                    f"no local image {local_ref!r} to push", "build it first (docker build -t ...)"
                ) from None
            self._ensure_repository()
            image.tag(uri, version)
            self._upload(docker, uri, version)
        if not self.exists(name, version):
            raise BadInput(
                f"pushed {local_ref} to {uri}:{version}, but Artifact Registry does not list that tag",
                "check the repository's immutable-tags and cleanup policies, then push again",
            )
        return f"{uri}:{version}"

    def pull(self, name: str, version: str) -> str:
        if not self.exists(name, version):
            raise NotFound(f"no image {name}:{version} in Artifact Registry ({self.repository})", "push it first")
        uri = self.uri_prefix + name
        with self._docker() as docker:
            self._download(docker, uri, version)
        return f"{uri}:{version}"

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

    def _upload(self, docker: Any, uri: str, version: str) -> None:
        """Push the layers of the image tagged `uri:version` to the registry (the data plane)."""
        for line in docker.images.push(uri, tag=version, auth_config=self._login(), stream=True, decode=True):
            if "error" in line:
                raise BadInput(f"pushing {uri}:{version} failed: {line['error']}", "check the registry's login")

    def _download(self, docker: Any, uri: str, version: str) -> None:
        """Pull `uri:version` into the local daemon (the data plane)."""
        docker.images.pull(uri, tag=version, auth_config=self._login())

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

    def _docker(self) -> Any:
        """A client of the local Docker daemon (a context manager: it closes its connections)."""
        try:
            import docker
        except ImportError:
            raise BadInput(
                "pushing and pulling Artifact Registry images needs the docker package",
                "pip install 'agentenv[docker]'",
            ) from None
        try:
            return contextlib.closing(docker.from_env())
        except docker.errors.DockerException as e:
            raise BadInput(f"cannot reach the Docker daemon: {e}", "start Docker, or set DOCKER_HOST") from None
