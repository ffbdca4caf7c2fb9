"""`urn:agentenv:staging/v1` served by our agent SDK, used as an outsider uses it over real HTTP: declared on the
card, objects put, read with their tag, uploaded as a namespace grant's multipart form, listed and deleted (with
If-Match), all within the configured bound, at unguessable ids and normalized paths only."""

from __future__ import annotations

import hashlib
import json

import httpx
import pytest
from conftest import free_port
from starlette.applications import Starlette
from test_agents import serving

from agent_env.agents.extension_table import ENDPOINTS, STAGING
from agent_env.agents.sdk import Agent, Answer, Turn, a2a_routes
from agent_env.guard import HostGuard

ID = "s" * 32  # an id the run made (>= 22 characters)


class Quiet(Agent):
    name = "quiet"

    async def answer(self, turn: Turn) -> Answer:
        return Answer(text="ok")


@pytest.fixture
async def agent(monkeypatch):
    monkeypatch.setenv("AGENT_ENV_STAGING_MAX_BYTES", "1000")
    app = Starlette()
    guarded = HostGuard(app, form_paths=(ENDPOINTS[STAGING] + "/",))  # as `sdk.serve` guards it
    async with serving(guarded) as url, httpx.AsyncClient(base_url=url + ENDPOINTS[STAGING]) as http:
        routes, handler = a2a_routes(Quiet(), url + "/", extensions=True)
        app.router.routes.extend(routes)
        yield url, http
        await handler.aclose()


async def test_the_card_declares_staging_with_its_endpoint_and_bound(agent):
    url, _ = agent
    async with httpx.AsyncClient() as http:
        card = (await http.get(url + "/.well-known/agent-card.json")).json()
    [entry] = [e for e in card["capabilities"]["extensions"] if e["uri"] == STAGING]
    assert entry["params"] == {"endpoint": "/ext/staging", "max_bytes": 1000}


async def test_an_object_is_put_read_with_its_tag_and_deleted_only_while_it_has_it(agent):
    _, http = agent
    put = await http.put(f"/{ID}/skills/SKILL.md", content=b"# skill")
    assert put.status_code == 201
    assert put.json()["sha256"] == hashlib.sha256(b"# skill").hexdigest() and put.json()["size_bytes"] == 7
    got = await http.get(f"/{ID}/skills/SKILL.md")
    assert (got.status_code, got.content, got.headers["etag"]) == (200, b"# skill", put.json()["etag"])
    replaced = await http.put(f"/{ID}/skills/SKILL.md", content=b"# skill v2")
    assert replaced.json()["etag"] != put.json()["etag"]
    stale = await http.delete(f"/{ID}/skills/SKILL.md", headers={"if-match": put.json()["etag"]})
    assert stale.status_code == 412 and (await http.get(f"/{ID}/skills/SKILL.md")).content == b"# skill v2"
    fresh = await http.delete(f"/{ID}/skills/SKILL.md", headers={"if-match": replaced.json()["etag"]})
    assert fresh.status_code == 204 and (await http.get(f"/{ID}/skills/SKILL.md")).status_code == 404


async def test_a_namespace_upload_is_a_form_stored_below_its_prefix_and_listed_and_deleted_as_one(agent):
    _, http = agent
    form = await http.post(f"/{ID}/export", data={"key": "tables/rows.json"}, files={"file": ("rows.json", b"[1]")})
    assert form.status_code == 201, form.text
    assert form.json()["path"] == f"{ID}/export/tables/rows.json"
    assert (await http.get(f"/{ID}/export/tables/rows.json")).content == b"[1]"
    listed = (await http.get(f"/{ID}/export/")).json()["objects"]
    assert [(o["path"], o["size_bytes"]) for o in listed] == [("tables/rows.json", 3)]
    escape = await http.post(f"/{ID}/export", data={"key": "../../x"}, files={"file": ("x", b"x")})
    assert escape.status_code == 400
    assert (await http.delete(f"/{ID}/")).status_code == 204
    assert (await http.get(f"/{ID}/export/tables/rows.json")).status_code == 404


async def test_guessable_ids_and_unnormalized_paths_find_nothing(agent):
    _, http = agent
    await http.put(f"/{ID}/a", content=b"secret")
    assert (await http.get("/short/a")).status_code == 404  # an id under 22 characters: nothing is there
    for path in (f"/{ID}//a", f"/{ID}/%2e%2e/{ID}/a", f"/{ID}/a%5Cb"):  # (httpx itself drops "/./")
        assert (await http.get(path)).status_code in (400, 404), path
    assert (await http.put(f"/{ID}/x", content=b"<p>", headers={"content-type": "text/plain"})).status_code == 415


async def test_staging_holds_at_most_its_bound_declared_or_streamed_and_a_refusal_frees_what_it_took(agent):
    _, http = agent
    assert (await http.put(f"/{ID}/big", content=b"x" * 1001)).status_code == 413

    async def chunked():  # no content-length: counted as it arrives
        for _ in range(20):
            yield b"y" * 100

    assert (await http.put(f"/{ID}/big", content=chunked())).status_code == 413
    form = await http.post(f"/{ID}/ns", data={"key": "f"}, files={"file": ("f", b"z" * 1001)})
    assert form.status_code == 413
    assert (await http.get(f"/{ID}/")).json()["objects"] == []
    assert (await http.put(f"/{ID}/fits", content=b"x" * 1000)).status_code == 201  # nothing refused was counted
    assert (await http.put(f"/{ID}/more", content=b"x")).status_code == 413


# -- a run uses it: the local store's grants cannot reach an agent on another host's address --


def _outward_address() -> str | None:
    """This machine's address on a non-loopback interface (as another host would reach it), if it has one."""
    import socket

    for probe in ("10.255.255.255", "192.0.2.255", "8.8.8.8"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.connect((probe, 9))  # (no packet is sent: it picks the interface)
            except OSError:
                continue
            address = s.getsockname()[0]
            if not address.startswith("127."):
                return address
    return None


def _self_signed(folder, address: str):
    """A certificate for `address`, its own CA (the test's trust anchor), and its key, as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (folder / "agent.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "agent.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder / "agent.pem", folder / "agent.key"


@pytest.fixture
async def remote_notes(tmp_path, monkeypatch, settings):
    """Our SDK's Notes agent (snapshot/v1) over HTTPS at this machine's outward address, and a run's view of it: the
    local store (its grants on 127.0.0.1), an extension client; everything trusts the agent's and the store's CAs."""
    import asyncio

    import uvicorn
    from test_object_transfers import Notes

    from agent_env.agents.extensions import ExtensionClient
    from agent_env.agents.sdk import agent_card
    from agent_env.stores import Stores
    from agent_env.stores.grant_issuers import object_grants
    from agent_env.stores.local import FileObjectStore
    from agent_env.stores.local_tls import trust_bundle

    address = _outward_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to serve an agent 'on another host' at")
    cert, key = _self_signed(tmp_path, address)
    state = tmp_path / "state"
    bundle = tmp_path / "trust.pem"
    bundle.write_bytes(cert.read_bytes() + trust_bundle(state / "tls").read_bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    store = FileObjectStore(tmp_path / "objects")
    grants = object_grants(store, settings.model_copy(update={"state_dir": state}))
    stores = Stores(documents=None, objects=store, images=None, secrets=None)  # type: ignore[arg-type]

    agent, app = Notes(), Starlette()
    port = free_port()
    url = f"https://{address}:{port}/"
    routes, handler = a2a_routes(agent, url, extensions=True)
    app.router.routes.extend(routes)
    guarded = HostGuard(app, form_paths=(ENDPOINTS[STAGING] + "/",))
    config = uvicorn.Config(
        guarded, host=address, port=port, log_level="warning", ssl_certfile=str(cert), ssl_keyfile=str(key)
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the agent did not start"
        await asyncio.sleep(0.01)
    import ssl

    async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(bundle))) as http:
        client = ExtensionClient(http, url, agent_card(agent, url, extensions=True))
        yield agent, client, grants, stores
    server.should_exit = True
    await task
    await handler.aclose()


async def test_a_snapshot_reaches_an_agent_the_stores_grants_cannot_through_its_staging(remote_notes):
    from agent_env.agents.transfers import load_snapshot, save_snapshot
    from agent_env.stores.transfer import reaches

    agent, client, grants, stores = remote_notes
    assert not reaches(grants.read("x").url, client.agent_url)  # the premise: 127.0.0.1 grants, an agent elsewhere
    agent.memory["c1"] = ["remember the blue door"]
    saved = await save_snapshot(client, grants, stores, "runs/r1/agent_snapshots/s1/", "c1", timeout=60)
    assert saved["objects"] == {"trajectory": "runs/r1/agent_snapshots/s1/trajectory"} | {
        "workspace": "runs/r1/agent_snapshots/s1/workspace"
    }
    assert json.loads(stores.objects.get("runs/r1/agent_snapshots/s1/trajectory")) == ["remember the blue door"]
    restored = await load_snapshot(client, grants, stores, "runs/r1/agent_snapshots/s1/", "c2", timeout=60)
    assert restored == "c2" and agent.restored == ["remember the blue door"]
    assert agent.loaded[0][0].workspace == b"files"


async def test_an_agent_the_grants_cannot_reach_without_staging_fails_naming_both_ways_out(remote_notes):
    from agent_env.agents.transfers import TransferFailed, save_snapshot

    agent, client, grants, stores = remote_notes
    del client.extensions[STAGING]  # (as a card that declares none)
    agent.memory["c1"] = ["x"]
    with pytest.raises(TransferFailed, match="cannot reach the agent .* declares no urn:agentenv:staging/v1"):
        await save_snapshot(client, grants, stores, "runs/r1/agent_snapshots/s2/", "c1", timeout=60)


def test_a_loopback_grant_reaches_only_holders_on_loopback_and_any_other_grant_everyone():
    from agent_env.stores.transfer import reaches

    local = "https://127.0.0.1:4431/grants/v1.x.y"
    assert reaches(local, "http://127.0.0.1:9000/") and reaches(local, "http://localhost:9000/")
    assert reaches(local, "http://[::1]:9000/") and reaches(local, "http://127.0.0.2:9000/")
    assert not reaches(local, "https://agent.example.com/") and not reaches(local, "http://10.0.0.7:9000/")
    assert reaches("https://bucket.s3.amazonaws.com/k?X-Amz-Signature=s", "https://agent.example.com/")
