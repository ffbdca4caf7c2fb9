"""Secrets in AWS Secrets Manager, one secret per name under a prefix (default `agentenv/`).

As with the local store, the environment variable AGENT_ENV_SECRET_<NAME> is looked up first, so one process can
override a shared secret without touching it. Deletes are immediate (no recovery window): a name set again right
after a delete must work, as it does locally.
"""

from __future__ import annotations

import os
from typing import Any

from botocore.exceptions import ClientError

from agent_env.stores.aws import error_code, refused
from agent_env.stores.base import MissingSecret, SecretStore, check_secret_name
from agent_env.stores.secrets import env_var


class SecretsManagerStore(SecretStore):
    def __init__(self, client: Any, prefix: str = "agentenv/") -> None:
        self.client = client
        self.prefix = prefix

    def where(self) -> str:
        return f"AWS Secrets Manager at {self.client.meta.endpoint_url} (names under {self.prefix})"

    def _id(self, name: str) -> str:
        return self.prefix + check_secret_name(name)

    def get(self, name: str) -> str:
        if value := os.environ.get(env_var(name)):  # the same override, first, as the local store
            return value
        try:
            return str(self.client.get_secret_value(SecretId=self._id(name))["SecretString"])
        except ClientError as e:
            if error_code(e) != "ResourceNotFoundException":
                raise refused(e, f"reading the secret {name!r}") from None
        raise MissingSecret(
            f"secret {name!r} is not set (AWS Secrets Manager: {self._id(name)})",
            f"set it with `agent-env secrets set {name}` or the environment variable {env_var(name)}",
        )

    def set(self, name: str, value: str) -> None:
        secret_id = self._id(name)
        try:
            self.client.put_secret_value(SecretId=secret_id, SecretString=value)
            return
        except ClientError as e:
            if error_code(e) != "ResourceNotFoundException":
                raise refused(e, f"setting the secret {name!r}") from None
        try:
            self.client.create_secret(Name=secret_id, SecretString=value)
        except ClientError as e:
            if error_code(e) != "ResourceExistsException":
                raise refused(e, f"creating the secret {name!r}") from None
            self.client.put_secret_value(SecretId=secret_id, SecretString=value)  # created meanwhile: ours is last

    def delete(self, name: str) -> bool:
        secret_id = self._id(name)
        try:
            self.client.describe_secret(SecretId=secret_id)
            self.client.delete_secret(SecretId=secret_id, ForceDeleteWithoutRecovery=True)
            return True
        except ClientError as e:
            if error_code(e) == "ResourceNotFoundException":
                return False
            raise refused(e, f"deleting the secret {name!r}") from None

    def names(self) -> list[str]:
        found = []
        pages = self.client.get_paginator("list_secrets").paginate(Filters=[{"Key": "name", "Values": [self.prefix]}])
        for page in pages:
            for secret in page["SecretList"]:
                # the filter is a case-insensitive prefix match: keep exactly ours
                if secret["Name"].startswith(self.prefix) and "DeletedDate" not in secret:
                    found.append(secret["Name"][len(self.prefix) :])
        return sorted(found)
