"""Secrets in Google Secret Manager, one secret per name under a prefix (default `agentenv-`), its value the
latest version.

Secret IDs allow only letters, digits, '_' and '-', and names also allow '.': a name's ID is the prefix plus
the name with '.' and '_' escaped (`_2e`, `_5f`), so every name has one ID and every ID of ours one name.
As with the local store, the environment variable AGENT_ENV_SECRET_<NAME> is looked up first, so one process can
override a shared secret without touching it. Deletes are immediate (Secret Manager keeps no recovery window):
a name set again right after a delete works, as it does locally.
"""

from __future__ import annotations

import re
from typing import Any

from google.api_core import exceptions

from agent_env.errors import BadInput
from agent_env.stores.base import MissingSecret, SecretStore, check_secret_name
from agent_env.stores.gcp import explained
from agent_env.stores.secrets import env_override, env_var

_PREFIX = re.compile(r"^[A-Za-z0-9-]{0,64}$")


class SecretManagerStore(SecretStore):
    def __init__(
        self, client: Any, project: str, prefix: str = "agentenv-", *, address: str = "secretmanager.googleapis.com"
    ) -> None:
        if not _PREFIX.match(prefix):
            raise BadInput(
                f"[stores.secrets] prefix {prefix!r} is not a secret ID prefix",
                "use letters, digits and '-' (max 64), like 'agentenv-'",
            )
        self.client = client
        self.project = project
        self.prefix = prefix
        self.address = address

    def where(self) -> str:
        return f"Secret Manager of project {self.project} at {self.address} (IDs under {self.prefix})"

    def _explained(self, what: str) -> Any:
        return explained("Secret Manager", self.address, what)

    def _path(self, name: str) -> str:
        escaped = re.sub(r"[._]", lambda m: f"_{ord(m.group()):x}", check_secret_name(name))
        return f"projects/{self.project}/secrets/{self.prefix}{escaped}"

    def get(self, name: str) -> str:
        if value := env_override(name):
            return value
        path = self._path(name)
        with self._explained(f"reading the secret {name!r}"):
            try:
                response = self.client.access_secret_version(request={"name": f"{path}/versions/latest"})
                return bytes(response.payload.data).decode()
            except (exceptions.NotFound, exceptions.FailedPrecondition):  # no secret, or no enabled version
                pass
        raise MissingSecret(
            f"secret {name!r} is not set (Google Secret Manager: {path})",
            f"set it with `agent-env secrets set {name}` or the environment variable {env_var(name)}",
        )

    def set(self, name: str, value: str) -> None:
        path = self._path(name)
        payload = {"data": value.encode()}
        with self._explained(f"setting the secret {name!r}"):
            try:
                self.client.add_secret_version(request={"parent": path, "payload": payload})
                return
            except exceptions.NotFound:
                pass
            try:
                self.client.create_secret(
                    request={
                        "parent": f"projects/{self.project}",
                        "secret_id": path.rsplit("/", 1)[1],
                        "secret": {"replication": {"automatic": {}}},
                    }
                )
            except exceptions.AlreadyExists:
                pass  # created meanwhile by another writer: our version goes on top of theirs
            self.client.add_secret_version(request={"parent": path, "payload": payload})

    def delete(self, name: str) -> bool:
        path = self._path(name)
        with self._explained(f"deleting the secret {name!r}"):
            try:
                self.client.delete_secret(request={"name": path})
                return True
            except exceptions.NotFound:
                return False

    def names(self) -> list[str]:
        found = []
        with self._explained("listing the secrets"):
            # the filter narrows the listing on the server; the prefix check keeps exactly ours
            listing = self.client.list_secrets(
                request={"parent": f"projects/{self.project}", "filter": f"name:{self.prefix}"}
            )
            for secret in listing:
                secret_id = secret.name.rsplit("/", 1)[1]
                if secret_id.startswith(self.prefix) and (name := _name(secret_id[len(self.prefix) :])):
                    found.append(name)
        return sorted(found)


def _name(escaped: str) -> str | None:
    """The name an escaped ID stands for; None for an ID this store would not have made."""
    name = re.sub(r"_(2e|5f)", lambda m: chr(int(m.group(1), 16)), escaped)
    if "_" in re.sub(r"_(2e|5f)", "", escaped):
        return None
    return name
