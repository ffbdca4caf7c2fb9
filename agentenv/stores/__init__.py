"""Document, object (and later image and secret) stores. `open_stores` picks the configured backends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentenv.stores.base import DocumentStore, ObjectStore

if TYPE_CHECKING:
    from agentenv.config import Settings

__all__ = ["DocumentStore", "ObjectStore", "Stores", "open_stores"]


@dataclass
class Stores:
    documents: DocumentStore
    objects: ObjectStore

    def close(self) -> None:
        self.documents.close()


def open_stores(settings: Settings) -> Stores:
    from agentenv.stores.local import FileObjectStore, SqliteDocumentStore

    return Stores(
        documents=SqliteDocumentStore(settings.state_dir / "agentenv.sqlite"),
        objects=FileObjectStore(settings.state_dir / "objects"),
    )
