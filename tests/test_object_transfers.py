"""Object transfers of protocol v1: short-lived grants on our object store, and the extension calls that hand them
to agents (snapshot/v1 save and load, trajectory/v1 `task_objects`).

Grants are tested as an outsider uses them: real HTTPS requests to the local grant server (trusting only the
install's local CA), and presigned URLs against moto's S3 server over real HTTP.
"""

from __future__ import annotations

import json
import ssl
import time

import httpx
import pytest
from reference_venv import A2A_CARD, reference_python, side_script  # noqa: F401 - fixtures

from agent_env.agents.sdk import Agent, Answer, Turn
from agent_env.agents.transfer_serving import AgentState, new_context_id
from agent_env.registry.store import Registry
from agent_env.stores.grant_issuers import object_grants
from agent_env.stores.local import FileObjectStore
from agent_env.stores.local_tls import CERT_FILE, trust_bundle

# -- grants on the local store --


@pytest.fixture
def local(tmp_path, settings):
    store = FileObjectStore(tmp_path / "objects")
    grants = object_grants(store, settings.model_copy(update={"state_dir": tmp_path}))
    trust = ssl.create_default_context(cafile=str(tmp_path / "tls" / CERT_FILE))  # the install's CA, nothing else
    with httpx.Client(verify=trust) as http:
        yield store, grants, http


def test_a_local_write_grant_puts_one_object_and_a_read_grant_gets_it_over_https(local, tmp_path):
    store, grants, http = local
    put = grants.write("runs/r1/snap/trajectory", media_type="application/octet-stream", max_bytes=100)
    assert put.url.startswith("https://127.0.0.1:") and put.method == "PUT"
    assert http.put(put.url, content=b"state!", headers=put.headers).status_code == 200
    assert store.get("runs/r1/snap/trajectory") == b"state!"
    get = grants.read("runs/r1/snap/trajectory")
    answer = http.get(get.url, headers=get.headers)
    assert (answer.status_code, answer.content) == (200, b"state!")
    assert str(tmp_path) not in put.url + get.url  # a grant names no path of ours
    with pytest.raises(httpx.ConnectError):  # the CA is this install's: nothing else trusts it by default
        httpx.get(get.url)
    assert trust_bundle(tmp_path / "tls").read_bytes().count(b"BEGIN CERTIFICATE") > 1  # roots + ours


def test_a_local_grant_cannot_be_used_for_another_method_key_or_content_type(local):
    store, grants, http = local
    store.put("a", b"secret a")
    store.put("b", b"secret b")
    read_a = grants.read("a")
    write_a = grants.write("a", media_type="application/json", max_bytes=100)
    assert http.put(read_a.url, content=b"{}", headers={"content-type": "application/json"}).status_code == 403
    assert http.get(write_a.url).status_code == 403
    # the key is in the signed claims, not the URL's path: another key means another token, which it cannot sign
    token = read_a.url.rsplit("/", 1)[1]
    version, claims, signature = token.split(".")
    import base64
    import json

    forged = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    forged["key"] = "b"
    forged_claims = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
    forged_url = read_a.url.replace(token, f"{version}.{forged_claims}.{signature}")
    assert http.get(forged_url).status_code == 403
    assert http.get(read_a.url + "/../b").status_code in (403, 404)  # a key grant takes no path after it
    wrong_type = http.put(write_a.url, content=b"<html>", headers={"content-type": "application/octet-stream"})
    assert wrong_type.status_code == 403
    assert store.get("a") == b"secret a"


def test_a_local_write_grant_is_refused_past_its_size_bound_declared_or_streamed(local):
    store, grants, http = local
    put = grants.write("big", media_type="application/octet-stream", max_bytes=10)
    assert http.put(put.url, content=b"x" * 11, headers=put.headers).status_code == 413

    def chunked():  # no content-length: the server counts what arrives
        for _ in range(100):
            yield b"y" * 1000

    assert http.put(put.url, content=chunked(), headers=put.headers).status_code == 413
    assert not store.exists("big") and not any(p.name.startswith(".tmp-") for p in store.root.rglob("*"))
    assert http.put(put.url, content=b"x" * 10, headers=put.headers).status_code == 200


def test_a_prefix_grant_writes_below_its_prefix_only(local):
    store, grants, http = local
    under = grants.write_under("runs/r1/changelog", max_bytes=100)
    headers = {"content-type": "application/octet-stream"}
    assert http.put(under.url + "/000001.tar", content=b"one", headers=headers).status_code == 200
    assert store.get("runs/r1/changelog/000001.tar") == b"one"
    for escape in ("/../../escaped", "/%2e%2e/escaped", "/a//b"):
        assert http.put(under.url + escape, content=b"x", headers=headers).status_code in (400, 403, 404)
    assert [k for k in store.list() if "escaped" in k] == []
    assert http.put(under.url, content=b"x", headers=headers).status_code == 403  # the prefix itself is no key


def test_a_local_grant_expires(local):
    store, grants, http = local
    store.put("k", b"v")
    get = grants.read("k", ttl_s=0.3)
    assert http.get(get.url).status_code == 200
    time.sleep(0.5)  # (waiting out the grant, not timing anything)
    expired = http.get(get.url)
    assert expired.status_code == 403 and "expired" in expired.text
    with pytest.raises(ValueError, match="at most 3600"):
        grants.read("k", ttl_s=86400)


# -- grants on S3 (moto's server) --

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
def test_s3_grants_are_presigned_sigv4_urls_that_move_one_object_and_carry_no_secret(s3):
    from urllib.parse import parse_qs, urlsplit

    store, grants = s3
    put = grants.write("runs/r1/t.json", media_type="application/json", max_bytes=1000, ttl_s=120)
    assert httpx.put(put.url, content=b'{"a": 1}', headers=put.headers).status_code == 200
    assert store.get("runs/r1/t.json") == b'{"a": 1}'
    get = grants.read("runs/r1/t.json", ttl_s=60)
    assert httpx.get(get.url).content == b'{"a": 1}'
    query = parse_qs(urlsplit(put.url).query)
    assert urlsplit(put.url).path.endswith("/inst/runs/r1/t.json")  # under the store's prefix
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"] and query["X-Amz-Expires"] == ["120"]
    assert set(query["X-Amz-SignedHeaders"][0].split(";")) == {"content-type", "host"}
    assert "testing" not in query["X-Amz-Signature"][0] and "Secret" not in put.url
    # S3 checks the signature over method, key, expiry and headers (moto's server does not): they all differ
    other_key = grants.write("runs/r1/u.json", media_type="application/json", max_bytes=1000, ttl_s=120)
    assert parse_qs(urlsplit(other_key.url).query)["X-Amz-Signature"] != query["X-Amz-Signature"]
    assert not grants.bounds_writes  # a presigned PUT cannot bound its size: what reads it measures it first
    assert (grants.size("runs/r1/t.json"), grants.size("runs/r1/none")) == (8, None)


@pytest.mark.processes
async def test_an_object_written_past_its_grants_bound_on_s3_is_refused_and_deleted_unread(s3):
    from agent_env.agents.transfers import TransferFailed, _written
    from agent_env.stores import Stores

    store, grants = s3
    put = grants.write("runs/r1/big", media_type="application/octet-stream", max_bytes=10)
    assert httpx.put(put.url, content=b"x" * 11, headers=put.headers).status_code == 200  # S3 takes it...
    stores = Stores(documents=None, objects=store, images=None, secrets=None)  # type: ignore[arg-type]
    with pytest.raises(TransferFailed, match="11 bytes .* more than its grant's 10"):
        await _written(grants, stores, put)  # ...the run does not
    assert not store.exists("runs/r1/big")


def test_a_store_without_grants_says_so(tmp_path, settings):
    from agent_env.errors import BadInput
    from agent_env.stores.base import ObjectStore

    class Plain(ObjectStore):
        put = create = get = exists = delete = list = put_file = get_file = None  # type: ignore[assignment]

    with pytest.raises(BadInput, match="issues no transfer grants"):
        object_grants(Plain(), settings)


# -- snapshot/v1 in runs --


class Notes(Agent):
    """An agent of our SDK that remembers what it was told, and saves and restores that memory (snapshot/v1)."""

    name = "notes"

    def __init__(self) -> None:
        self.memory: dict[str, list[str]] = {}
        self.restored: list[str] = []
        self.loaded: list[tuple[AgentState, str | None]] = []

    async def answer(self, turn: Turn) -> Answer:
        seen = self.memory.setdefault(turn.context_id, list(self.restored))
        seen.append(turn.prompt)
        return Answer(text=" | ".join(seen))

    async def save_state(self, context_id: str) -> AgentState:
        if context_id not in self.memory:
            raise LookupError(context_id)
        return AgentState(trajectory=json.dumps(self.memory[context_id]).encode(), workspace=b"files")

    async def load_state(self, state: AgentState, context_id: str | None) -> str:
        self.loaded.append((state, context_id))
        self.restored = json.loads(state.trajectory)
        return context_id or new_context_id()


@pytest.fixture
def trusting(settings, monkeypatch):
    """Agents in this process trust the install's local CA (as an operator sets SSL_CERT_FILE for its agents)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(trust_bundle(settings.state_dir / "tls")))


async def test_our_sdk_agent_saves_and_restores_its_state_through_snapshot_agent_state(run_task, settings, trusting):
    from starlette.applications import Starlette
    from test_agents import serving

    from agent_env.agents.sdk import a2a_routes
    from agent_env.spec.run import RunStatus
    from agent_env.stores import open_stores

    first, second = Notes(), Notes()
    apps = [Starlette(), Starlette()]
    async with serving(apps[0]) as url_a, serving(apps[1]) as url_b:
        handlers = []
        for app, agent, url in ((apps[0], first, url_a), (apps[1], second, url_b)):
            routes, handler = a2a_routes(agent, url + "/", extensions=True)
            app.router.routes.extend(routes)
            handlers.append(handler)
        async with httpx.AsyncClient() as http:
            card = (await http.get(url_a + "/.well-known/agent-card.json")).json()
        declared = {e["uri"]: e["params"] for e in card["capabilities"]["extensions"]}
        from agentenv_protocol.a2a_agent import SNAPSHOT_V1, card_request_accepts

        save = declared[SNAPSHOT_V1.uri]["methods"]["save"]
        assert save["method"] == "POST" and card_request_accepts(save["request"], ["context_id", "objects"])

        def deploy(step: str, url: str, **more) -> dict:
            record = {"name": step, "type": "a2a", "config": {"url": url + "/"}}
            return {"id": step, "type": "deploy_agent", "config": {"record": record, **more}}

        state = await run_task(
            {
                "id": "agent-state",
                "steps": [
                    deploy("a", url_a),
                    {
                        "id": "p1",
                        "type": "prompt_agent",
                        "depends_on": ["a"],
                        "config": {"agent": "a", "prompt": "blue door"},
                    },
                    {
                        "id": "snap",
                        "type": "snapshot_agent_state",
                        "depends_on": ["p1"],
                        "config": {"agent": "a", "prompt": "p1"},
                    },
                    {"id": "pad", "type": "deploy_env", "depends_on": ["p1"], "config": {"env_id": "notes"}},
                    {
                        "id": "with_env",
                        "type": "snapshot_agent_state",
                        "depends_on": ["snap", "pad"],
                        "config": {"agent": "a", "prompt": "p1", "env": "pad", "artifact_id": "notes-and-agent"},
                    },
                    {
                        **deploy(
                            "b", url_b, agent_snapshot="snap", agent_snapshot_target_context_id="${run.id}/p2/agent"
                        ),
                        "depends_on": ["snap"],
                    },
                    {
                        "id": "p2",
                        "type": "prompt_agent",
                        "depends_on": ["b"],
                        "config": {"agent": "b", "prompt": "which door?"},
                    },
                ],
            }
        )
        for handler in handlers:
            await handler.aclose()
    assert state.status is RunStatus.PASSED, state.error or state
    snap = state.steps["snap"].outputs
    run_id = state.run_id
    assert snap["snapshot"] == f"runs/{run_id}/agent_snapshots/snap/"
    assert snap["context_id"] == f"{run_id}/p1/agent"
    assert snap["objects"] == {
        "trajectory": snap["snapshot"] + "trajectory",
        "workspace": snap["snapshot"] + "workspace",
    }
    stores = open_stores(settings)
    assert json.loads(stores.objects.get(snap["objects"]["trajectory"])) == ["blue door"]
    assert stores.objects.get(snap["objects"]["workspace"]) == b"files"
    # with the framework's env_id: each app's data of the env beside the snapshot, and in the registry artifact
    with_env = state.steps["with_env"].outputs
    assert list(with_env["services"]) == ["notes"] and with_env["services_missing"] == []
    notes = json.loads(stores.objects.get(with_env["services"]["notes"]))
    assert with_env["services"]["notes"] == f"runs/{run_id}/agent_snapshots/with_env/services/notes.json"
    assert isinstance(notes, dict) and notes, notes
    kept = Registry(stores.documents, stores.objects).version("artifacts", "notes-and-agent")
    assert any(f.path.endswith("/services/notes.json") for f in kept.files), kept.files
    assert state.steps["b"].outputs["restored_context_id"] == f"{run_id}/p2/agent"
    assert [(s.workspace, c) for s, c in second.loaded] == [(b"files", f"{run_id}/p2/agent")]
    assert state.steps["p2"].outputs["answer"] == "blue door | which door?"  # it went on from the restored state
    # trajectory/v1 task_objects, served by our SDK: its account of the turn, written into our store through a grant
    written = json.loads(stores.objects.get(f"runs/{run_id}/transcripts/p1/agent-0.trajectory.json"))
    assert written == state.steps["p1"].outputs["trajectory"] and written[0] == {"event": "prompt", "text": "blue door"}
    assert "grants/v1." not in state.model_dump_json() and "X-Amz" not in state.model_dump_json()  # no grant in history


async def test_snapshot_agent_state_fails_clearly_for_an_agent_without_snapshot(run_task, settings):
    from starlette.applications import Starlette
    from test_agents import Recorder, serving

    from agent_env.agents.sdk import a2a_routes
    from agent_env.spec.run import RunStatus

    app = Starlette()
    async with serving(app) as url:
        routes, handler = a2a_routes(Recorder(), url + "/", extensions=True)
        app.router.routes.extend(routes)
        record = {"name": "r", "type": "a2a", "config": {"url": url + "/"}}
        state = await run_task(
            {
                "id": "no-snapshot",
                "steps": [
                    {"id": "a", "type": "deploy_agent", "config": {"record": record}},
                    {"id": "p", "type": "prompt_agent", "depends_on": ["a"], "config": {"agent": "a", "prompt": "hi"}},
                    {
                        "id": "s",
                        "type": "snapshot_agent_state",
                        "depends_on": ["p"],
                        "config": {"agent": "a", "prompt": "p"},
                    },
                ],
            }
        )
        await handler.aclose()
    assert state.status is not RunStatus.PASSED
    assert "declares no urn:agentenv:snapshot/v1" in (state.steps["s"].error or "")


# -- an agent written with the protocol's reference framework (its own virtualenv, a real process) --

REFERENCE_SNAPSHOT_AGENT = """
import json, sys, tempfile
from pathlib import Path

from agentenv_protocol.a2a_agent import (
    SKILL_CONFIG_V1, SNAPSHOT_V1, TRAJECTORY_V1, AgentEnvAgent, AgentIdentity, BundleSkillRequest,
    InlineSkillRequest, ObjectSnapshotLoadRequest, ObjectSnapshotLoadResponse, ObjectSnapshotSaveRequest,
    ObjectSnapshotSaveResponse, TaskRequest, TaskResult, a2a_agent, extension,
)
from agentenv_protocol.transfers import download, upload

NOTES = {}
SKILLS = {}


@a2a_agent(
    identity=AgentIdentity(name="keeper", description="remembers, and saves what it remembers", version="1"),
    extensions=[TRAJECTORY_V1, SNAPSHOT_V1, SKILL_CONFIG_V1],
)
class Keeper(AgentEnvAgent):
    @extension(SKILL_CONFIG_V1.add.inline)
    async def add_inline(self, request: InlineSkillRequest):
        SKILLS[request.name] = {"via": "inline", "SKILL.md": request.skill_md}
        return {"name": request.name}

    @extension(SKILL_CONFIG_V1.add.bundle)
    async def add_bundle(self, request: BundleSkillRequest):
        files = {"via": "bundle"}
        with tempfile.TemporaryDirectory() as folder:
            for item in request.skill_bundle.files:
                await download(item.object, Path(folder) / item.path)
                files[item.path] = (Path(folder) / item.path).read_text()
        SKILLS[request.name] = files
        return {"name": request.name}

    async def run(self, request: TaskRequest) -> TaskResult:
        said = " ".join(p.text for p in request.parts if getattr(p, "text", None))
        notes = NOTES.setdefault(request.context_id, list(NOTES.get("restored", [])))
        notes.append(said)
        request.trajectory.set_format("keeper/1")
        request.trajectory.append({"event": "noted", "text": said, "skills": SKILLS})
        return TaskResult.text(" | ".join(notes))

    @extension(SNAPSHOT_V1.save)
    async def save(self, request: ObjectSnapshotSaveRequest) -> ObjectSnapshotSaveResponse:
        data = json.dumps({"context_id": request.context_id, "notes": NOTES.get(request.context_id, [])}).encode()
        uploaded = {"trajectory": (await upload(request.objects.trajectory, data)).model_dump(mode="json")}
        return ObjectSnapshotSaveResponse.model_validate({"context_id": request.context_id, "objects": uploaded})

    @extension(SNAPSHOT_V1.load)
    async def load(self, request: ObjectSnapshotLoadRequest) -> ObjectSnapshotLoadResponse:
        with tempfile.TemporaryDirectory() as folder:
            await download(request.objects.trajectory, Path(folder) / "t")
            NOTES["restored"] = json.loads((Path(folder) / "t").read_text())["notes"]
        return ObjectSnapshotLoadResponse(context_id=request.target_context_id or "restored")


if __name__ == "__main__":
    Keeper().serve(host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


async def test_a_reference_framework_agent_is_snapshotted_restored_and_given_objects_through_grants(
    client,
    worker,
    settings,
    side_script,  # noqa: F811 - the fixture imported above
    tmp_path,
):
    """snapshot/v1 save and load, trajectory/v1 task_objects, skill-config/v1 bundles: each through grants."""
    import asyncio

    from agent_env.planning.tasks import parse_task
    from agent_env.spec.run import RunStatus
    from agent_env.stores import open_stores
    from agent_env.temporal import launch

    bundle = tmp_path / "bundle"
    (bundle / "artifacts" / "triage").mkdir(parents=True)
    (bundle / "tasks").mkdir()
    skill_md = "---\nname: triage\ndescription: Sort tickets by urgency\n---\nUrgent first.\n"
    (bundle / "artifacts" / "triage" / "SKILL.md").write_text(skill_md)
    (bundle / "artifacts" / "triage" / "checklist.txt").write_text("1. read the ticket\n")
    trust = trust_bundle(settings.state_dir / "tls")
    keeper = side_script("keeper", REFERENCE_SNAPSHOT_AGENT, ready=A2A_CARD, env={"SSL_CERT_FILE": str(trust)})
    with keeper as base:
        url = base + "/"
        record = {"name": "keeper", "type": "a2a", "config": {"url": url}}
        task = parse_task(
            {
                "id": "reference-snapshot",
                "steps": [
                    {"id": "k", "type": "deploy_agent", "config": {"record": {**record, "skills": ["triage"]}}},
                    {
                        "id": "p1",
                        "type": "prompt_agent",
                        "depends_on": ["k"],
                        "config": {"agent": "k", "prompt": "red key"},
                    },
                    {
                        "id": "s",
                        "type": "snapshot_agent_state",
                        "depends_on": ["p1"],
                        "config": {"agent": "k", "prompt": "p1"},
                    },
                    {
                        "id": "k2",
                        "type": "deploy_agent",
                        "depends_on": ["s"],
                        "config": {
                            "record": {**record, "name": "keeper2"},
                            "agent_snapshot": "s",
                            "agent_snapshot_target_context_id": "${run.id}/p2/agent",
                        },
                    },
                    {
                        "id": "p2",
                        "type": "prompt_agent",
                        "depends_on": ["k2"],
                        "config": {"agent": "k2", "prompt": "which key?"},
                    },
                ],
            },
            "test task",
            bundle,
        )
        state = await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, task)), 120)
    assert state.status is RunStatus.PASSED, state.error or state
    run_id, stores = state.run_id, open_stores(settings)
    saved = state.steps["s"].outputs
    assert saved["objects"] == {"trajectory": f"runs/{run_id}/agent_snapshots/s/trajectory"}  # it keeps no workspace
    assert json.loads(stores.objects.get(saved["objects"]["trajectory"])) == {
        "context_id": f"{run_id}/p1/agent",
        "notes": ["red key"],
    }
    assert state.steps["k2"].outputs["restored_context_id"] == f"{run_id}/p2/agent"
    assert state.steps["p2"].outputs["answer"] == "red key | which key?"
    # trajectory/v1 task_objects: the agent wrote its account of the turn into our store through a write grant
    written = json.loads(stores.objects.get(f"runs/{run_id}/transcripts/p1/agent-0.trajectory.json"))
    told = state.steps["p1"].outputs["trajectory"]
    assert told == written and "red key" in json.dumps(written)
    # skill-config/v1 bundle: the skill's whole folder, read by the agent through read grants
    assert {"via": "bundle", "SKILL.md": skill_md, "checklist.txt": "1. read the ticket\n"} in [
        e.get("skills", {}).get("triage") for e in (written["events"] if "events" in written else written)
    ]
    assert "grants/v1." not in state.model_dump_json()  # no grant in the run's history


# -- grants on Cloud Storage: V4 signed URLs (signed here; fake-gcs-server checks no signature, Cloud Storage does) --


def _gcs_store(credentials):
    pytest.importorskip("google.cloud.storage")
    from google.cloud import storage

    from agent_env.stores.gcp_objects import GcsObjectStore

    store = GcsObjectStore.__new__(GcsObjectStore)  # (no bucket to reach: signing is local)
    store.client = storage.Client(project="test", credentials=credentials)
    store.bucket, store.prefix = store.client.bucket("bucket-x"), "inst/"
    return store


def test_gcs_grants_are_v4_signed_urls_and_unsigning_credentials_are_named():
    from urllib.parse import parse_qs, urlsplit

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from google.auth.credentials import AnonymousCredentials
    from google.oauth2 import service_account

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
    put = grants.write("runs/r1/t.json", media_type="application/json", max_bytes=1000, ttl_s=120)
    query = parse_qs(urlsplit(put.url).query)
    assert urlsplit(put.url).path == "/bucket-x/inst/runs/r1/t.json"
    assert query["X-Goog-Algorithm"] == ["GOOG4-RSA-SHA256"] and query["X-Goog-Expires"] == ["120"]
    assert "content-type" in query["X-Goog-SignedHeaders"][0] and put.headers == {"content-type": "application/json"}
    assert "PRIVATE KEY" not in put.url and not grants.bounds_writes
    with pytest.raises(BadInput, match="cannot sign URLs"):
        _gcs_store(AnonymousCredentials()).grants().read("runs/r1/t.json")


async def test_our_sdk_refuses_a_snapshot_request_it_cannot_honour_without_quoting_its_grants(tmp_path):
    """An http:// grant (the protocol takes https only), a missing conversation, a grant that fails: each answered
    with the status the protocol names, and never the grant's URL."""
    from starlette.applications import Starlette
    from test_agents import serving

    from agent_env.agents.sdk import a2a_routes

    expires = "2099-01-01T00:00:00Z"

    def save(url: str, context_id: str = "c1") -> dict:
        grant = {"kind": "http-put", "url": url, "expires_at": expires}
        writing = {"media_type": "application/octet-stream", "max_bytes": 100, "write": grant}
        return {"context_id": context_id, "objects": {"trajectory": writing}}

    agent, app = Notes(), Starlette()
    agent.memory["c1"] = ["x"]
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        routes, handler = a2a_routes(agent, url + "/", extensions=True)
        app.router.routes.extend(routes)
        plain = await http.post("/ext/snapshot", json=save("http://secret-host.example/put?sig=SECRET"))
        assert plain.status_code == 400 and "objects.trajectory.write.url" in plain.text
        assert "SECRET" not in plain.text and "secret-host" not in plain.text
        missing = await http.post("/ext/snapshot", json=save("https://127.0.0.1:9/put?sig=SECRET", "nope"))
        assert missing.status_code == 404
        unreachable = await http.post("/ext/snapshot", json=save("https://127.0.0.1:9/put?sig=SECRET"))
        assert unreachable.status_code == 502 and unreachable.json()["error"]["code"] == "transfer_unavailable"
        assert "SECRET" not in unreachable.text
        await handler.aclose()
