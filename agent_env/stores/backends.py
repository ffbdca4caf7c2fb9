"""Which backend serves each store: `[stores.<kind>] backend = ...` in the config.

"local" is built in; "aws" and "gcp" are modules of this package that need an extra (their SDKs); any other
name is a plugin in the `agent_env.stores` entry-point group (`memory = "my_pkg.stores:open_store"`). A cloud
module or plugin is a factory, `factory(kind, options, settings)`, returning the store for that kind.
"""

from __future__ import annotations

import difflib
import importlib
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from agent_env.errors import BadInput
from agent_env.stores.base import DocumentStore, ImageStore, ObjectStore, Options, SecretStore
from agent_env.stores.local import FileObjectStore, SqliteDocumentStore
from agent_env.stores.local_images import DockerImageStore
from agent_env.stores.secrets import FileSecretStore

if TYPE_CHECKING:
    from agent_env.config import Settings

ENTRY_POINT_GROUP = "agent_env.stores"  # (the framework's name; `agent-env plugin` lists it)
KINDS: dict[str, type] = {
    "documents": DocumentStore,
    "objects": ObjectStore,
    "images": ImageStore,
    "secrets": SecretStore,
}
CLOUD = {"aws": "agent_env.stores.aws:open_aws", "gcp": "agent_env.stores.gcp:open_gcp"}


def open_store(kind: str, settings: Settings) -> Any:
    """The store of this kind ("documents", "objects", "images", "secrets") that the settings configure."""
    if kind not in KINDS:
        raise ValueError(f"no store kind {kind!r}: one of {', '.join(KINDS)}")
    configured = getattr(settings.stores, kind)
    backend, options = configured.backend.strip(), configured.options
    if backend == "local":
        store = _open_local(kind, options, settings)
    else:
        store = _factory(kind, backend)(kind, options, settings)
    if not isinstance(store, KINDS[kind]):
        raise BadInput(
            f"store backend {backend!r} returned {type(store).__name__} for [stores.{kind}], not a {KINDS[kind].__name__}",
            f"its factory must return an agent_env.stores.base.{KINDS[kind].__name__}",
        )
    return store


def names() -> list[str]:
    return sorted({"local", *CLOUD, *_plugins()})


def _open_local(kind: str, options: Options, settings: Settings) -> Any:
    if options:
        raise BadInput(
            f"the local {kind} store takes no options, but [stores.{kind}] sets {', '.join(sorted(options))}",
            f"remove them, or set the backend they belong to (backend = one of {', '.join(names())})",
        )
    if kind == "documents":
        return SqliteDocumentStore(settings.state_dir / "agentenv.sqlite")
    if kind == "objects":
        return FileObjectStore(settings.state_dir / "objects")
    if kind == "images":
        return DockerImageStore()
    return FileSecretStore(settings.state_dir)


def _factory(kind: str, backend: str) -> Any:
    if backend in CLOUD:
        module_name, _, attr = CLOUD[backend].partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            raise BadInput(
                f"the {backend} store backend for [stores.{kind}] is not installed ({e.name} is missing)",
                f"pip install 'agentenv-framework[{backend}]'",
            ) from None
        return getattr(module, attr)
    plugins = _plugins()
    if backend not in plugins:
        close = difflib.get_close_matches(backend, names(), n=1)
        raise BadInput(
            f"no store backend named {backend!r} for [stores.{kind}]"
            + (f" (did you mean {close[0]!r}?)" if close else ""),
            f"use one of: {', '.join(names())}, or install a plugin in the {ENTRY_POINT_GROUP!r} entry-point group",
        )
    try:
        return plugins[backend].load()
    except Exception as e:  # noqa: BLE001 - a broken plugin is the user's to fix
        raise BadInput(
            f"store backend plugin {backend!r} failed to load: {e}", "fix or uninstall the package that provides it"
        ) from None


def _plugins() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
