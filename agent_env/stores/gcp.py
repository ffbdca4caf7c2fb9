"""The Google Cloud backends of the four stores: documents in Firestore, objects in Cloud Storage, images in
Artifact Registry, secrets in Secret Manager. Every install pointed at the same project, bucket and prefixes
shares them.

The Google SDKs (the `gcp` extra) are imported here and in the `gcp_*` modules only, when a GCP store opens.
Credentials come from Google's standard chain (GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default
login`, the metadata server); the config file names resources, never keys. `endpoint_url` points a store at an
emulator, which is spoken to without credentials. A store that cannot reach its endpoint, or finds no
credentials, fails with a BadInput naming the address and the fix, not a traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import google.auth
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.auth.exceptions import DefaultCredentialsError

from agent_env.errors import BadInput
from agent_env.stores.base import Options

if TYPE_CHECKING:
    from agent_env.config import Settings

# Options every GCP store takes; each kind adds its own (see OPTIONS).
COMMON = {"project", "endpoint_url"}
OPTIONS = {
    "documents": {"database", "prefix"},
    "objects": {"bucket", "prefix"},
    "images": {"location", "repository"},
    "secrets": {"prefix"},
}
SERVICES = {
    "documents": "Firestore",
    "objects": "Cloud Storage",
    "images": "Artifact Registry",
    "secrets": "Secret Manager",
}


def open_gcp(kind: str, options: Options, settings: Settings) -> Any:
    """The `kind` store ("documents", "objects", "images" or "secrets") on GCP, from its `[stores.KIND]` options."""
    if kind not in OPTIONS:
        raise BadInput(f"GCP has no {kind!r} store", f"use one of: {', '.join(OPTIONS)}")
    unknown = sorted(set(options) - COMMON - OPTIONS[kind])
    if unknown:
        allowed = ", ".join(sorted(COMMON | OPTIONS[kind]))
        raise BadInput(f"[stores.{kind}] has unknown GCP option(s): {', '.join(unknown)}", f"use: {allowed}")
    if kind == "objects" and not options.get("bucket"):
        raise BadInput(
            "the GCP object store needs a bucket: [stores.objects] bucket is not set",
            'add `bucket = "NAME"` (an existing Cloud Storage bucket) under [stores.objects] in .agentenv/config.toml',
        )
    try:
        return _open(kind, options)
    except ModuleNotFoundError as e:  # the extra is partly installed: one client library is missing
        raise BadInput(
            f"the gcp store backend for [stores.{kind}] is not installed ({e.name} is missing)",
            "pip install 'agentenv-framework[gcp]'",
        ) from None


def _open(kind: str, options: Options) -> Any:
    endpoint = str(options.get("endpoint_url") or "") or None
    credentials, project = _credentials(kind, options, endpoint)
    client_options = {"api_endpoint": endpoint} if endpoint else None
    if kind == "objects":
        from google.cloud.storage import Client as StorageClient

        from agent_env.stores.gcp_objects import GcsObjectStore

        client = StorageClient(project=project, credentials=credentials, client_options=client_options)
        return GcsObjectStore(client, str(options["bucket"]), str(options.get("prefix", "")))
    project = _required_project(kind, project)
    if kind == "documents":
        from google.cloud import firestore

        from agent_env.stores.gcp_documents import FirestoreDocumentStore

        database = str(options.get("database", "(default)"))
        client = firestore.Client(
            project=project, credentials=credentials, database=database, client_options=client_options
        )
        return FirestoreDocumentStore(client, str(options.get("prefix", "agentenv_")), address=_address(kind, endpoint))
    if kind == "images":
        from google.cloud import artifactregistry_v1

        from agent_env.stores.gcp_images import ArtifactRegistryImageStore

        if not options.get("location"):
            raise BadInput(
                "the GCP image store needs a location: [stores.images] location is not set",
                'add `location = "REGION"` (e.g. "europe-west1") under [stores.images] in .agentenv/config.toml',
            )
        registry = artifactregistry_v1.ArtifactRegistryClient(credentials=credentials, client_options=client_options)
        return ArtifactRegistryImageStore(
            registry,
            project,
            str(options["location"]),
            str(options.get("repository", "agentenv")),
            credentials=credentials,
            address=_address(kind, endpoint),
        )
    from google.cloud import secretmanager

    from agent_env.stores.gcp_secrets import SecretManagerStore

    client = secretmanager.SecretManagerServiceClient(credentials=credentials, client_options=client_options)
    return SecretManagerStore(
        client, project, str(options.get("prefix", "agentenv-")), address=_address(kind, endpoint)
    )


def _credentials(kind: str, options: Options, endpoint: str | None) -> tuple[Any, str | None]:
    """(credentials, project): anonymous ones for an emulator, else Google's default chain."""
    project = str(options["project"]) if options.get("project") else None
    if endpoint:
        return AnonymousCredentials(), project
    try:
        credentials, default_project = google.auth.default()
    except DefaultCredentialsError:
        raise BadInput(
            f'no Google credentials for {SERVICES[kind]} ([stores.{kind}] backend = "gcp")',
            "set GOOGLE_APPLICATION_CREDENTIALS to a key file, run `gcloud auth application-default login`, "
            "or run where a service account applies",
        ) from None
    return credentials, project or default_project


def _required_project(kind: str, project: str | None) -> str:
    if not project:
        raise BadInput(
            f"the GCP {kind} store needs a project: [stores.{kind}] project is not set",
            f'add `project = "PROJECT_ID"` under [stores.{kind}] in .agentenv/config.toml',
        )
    return project


def _address(kind: str, endpoint: str | None) -> str:
    hosts = {
        "documents": "firestore.googleapis.com",
        "images": "artifactregistry.googleapis.com",
        "secrets": "secretmanager.googleapis.com",
    }
    return endpoint or hosts[kind]


@contextlib.contextmanager
def explained(service: str, address: str, what: str) -> Iterator[None]:
    """Turn the SDK's failures the user can act on into BadInputs naming the address or what was asked."""
    try:
        yield
    except (exceptions.ServiceUnavailable, exceptions.RetryError, exceptions.DeadlineExceeded) as e:
        raise BadInput(
            f"cannot reach Google {service} at {address} ({what}): {e}",
            "check the network, and [stores] project / endpoint_url in .agentenv/config.toml",
        ) from None
    except (exceptions.PermissionDenied, exceptions.Unauthenticated, exceptions.InvalidArgument) as e:
        raise BadInput(
            f"Google {service} refused {what}: {e.message}", "check the store's settings and the IAM permissions"
        ) from None
