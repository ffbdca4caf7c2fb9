"""collect_artifacts' export of an environment's data through data-objects/v1: the run hands the gateway a namespace
grant on its own store, each app that declares the extension uploads its export itself (below a folder of its own),
and the run keeps what landed, held to the grant's limits. Tested against a real gateway over HTTP with our env server
(`agent-env env serve`, a subprocess app) and with an env written with the protocol's own env SDK (its side venv)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time

import httpx
import pytest
from conftest import free_port
from gateway_util import running_gateway
from test_protocol_agents import reference_python  # noqa: F401 - the side venv's Python, as a fixture

from agent_env.config import Settings
from agent_env.steps import StepContext
from agent_env.steps.builtin.env_export import export_data
from agent_env.stores.local_tls import trust_bundle

NOTE = {
    "notes": {
        "notes": [{"key": "ada", "text": "first programmer", "author": None, "updated_at": "2026-01-01T00:00:00Z"}]
    }
}


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    """A step of run `run-x` on an install of its own (local stores); the env servers it starts trust the install's
    CA, whose grant URLs they are handed (as an operator's SSL_CERT_FILE does)."""
    settings = Settings.model_validate({"state_dir": str(tmp_path / "state")})
    monkeypatch.setenv("SSL_CERT_FILE", str(trust_bundle(settings.state_dir / "tls")))
    return StepContext(run_id="run-x", task_id="t", step_id="keep", attempt=1, settings=settings)


@pytest.mark.processes
async def test_our_env_server_uploads_its_export_and_an_in_process_app_answers_inline(ctx, tmp_path):
    async with running_gateway(tmp_path / "gw") as (_, _, admin):
        spec = {
            "id": "run-x.env",
            "run_id": "run-x",
            "apps": [{"app": "notes", "run": "subprocess", "name": "pad"}, {"app": "billing"}],
            "roles": {"agent": {"tools": ["*"]}},
        }
        await admin.put_instance(spec)
        await admin.load("run-x.env", [{"kind": "data", "data": {"pad": NOTE["notes"]}}])
        kept = await export_data(ctx, admin, "env", "run-x.env")
    objects = ctx.stores.objects
    assert kept == ["runs/run-x/artifacts/env/data.json", "runs/run-x/artifacts/env/data/pad/notes.json"]
    assert json.loads(objects.get(kept[1])) == NOTE["notes"]  # the app's own upload, in the run's store
    answer = json.loads(objects.get(kept[0]))
    named = [p for p in answer["parts"] if p["kind"] == "file"]
    assert [p["metadata"]["urn:agentenv:data-objects/v1"]["path"] for p in named] == ["pad/notes.json"]
    inline = [p for p in answer["parts"] if p["kind"] == "data"]
    assert [p["metadata"]["agentenv.io/app"] for p in inline] == ["billing"]  # declares nothing: inline
    assert "grants/v1." not in json.dumps(answer)  # the grant is in no record


@pytest.mark.processes
async def test_without_a_grant_that_reaches_the_apps_the_export_is_inline(ctx, tmp_path, monkeypatch):
    import certifi

    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())  # public roots only: the app cannot verify the store
    async with running_gateway(tmp_path / "gw") as (_, _, admin):
        spec = {"id": "run-x.env", "run_id": "run-x", "apps": [{"app": "notes", "run": "subprocess"}]}
        await admin.put_instance(spec)
        await admin.load("run-x.env", [{"kind": "data", "data": NOTE}])
        kept = await export_data(ctx, admin, "env", "run-x.env")
    assert kept == ["runs/run-x/artifacts/env/data.json"]
    answer = json.loads(ctx.stores.objects.get(kept[0]))
    assert (
        answer["parts"][0]["data"] == NOTE["notes"] and ctx.stores.objects.list("runs/run-x/artifacts/env/data/") == []
    )


REFERENCE_ENV = '''
import json
import sys

from agentenv_protocol.agent_env_environment import AgentEnvEnvironment, environment_card, get_data, tool
from agentenv_protocol.transfers import NamespaceUploader
from agentenv_protocol.types import DataPart, uploaded_file_part


@environment_card(name="ledger")
class Ledger(AgentEnvEnvironment):
    rows = [{"id": 1, "amount": 42}]

    @tool()
    def count(self) -> int:
        """How many rows."""
        return len(self.rows)

    @get_data
    async def export(self, write_namespace=None):
        if write_namespace is None:
            return [DataPart(data={"rows": self.rows})]
        uploader = NamespaceUploader(write_namespace)
        await uploader.upload("tables/rows.json", json.dumps(self.rows).encode())
        return [uploaded_file_part("tables/rows.json", name="rows.json", mime_type="application/json")]


env = Ledger()
app = env.create_app()
app.settings.host, app.settings.port = "127.0.0.1", int(sys.argv[1])
env.serve()
'''


@pytest.fixture
def reference_env(request, tmp_path, ctx):
    """An env server written with the protocol's own env SDK (its venv: mcp 1.x), trusting the install's CA."""
    import os

    python = request.getfixturevalue("reference_python")
    script = tmp_path / "reference_env.py"
    script.write_text(REFERENCE_ENV)
    port = free_port()
    log = (tmp_path / "reference.log").open("w")
    env = {**os.environ, "SSL_CERT_FILE": str(trust_bundle(ctx.settings.state_dir / "tls"))}
    process = subprocess.Popen([str(python), str(script), str(port)], stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp_path / "reference.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/.well-known/agent-env.json").status_code == 200:
                    break
            assert time.monotonic() < deadline, "the reference env did not serve its card in 60s"
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)
        log.close()


@pytest.mark.processes
async def test_an_env_written_with_the_reference_sdk_exports_through_the_grant_behind_our_gateway(
    ctx, tmp_path, reference_env
):
    card = httpx.get(reference_env + "/.well-known/agent-env.json").json()
    assert "urn:agentenv:data-objects/v1" in [e["uri"] for e in card["capabilities"]["extensions"]]
    async with running_gateway(tmp_path / "gw") as (_, _, admin):
        spec = {"id": "run-x.env", "run_id": "run-x", "apps": [{"name": "ledger", "url": reference_env}]}
        await admin.put_instance(spec)
        kept = await export_data(ctx, admin, "books", "run-x.env")
    assert kept == ["runs/run-x/artifacts/books/data.json", "runs/run-x/artifacts/books/data/ledger/tables/rows.json"]
    assert json.loads(ctx.stores.objects.get(kept[1])) == [{"id": 1, "amount": 42}]
