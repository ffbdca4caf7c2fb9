"""The AWS stores against moto's server, over real HTTP with real boto3 (the wire protocol of AWS): the store
conformance suite, plus what only the AWS backends promise (shared tables and buckets, clear errors for a missing
bucket or an unreachable endpoint, the config file's options).

moto serves S3, DynamoDB and Secrets Manager fully, and ECR's control plane only: repositories and tags, but no
registry to push image layers to. The image tests use the real Docker daemon and the real ECR API, and stand in
for the layer transfer alone (see `images`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("boto3", reason="the AWS stores need boto3 (pip install 'agentenv-framework[aws]')")
pytest.importorskip("moto.server", reason="the AWS store tests need moto's server (the dev extra)")

from store_conformance import *  # noqa: E402, F403 - the suite's tests, collected here against the AWS backends
from store_conformance import docker_daemon  # noqa: E402

from agent_env.config import Settings  # noqa: E402
from agent_env.errors import BadInput  # noqa: E402

pytestmark = pytest.mark.processes  # moto's server runs in its own process (its memory is not the client's)

import moto_util  # noqa: E402
from moto_util import unique  # noqa: E402

endpoint = moto_util.endpoint  # the module's moto server (a fixture)


@pytest.fixture
def bucket(endpoint):
    import boto3

    name = unique("bucket")
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return name


def settings_for(tmp_path: Path, endpoint: str, **stores: dict) -> Settings:
    """Settings as a config file would give them: `[stores.<kind>] backend = "aws"` plus options."""
    sections = {kind: {"backend": "aws", "endpoint_url": endpoint, **options} for kind, options in stores.items()}
    return Settings.model_validate({"state_dir": str(tmp_path), "stores": sections})


def open_kind(kind: str, tmp_path: Path, endpoint: str, **options):
    from agent_env.stores.backends import open_store

    return open_store(kind, settings_for(tmp_path, endpoint, **{kind: options}))


@pytest.fixture
def documents(tmp_path, endpoint):
    store = open_kind("documents", tmp_path, endpoint, table=unique("table"))
    yield store
    store.close()


@pytest.fixture
def objects(tmp_path, endpoint, bucket):
    store = open_kind("objects", tmp_path, endpoint, bucket=bucket, prefix="install-a")
    yield store
    store.close()


@pytest.fixture
def secrets(tmp_path, endpoint):
    store = open_kind("secrets", tmp_path, endpoint, prefix=unique("agentenv") + "/")
    yield store
    store.close()


@pytest.fixture
def images(tmp_path, endpoint, image_name):
    """The ECR store with only the layer transfer stood in for: `_upload` records the pushed image through ECR's
    API (`put_image`, what the registry does once the layers are in) and `_download` finds the image already in
    the daemon (which tagged it on push). The Docker side (the local image, its tag) and the ECR control plane
    (repositories, tags, lookups) are real."""
    from agent_env.stores.aws import make_client
    from agent_env.stores.aws_images import EcrImageStore

    class ControlPlaneOnly(EcrImageStore):
        def _upload(self, docker, uri: str, version: str) -> None:
            image_id = docker.images.get(f"{uri}:{version}").id
            try:
                self.client.put_image(
                    repositoryName=uri.split("/", 1)[1], imageManifest=_manifest(image_id), imageTag=version
                )
            except self.client.exceptions.ImageAlreadyExistsException:
                pass  # the same image at the same tag: the registry accepts a repeated push

        def _download(self, docker, uri: str, version: str) -> None:
            docker.images.get(f"{uri}:{version}")

    docker = docker_daemon()
    client = make_client("ecr", {"endpoint_url": endpoint}, settings_for(tmp_path, endpoint))
    store = ControlPlaneOnly(client, prefix=unique("team") + "/")
    yield store
    store.close()
    for image in docker.images.list():
        for tag in image.tags:
            if f"/{store.prefix}" in tag:
                docker.images.remove(tag)


def _manifest(config_digest: str) -> str:
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": 2,
                "digest": config_digest,
            },
            "layers": [],
        }
    )


# --- documents (DynamoDB) ---


def test_documents_page_cursor_survives_changes(documents):
    """A cursor is the last document's position, not an offset: changes before it shift nothing."""
    for i in range(6):
        documents.put("items", f"k{i}", {"i": i})
    first = documents.page("items", limit=3, order_by="i")
    assert [d["i"] for d in first.items] == [0, 1, 2]
    documents.delete("items", "k2")  # the last one seen goes: the next page still starts right after it
    documents.put("items", "k0b", {"i": 0})  # one sorting before the cursor is not repeated
    assert [d["i"] for d in documents.page("items", limit=3, order_by="i", after=first.next).items] == [3, 4, 5]


def test_documents_filters_compare_as_json_does(documents):
    documents.put("c", "a", {"flag": True, "n": 1})
    documents.put("c", "b", {"flag": False, "n": "1"})
    assert documents.query("c", where={"flag": True}) == [{"flag": True, "n": 1}]
    assert documents.query("c", where={"n": 1}) == [{"flag": True, "n": 1}]  # a string never equals a number
    assert documents.query("c", where={"n": "1"}) == [{"flag": False, "n": "1"}]
    assert documents.query("c", limit=0) == []


def test_documents_table_is_created_once_and_required_when_not_created(tmp_path, endpoint):
    table = unique("table")
    with pytest.raises(BadInput, match=f"table '{table}' does not exist"):
        open_kind("documents", tmp_path, endpoint, table=table, create_table=False)
    open_kind("documents", tmp_path, endpoint, table=table).put("c", "k", {"v": 1})
    again = open_kind("documents", tmp_path, endpoint, table=table, create_table=False)
    assert again.get("c", "k") == {"v": 1}


# --- objects (S3) ---


def test_objects_prefix_keeps_installs_apart(tmp_path, endpoint, bucket):
    a = open_kind("objects", tmp_path, endpoint, bucket=bucket, prefix="team-a/")
    b = open_kind("objects", tmp_path, endpoint, bucket=bucket, prefix="team-b")
    a.put("k", b"a")
    assert not b.exists("k") and b.list() == []
    import boto3

    listed = boto3.client("s3", endpoint_url=endpoint).list_objects_v2(Bucket=bucket)["Contents"]
    assert [o["Key"] for o in listed] == ["team-a/k"]


def test_objects_need_a_bucket_that_exists(tmp_path, endpoint):
    with pytest.raises(BadInput, match=r"\[stores.objects\] bucket") as no_option:
        open_kind("objects", tmp_path, endpoint)
    assert "bucket =" in str(no_option.value)
    with pytest.raises(BadInput, match="'no-such-bucket' does not exist"):
        open_kind("objects", tmp_path, endpoint, bucket="no-such-bucket")


# --- images (ECR control plane) ---


def test_images_push_creates_one_repository_per_name(images, endpoint, local_image, image_name):
    ref = images.push(local_image, image_name, "1.0")
    assert ref.endswith(f".amazonaws.com/{images.prefix}{image_name}:1.0")
    images.push(local_image, image_name, "1.1")  # the repository exists now: it is reused
    import boto3

    repositories = boto3.client("ecr", endpoint_url=endpoint).describe_repositories()["repositories"]
    assert [r["repositoryName"] for r in repositories].count(f"{images.prefix}{image_name}") == 1
    assert images.pull(image_name, "1.1") == ref.replace(":1.0", ":1.1")


# --- configuration, errors, sharing ---


def test_open_stores_with_aws_objects_end_to_end(tmp_path, endpoint, bucket):
    from agent_env.stores import open_stores

    settings = settings_for(tmp_path, endpoint, objects={"bucket": bucket}, documents={"table": unique("table")})
    stores = open_stores(settings)
    try:
        stores.objects.put("runs/r1/result.json", b'{"ok": true}')
        stores.documents.put("runs", "r1", {"status": "done"})
        assert type(stores.objects).__name__ == "S3ObjectStore"
        assert type(stores.secrets).__name__ == "FileSecretStore"  # kinds not configured stay local
    finally:
        stores.close()
    import boto3

    body = boto3.client("s3", endpoint_url=endpoint).get_object(Bucket=bucket, Key="runs/r1/result.json")["Body"]
    assert body.read() == b'{"ok": true}'


def test_two_installs_share_documents_and_objects(tmp_path, endpoint, bucket):
    from agent_env.stores import open_stores

    shared = {"objects": {"bucket": bucket}, "documents": {"table": unique("table")}}
    first = open_stores(settings_for(tmp_path / "install-1", endpoint, **shared))
    second = open_stores(settings_for(tmp_path / "install-2", endpoint, **shared))
    try:
        first.documents.put("envs", "hello@1", {"version": "1"})
        first.objects.put("envs/hello/1/bundle.tar", b"bundle")
        assert second.documents.get("envs", "hello@1") == {"version": "1"}
        assert second.objects.get("envs/hello/1/bundle.tar") == b"bundle"
        assert second.documents.create("envs", "hello@1", {"version": "x"}) is False
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("kind", ["documents", "objects", "images", "secrets"])
def test_unreachable_endpoint_is_a_bad_input_naming_the_address(tmp_path, kind):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(BadInput, match=f"cannot reach AWS .* at {address}"):
        store = open_kind(kind, tmp_path, address, **({"bucket": "some-bucket"} if kind == "objects" else {}))
        if kind == "images":
            store.versions("hello")
        elif kind == "secrets":
            store.get("anything")


def test_unknown_options_and_literal_secret_keys_are_refused(tmp_path, endpoint):
    with pytest.raises(BadInput, match="unknown AWS option.*tabel"):
        open_kind("documents", tmp_path, endpoint, tabel="x")
    with pytest.raises(BadInput, match="must be a reference"):
        open_kind("secrets", tmp_path, endpoint, aws_access_key_id="AKIA", aws_secret_access_key="plain")


def test_secret_access_key_as_a_reference(tmp_path, endpoint, monkeypatch):
    monkeypatch.setenv("AGENT_ENV_SECRET_AWS_KEY", "testing")
    store = open_kind("secrets", tmp_path, endpoint, aws_access_key_id="AKIA", aws_secret_access_key="secret:aws-key")
    store.set("x", "1")
    assert store.get("x") == "1"
    assert store.client._request_signer._credentials.access_key == "AKIA"
