"""A version's digest: the sha256 of its manifest, the canonical JSON of its kind, name, record, dependencies
and files (path and sha256 each). Same content, same digest, on any machine; any change, another digest."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agent_env.registry.models import FileEntry


def canonical_json(value: Any) -> bytes:
    """One spelling of a JSON value: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(
    kind: str, name: str, record: dict[str, Any], files: list[FileEntry], uses: dict[str, dict[str, str]]
) -> str:
    manifest = {
        "kind": kind,
        "name": name,
        "record": record,
        "uses": uses,
        "files": sorted([f.path, f.sha256] for f in files),
    }
    return "sha256:" + hashlib.sha256(canonical_json(manifest)).hexdigest()


def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
