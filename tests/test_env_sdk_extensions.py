"""The protocol v1 extensions `agent-env env serve` declares on its card and serves, over real HTTP: data-objects/v1
(the export uploaded under a write_namespace grant to a real HTTPS object store; data/add reading objects named by a
read grant or a signed URL), get-interfaces/v1, intake/v1 and set-errors/v1. Cards are judged by the protocol's own
pydantic models and set beside the card its reference SDK makes for the same extensions; operations go through its
reference client where it has one."""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from agentenv_protocol import AgentEnvStarletteApplication, extension, get_data
from agentenv_protocol import client as reference
from agentenv_protocol.client import ExtensionCallError
from agentenv_protocol.manifest import (
    GET_INTERFACES_EXTENSION_URI,
    INTERFACE_MANIFEST_PATH,
    CliManifest,
    manifest_compatible,
)
from agentenv_protocol.preflight import intake_fit_check
from agentenv_protocol.transfers import HttpGetGrant, HttpPostPolicyGrant, ReadObject, WriteNamespaceGrant
from agentenv_protocol.types import (
    DATA_OBJECTS_EXTENSION_URI,
    INTAKE_EXTENSION_URI,
    EnvironmentCard,
    EnvironmentExtension,
    FilePart,
    FileWithUri,
    IntakeDeclaration,
    IntakeFormat,
    intake_extension,
    uploaded_object_path,
)
from conftest import free_port
from explorer_util import serving
from mcp import Client

from agent_env.cli.env_cmd import resolve_app
from agent_env.envs.builtin.billing import Billing
from agent_env.envs.extensions import interfaces
from agent_env.envs.serve import create_app

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
CARD = "/.well-known/agent-env.json"
SET_ERRORS = "urn:agentenv:set-errors/v1"
SECRET = "grant-signature-7f3a"  # the store's credential in every grant: it must reach the store and nothing else
NOTE = {"key": "k1", "text": "from an object", "author": None, "updated_at": "2026-01-01T00:00:00Z"}


# -- a real HTTPS object store: uploads through a POST policy, downloads with a header or a signed URL --


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) for 127.0.0.1, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.now(UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test object store CA")])
    usage = dict.fromkeys(
        ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement", "encipher_only"), False
    )
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, decipher_only=False, **usage),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@dataclass
class Store:
    base: str
    objects: dict[str, bytes] = field(default_factory=dict)
    forms: dict[str, dict[str, str]] = field(default_factory=dict)  # each upload's form fields, by key
    seen: list[tuple[str, str | None]] = field(default_factory=list)  # (path, the grant header) of every request


def _store_app(store: Store):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import RedirectResponse, Response
    from starlette.routing import Route

    async def upload(request: Request) -> Response:
        form = await request.form()
        if form.get("policy") != "signed-policy" or request.headers.get("x-grant") != SECRET:
            return Response("AccessDenied", status_code=403)
        key, file = str(form["key"]), form["file"]
        assert not isinstance(file, str)
        store.objects[key] = await file.read()
        store.forms[key] = {k: str(v) for k, v in form.items() if k != "file"}
        return Response(status_code=204)

    async def by_header(request: Request) -> Response:
        if request.headers.get("x-grant") != SECRET:
            return Response("AccessDenied", status_code=403)
        return Response(store.objects[request.path_params["key"]])

    async def signed(request: Request) -> Response:
        if request.query_params.get("sig") != SECRET:
            return Response("AccessDenied", status_code=403)
        return Response(store.objects[request.path_params["key"]])

    async def record(request: Request, call_next):
        store.seen.append((request.url.path, request.headers.get("x-grant")))
        return await call_next(request)

    from starlette.middleware import Middleware
    from starlette.middleware.base import BaseHTTPMiddleware

    return Starlette(
        routes=[
            Route("/upload", upload, methods=["POST"]),
            Route("/objects/{key:path}", by_header),
            Route("/signed/{key:path}", signed),
            Route("/moved", lambda request: RedirectResponse("/elsewhere", status_code=307), methods=["GET", "POST"]),
            Route("/elsewhere", lambda request: Response("caught"), methods=["GET", "POST"]),
        ],
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=record)],
    )


@contextlib.contextmanager
def _https(app, cert: Path, key: Path) -> Iterator[str]:
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", ssl_certfile=str(cert), ssl_keyfile=str(key)
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the object store did not start"
        threading.Event().wait(0.01)
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> tuple[Path, Path, Path]:
    return _certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def store(tls) -> Iterator[Store]:
    ca, cert, key = tls
    holder = Store(base="")
    with _https(_store_app(holder), cert, key) as base:
        holder.base = base
        yield holder


@pytest.fixture(scope="module")
def env(tmp_path_factory, tls) -> Iterator[str]:
    """`agent-env env serve notes`, trusting the object store's CA (as SSL_CERT_FILE: what any TLS client reads)."""
    root = tmp_path_factory.mktemp("serve")
    port = free_port()
    proc = subprocess.Popen(
        [AGENT_ENV, "env", "serve", "notes", "--port", str(port), "--state", str(root / "state")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "SSL_CERT_FILE": str(tls[0])},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base}/ready").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "env serve did not come up"
        time.sleep(0.05)
    yield base
    proc.terminate()
    proc.wait(10)


def rpc(base: str, method: str, params: Any = None) -> dict[str, Any]:
    answer = httpx.post(f"{base}/agentenv", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    assert answer.status_code == 200, answer.text
    return answer.json()


def card_of(base: str) -> dict[str, Any]:
    return httpx.get(f"{base}{CARD}").json()


def extension_of(card: dict[str, Any], uri: str) -> dict[str, Any]:
    found = reference.find_extension(card, uri)
    assert found is not None, f"the card does not declare {uri}"
    return found


def grant(store: Store, **change: Any) -> WriteNamespaceGrant:
    fields: dict[str, Any] = {
        "root_path": "runs/r1/env",
        "expires_at": datetime.now(UTC) + timedelta(minutes=5),
        "max_objects": 1,
        "max_object_bytes": 1 << 20,
        "max_total_bytes": 1 << 20,
        "write": HttpPostPolicyGrant(
            kind="http-post-policy",
            url=f"{store.base}/upload",
            fields={"policy": "signed-policy"},
            path_field="key",
            file_field="file",
            headers={"x-grant": SECRET},
        ),
    }
    return WriteNamespaceGrant(**{**fields, **change})


def read_grant(store: Store, key: str, **change: Any) -> dict[str, Any]:
    body = store.objects[key]
    fields: dict[str, Any] = {
        "media_type": "application/json",
        "max_bytes": 1 << 20,
        "size_bytes": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
        "read": HttpGetGrant(
            kind="http-get",
            url=f"{store.base}/objects/{key}",
            expires_at=datetime.now(UTC) + timedelta(minutes=5),
            headers={"x-grant": SECRET},
        ),
    }
    return ReadObject(**{**fields, **change}).model_dump(mode="json", exclude_none=True)


def object_part(read: dict[str, Any]) -> dict[str, Any]:
    return FilePart(
        file=FileWithUri(uri="notes.json", mimeType="application/json"),
        metadata={DATA_OBJECTS_EXTENSION_URI: {"path": "notes.json", "read": read}},
    ).model_dump(mode="json", exclude_none=True)


# -- the card --


class ReferenceEnv:
    """The same extensions as the protocol's reference SDK declares them, to hold our card beside."""

    @get_data
    def export(self, write_namespace: WriteNamespaceGrant | None = None) -> list:
        return []

    @extension(SET_ERRORS)
    def set_errors(self, tool_name: str, error_rate: float, error_type: str = "error") -> dict:
        return {}

    def declared_extensions(self) -> list[EnvironmentExtension]:
        return [
            intake_extension(
                IntakeDeclaration(
                    add=[IntakeFormat(part="data", format="json")], get=[IntakeFormat(part="data", format="json")]
                )
            ),
            EnvironmentExtension(uri=GET_INTERFACES_EXTENSION_URI, params={"endpoint": INTERFACE_MANIFEST_PATH}),
        ]


def _shape(entry: dict[str, Any]) -> dict[str, Any]:
    """What a client reads of an extension entry: its keys, and of an endpoint's methods their verbs, paths and
    request fields (descriptions and schema details are each server's own)."""
    params = entry["params"]
    if params is None or "methods" not in params:
        return {"keys": sorted(entry), "params": None if params is None else sorted(params)}
    return {
        "keys": sorted(entry),
        "params": sorted(params),
        "endpoint": params.get("endpoint"),
        "methods": {
            name: (m["method"], sorted(m["request"]["properties"]), sorted(m["request"].get("required", [])))
            for name, m in params["methods"].items()
        },
    }


def test_the_card_declares_each_extension_as_the_reference_sdk_does(env):
    card = card_of(env)
    assert EnvironmentCard.model_validate(card).model_dump(mode="json") == card  # the protocol's card, exactly
    declared = card["capabilities"]["extensions"]
    assert [e["uri"] for e in declared] == [
        DATA_OBJECTS_EXTENSION_URI,
        GET_INTERFACES_EXTENSION_URI,
        INTAKE_EXTENSION_URI,
        SET_ERRORS,
    ]
    theirs = AgentEnvStarletteApplication(EnvironmentCard(name="ref"), ReferenceEnv()).environment_card
    expected = {e.uri: _shape(e.model_dump(mode="json")) for e in theirs.capabilities.extensions or []}
    assert {e["uri"]: _shape(e) for e in declared} == expected
    assert extension_of(card, DATA_OBJECTS_EXTENSION_URI)["params"] is None  # declaration only, as theirs
    IntakeDeclaration.model_validate(extension_of(card, INTAKE_EXTENSION_URI)["params"])
    assert reference.find_extension_method(card, SET_ERRORS, "set_errors") == {
        **extension_of(card, SET_ERRORS)["params"]["methods"]["set_errors"],
        "endpoint": "/agentenv/ext/set_errors",
        "method": "POST",
    }


def test_intake_declares_each_table_and_the_reference_fit_check_reads_it(env):
    declared = reference.intake_declaration(card_of(env))
    assert declared is not None
    parsed = IntakeDeclaration.model_validate(declared)
    assert [(f.part, f.format, f.load) for f in parsed.add or []] == [
        ("data", "json", "additive"),
        ("file", "json", "additive"),
        ("text", "json", "additive"),
    ]
    assert [(f.part, f.mimeTypes) for f in parsed.get or []] == [("data", None), ("file", ["application/json"])]
    notes = (parsed.add or [])[0].tables["notes"]  # type: ignore[index]
    assert notes["required"] == ["text", "updated_at"] and notes["additionalProperties"] is False
    assert notes["properties"]["author"] == {"type": ["string", "object", "array", "null"]}
    assert intake_fit_check(declared, {"notes": [NOTE]}) == []
    assert intake_fit_check(declared, {"notes": [{"key": "k"}], "todo": []}) == [
        "notes[0] missing required field(s): ['text', 'updated_at']",
        "collection 'todo' is not accepted (declared: ['notes'])",
    ]


# -- data-objects/v1 --


async def test_data_get_uploads_the_export_under_the_grant(env, store):
    rpc(env, "data/reset")
    assert "error" not in rpc(env, "data/add", {"parts": [{"kind": "data", "data": {"notes": [NOTE]}}]})
    inline = (await reference.get_data(env)).parts[0].data  # type: ignore[union-attr]
    answer = await reference.get_data(env, write_namespace=grant(store))
    [part] = answer.parts
    assert isinstance(part, FilePart) and uploaded_object_path(part) == "notes.json"
    assert (part.file.name, part.file.mimeType) == ("notes.json", "application/json")
    assert json.loads(store.objects["runs/r1/env/notes.json"]) == inline == {"notes": [NOTE]}
    assert store.forms["runs/r1/env/notes.json"] == {
        "policy": "signed-policy",
        "key": "runs/r1/env/notes.json",
        "Content-Type": "application/json",
    }


async def test_data_add_reads_objects_named_by_a_read_grant_or_a_signed_url(env, store):
    store.objects["seed/notes.json"] = json.dumps({"notes": [NOTE]}).encode()
    store.objects["seed/more.json"] = json.dumps({"notes": [{**NOTE, "key": "k2"}]}).encode()
    rpc(env, "data/reset")
    added = rpc(env, "data/add", {"parts": [object_part(read_grant(store, "seed/notes.json"))]})
    assert "error" not in added, added
    signed = FilePart(file=FileWithUri(uri=f"{store.base}/signed/seed/more.json?sig={SECRET}"))
    await reference.add_data(env, [signed])
    rows = (await reference.get_data(env)).parts[0].data["notes"]  # type: ignore[union-attr]
    assert [r["key"] for r in rows] == ["k1", "k2"]


def _refused(answer: dict[str, Any], code: int, *named: str) -> str:
    assert answer["error"]["code"] == code, answer
    said = answer["error"]["data"].get("detail") or answer["error"]["message"]
    for name in named:
        assert name in said, said
    assert SECRET not in json.dumps(answer) and "/upload" not in said and "/objects" not in said  # never the grant
    return said


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"max_object_bytes": 10}, "write_namespace.max_object_bytes (10)"),
        ({"max_total_bytes": 10}, "write_namespace.max_total_bytes (10)"),
        ({"expires_at": datetime.now(UTC) - timedelta(minutes=1)}, "write_namespace.expires_at has passed"),
    ],
)
def test_data_get_refuses_an_export_its_grant_cannot_hold_naming_the_field(env, store, change, named):
    rpc(env, "data/add", {"parts": [{"kind": "data", "data": {"notes": [{**NOTE, "key": "big"}]}}]})
    before = len(store.seen)
    sent = grant(store, root_path="refused", **change).model_dump(mode="json")
    _refused(rpc(env, "data/get", {"write_namespace": sent}), -32602, named)
    assert len(store.seen) == before  # nothing was sent


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda g: {**g, "write": {**g["write"], "url": g["write"]["url"].replace("https:", "http:")}}, "write.url"),
        (lambda g: {k: v for k, v in g.items() if k != "max_objects"}, "write_namespace.max_objects: Field required"),
        (lambda g: {**g, "root_path": "../escape"}, "write_namespace.root_path"),
        (lambda g: {**g, "write": {**g["write"], "kind": "http-put"}}, "write_namespace.write.kind"),
    ],
)
def test_data_get_refuses_a_bad_grant_naming_its_field_not_its_values(env, store, change, named):
    sent = change(grant(store).model_dump(mode="json"))
    said = _refused(rpc(env, "data/get", {"write_namespace": sent}), -32602, named, "is not a namespace grant")
    assert "127.0.0.1" not in said


def test_a_grant_goes_to_its_own_url_only_redirects_are_not_followed(env, store):
    moved = grant(store, write=grant(store).write.model_copy(update={"url": f"{store.base}/moved"}))
    said = _refused(rpc(env, "data/get", {"write_namespace": moved.model_dump(mode="json")}), -32000, "redirect")
    assert "307" in said
    store.objects["seed/notes.json"] = json.dumps({"notes": [NOTE]}).encode()
    read = read_grant(store, "seed/notes.json")
    read["read"]["url"] = f"{store.base}/moved"
    _refused(rpc(env, "data/add", {"parts": [object_part(read)]}), -32000, "redirect", "307")
    assert store.seen.count(("/moved", SECRET)) == 2  # sent to the grant's URL, with its header
    assert all(path != "/elsewhere" for path, _ in store.seen)  # and nowhere else
    forged = grant(store, write=grant(store).write.model_copy(update={"fields": {"policy": "forged"}}))
    _refused(rpc(env, "data/get", {"write_namespace": forged.model_dump(mode="json")}), -32000, "refused", "403")


def test_a_store_whose_certificate_is_not_trusted_is_refused_naming_the_fix(tmp_path, store):
    """This server (in the test's process) was not told to trust the store's CA: no upload, and the error says
    how to trust it."""
    with serving(create_app(resolve_app("notes"), tmp_path)) as base:
        answer = rpc(base, "data/get", {"write_namespace": grant(store).model_dump(mode="json")})
    said = _refused(answer, -32000, "certificate is not trusted", "set SSL_CERT_FILE")
    assert answer["error"]["data"] == {"code": "get_failed"}, said


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"max_bytes": 8, "size_bytes": None, "sha256": None}, "over 8 bytes"),
        ({"sha256": "0" * 64}, ".read.sha256 does not match"),
        ({"size_bytes": 3}, ".read.size_bytes is 3"),
        ({"read": {"kind": "http-get", "url": "http://127.0.0.1/x", "expires_at": "2030-01-01T00:00:00Z"}}, "read.url"),
    ],
)
def test_data_add_refuses_an_object_over_its_limits_or_unlike_its_grant(env, store, change, named):
    store.objects["seed/notes.json"] = json.dumps({"notes": [NOTE]}).encode()
    read = read_grant(store, "seed/notes.json")
    read.update(change)
    read = {k: v for k, v in read.items() if v is not None}
    said = _refused(rpc(env, "data/add", {"parts": [object_part(read)]}), -32602, named)
    assert said.startswith(f"parts[0].metadata['{DATA_OBJECTS_EXTENSION_URI}'].read")


def test_data_add_refuses_an_object_past_the_servers_own_limit(env, store):
    """An object holds no more than a request body may (16 MiB here): reading stops there."""
    store.objects["seed/huge.json"] = b'{"notes": [{"key": "h", "text": "' + b"x" * (17 << 20) + b'"}]}'
    url = FilePart(file=FileWithUri(uri=f"{store.base}/signed/seed/huge.json?sig={SECRET}"))
    said = _refused(rpc(env, "data/add", {"parts": [url.model_dump(mode="json", exclude_none=True)]}), -32602)
    assert said.startswith("parts[0].file.uri names an object over 16777216 bytes"), said
    del store.objects["seed/huge.json"]


# -- get-interfaces/v1 --


async def test_the_interface_manifest_is_where_the_card_says(env):
    card = card_of(env)
    endpoint = reference.extension_params(card, GET_INTERFACES_EXTENSION_URI)["endpoint"]
    assert httpx.get(f"{env}{endpoint}").json() == ["cli"]
    served = await reference.get_interface_manifest(env, "cli", endpoint=endpoint)
    manifest = CliManifest.model_validate(served)
    assert manifest.service == "notes" and manifest_compatible(manifest.manifest_version)
    assert [a.tool for a in manifest.actions] == [t["name"] for t in card["capabilities"]["tools"]]
    write = next(a for a in manifest.actions if a.tool == "write_note")
    assert write.name == "write-note" and [(p.name, p.type, p.required) for p in write.params] == [
        ("key", "string", True),
        ("text", "string", True),
    ]
    missing = httpx.get(f"{env}{endpoint}/gui")
    assert missing.status_code == 404 and "serves cli" in missing.json()["error"]


def test_hidden_tools_are_no_commands_and_enums_are_their_values():
    manifest = interfaces.cli_manifest("billing", Billing.tools.values())
    assert "issue_refund" not in [a.tool for a in manifest.actions]  # hidden: plumbing for a harness
    from agent_env.envs.builtin.helpdesk import Helpdesk

    tickets = next(
        a for a in interfaces.cli_manifest("helpdesk", Helpdesk.tools.values()).actions if a.name == "list-tickets"
    )
    status = next(p for p in tickets.params if p.name == "status")
    assert (status.type, status.required, status.enum) == ("string", False, ["open", "pending", "solved", "closed"])


# -- set-errors/v1 --


async def test_set_errors_makes_a_tool_fail_at_its_rate(env):
    card = card_of(env)
    configured = await reference.invoke_extension(
        env, card, SET_ERRORS, {"tool_name": "list_notes", "error_rate": 0.5, "error_type": "timeout"}
    )
    assert configured == {"errors": {"list_notes": {"error_rate": 0.5, "error_type": "timeout"}}}
    async with Client(f"{env}/mcp") as mcp:
        results = [await mcp.call_tool("list_notes", {}) for _ in range(4)]
        assert [r.is_error for r in results] == [True, False, True, False]  # spread evenly, from the first call
        assert results[0].content[0].text.startswith("timeout: the tool timed out")
        assert results[0].structured_content == {
            "code": "timeout",
            "message": "the tool timed out (an error injected by the environment)",
            "retryable": True,
            "applied": "no",
        }
        await reference.invoke_extension(env, card, SET_ERRORS, {"tool_name": "write_note", "error_rate": 1})
        failed = await mcp.call_tool("write_note", {"key": "never", "text": "x"})
        assert failed.is_error and failed.structured_content["code"] == "error"
        assert (await mcp.call_tool("read_note", {"key": "never"})).is_error  # the tool did not run
        cleared = await reference.invoke_extension(env, card, SET_ERRORS, {"tool_name": "write_note", "error_rate": 0})
        assert "write_note" not in cleared["errors"]
        assert not (await mcp.call_tool("write_note", {"key": "now", "text": "x"})).is_error
    await reference.invoke_extension(env, card, SET_ERRORS, {"tool_name": "list_notes", "error_rate": 0})


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({"tool_name": "nope", "error_rate": 1}, "tool_name 'nope' is no tool of notes"),
        ({"tool_name": "list_notes", "error_rate": 2}, "error_rate: Input should be less than or equal to 1"),
        ({"tool_name": "list_notes", "error_rate": 1, "error_type": "boom"}, "error_type: Input should be"),
        ({"error_rate": 1}, "tool_name: Field required"),
    ],
)
async def test_set_errors_refuses_what_it_cannot_apply_naming_the_field(env, args, named):
    with pytest.raises(ExtensionCallError) as refused:
        await reference.invoke_extension(env, card_of(env), SET_ERRORS, args)
    assert refused.value.code == "invalid_params" and refused.value.applied == "no", refused.value
    assert named in refused.value.detail
