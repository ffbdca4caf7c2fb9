"""Fakes of the Google Cloud clients agent-env's GCP stores use where no emulator installs here (Firestore's needs
Java and gcloud; Secret Manager and Artifact Registry have none): `firestore.Client`,
`secretmanager.SecretManagerServiceClient` and `artifactregistry_v1.ArtifactRegistryClient`, the methods the
stores call, with the SDKs' documented semantics and errors (`google.api_core.exceptions`). State lives in the
fake client object; a lock makes each call atomic, as the service's are. The stores take their client as a
constructor parameter, so the fakes are passed in where `open_gcp` passes the real ones.
"""

from .artifactregistry import FakeArtifactRegistryClient
from .firestore import FakeFirestoreClient
from .secretmanager import FakeSecretManagerClient

__all__ = ["FakeArtifactRegistryClient", "FakeFirestoreClient", "FakeSecretManagerClient"]
