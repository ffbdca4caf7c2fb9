"""Secrets by reference. Specs and runs carry `secret:NAME`; the value is looked up at the last moment,
where it is used (an activity, the CLI), and never enters workflow inputs or history.

This is the local secret store. Lookup order: the environment variable AGENT_ENV_SECRET_<NAME> (upper case,
non-alphanumerics as _), then this install's secret file (`<state_dir>/secrets.json`, mode 0600, managed by
`agent-env secrets`). Other backends implement `agent_env.stores.base.SecretStore`; `open_stores` picks one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
from pathlib import Path

from agent_env.errors import BadInput
from agent_env.spec.secret_refs import NAME, PREFIX, is_reference  # how specs write a reference (re-exported)
from agent_env.stores import base
from agent_env.stores.base import MissingSecret, check_secret_name

__all__ = [
    "NAME",
    "PREFIX",
    "FileSecretStore",
    "MissingSecret",
    "SecretStore",
    "env_override",
    "env_var",
    "is_reference",
]


def env_var(name: str) -> str:
    return "AGENT_ENV_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def env_override(name: str) -> str | None:
    """The value this process's environment gives the secret (AGENT_ENV_SECRET_<NAME>), if any; every backend
    looks here first, so one process can override a shared secret without touching it."""
    return os.environ.get(env_var(name)) or None


class FileSecretStore(base.SecretStore):
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "secrets.json"

    def where(self) -> str:
        return str(self.path)

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise BadInput(
                f"the secret file {self.path} is damaged (not a JSON object)",
                "restore it from a backup, or delete it and set the secrets again",
            )
        return data

    @contextlib.contextmanager
    def _locked(self):
        """One writer at a time (processes included): a read-modify-write never loses another's change."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def get(self, name: str) -> str:
        if value := env_override(name):
            return value
        value = self._read().get(name)
        if value is None:
            raise MissingSecret(
                f"secret {name!r} is not set",
                f"set it with `agent-env secrets set {name}` or the environment variable {env_var(name)}",
            )
        return value

    def set(self, name: str, value: str) -> None:
        check_secret_name(name)
        with self._locked():
            data = self._read()
            data[name] = value
            self._write(data)

    def delete(self, name: str) -> bool:
        with self._locked():
            data = self._read()
            if name not in data:
                return False
            del data[name]
            self._write(data)
            return True

    def set_all(self, data: dict[str, str]) -> None:
        with self._locked():
            self._write(data)

    def _write(self, data: dict[str, str]) -> None:
        """Atomic and durable: a temp file of our own (0600), fsynced, renamed over the old one; a crash
        leaves the old file or the new one, never half of either."""
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a power cut
        finally:
            os.close(dir_fd)

    def names(self) -> list[str]:
        return sorted(self._read())


SecretStore = FileSecretStore  # its name before there were other backends (`SecretStore(state_dir)` callers)
