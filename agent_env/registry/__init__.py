"""The registry: immutable, content-addressed versions of envs, tasks, agents and artifacts in the shared
stores, so every install pointing at the same stores runs the same things by name.

- `models`: a version as stored (its record, files and digest) and what a push says about each item.
- `manifest`: the digest of a version (canonical JSON of its record, dependencies and files).
- `bundle_items`: a bundle folder read into items, every invalid record reported at once.
- `store`: push, list, show and pull against the stores (atomic creates: a label never moves).
- `resolve`: `agent-env run NAME` for a task found only in the registry.
- `bundle_file`: one file carrying tasks and what they use to another install's registry (export, import).
"""

from agent_env.registry.models import KINDS, FileEntry, Item, PushResult, Version

__all__ = ["KINDS", "FileEntry", "Item", "PushResult", "Version"]
