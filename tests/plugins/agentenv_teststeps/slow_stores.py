"""An object store as slow as a far-away S3 bucket, registered as the store backend "slow" through the
`agent_env.stores` entry-point group: files on disk (the local backend), but every call on a key containing the
`hold` option's text is held until the test lets it go (at most `max_hold_s`), so a test can act while a slow
store call is provably in flight (tests/test_stores_aio.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from agent_env.errors import BadInput
from agent_env.stores.base import ObjectStore
from agent_env.stores.local import FileObjectStore

IN_FLIGHT = threading.Event()  # set while a held call is waiting
RELEASE = threading.Event()  # set by the test: held calls go on


class SlowObjectStore(ObjectStore):
    def __init__(self, inner: FileObjectStore, hold: str, max_hold_s: float) -> None:
        self.inner, self.hold, self.max_hold_s = inner, hold, max_hold_s

    def _slow(self, key: str) -> None:
        if self.hold and self.hold in key:
            IN_FLIGHT.set()
            try:
                RELEASE.wait(self.max_hold_s)
            finally:
                IN_FLIGHT.clear()

    def put(self, key: str, data: bytes) -> None:
        self._slow(key)
        self.inner.put(key, data)

    def create(self, key: str, data: bytes) -> bool:
        self._slow(key)
        return self.inner.create(key, data)

    def get(self, key: str) -> bytes:
        self._slow(key)
        return self.inner.get(key)

    def exists(self, key: str) -> bool:
        self._slow(key)
        return self.inner.exists(key)

    def delete(self, key: str) -> bool:
        self._slow(key)
        return self.inner.delete(key)

    def list(self, prefix: str = "") -> list[str]:
        self._slow(prefix)
        return self.inner.list(prefix)

    def put_file(self, key: str, path: Path) -> None:
        self._slow(key)
        self.inner.put_file(key, path)

    def get_file(self, key: str, path: Path) -> None:
        self._slow(key)
        self.inner.get_file(key, path)


def open_store(kind: str, options: dict[str, Any], settings: Any) -> SlowObjectStore:
    if kind != "objects":
        raise BadInput(f"the slow backend keeps only objects, not {kind}", "use it for [stores.objects]")
    unknown = set(options) - {"hold", "max_hold_s"}
    if unknown:
        raise BadInput(f"the slow backend has no option {', '.join(sorted(unknown))}", "its options: hold, max_hold_s")
    inner = FileObjectStore(settings.state_dir / "objects")
    return SlowObjectStore(inner, str(options.get("hold", "")), float(options.get("max_hold_s", 20)))
