"""Namespace grants (upload policies: data-objects/v1's `write_namespace`) on our object stores, used as an outsider
uses them: multipart POSTs over real HTTPS to the local grant server (trusting only the install's CA), presigned POSTs
against moto's S3 server over real HTTP, and Cloud Storage's V4 POST policy signed here and checked with the
signer's public key (no Cloud Storage to reach)."""

from __future__ import annotations

import base64
import json
import ssl

import httpx
import pytest

from agent_env.stores.grant_issuers import object_grants
from agent_env.stores.grants import NamespaceLimits
from agent_env.stores.local import FileObjectStore
from agent_env.stores.local_tls import CERT_FILE, trust_bundle
from agent_env.stores.transfer import GrantNotWritten, check_namespace, namespace_wire

LIMITS = NamespaceLimits(max_objects=2, max_object_bytes=100, max_total_bytes=150)


@pytest.fixture
def local(tmp_path, settings):
    store = FileObjectStore(tmp_path / "objects")
    grants = object_grants(store, settings.model_copy(update={"state_dir": tmp_path}))
    trust = ssl.create_default_context(cafile=str(tmp_path / "tls" / CERT_FILE))
    with httpx.Client(verify=trust) as http:
        yield store, grants, http


def _post(http, grant, key, body: bytes, **extra):
    fields = {**grant.fields, grant.path_field: key, **extra}
    return http.post(grant.url, data=fields, files={grant.file_field: (key.rsplit("/", 1)[-1], body)})


def test_a_local_namespace_grant_takes_objects_below_its_root_within_its_limits(local):
    store, grants, http = local
    grant = grants.namespace("runs/r1/export", limits=LIMITS)
    assert grant.url.startswith("https://127.0.0.1:") and grant.root_path == "runs/r1/export"
    assert _post(http, grant, "runs/r1/export/mail.json", b'{"a": 1}').status_code == 204
    assert store.get("runs/r1/export/mail.json") == b'{"a": 1}'
    assert _post(http, grant, "runs/r1/export/mail.json", b'{"a": 2}').status_code == 204  # an overwrite: one object
    assert _post(http, grant, "runs/r1/export/sub/b.bin", b"x" * 100).status_code == 204
    third = _post(http, grant, "runs/r1/export/c", b"y")
    assert third.status_code == 413 and "2 objects" in third.text  # max_objects, however the holder splits
    assert not store.exists("runs/r1/export/c")


def test_a_local_namespace_grant_refuses_keys_outside_it_oversized_objects_and_other_methods(local):
    store, grants, http = local
    grant = grants.namespace("runs/r1/export", limits=LIMITS)
    for key in ("runs/r1/exported/x", "runs/r1/export/../evil", "runs/r2/x", "/etc/x", "runs/r1/export/"):
        assert _post(http, grant, key, b"x").status_code in (400, 403), key
    assert _post(http, grant, "runs/r1/export/big", b"x" * 101).status_code == 413
    big_total = NamespaceLimits(max_objects=5, max_object_bytes=100, max_total_bytes=150)
    roomy = grants.namespace("runs/r1/t", limits=big_total)
    assert _post(http, roomy, "runs/r1/t/a", b"x" * 100).status_code == 204
    assert _post(http, roomy, "runs/r1/t/b", b"x" * 51).status_code == 413  # the namespace's total
    assert http.put(grant.url, content=b"x").status_code == 403  # a POST grant is no PUT
    assert http.post(grant.url, content=b"not a form").status_code == 400
    assert [k for k in store.list() if "evil" in k or k.startswith("runs/r2")] == []
    forged = grant.url[:-3] + ("AAA" if not grant.url.endswith("AAA") else "BBB")
    assert _post(http, grant.model_copy(update={"url": forged}), "runs/r1/export/f", b"x").status_code == 403


async def test_the_protocols_own_uploader_writes_through_our_local_namespace_grant(local, tmp_path, monkeypatch):
    from agentenv_protocol.transfers import NamespaceUploader, TransferError

    store, grants, _ = local
    monkeypatch.setenv("SSL_CERT_FILE", str(trust_bundle(tmp_path / "tls")))
    grant = grants.namespace("runs/r1/ns", limits=LIMITS)
    uploader = NamespaceUploader(namespace_wire(grant))
    await uploader.upload("env/export.json", b"[1, 2]")
    assert store.get("runs/r1/ns/env/export.json") == b"[1, 2]"
    with pytest.raises(TransferError):
        await uploader.upload("too/big", b"x" * 101)
    assert await check_namespace(grants, store, grant) == {"env/export.json": 6}


async def test_what_was_written_past_a_namespaces_limits_is_deleted_unread(local):
    store, grants, _ = local
    grant = grants.namespace("runs/r1/ns", limits=LIMITS)
    for name in ("a", "b", "c"):  # (as a store that cannot count objects lets them through)
        store.put(f"runs/r1/ns/{name}", b"x")
    with pytest.raises(GrantNotWritten, match="3 objects, more than its grant's 2"):
        await check_namespace(grants, store, grant)
    assert store.list("runs/r1/ns/") == []


# -- S3 (moto's server) --

pytest.importorskip("boto3")
import moto_util  # noqa: E402

endpoint = moto_util.endpoint


@pytest.fixture
def s3(tmp_path, endpoint):
    import boto3

    from agent_env.config import Settings
    from agent_env.stores.backends import open_store

    bucket = moto_util.unique("bucket")
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    settings = Settings.model_validate(
        {
            "state_dir": str(tmp_path),
            "stores": {"objects": {"backend": "aws", "endpoint_url": endpoint, "bucket": bucket, "prefix": "inst"}},
        }
    )
    store = open_store("objects", settings)
    yield store, object_grants(store, settings)
    store.close()


@pytest.mark.processes
async def test_s3_namespace_grants_are_presigned_posts_bound_to_their_root_and_object_size(s3):
    store, grants = s3
    grant = grants.namespace("runs/r1/export", limits=LIMITS, ttl_s=120)
    assert grant.root_path == "inst/runs/r1/export"  # the holder names S3's keys: the store's prefix is in them
    with httpx.Client() as http:
        answer = _post(
            http, grant, "inst/runs/r1/export/mail.json", b'{"a": 1}', **{"Content-Type": "application/json"}
        )
    assert answer.is_success, answer.text
    assert store.get("runs/r1/export/mail.json") == b'{"a": 1}'
    policy = json.loads(base64.b64decode(grant.fields["policy"]))
    conditions = policy["conditions"]
    assert ["starts-with", "$key", "inst/runs/r1/export/"] in conditions  # ends in '/': no `export-evil/`
    assert ["content-length-range", 0, 100] in conditions
    signed = {"policy", "x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature", "x-amz-security-token"}
    assert set(grant.fields) <= signed  # a signature over the policy, never the secret (and the holder names each key)
    assert await check_namespace(grants, store, grant) == {"mail.json": 8}


# -- Cloud Storage: signed here, checked with the signer's public key --


def test_gcs_namespace_grants_are_v4_post_policies_signed_by_the_stores_service_account():
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa
    from google.auth.credentials import AnonymousCredentials
    from google.oauth2 import service_account
    from test_object_transfers import _gcs_store

    from agent_env.errors import BadInput

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    info = {
        "type": "service_account",
        "client_email": "grants@test.iam.gserviceaccount.com",
        "private_key": pem.decode(),
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    grants = _gcs_store(service_account.Credentials.from_service_account_info(info)).grants()
    grant = grants.namespace("runs/r1/export", limits=LIMITS, ttl_s=120)
    assert grant.url == "https://storage.googleapis.com/bucket-x/" and grant.root_path == "inst/runs/r1/export"
    policy = base64.b64decode(grant.fields["policy"])
    conditions = json.loads(policy)["conditions"]
    assert ["starts-with", "$key", "inst/runs/r1/export/"] in conditions
    assert ["content-length-range", 0, 100] in conditions and {"bucket": "bucket-x"} in conditions
    assert grant.fields["x-goog-credential"].startswith("grants@test.iam.gserviceaccount.com/")
    signature = bytes.fromhex(grant.fields["x-goog-signature"])
    key.public_key().verify(signature, grant.fields["policy"].encode(), padding.PKCS1v15(), hashes.SHA256())
    assert "PRIVATE KEY" not in json.dumps(grant.fields)
    assert namespace_wire(grant).write.kind == "http-post-policy"
    with pytest.raises(BadInput, match="cannot sign"):
        _gcs_store(AnonymousCredentials()).grants().namespace("runs/r1/x", limits=LIMITS)
