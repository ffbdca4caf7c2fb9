"""Which grants this install's object store issues (see `grants`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_env.errors import BadInput
from agent_env.stores.base import ObjectStore
from agent_env.stores.grants import ObjectGrants
from agent_env.stores.local import FileObjectStore
from agent_env.stores.local_grants import LocalGrants

if TYPE_CHECKING:
    from agent_env.config import Settings


def object_grants(objects: ObjectStore, settings: Settings) -> ObjectGrants:
    """The grants of this install's object store; BadInput naming the backend if it issues none."""
    if isinstance(objects, FileObjectStore):
        return LocalGrants(objects.root, settings.state_dir / "tls")
    issuer = getattr(objects, "grants", None)
    if callable(issuer):
        grants = issuer()
        if isinstance(grants, ObjectGrants):
            return grants
    raise BadInput(
        f"the object store ({type(objects).__name__}) issues no transfer grants, which agents need to move objects "
        "(snapshot/v1, trajectory objects, skill bundles)",
        "use the local or the aws object store ([stores.objects] backend), or an agent that takes the inline forms",
    )
