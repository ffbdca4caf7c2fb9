"""The env validators of protocol v1 (agent_env/validators, their step types and `agent-env env validate`), over real
HTTP on 127.0.0.1: they pass on our env servers (`env serve`, a gateway instance) and on an env written with the
reference env SDK (in a side venv: it needs mcp<2), and FAIL, naming the check, on one-fault mutants of a good
server: a card missing a required field, a snake_case card, a tool on the card that MCP lacks, JSON-RPC errors
sent as HTTP errors, a data plane that answers although the card offers none."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import free_port
from explorer_util import serving
from gateway_util import running_gateway, support_spec
from starlette.responses import JSONResponse
from test_protocol_agents import reference_python  # noqa: F401 - the side venv's fixture

from agent_env.cli.env_cmd import resolve_app
from agent_env.envs.serve import create_app
from agent_env.spec.run import RunStatus
from agent_env.validators import env_card, env_protocol, mcp_tools, spec_conformance, universe
from agent_env.validators.gate import GateVerdict, aggregate
from agent_env.validators.report import ValidationReport
from agent_env.validators.target import EnvTarget

CARD = "/.well-known/agent-env.json"
AGENT_ENV = str(Path(sys.executable).parent / "agent-env")


async def validate(target: EnvTarget) -> list[ValidationReport]:
    card_report, card = await env_card.verify_card(target)
    conformance, _ = await spec_conformance.verify_conformance(target, card)
    return [
        card_report,
        await env_protocol.verify_protocol(target, card),
        await mcp_tools.verify_tools(target, card),
        conformance,
    ]


def failed(reports: list[ValidationReport]) -> dict[str, str]:
    """Failed required checks by name: their problem and fix."""
    return {c.name: f"{c.problem} (fix: {c.fix})" for r in reports for c in r.checks if c.required and not c.passed}


@pytest.fixture(scope="module")
def good_card(tmp_path_factory) -> dict[str, Any]:
    with serving(create_app(resolve_app("notes"), tmp_path_factory.mktemp("card"))) as base:
        return httpx.get(base + CARD).json()


@contextlib.contextmanager
def mutant(
    folder: Path,
    *,
    card: dict[str, Any] | None = None,
    http_errors: bool = False,
    answers: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    documents: dict[str, Any] | None = None,
) -> Iterator[str]:
    """`env serve notes` with one fault: another card served, the data plane's JSON-RPC errors sent with an HTTP
    error status, its answers rewritten (`answers`), or more documents served (path -> JSON)."""
    inner = create_app(resolve_app("notes"), folder)
    served = {**({CARD: card} if card is not None else {}), **(documents or {})}

    async def app(scope, receive, send):
        if scope["type"] == "http" and scope["path"] in served:
            await JSONResponse(served[scope["path"]])(scope, receive, send)
            return
        if scope["type"] == "http" and (http_errors or answers) and scope["path"] == "/agentenv":
            started: dict[str, Any] = {}

            async def rewritten(message):
                if message["type"] == "http.response.start":
                    started.update(message)  # held until the body is seen
                    return
                body = message.get("body", b"")
                if http_errors and b'"error"' in body:
                    started["status"] = 400
                if answers is not None:
                    body = json.dumps(answers(json.loads(body))).encode()
                    started["headers"] = [(k, v) for k, v in started["headers"] if k != b"content-length"]
                    started["headers"].append((b"content-length", str(len(body)).encode()))
                await send(started)
                await send({**message, "body": body})

            await inner(scope, receive, rewritten)
            return
        await inner(scope, receive, send)

    with serving(app) as base:
        yield base


# -- they pass on ours --


async def test_env_serve_passes_every_validator(tmp_path):
    with serving(create_app(resolve_app("notes"), tmp_path)) as base:
        reports = await validate(EnvTarget.of_url(base))
    assert failed(reports) == {}
    assert all(r.passed for r in reports)
    assert {c.name for c in reports[1].checks} >= {
        "rpc.unknown_method",
        "rpc.parse_error",
        "data/add.empty_parts",
        "data/reset.result",
        "operations.match_card",
        "rpc.errors_http_200",
    }


async def test_a_gateway_instance_passes_every_validator(tmp_path):
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(support_spec())
        role = {"authorization": f"Bearer {await admin.token('desk-1', 'sam')}"}
        target = EnvTarget(
            base=f"{base}/envs/desk-1",
            card_headers=role,
            rpc_headers={"authorization": f"Bearer {gateway.admin_token}"},
            mcp_headers=role,
        )
        reports = await validate(target)
    assert failed(reports) == {}
    tools = next(c for c in reports[3].checks if c.name == "spec.matches_tools")
    assert tools.passed  # the gateway's OpenAPI document of the role's REST tools was compared with MCP


async def test_a_target_is_sent_no_credential_off_its_origin():
    target = EnvTarget(base="http://127.0.0.1:1/envs/x", mcp_headers={"authorization": "Bearer secret"})
    elsewhere = target.mcp_url({"additionalInterfaces": [{"url": "http://evil.example/mcp", "transport": "mcp"}]})
    assert elsewhere == "http://evil.example/mcp"
    assert target.headers_for(elsewhere, target.mcp_headers) == {}
    assert target.mcp_url({}) == "http://127.0.0.1:1/envs/x/mcp"


# -- and fail, naming the check, on one fault --


async def test_a_card_missing_a_required_field_fails_naming_it(tmp_path, good_card):
    card = {k: v for k, v in good_card.items() if k != "preferredTransport"}
    with mutant(tmp_path, card=card) as base:
        reports = await validate(EnvTarget.of_url(base))
    problems = failed(reports)
    assert list(problems) == ["card.preferredTransport"], problems
    assert "no 'preferredTransport'" in problems["card.preferredTransport"]


async def test_a_snake_case_card_fails_naming_the_key_and_its_spelling(tmp_path, good_card):
    card = dict(good_card)
    card["protocol_version"] = card.pop("protocolVersion")
    with mutant(tmp_path, card=card) as base:
        problems = failed(await validate(EnvTarget.of_url(base)))
    assert set(problems) == {"card.protocolVersion", "card.key_spelling"}, problems
    assert "rename 'protocol_version' to 'protocolVersion'" in problems["card.protocolVersion"]


async def test_a_tool_on_the_card_that_mcp_lacks_fails_naming_it(tmp_path, good_card):
    card = copy.deepcopy(good_card)
    card["capabilities"]["tools"].append({"name": "ghost", "description": "x", "inputSchema": {"type": "object"}})
    with mutant(tmp_path, card=card) as base:
        problems = failed(await validate(EnvTarget.of_url(base)))
    assert list(problems) == ["mcp.tools_match_card"], problems
    assert "on the card but not over MCP: ghost" in problems["mcp.tools_match_card"]


async def test_json_rpc_errors_sent_as_http_errors_fail(tmp_path):
    with mutant(tmp_path, http_errors=True) as base:
        problems = failed(await validate(EnvTarget.of_url(base)))
    assert "rpc.errors_http_200" in problems, problems
    assert "came with HTTP 400" in problems["rpc.errors_http_200"]
    assert set(problems) <= {"rpc.errors_http_200"}, problems


async def test_a_data_plane_answering_though_the_card_offers_none_fails(tmp_path, good_card):
    card = copy.deepcopy(good_card)
    card["capabilities"]["operations"] = []
    with mutant(tmp_path, card=card) as base:
        problems = failed(await validate(EnvTarget.of_url(base)))
    assert list(problems) == ["operations.match_card"], problems
    assert "the card offers none" in problems["operations.match_card"]
    assert "data/get answered a result" in problems["operations.match_card"]


async def test_an_export_that_loses_a_column_fails_the_universe_round_trip(tmp_path):
    def without_text(answer: dict[str, Any]) -> dict[str, Any]:
        for part in (answer.get("result") or {}).get("parts") or []:
            for row in part["data"].get("notes", []):
                row.pop("text", None)
        return answer

    note = {"key": "k", "text": "hello", "updated_at": "2026-01-01T00:00:00Z"}
    with mutant(tmp_path, answers=without_text) as base:
        target = EnvTarget.of_url(base)
        card, _ = await env_card.fetch_card(target)
        report, verdict = await universe.round_trip(target, card, {"notes": {"notes": [note]}})
    problems = failed([report])
    assert list(problems) == ["universe.notes.loads", "universe.round_trip"], problems
    assert "notes[0] is not in the export" in problems["universe.notes.loads"]
    assert "reloading export 1" in problems["universe.round_trip"]  # (and its lossy export cannot be loaded back)
    assert verdict["compatible"] is False


async def test_the_round_trip_passes_values_equal_in_meaning(tmp_path):
    note = {"key": "k", "text": "hello", "updated_at": "2026-01-01T00:00:00+00:00"}  # stored and exported as ...Z
    with serving(create_app(resolve_app("notes"), tmp_path)) as base:
        target = EnvTarget.of_url(base)
        card, _ = await env_card.fetch_card(target)
        report, verdict = await universe.round_trip(target, card, {"notes": {"notes": [note]}})
    assert report.passed, report.report()
    assert verdict["environments"]["notes"]["compatible"]


async def test_an_openapi_document_promising_what_mcp_lacks_fails(tmp_path):
    body = {"type": "object", "required": ["key"], "properties": {"key": {"type": "integer"}}}
    document = {
        "openapi": "3.1.0",
        "paths": {
            "/tools/read_note": {
                "post": {"operationId": "read_note", "requestBody": {"content": {"application/json": {"schema": body}}}}
            },
            "/tools/archive": {"post": {"operationId": "archive"}},
        },
    }
    with mutant(tmp_path, documents={"/openapi.json": document}) as base:
        problems = failed(await validate(EnvTarget.of_url(base)))
    assert list(problems) == ["spec.matches_tools"], problems
    assert "operation 'archive' has no MCP tool" in problems["spec.matches_tools"]
    assert "read_note.key: the document says integer, the tool takes string" in problems["spec.matches_tools"]


# -- an env written with the reference env SDK (mcp<2: its own venv) --

REFERENCE_ENV = '''
import sys
from agentenv_protocol import AgentEnvEnvironment, add_data, environment_card, get_data, reset_data, tool
from agentenv_protocol.types import DataPart

@environment_card(name="ledger")
class Ledger(AgentEnvEnvironment):
    entries = []

    @tool()
    def balance(self, account: str) -> int:
        """The balance of an account."""
        return sum(e["amount"] for e in self.entries if e.get("account") == account)

    @reset_data
    def reset(self):
        self.entries.clear()

    @add_data
    def load(self, parts):
        for part in parts:
            self.entries += part.data["entries"]

    @get_data
    def export(self):
        return [DataPart(data={"entries": self.entries})]

Ledger().serve()
'''


@pytest.mark.processes
async def test_an_env_written_with_the_reference_sdk_passes(reference_python, tmp_path):  # noqa: F811
    script = tmp_path / "ledger.py"
    script.write_text(REFERENCE_ENV)
    port = free_port()
    env = {**os.environ, "MCP_HOST": "127.0.0.1", "MCP_PORT": str(port)}
    log = (tmp_path / "ledger.log").open("w")
    process = subprocess.Popen([str(reference_python), str(script)], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + CARD).status_code == 200:
                    break
            assert process.poll() is None, (tmp_path / "ledger.log").read_text()
            await __import__("asyncio").sleep(0.05)
        reports = await validate(EnvTarget.of_url(base))
    finally:
        process.terminate()
        process.wait(10)
    assert failed(reports) == {}, "\n".join(r.report() for r in reports)


# -- as steps of a run --


async def test_the_validators_run_as_steps_and_gate_their_verdicts(run_task):
    universe = {"notes": {"notes": [{"key": "k", "text": "hello", "updated_at": "2026-01-01T00:00:00Z"}]}}
    on = {"env": "deploy"}
    steps = [
        {"id": "deploy", "type": "deploy_env", "config": {"env_id": "notes"}},
        *(
            {"id": sid, "type": kind, "depends_on": ["deploy"], "config": on}
            for sid, kind in [
                ("card", "verify_env_card"),
                ("protocol", "verify_env_core_protocol"),
                ("tools", "verify_mcp_tool_schema"),
                ("spec", "verify_spec_conformance"),
                ("assess", "verify_mcp_env_assessment"),
            ]
        ),
        {
            "id": "trip",
            "type": "verify_universe_load_export_roundtrip",
            "depends_on": ["deploy", "protocol"],
            "config": {**on, "data": universe},
        },
        {
            "id": "compat",
            "type": "combine_universe_verdicts",
            "depends_on": ["trip", "assess"],
            "config": {"roundtrip": "trip", "judge": "assess"},
        },
        {
            "id": "gate",
            "type": "validation_gate_aggregator",
            "depends_on": ["card", "protocol", "tools", "spec", "compat"],
            "config": {"inputs": ["card", "protocol", "tools", "spec", "compat"]},
        },
    ]
    state = await run_task({"id": "validators", "steps": steps}, timeout=120)
    assert state.status is RunStatus.PASSED, {
        sid: (v.error, [c for c in (v.outputs.get("report") or {}).get("checks", []) if not c["passed"]])
        for sid, v in state.steps.items()
        if v.error or not v.outputs.get("passed", True)
    }
    gate = state.steps["gate"].outputs
    assert gate["passed"] and gate["skipped_gates"] == [] and gate["failed_gates"] == []
    assert state.steps["compat"].outputs["verdict"]["environments"]["notes"]["compatible"]
    checks = [c["name"] for c in state.steps["assess"].outputs["report"]["checks"]]
    assert {"assessment.write_note", "assessment.read_note"} <= set(checks)


async def test_the_gate_fails_on_a_failed_or_missing_verdict(run_task, tmp_path, good_card):
    card = copy.deepcopy(good_card)
    card["capabilities"]["operations"] = []
    with mutant(tmp_path, card=card) as base:
        steps = [
            {"id": "protocol", "type": "verify_env_core_protocol", "config": {"url": base}},
            {"id": "card", "type": "verify_env_card", "config": {"url": base}},
            {
                "id": "gate",
                "type": "validation_gate_aggregator",
                "depends_on": ["protocol", "card"],
                "config": {"inputs": ["protocol", "card"]},
            },
        ]
        state = await run_task({"id": "gated", "steps": steps}, timeout=60)
    assert state.status is RunStatus.FAILED
    gate = state.steps["gate"]
    assert gate.outputs["failed_gates"] == ["protocol"] and not gate.outputs["passed"]
    assert "operations.match_card" in json.dumps(gate.outputs["report"])


def test_a_required_gate_without_a_verdict_fails_and_a_skipped_one_does_not():
    verdicts = [
        GateVerdict(step="card", status="succeeded", passed=True),
        GateVerdict(step="protocol", status="failed", passed=None),  # the validator itself broke
        GateVerdict(step="spec", status="succeeded", passed=True, skipped=True),
        GateVerdict(step="tools", status="succeeded", passed=False, failures=["mcp.tools_match_card"]),
    ]
    report = aggregate("validation_gate_aggregator", "run", verdicts, required=["card", "protocol", "spec"])
    assert not report.passed
    problems = {c.name: c.problem for c in report.checks if not c.passed}
    assert problems == {
        "gate.protocol": "step 'protocol' left no verdict (it failed)",
        "gate.tools": "step 'tools' failed: mcp.tools_match_card",
    }
    assert [c.name for c in report.checks if not c.passed and c.required] == ["gate.protocol"]  # tools: advisory here


# -- the command --


@pytest.mark.processes
def test_env_validate_end_to_end(tmp_path, good_card):
    env = {
        **os.environ,
        "AGENT_ENV_HOME": str(tmp_path / "home"),
        "AGENT_ENV_SERVER_PORT": str(free_port()),
        "AGENT_ENV_UI_PORT": str(free_port()),
        "AGENT_ENV_GATEWAY_PORT": str(free_port()),
        "AGENT_ENV_TASK_QUEUE": "agentenv-validate-tests",
    }

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([AGENT_ENV, *args], capture_output=True, text=True, env=env, timeout=180)

    try:
        with serving(create_app(resolve_app("notes"), tmp_path / "good")) as base:
            ok = cli("env", "validate", base)
            assert ok.returncode == 0, ok.stdout + ok.stderr
            assert "✓ card.protocolVersion" in ok.stdout and "✓ rpc.errors_http_200" in ok.stdout
            as_json = cli("env", "validate", base, "--json")
            assert as_json.returncode == 0, as_json.stderr
            doc = json.loads(as_json.stdout)
            read_only = json.loads(cli("env", "validate", base, "--json", "--read-only").stdout)
            checked = {c["name"] for r in read_only["reports"] for c in r["checks"]}
            assert read_only["passed"] and "data/reset.result" not in checked and "data/get.result" in checked
            assert doc["passed"] and {r["validator"] for r in doc["reports"]} >= {
                "verify_env_card",
                "verify_mcp_tool_schema",
            }
            # warm, the background worker runs it (as `agent-env run`): the command loads neither typer nor Temporal
            probe = (
                "import sys\nfrom agent_env.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
                "    print(e.code, 'typer' in sys.modules, 'temporalio' in sys.modules, file=sys.stderr)\n"
            )
            fast = subprocess.run(
                [sys.executable, "-c", probe, "env", "validate", base, "--json"],
                capture_output=True,
                text=True,
                env=env,
                timeout=180,
            )
            assert fast.stderr.split() == ["0", "False", "False"], fast.stderr
            warm = json.loads(fast.stdout)
            assert warm["passed"] and [r["validator"] for r in warm["reports"]] == [
                r["validator"] for r in doc["reports"]
            ]
        card = {k: v for k, v in good_card.items() if k != "name"}
        with mutant(tmp_path / "bad", card=card) as base:
            bad = cli("env", "validate", base)
            assert bad.returncode == 1, bad.stdout + bad.stderr
            assert "✗ card.name: the card has no 'name'" in bad.stdout
            bad_json = cli("env", "validate", base, "--json")
            assert bad_json.returncode == 1 and not json.loads(bad_json.stdout)["passed"]
        named = cli("env", "validate", "notes")
        assert named.returncode == 0, named.stdout + named.stderr
        assert "/envs/env-validate-" in named.stdout  # checked through the gateway
    finally:
        cli("server", "stop")
        cli("gateway", "stop")


async def test_the_gate_takes_the_frameworks_gates_by_name_for_an_env(run_task):
    """required_gates names the framework's gates (the verification a validator records): each is the validator
    steps of that type before the gate, of the env `env` (the framework's `env_id`) names; a gate no step gives fails it (fail-closed)."""
    steps = [
        {"id": "deploy", "type": "deploy_env", "config": {"env_id": "notes"}},
        {"id": "other", "type": "deploy_env", "config": {"env_id": "notes"}},
        {"id": "tools", "type": "verify_mcp_tool_schema", "depends_on": ["deploy"], "config": {"env": "deploy"}},
        {"id": "card", "type": "verify_env_card", "depends_on": ["other"], "config": {"env": "other"}},
        *(
            {"id": gid, "type": "validation_gate_aggregator", "depends_on": ["tools", "card"], "on_failure": "continue",
             "config": config}
            for gid, config in [
                ("named", {"env": "deploy", "required_gates": ["mcp_tool_schema"]}),
                ("defaults", {"env": "deploy"}),
                ("card_of_other", {"env": "deploy", "required_gates": ["environment_card"]}),
            ]
        ),
    ]  # fmt: skip
    state = await run_task({"id": "gates", "steps": steps}, timeout=120)
    named = state.steps["named"].outputs
    assert named["passed"] and named["failed_gates"] == [] and named["missing_gates"] == [], named
    defaults = state.steps["defaults"].outputs
    assert not defaults["passed"] and defaults["missing_gates"] == ["mcp_tool_correctness"], defaults
    assert "no verify_mcp_env_assessment step comes before" in json.dumps(defaults["report"])
    other = state.steps["card_of_other"].outputs
    assert other["missing_gates"] == ["environment_card"], "the card of another env's step is no gate of this one"
