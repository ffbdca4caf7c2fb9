"""snapshot/v1's optional `changelog` feature, both ways: our SDK agent writes an increment of its state after each
turn into the namespace grant a run's deploy_agent (`enable_agent_changelog`) gave it, and a later run's deploy_agent
(`agent_changelog_object_url`, `agent_changelog_toolcall_position_exclusive`) replays them into a new agent, which
answers from the state they rebuild. Real HTTP, real grants over HTTPS, a real Temporal run; the reference's models
check our wire in its own virtualenv.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import httpx
import pytest
from reference_venv import reference_python, run_to_end  # noqa: F401 - fixtures
from test_object_transfers import Notes

from agent_env.stores.local_tls import trust_bundle


@pytest.fixture
def trusting(settings, monkeypatch):
    """Agents in this process trust the install's local CA (as an operator sets SSL_CERT_FILE for its agents)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(trust_bundle(settings.state_dir / "tls")))


@asynccontextmanager
async def served(*agents):
    """Each agent served by our SDK (extensions on) at a URL of its own; yields the URLs."""
    from contextlib import AsyncExitStack

    from starlette.applications import Starlette
    from test_agents import serving

    from agent_env.agents.sdk import a2a_routes

    async with AsyncExitStack() as stack:
        urls, handlers = [], []
        for agent in agents:
            app = Starlette()
            url = await stack.enter_async_context(serving(app))
            routes, handler = a2a_routes(agent, url + "/", extensions=True)
            app.router.routes.extend(routes)
            urls.append(url + "/")
            handlers.append(handler)
        try:
            yield urls
        finally:
            for handler in handlers:
                await handler.aclose()


def deploy(step: str, url: str, **more) -> dict:
    record = {"name": step, "type": "a2a", "config": {"url": url}}
    return {"id": step, "type": "deploy_agent", "config": {"record": record, **more}}


def prompt(step: str, agent: str, text: str, after: str) -> dict:
    return {"id": step, "type": "prompt_agent", "depends_on": [after], "config": {"agent": agent, "prompt": text}}


async def test_a_capture_leaves_increments_and_a_later_run_replays_them_up_to_a_position(run_task, settings, trusting):
    from agent_env.spec.run import RunStatus
    from agent_env.stores import open_stores

    async with served(Notes()) as [url]:
        first = await run_task(
            {
                "id": "capture",
                "steps": [
                    deploy("a", url, enable_agent_changelog=True),
                    prompt("p1", "a", "blue door", after="a"),
                    prompt("p2", "a", "red key", after="p1"),
                ],
            }
        )
    assert first.status is RunStatus.PASSED, first.error or first
    capture = first.steps["a"].outputs["agent_changelog"]
    prefix = f"runs/{first.run_id}/agent_changelog/a/"
    assert capture["changelog"] == prefix and capture["roots"] == []
    stores = open_stores(settings)
    assert sorted(stores.objects.list(prefix)) == [prefix + "000000.state", prefix + "000001.state"]
    increment = json.loads(stores.objects.get(prefix + "000001.state"))
    assert increment["context_id"] == f"{first.run_id}/p2/agent"  # the state after the second turn, its own
    assert "grants/v1." not in first.model_dump_json()  # the namespace grant went to the agent, not into history

    whole, cut, none = Notes(), Notes(), Notes()
    async with served(whole, cut, none) as [url_whole, url_cut, url_none]:
        second = await run_task(
            {
                "id": "replay",
                "steps": [
                    deploy("w", url_whole, agent_changelog_object_url=prefix),
                    deploy(
                        "c",
                        url_cut,
                        agent_changelog_object_url=prefix,
                        agent_changelog_toolcall_position_exclusive=1,
                        agent_snapshot_target_context_id="${run.id}/q2/agent",
                    ),
                    deploy(
                        "n", url_none, agent_changelog_object_url=prefix, agent_changelog_toolcall_position_exclusive=0
                    ),
                    prompt("q1", "w", "which?", after="w"),
                    prompt("q2", "c", "which?", after="c"),
                    prompt("q3", "n", "which?", after="n"),
                ],
            }
        )
    assert second.status is RunStatus.PASSED, second.error or second
    applied = {step: second.steps[step].outputs["changelog_applied"] for step in ("w", "c", "n")}
    assert [applied[s]["applied"] for s in ("w", "c", "n")] == [2, 1, 0]
    assert applied["c"]["context_id"] == f"{second.run_id}/q2/agent"  # the target conversation it was given
    assert len(whole.loaded) == 2 and len(cut.loaded) == 1 and none.loaded == []
    assert second.steps["q1"].outputs["answer"] == "red key | which?"  # the state after both turns
    assert second.steps["q2"].outputs["answer"] == "blue door | which?"  # position 1: after the first turn only
    assert second.steps["q3"].outputs["answer"] == "which?"  # position 0: nothing replayed
    assert "agent_changelog" not in second.steps["w"].outputs  # replaying is not capturing


async def test_a_card_without_the_changelog_feature_is_refused_naming_the_field(run_task, trusting, monkeypatch):
    from test_agents import Recorder

    from agent_env.agents import transfer_serving
    from agent_env.spec.run import RunStatus

    async with served(Recorder()) as [url]:  # no snapshot/v1 at all
        state = await run_task({"id": "no-snapshot", "steps": [deploy("a", url, enable_agent_changelog=True)]})
    assert state.status is not RunStatus.PASSED
    error = state.steps["a"].error or ""
    assert "`enable_agent_changelog`" in error and "declares no urn:agentenv:snapshot/v1" in error, error

    monkeypatch.setattr(transfer_serving, "changelog_card_methods", lambda: {})  # snapshot/v1 without the feature
    async with served(Notes()) as [url]:
        async with httpx.AsyncClient() as http:
            card = (await http.get(url + ".well-known/agent-card.json")).json()
        methods = {e["uri"]: e["params"] for e in card["capabilities"]["extensions"]}["urn:agentenv:snapshot/v1"]
        assert set(methods["methods"]) == {"save", "load"}
        state = await run_task(
            {"id": "no-feature", "steps": [deploy("a", url, agent_changelog_object_url="runs/x/agent_changelog/a/")]}
        )
    assert state.status is not RunStatus.PASSED
    error = state.steps["a"].error or ""
    assert "`agent_changelog_object_url`" in error and "'apply-changelog'" in error, error


def test_a_position_without_a_changelog_or_a_source_outside_captures_is_refused_when_the_task_is_read():
    from pydantic import ValidationError

    from agent_env.steps.builtin.agent_deploy import DeployAgentConfig

    record = {"name": "a", "type": "a2a", "config": {"url": "http://127.0.0.1:1/"}}
    with pytest.raises(ValidationError, match="agent_changelog_toolcall_position_exclusive needs"):
        DeployAgentConfig.model_validate({"record": record, "agent_changelog_toolcall_position_exclusive": 3})
    with pytest.raises(ValidationError, match="is not a changelog's prefix: give runs/RUN/agent_changelog/NAME/"):
        DeployAgentConfig.model_validate({"record": record, "agent_changelog_object_url": "runs/x/agent_snapshots/a/"})


REFERENCE_CHECK = """
import json, sys
from agentenv_protocol.a2a_agent.extensions import (
    SNAPSHOT_V1, NamespaceChangelogEnableRequest, NamespaceChangelogEnableResponse, ObjectChangelogApplyRequest,
    ObjectChangelogApplyResponse,
)
from agentenv_protocol.a2a_agent import card_request_accepts

wire = json.load(open(sys.argv[1]))
NamespaceChangelogEnableRequest.model_validate(wire["enable"])
NamespaceChangelogEnableResponse.model_validate(wire["enabled"])
ObjectChangelogApplyRequest.model_validate(wire["apply"])
ObjectChangelogApplyResponse.model_validate(wire["applied"])
declared = wire["card"]["methods"]
for op in SNAPSHOT_V1.optional_features["changelog"].operations.values():
    ours = declared[op.name]
    assert ours["method"] == op.method and ours["endpoint"] == op.path, (op.name, ours)
    assert card_request_accepts(ours["request"], sorted(op.request.to_card().get("required", []))), op.name
print("reference accepts", sorted(declared))
"""


async def test_the_reference_models_accept_our_changelog_wire(reference_python, tmp_path, settings, trusting):  # noqa: F811
    """What our SDK declares and what our run and agent send and answer, validated by the reference's own models."""
    from agent_env.agents import transfer_serving
    from agent_env.agents.changelog_serving import encode
    from agent_env.agents.changelog_transfers import LIMITS
    from agent_env.agents.changelog_wire import (
        ChangelogIncrement,
        NamespaceChangelogEnableRequest,
        NamespaceChangelogEnableResponse,
        ObjectChangelogApplyRequest,
        ObjectChangelogApplyResponse,
    )
    from agent_env.stores.grant_issuers import object_grants
    from agent_env.stores.local import FileObjectStore
    from agent_env.stores.transfer import OPAQUE, namespace_wire, read_object

    store = FileObjectStore(tmp_path / "objects")
    grants = object_grants(store, settings.model_copy(update={"state_dir": tmp_path}))
    data = encode(transfer_serving.AgentState(trajectory=b"[]"), "c1")
    store.put("runs/r/agent_changelog/a/000000.state", data)
    read = read_object(grants.read("runs/r/agent_changelog/a/000000.state"), len(data), OPAQUE, data)
    bodies = {
        "enable": NamespaceChangelogEnableRequest(
            write_namespace=namespace_wire(grants.namespace("runs/r/agent_changelog/a", limits=LIMITS))
        ),
        "enabled": NamespaceChangelogEnableResponse(roots=[]),
        "apply": ObjectChangelogApplyRequest(increments=[ChangelogIncrement(sequence=0, object=read)]),
        "applied": ObjectChangelogApplyResponse(count=1, context_id="c1"),
    }
    wire = {name: body.model_dump(mode="json", exclude_none=True) for name, body in bodies.items()}
    wire["card"] = transfer_serving.card_entries(Notes())[0].params
    (tmp_path / "wire.json").write_text(json.dumps(wire, default=_plain))
    output = await run_to_end(reference_python, tmp_path, "check", REFERENCE_CHECK, str(tmp_path / "wire.json"))
    assert "reference accepts ['apply-changelog', 'enable-changelog', 'load', 'save']" in output


def _plain(value):
    """A protobuf Struct (the card's params) as plain JSON."""
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(value)


async def test_our_sdk_refuses_an_apply_out_of_order_or_of_bytes_it_did_not_write(tmp_path, settings, trusting):
    """As an outsider would send them over HTTP: increments out of order, and an object that is no increment of its
    own, are 400s naming the problem, and the agent loads nothing."""
    from agent_env.stores.grant_issuers import object_grants
    from agent_env.stores.local import FileObjectStore
    from agent_env.stores.transfer import OPAQUE, read_object

    store = FileObjectStore(settings.state_dir / "objects")
    grants = object_grants(store, settings)
    store.put("runs/r/agent_changelog/a/000000.state", b"not ours")
    read = read_object(grants.read("runs/r/agent_changelog/a/000000.state"), 8, OPAQUE, b"not ours")
    increment = {"sequence": 0, "object": read.model_dump(mode="json", exclude_none=True)}
    notes = Notes()
    async with served(notes) as [url], httpx.AsyncClient() as http:
        backwards = {"increments": [{**increment, "sequence": 2}, increment]}
        answer = await http.put(url + "ext/snapshot/changelog", json=backwards)
        assert answer.status_code == 400 and "strictly increasing" in answer.json()["detail"]
        answer = await http.put(url + "ext/snapshot/changelog", json={"increments": [increment]})
        assert answer.status_code == 400, answer.text
        assert "increment 0: a changelog increment is not one this agent wrote" in answer.json()["detail"]
        assert "grants/v1." not in answer.text  # its grant is not quoted back
    assert notes.loaded == []
