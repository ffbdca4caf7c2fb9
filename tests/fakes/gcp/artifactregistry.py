"""A fake `google.cloud.artifactregistry_v1.ArtifactRegistryClient` (google-cloud-artifact-registry 1.x), its
control plane only: repositories (`get_repository`, NotFound; `create_repository`, a long-running operation,
AlreadyExists) and the tags of packages in them (`get_tag`, NotFound; `list_tags`, empty for a package without
tags). Packages live at `.../repositories/R/packages/PKG` with '/' in an image name escaped as `%2F`, as the
API requires.

Not in the SDK, for tests: `tag(package, tag)` records a tag, as the registry does once a push's layers are in
(there is no registry here to push layers to).
"""

from __future__ import annotations

import re
import threading
from types import SimpleNamespace
from typing import Any

from google.api_core import exceptions

_REPOSITORY = re.compile(r"^projects/[^/]+/locations/[^/]+/repositories/[a-z]([a-z0-9-]*[a-z0-9])?$")


class FakeArtifactRegistryClient:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.repositories: dict[str, Any] = {}
        self._tags: dict[str, set[str]] = {}  # package path -> tags

    def get_repository(self, request: dict[str, Any]) -> SimpleNamespace:
        with self._lock:
            if request["name"] not in self.repositories:
                raise exceptions.NotFound(f"Repository {request['name']!r} not found")
            return SimpleNamespace(name=request["name"], format_=self.repositories[request["name"]])

    def create_repository(self, request: dict[str, Any]) -> SimpleNamespace:
        name = f"{request['parent']}/repositories/{request['repository_id']}"
        if not _REPOSITORY.match(name):
            raise exceptions.InvalidArgument(f"invalid repository {name!r}")
        with self._lock:
            if name in self.repositories:
                raise exceptions.AlreadyExists(f"the repository {name!r} already exists")
            self.repositories[name] = request["repository"]["format_"]
        done = SimpleNamespace(name=name)
        return SimpleNamespace(result=lambda timeout=None: done)

    def _package(self, path: str) -> str:
        repository, _, package = path.partition("/packages/")
        if repository not in self.repositories:
            raise exceptions.NotFound(f"Repository {repository!r} not found")
        if not package or "/" in package:
            raise exceptions.InvalidArgument(f"invalid package {package!r} (escape '/' as %2F)")
        return path

    def get_tag(self, request: dict[str, Any]) -> SimpleNamespace:
        package, _, tag = request["name"].partition("/tags/")
        with self._lock:
            if tag not in self._tags.get(self._package(package), set()):
                raise exceptions.NotFound(f"Tag {request['name']!r} not found")
        return SimpleNamespace(name=request["name"])

    def list_tags(self, request: dict[str, Any]) -> list[SimpleNamespace]:
        with self._lock:
            package = self._package(request["parent"])
            return [SimpleNamespace(name=f"{package}/tags/{tag}") for tag in sorted(self._tags.get(package, ()))]

    def tag(self, package: str, tag: str) -> None:
        with self._lock:
            self._tags.setdefault(self._package(package), set()).add(tag)
