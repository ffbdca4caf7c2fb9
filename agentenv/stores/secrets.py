"""Secrets by reference. Specs and runs carry `secret:NAME`; the value is looked up at the last moment,
where it is used (an activity, the CLI), and never enters workflow inputs or history.

Lookup order: the environment variable AGENTENV_SECRET_<NAME> (upper case, non-alphanumerics as _),
then this install's secret file (`<state_dir>/secrets.json`, mode 0600, managed by `agent-env secrets`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from agentenv.errors import BadInput

PREFIX = "secret:"
NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class MissingSecret(BadInput):
    pass


def env_var(name: str) -> str:
    return "AGENTENV_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def is_reference(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


class SecretStore:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "secrets.json"

    def _read(self) -> dict[str, str]:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}

    def get(self, name: str) -> str:
        if value := os.environ.get(env_var(name)):
            return value
        value = self._read().get(name)
        if value is None:
            raise MissingSecret(f"secret {name!r} is not set",
                                f"set it with `agent-env secrets set {name}` or the environment variable {env_var(name)}")
        return value

    def has(self, name: str) -> bool:
        try:
            self.get(name)
            return True
        except MissingSecret:
            return False

    def set(self, name: str, value: str) -> None:
        if not NAME.match(name):
            raise BadInput(f"secret name {name!r} is not valid", "use letters, digits, '.', '_' and '-'")
        data = self._read()
        data[name] = value
        self.set_all(data)

    def delete(self, name: str) -> bool:
        data = self._read()
        if name not in data:
            return False
        del data[name]
        self.set_all(data)
        return True

    def set_all(self, data: dict[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)

    def names(self) -> list[str]:
        return sorted(self._read())

    def resolve(self, value: str) -> str:
        """The value of a `secret:NAME` reference; any other string is returned as it is."""
        return self.get(value[len(PREFIX):]) if is_reference(value) else value
