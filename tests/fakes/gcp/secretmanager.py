"""A fake `google.cloud.secretmanager.SecretManagerServiceClient` (google-cloud-secret-manager 2.x): secrets by
`projects/P/secrets/ID`, each with numbered versions. `create_secret` (AlreadyExists if it exists; IDs are
letters, digits, '_' and '-', max 255), `add_secret_version` (NotFound without the secret),
`access_secret_version` (`.../versions/latest` or a number; NotFound), `delete_secret` (immediate; NotFound),
`list_secrets` (with the `name:TEXT` filter: IDs containing TEXT). Requests are dicts, as the SDK accepts.
"""

from __future__ import annotations

import re
import threading
from types import SimpleNamespace
from typing import Any

from google.api_core import exceptions

_ID = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
_SECRET = re.compile(r"^projects/([^/]+)/secrets/([^/]+)$")


class FakeSecretManagerClient:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._secrets: dict[str, list[bytes]] = {}

    def _secret(self, path: str) -> list[bytes]:
        if not _SECRET.match(path):
            raise exceptions.InvalidArgument(f"invalid secret name {path!r}")
        if path not in self._secrets:
            raise exceptions.NotFound(f"Secret [{path}] not found.")
        return self._secrets[path]

    def create_secret(self, request: dict[str, Any]) -> SimpleNamespace:
        secret_id, parent = request["secret_id"], request["parent"]
        if not _ID.match(secret_id):
            raise exceptions.InvalidArgument(f"invalid secret ID {secret_id!r}")
        if "replication" not in request.get("secret", {}):
            raise exceptions.InvalidArgument("Secret.replication is required")
        path = f"{parent}/secrets/{secret_id}"
        with self._lock:
            if path in self._secrets:
                raise exceptions.AlreadyExists(f"Secret [{path}] already exists.")
            self._secrets[path] = []
        return SimpleNamespace(name=path)

    def add_secret_version(self, request: dict[str, Any]) -> SimpleNamespace:
        data = request["payload"]["data"]
        if not isinstance(data, bytes):
            raise TypeError("payload.data must be bytes")
        with self._lock:
            versions = self._secret(request["parent"])
            versions.append(data)
            return SimpleNamespace(name=f"{request['parent']}/versions/{len(versions)}")

    def access_secret_version(self, request: dict[str, Any]) -> SimpleNamespace:
        path, _, version = request["name"].rpartition("/versions/")
        with self._lock:
            versions = self._secret(path)
            if not versions:
                raise exceptions.NotFound(f"Secret Version [{request['name']}] not found.")
            number = len(versions) if version == "latest" else int(version)
            if not 1 <= number <= len(versions):
                raise exceptions.NotFound(f"Secret Version [{request['name']}] not found.")
            return SimpleNamespace(name=f"{path}/versions/{number}", payload=SimpleNamespace(data=versions[number - 1]))

    def delete_secret(self, request: dict[str, Any]) -> None:
        with self._lock:
            self._secret(request["name"])
            del self._secrets[request["name"]]

    def list_secrets(self, request: dict[str, Any]) -> list[SimpleNamespace]:
        parent, text = request["parent"], ""
        if request.get("filter"):
            match = re.fullmatch(r"name:(\S+)", request["filter"])
            if not match:
                raise NotImplementedError(f"the fake filters only on name:TEXT, not {request['filter']!r}")
            text = match.group(1)
        with self._lock:
            return [
                SimpleNamespace(name=path)
                for path in sorted(self._secrets)
                if path.startswith(f"{parent}/secrets/") and text in path.rsplit("/", 1)[1]
            ]
