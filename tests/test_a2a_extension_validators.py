"""The A2A agent extension validators (`verify_a2a_peer_agents`, `verify_a2a_install`, `verify_a2a_skill_config`,
`verify_a2a_snapshot`, `verify_a2a_trajectory`), run as step types against real agents on 127.0.0.1: they pass
on an agent written with the protocol's reference framework (in its side virtualenv) and on one written with
our SDK, and fail, naming the check, on agents with one fault each.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import httpx
import pytest
import test_protocol_agents
from reference_venv import A2A_CARD, side_script  # noqa: F401  (a fixture, by import)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from test_agents import serving
from test_object_transfers import REFERENCE_SNAPSHOT_AGENT, Notes, trusting  # noqa: F401  (a fixture, by import)
from test_protocol_agents import reference_agent, reference_python  # noqa: F401  (a fixture, by import)

from agent_env.agents.sdk import Agent, Answer, Turn, a2a_routes
from agent_env.agents.transfer_serving import AgentState, new_context_id
from agent_env.spec.run import RunStatus
from agent_env.steps import catalog
from agent_env.stores import open_stores
from agent_env.validators.report import ValidationReport

VALIDATORS = (
    "verify_a2a_peer_agents",
    "verify_a2a_install",
    "verify_a2a_skill_config",
    "verify_a2a_snapshot",
    "verify_a2a_trajectory",
)

# A reference-framework agent declaring all five (trajectory with its cursor reads), as the framework's docs
# write one; its snapshot operations take the protocol's requests and keep nothing.
ALL_FIVE = """
import sys

from agentenv_protocol.a2a_agent import (
    INSTALL_V1, PEER_AGENTS_V1, SKILL_CONFIG_V1, SNAPSHOT_V1, TRAJECTORY_V1, AgentEnvAgent, AgentIdentity,
    BundleSkillRequest, InlineSkillRequest, ObjectSnapshotLoadRequest, ObjectSnapshotSaveRequest, TaskRequest,
    TaskResult, a2a_agent, enable, extension,
)


@a2a_agent(
    identity=AgentIdentity(name="all-five", description="declares the five extensions", version="1"),
    extensions=[
        SKILL_CONFIG_V1,
        enable(TRAJECTORY_V1, live=True),
        PEER_AGENTS_V1,
        enable(
            INSTALL_V1,
            install_commands=["tar -xzf {agent_ctx_tar} -C {work_dir}", "docker exec {container} serve {a2a_port}"],
            required_params=["agent_ctx_tar", "work_dir", "container", "a2a_port"],
            a2a_port=8000,
        ),
        SNAPSHOT_V1,
    ],
)
class AllFive(AgentEnvAgent):
    @extension(SKILL_CONFIG_V1.add.inline)
    async def add_skill(self, request: InlineSkillRequest):
        return {"name": request.name}

    @extension(SKILL_CONFIG_V1.add.bundle)
    async def add_bundle(self, request: BundleSkillRequest):
        return {"name": request.name}

    @extension(SNAPSHOT_V1.save)
    async def save(self, request: ObjectSnapshotSaveRequest):
        raise RuntimeError("not reached: the validator sends no objects")

    @extension(SNAPSHOT_V1.load)
    async def load(self, request: ObjectSnapshotLoadRequest):
        raise RuntimeError("not reached: the validator sends no objects")

    async def run(self, request: TaskRequest) -> TaskResult:
        request.trajectory.set_format("validator-probe/1")
        request.trajectory.append({"event": "prompt", "task": request.task_id})
        return TaskResult.text("checked")


if __name__ == "__main__":
    AllFive().serve(host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


async def validate(name: str, url: str, **config: Any):
    """One validator run as its step type runs it in a task (it uses nothing of the step's context)."""
    step = catalog.get(name)
    return await step(None, step.config(url=url, **config))  # type: ignore[arg-type]


async def validate_in_run(settings, name: str, url: str, **config: Any):
    """One validator run as a step of a run: with the run's object store to issue grants on."""
    from agent_env.steps.context import StepContext

    step = catalog.get(name)
    ctx = StepContext(
        run_id=f"validate-{uuid.uuid4().hex[:8]}", task_id="t", step_id=name, attempt=1, settings=settings
    )
    return await step(ctx, step.config(url=url, **config))


def checks(result) -> list[dict[str, Any]]:
    return result.outputs["report"]["checks"]


def text(result) -> str:
    """The report as `agent-env a2a-agent validate` prints it."""
    return ValidationReport.model_validate(result.outputs["report"]).report()


def failed(result) -> list[str]:
    return [c["name"] for c in checks(result) if not c["passed"]]


def required_failures(result) -> list[str]:
    return [c["name"] for c in checks(result) if not c["passed"] and c["required"]]


class Plain(Agent):
    name = "plain"

    async def answer(self, turn: Turn) -> Answer:
        return Answer(text=f"you said {turn.prompt}")


@contextlib.asynccontextmanager
async def sdk_agent(*overrides: Route, card: dict[str, Any] | None = None, agent: Agent | None = None):
    """An agent of our SDK (extensions on), with `overrides` answering before its own routes; yields its URL."""
    app = Starlette()
    async with serving(app) as url:
        served, handler = a2a_routes(agent or Plain(), url + "/", extensions=True)
        app.router.routes.extend([*overrides, *served])
        try:
            yield url + "/"
        finally:
            await handler.aclose()


def hand_card(extensions: list[dict[str, Any]]) -> dict[str, Any]:
    """A card (A2A 0.3 JSON, as the reference framework serves) declaring `extensions`, for agents with no turns."""
    return {
        "name": "hand",
        "description": "a hand-written card",
        "version": "1",
        "protocolVersion": "0.3.0",
        "preferredTransport": "JSONRPC",
        "url": "/a2a",
        "capabilities": {"extensions": extensions},
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": [],
    }


@contextlib.asynccontextmanager
async def card_only(extensions: list[dict[str, Any]], *routes: Route):
    async def card(request: Request) -> JSONResponse:
        return JSONResponse(hand_card(extensions))

    app = Starlette(routes=[Route("/.well-known/agent-card.json", card), *routes])
    async with serving(app) as url:
        yield url + "/"


PEER_AGENTS = {
    "uri": "urn:agentenv:peer-agents/v1",
    "params": {
        "endpoint": "/ext/peer-agents",
        "methods": {"set": {"method": "POST"}, "list": {"method": "GET", "response": {"required": ["peers"]}}},
    },
}


# -- good agents --


async def test_a_reference_framework_agent_passes_all_five(reference_python, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(test_protocol_agents, "REFERENCE_AGENT", ALL_FIVE)  # reference_agent serves this script
    with reference_agent(reference_python, tmp_path) as url:
        results = {name: await validate(name, url) for name in VALIDATORS}
        async with httpx.AsyncClient() as http:
            peers = (await http.get(url + "ext/peer-agents")).json()["peers"]
    for name, result in results.items():
        assert result.outputs["passed"] and result.score.passed, text(result)
        assert not any(n.endswith(".declared") for n in failed(result)), name  # each was declared, and checked
    assert peers == []  # what it listed before the probe, set back
    passed = {c["name"] for r in results.values() for c in checks(r) if c["passed"]}
    assert {
        "peer_agents.round_trip",
        "skill_config.list_shows_added",
        "trajectory.well_formed",
        "trajectory.events",
        "install.install_commands.placeholders",
        "install.a2a_port",
        "snapshot.save",
        "snapshot.load",
    } <= passed
    # what needs object grants is said to be not checked, never passed silently
    assert set(failed(results["verify_a2a_skill_config"])) == {"skill_config.add_bundle"}
    assert set(failed(results["verify_a2a_snapshot"])) == {"snapshot.round_trip"}
    assert "not checked" in text(results["verify_a2a_snapshot"])


async def test_an_agent_of_our_sdk_passes_what_it_declares_and_is_told_what_it_does_not():
    async with sdk_agent() as url:
        results = {name: await validate(name, url) for name in VALIDATORS}
    for result in results.values():
        assert result.outputs["passed"] and result.score.passed, text(result)
    assert failed(results["verify_a2a_skill_config"]) == []
    # our SDK also serves the trajectory's objects variant, which this validator reports as not checked (optional)
    assert failed(results["verify_a2a_trajectory"]) == ["trajectory.task_objects"]
    assert "not checked" in text(results["verify_a2a_trajectory"])
    for name, prefix in (("verify_a2a_peer_agents", "peer_agents"), ("verify_a2a_install", "install")):
        found = checks(results[name])  # not declared: one optional finding, and nothing called
        assert [(c["name"], c["passed"], c["required"]) for c in found] == [(f"{prefix}.declared", False, False)]
        assert "not declared" in found[0]["problem"] and found[0]["fix"]


async def test_the_validators_run_as_steps_of_a_task(run_task):
    async with sdk_agent() as url:
        state = await run_task(
            {
                "id": "validate-agent",
                "steps": [{"id": name, "type": name, "config": {"url": url}} for name in VALIDATORS],
            }
        )
    assert state.status is RunStatus.PASSED, state.error
    assert all(state.steps[name].score.passed for name in VALIDATORS)
    assert (
        "✓ trajectory.well_formed"
        in ValidationReport.model_validate(state.steps["verify_a2a_trajectory"].outputs["report"]).report()
    )


# -- agents with one fault each --


async def test_skill_config_fails_when_list_never_shows_the_added_skill():
    async def forgetful(request: Request) -> JSONResponse:
        return JSONResponse({"skills": {"its-own": {"description": "always there"}}})

    async with sdk_agent(Route("/ext/skill-config", forgetful, methods=["GET"])) as url:
        result = await validate("verify_a2a_skill_config", url)
    assert not result.score.passed and not result.outputs["passed"]
    assert required_failures(result) == ["skill_config.list_shows_added"]
    assert "its-own" in text(result)  # what it listed instead, in the problem


async def test_trajectory_fails_when_the_trajectory_is_malformed():
    async def malformed(request: Request) -> JSONResponse:
        return JSONResponse({"trajectory": {"events": "none kept"}})

    async with sdk_agent(Route("/ext/trajectory", malformed, methods=["POST"])) as url:
        result = await validate("verify_a2a_trajectory", url)
    assert not result.score.passed
    assert required_failures(result) == ["trajectory.well_formed"]
    assert "unknown_task" in " ".join(failed(result))  # (it answers 200 for any task: optional, noted)


async def test_peer_agents_fails_when_the_declared_extension_is_not_served():
    async with card_only([PEER_AGENTS]) as url:
        result = await validate("verify_a2a_peer_agents", url)
    assert not result.score.passed
    assert {"peer_agents.set", "peer_agents.list"} <= set(required_failures(result))
    problems = " ".join(c["problem"] for c in checks(result))
    assert f"POST {url}ext/peer-agents answered 404" in problems


async def test_peer_agents_fails_when_list_does_not_show_the_peer_set():
    async def accept(request: Request) -> JSONResponse:
        return JSONResponse({"status": "updated"})

    async def stale(request: Request) -> JSONResponse:
        return JSONResponse({"peers": [{"name": "someone-else", "url": "http://elsewhere.invalid/"}]})

    routes = (Route("/ext/peer-agents", accept, methods=["POST"]), Route("/ext/peer-agents", stale, methods=["GET"]))
    async with card_only([PEER_AGENTS], *routes) as url:
        result = await validate("verify_a2a_peer_agents", url)
    assert required_failures(result) == ["peer_agents.round_trip"]


async def test_an_operation_on_another_origin_is_a_finding_and_never_called():
    called = []

    async def elsewhere(request: Request) -> JSONResponse:
        called.append(request.url.path)
        return JSONResponse({"peers": []})

    async with serving(Starlette(routes=[Route("/ext/peer-agents", elsewhere, methods=["GET", "POST"])])) as other:
        moved = {"uri": PEER_AGENTS["uri"], "params": {"endpoint": other + "/ext/peer-agents"}}
        async with card_only([moved]) as url:
            result = await validate("verify_a2a_peer_agents", url)
    assert required_failures(result) == ["peer_agents.origin"] and called == []


async def test_params_the_protocol_cannot_read_are_a_finding_not_a_crash():
    for params in (
        {"methods": ["set"]},
        {"endpoint": 42},
        {"methods": {"set": {"method": 1}}},
    ):
        async with card_only([{"uri": PEER_AGENTS["uri"], "params": params}]) as url:
            result = await validate("verify_a2a_peer_agents", url)
        assert required_failures(result) == ["peer_agents.params"], params


async def test_install_fails_on_a_command_using_a_parameter_it_does_not_list():
    install = {
        "uri": "urn:agentenv:install/v1",
        "params": {"install_commands": ["docker cp {agent_ctx_tar} {container}:/agent"], "a2a_port": 70000},
    }
    async with card_only([install]) as url:
        result = await validate("verify_a2a_install", url)
    assert set(required_failures(result)) == {"install.install_commands.placeholders", "install.a2a_port"}
    assert "['agent_ctx_tar', 'container']" in text(result)


async def test_install_takes_host_commands_alone_and_fails_a_declaration_of_no_commands():
    host_only = {
        "uri": "urn:agentenv:install/v1",
        "params": {
            "install_commands_host": ["bash {work_dir}/install.sh {agent_name} {a2a_port}"],
            "required_params_host": ["work_dir", "agent_name", "a2a_port"],
            "a2a_port": 8000,
            "workdir_host": "/app",
        },
    }
    nothing = {"uri": "urn:agentenv:install/v1", "params": {"a2a_port": 8000}}
    async with card_only([host_only]) as url:
        assert failed(await validate("verify_a2a_install", url)) == []
    async with card_only([nothing]) as url:
        assert required_failures(await validate("verify_a2a_install", url)) == ["install.install_commands"]


async def test_snapshot_fails_when_its_operations_are_not_served():
    snapshot = {"uri": "urn:agentenv:snapshot/v1", "params": {"endpoint": "/ext/snapshot"}}

    async def accepts_anything(request: Request) -> JSONResponse:
        return JSONResponse({"context_id": "c"})

    async with card_only([snapshot], Route("/ext/snapshot", accepts_anything, methods=["PUT"])) as url:
        result = await validate("verify_a2a_snapshot", url)
    assert set(required_failures(result)) == {"snapshot.save", "snapshot.load"}
    report = text(result)
    assert "not served" in report and "accepted a request without objects" in report


async def test_a_hostile_agents_endless_or_deeply_nested_answers_are_findings_read_to_a_bound():
    """An agent answering list with an endless body, or JSON nested past any parser's depth: each is a finding
    naming the operation, the body is read no further than the bound, and the validator neither hangs nor
    crashes."""
    import asyncio

    from starlette.responses import Response, StreamingResponse

    from agent_env.validators.a2a_wire import MAX_REPLY_BYTES as MAX_ANSWER_BYTES

    sent = []

    async def endless(request: Request) -> StreamingResponse:
        async def body():
            for _ in range(4096):  # 256 MiB, if nobody stops reading
                sent.append(1)
                yield b"x" * 65536
                await asyncio.sleep(0)

        return StreamingResponse(body(), media_type="application/json")

    async def deep(request: Request) -> Response:
        return Response(b'{"skills": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", media_type="application/json")

    for hostile, said in ((endless, f"answered over {MAX_ANSWER_BYTES} bytes"), (deep, "answered 200")):
        async with sdk_agent(Route("/ext/skill-config", hostile, methods=["GET"])) as url:
            result = await validate("verify_a2a_skill_config", url)
        assert required_failures(result) == ["skill_config.list"]
        assert said in text(result)
    assert len(sent) < 4096, "the endless answer was read to its end"


async def test_a_url_that_is_not_http_is_refused_by_the_config():
    with pytest.raises(ValueError, match="url"):
        catalog.get("verify_a2a_install").config(url="file:///etc/passwd")


# -- object transfers through grants on the run's store (snapshot round trip, skill bundles, task_objects) --


class Amnesiac(Notes):
    """Saves its conversation, but restores nothing on load (answers as if it had)."""

    async def load_state(self, state: AgentState, context_id: str | None) -> str:
        self.loaded.append((state, context_id))
        return context_id or new_context_id()


async def test_the_snapshot_round_trip_passes_on_an_agent_that_restores_and_fails_on_one_that_restores_nothing(
    settings,
    trusting,  # noqa: F811 - the fixture imported above
):
    good = Notes()
    async with sdk_agent(agent=good) as url:
        result = await validate_in_run(settings, "verify_a2a_snapshot", url)
    assert result.score.passed and failed(result) == [], text(result)
    assert {"snapshot.save_objects", "snapshot.load_objects", "snapshot.recall"} <= {
        c["name"] for c in checks(result) if c["passed"]
    }
    assert [c for _, c in good.loaded] and all(c.startswith("agent-env-validator-restored-") for _, c in good.loaded)
    kept = open_stores(settings).objects.list("runs/")
    assert not [k for k in kept if "/validators/verify_a2a_snapshot/snapshot/" in k]  # the probe's objects: removed

    forgetful = Amnesiac()
    async with sdk_agent(agent=forgetful) as url:
        result = await validate_in_run(settings, "verify_a2a_snapshot", url)
    assert not result.score.passed and required_failures(result) == ["snapshot.recall"], text(result)
    assert forgetful.loaded  # it was handed the saved state: it saved and loaded, but went on from nothing
    assert "code word" in text(result)


async def test_a_snapshot_save_that_writes_nothing_fails_naming_the_save(settings, trusting):  # noqa: F811
    async def claims_saved(request: Request) -> JSONResponse:
        body = await request.json()
        return (
            JSONResponse({"context_id": body["context_id"], "objects": {}})
            if "objects" in body
            else JSONResponse({"detail": "objects: field required"}, status_code=400)
        )

    async with sdk_agent(Route("/ext/snapshot", claims_saved, methods=["POST"]), agent=Notes()) as url:
        result = await validate_in_run(settings, "verify_a2a_snapshot", url)
    assert required_failures(result) == ["snapshot.save_objects"], text(result)


async def test_trajectory_task_objects_are_checked_in_the_store_and_fail_when_the_agent_writes_nothing(
    settings,
    trusting,  # noqa: F811
):
    async with sdk_agent() as url:
        result = await validate_in_run(settings, "verify_a2a_trajectory", url)
    assert result.score.passed and failed(result) == [], text(result)
    assert "trajectory.task_objects" in {c["name"] for c in checks(result) if c["passed"]}

    async def claims_written(request: Request) -> JSONResponse:
        body = await request.json()
        if "objects" in body:  # answered as if it had uploaded, but nothing was put through the grant
            return JSONResponse({"objects": {"trajectory": {"size_bytes": 2, "sha256": "0" * 64}}})
        return JSONResponse({"trajectory": []})

    async with sdk_agent(Route("/ext/trajectory", claims_written, methods=["POST"])) as url:
        result = await validate_in_run(settings, "verify_a2a_trajectory", url)
    assert required_failures(result) == ["trajectory.task_objects"], text(result)
    assert "wrote nothing" in text(result)  # it claimed a write: held to it, required


SKILL_CONFIG_BUNDLES = {
    "uri": "urn:agentenv:skill-config/v1",
    "params": {
        "endpoint": "/ext/skill-config",
        "methods": {
            "add": {
                "method": "POST",
                "request": {
                    "oneOf": [
                        {"required": ["name", "description", "skill_md"]},
                        {"required": ["name", "description", "skill_bundle"]},
                    ]
                },
            },
            "list": {"method": "GET", "response": {"required": ["skills"]}},
        },
    },
}


@contextlib.asynccontextmanager
async def bundle_agent(on_bundle: str):
    """A hand-written agent taking skills inline and as bundles. `on_bundle`: "read" (reads each file through its
    grant and keeps the skill), "forget" (answers 2xx, keeps nothing), "refuse" (400)."""
    import tempfile
    from pathlib import Path

    from agentenv_protocol.transfers import ReadObject, download

    skills: dict[str, dict[str, str]] = {}

    async def add(request: Request) -> JSONResponse:
        body = await request.json()
        if "skill_bundle" in body:
            if on_bundle == "refuse":
                return JSONResponse({"detail": "bundles are not taken"}, status_code=400)
            if on_bundle == "forget":
                return JSONResponse({"name": body["name"]})
            with tempfile.TemporaryDirectory() as folder:
                for item in body["skill_bundle"]["files"]:
                    await download(ReadObject.model_validate(item["object"]), Path(folder) / item["path"])
                skill_md = (Path(folder) / "SKILL.md").read_text()
        else:
            skill_md = body["skill_md"]
        skills[body["name"]] = {"description": body["description"], "skill_md": skill_md}
        return JSONResponse({"name": body["name"]})

    async def listed(request: Request) -> JSONResponse:
        return JSONResponse({"skills": {n: {"description": s["description"]} for n, s in skills.items()}})

    routes = (Route("/ext/skill-config", add, methods=["POST"]), Route("/ext/skill-config", listed, methods=["GET"]))
    async with card_only([SKILL_CONFIG_BUNDLES], *routes) as url:
        yield url, skills


async def test_a_skill_bundle_is_given_by_read_grants_and_a_mutant_that_drops_or_refuses_it_fails(
    settings,
    trusting,  # noqa: F811
):
    async with bundle_agent("read") as (url, skills):
        result = await validate_in_run(settings, "verify_a2a_skill_config", url)
    assert result.score.passed and failed(result) == [], text(result)
    assert {"skill_config.add_bundle", "skill_config.list_shows_bundled"} <= {
        c["name"] for c in checks(result) if c["passed"]
    }
    bundled = [s for n, s in skills.items() if "-bundle-" in n]
    assert len(bundled) == 1 and "added as a bundle" in bundled[0]["skill_md"]  # read through the grant

    async with bundle_agent("forget") as (url, _):
        result = await validate_in_run(settings, "verify_a2a_skill_config", url)
    assert required_failures(result) == ["skill_config.list_shows_bundled"], text(result)
    async with bundle_agent("refuse") as (url, _):
        result = await validate_in_run(settings, "verify_a2a_skill_config", url)
    # a refusal, through this install's own loopback grant server: optional (an agent may not reach or trust it)
    assert failed(result) == ["skill_config.add_bundle"] and required_failures(result) == [], text(result)
    assert "HTTP 400" in text(result) and "SSL_CERT_FILE=" in text(result)


async def test_a_reference_framework_agent_passes_the_checks_through_grants(
    settings,
    side_script,  # noqa: F811 - the fixture imported above
):
    """The reference framework's agent that keeps notes and saves them (test_object_transfers' keeper), trusting
    this install's grants: its snapshot round trip, skill bundle and trajectory objects all pass."""
    from agent_env.stores.local_tls import trust_bundle

    trust = trust_bundle(settings.state_dir / "tls")
    with side_script("keeper", REFERENCE_SNAPSHOT_AGENT, ready=A2A_CARD, env={"SSL_CERT_FILE": str(trust)}) as base:
        url = base + "/"
        results = {
            name: await validate_in_run(settings, name, url)
            for name in ("verify_a2a_snapshot", "verify_a2a_skill_config", "verify_a2a_trajectory")
        }
    for result in results.values():
        assert result.score.passed and failed(result) == [], text(result)
    passed = {c["name"] for r in results.values() for c in checks(r) if c["passed"]}
    assert {"snapshot.recall", "skill_config.list_shows_bundled", "trajectory.task_objects"} <= passed


async def test_skill_bundle_object_url_names_the_bundle_given_which_stays_in_the_store(settings, trusting):  # noqa: F811
    objects = open_stores(settings).objects
    objects.put("bundles/mine/SKILL.md", b"---\nname: mine\ndescription: ours\n---\nSay MINE-TOKEN.\n")
    objects.put("bundles/mine/notes/extra.txt", b"more")
    async with bundle_agent("read") as (url, skills):
        result = await validate_in_run(
            settings, "verify_a2a_skill_config", url, skill_bundle_object_url="bundles/mine/"
        )
        assert result.score.passed, text(result)
        assert [s["skill_md"] for n, s in skills.items() if "-bundle-" in n] == [
            objects.get("bundles/mine/SKILL.md").decode()
        ]
        assert objects.exists("bundles/mine/notes/extra.txt"), "the caller's bundle is not the validator's to delete"
        with pytest.raises(Exception, match="holds no SKILL.md"):
            await validate_in_run(settings, "verify_a2a_skill_config", url, skill_bundle_object_url="bundles/none/")
    for escape in ("../runs/", "s3://bucket/k/", "/abs/", "bundles/mine"):
        with pytest.raises(ValueError, match="not a key prefix"):
            catalog.get("verify_a2a_skill_config").config(url=url, skill_bundle_object_url=escape)
