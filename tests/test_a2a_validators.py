"""The A2A agent validators and `agent-env a2a-agent validate`: agents written with our SDK (a scripted agent that
uses the MCP server it is given) and with the protocol's reference framework (in its own virtualenv) pass; agents
with one fault each fail, and the report names the check. Every agent is a real server on 127.0.0.1, every
validator talks to it over HTTP, and the MCP check reads the real gateway's trajectory.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import uvicorn
from conftest import free_port
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from test_agents import serving
from test_protocol_agents import reference_agent, reference_python  # noqa: F401 - a fixture, used by name

from agent_env.agents.builtin import ScriptedAgent
from agent_env.agents.sdk import Agent, Turn, a2a_routes, agent_card
from agent_env.errors import BadInput
from agent_env.spec.agent import AgentRecord
from agent_env.temporal.validation import AGENT_VALIDATORS as VALIDATORS
from agent_env.temporal.validation import agent_validation_task as validation_task
from agent_env.validators import a2a_card
from agent_env.validators.report import ValidationReport

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
CLI_QUEUE = {"AGENT_ENV_TASK_QUEUE": "agentenv-cli-tests"}  # as tests/test_cli.py: CLI runs go to CLI workers
OURS = [v for v in VALIDATORS if v.startswith(("verify_a2a_agent_", "verify_a2a_core", "verify_a2a_role"))] + [
    "verify_a2a_system_prompt",
    "verify_a2a_modalities",
]


def scripted() -> Agent:
    """Our built-in scripted agent: each task, it searches the mail of the MCP server it was given."""
    record = AgentRecord(
        name="mail-searcher",
        type="scripted",
        config={"turns": [[{"tool": "search_messages", "arguments": {"query": "invoice"}}, {"say": "I searched."}]]},
    )
    return ScriptedAgent(record)


class IgnoresItsServer(Agent):
    """Takes an MCP server through mcp-config/v1 (the SDK serves it), then answers from memory."""

    name = "forgetful"

    async def answer(self, turn: Turn) -> str:
        return "There are no invoices (I did not look)."


def agent_app(agent: Agent, url: str, *, card_edit: Callable[[dict], None] | None = None) -> Starlette:
    """`agent` served by our SDK with the extensions, as reached at `url`; `card_edit` changes the card it serves."""
    routes, _ = a2a_routes(agent, url, extensions=True)
    if card_edit is not None:
        card = MessageToDict(agent_card(agent, url, extensions=True))
        card_edit(card)

        async def edited(request):
            return JSONResponse(card)

        routes = [Route("/.well-known/agent-card.json", edited)] + routes  # matched first
    return Starlette(routes=routes)


@contextlib.asynccontextmanager
async def served(agent: Agent, **kw):
    app = Starlette()
    async with serving(app) as base:
        app.router.routes.extend(agent_app(agent, base + "/", **kw).routes)
        yield base + "/"


async def validate(run_task, url: str) -> dict[str, ValidationReport]:
    """The validation task as `a2a-agent validate` runs it; each validator's report."""
    task, _ = validation_task(url, 30)
    state = await run_task(task, timeout=120)
    assert state.steps["mail"].status == "succeeded", state.steps["mail"].error
    reports = {}
    for name in OURS:
        step = state.steps[name]
        assert step.status == "succeeded", f"{name}: {step.error}"
        reports[name] = ValidationReport.model_validate(step.outputs["report"])
        assert step.score is not None and step.score.passed is reports[name].passed
    return reports


def failed_checks(report: ValidationReport) -> list[str]:
    return [c.name for c in report.failures if c.required]


async def test_our_sdks_scripted_agent_passes_every_validator(run_task):
    async with served(scripted()) as url:
        reports = await validate(run_task, url)
    for report in reports.values():
        assert report.passed, report.report()
    mcp = {c.name: c for c in reports["verify_a2a_agent_mcp"].checks}
    assert mcp["mcp.tool_called"].passed and mcp["mcp.list_hides_headers"].passed
    card = {c.name for c in reports["verify_a2a_agent_card"].checks if c.passed}
    assert {"ext.mcp-config/v1.add.served", "ext.agent-config/v1.get.served", "ext.trajectory/v1.get.served"} <= card
    assert all(c.problem and c.fix for r in reports.values() for c in r.failures)  # optional ones say why, and how


async def test_a_reference_framework_agent_passes_every_validator(run_task, reference_python, tmp_path):  # noqa: F811
    with reference_agent(reference_python, tmp_path) as url:
        reports = await validate(run_task, url)
        async with httpx.AsyncClient() as http:
            card = (await http.get(url + ".well-known/agent-card.json")).json()
    for report in reports.values():
        assert report.passed, report.report()
    identity = {c.name: c for c in reports["verify_a2a_agent_config_identity"].checks}
    assert identity["agent_config.identity.card"].passed and identity["agent_config.identity.card"].required
    assert card["name"] == "reference", "the identity check puts the agent's own name back"
    protocol = {c.name: c for c in reports["verify_a2a_core_protocol"].checks}
    assert protocol["protocol.task_not_found"].passed and protocol["protocol.method_not_found"].passed


async def test_an_agent_that_ignores_its_mcp_server_fails_the_mcp_check(run_task):
    async with served(IgnoresItsServer()) as url:
        reports = await validate(run_task, url)
    report = reports["verify_a2a_agent_mcp"]
    assert failed_checks(report) == ["mcp.tool_called"], report.report()
    assert "made no call to the MCP server it was given" in report.report()
    assert reports["verify_a2a_agent_card"].passed and reports["verify_a2a_core_protocol"].passed


async def test_an_extension_declared_but_not_served_fails_the_card_check():
    def declare_peer_agents(card: dict) -> None:
        card["capabilities"]["extensions"].append(
            {"uri": "urn:agentenv:peer-agents/v1", "params": {"endpoint": "/ext/peer-agents"}}
        )

    async with served(scripted(), card_edit=declare_peer_agents) as url, httpx.AsyncClient() as http:
        report = await a2a_card.verify_agent_card(http, url)
    assert failed_checks(report) == ["ext.peer-agents/v1.set.served", "ext.peer-agents/v1.list.served"]
    assert "answered 404: not served" in report.report() and not report.score().passed


async def test_a_card_missing_a_required_field_fails_naming_it():
    async with (
        served(scripted(), card_edit=lambda card: card.pop("description")) as url,
        httpx.AsyncClient() as http,
    ):
        report = await a2a_card.verify_agent_card(http, url)
    assert failed_checks(report) == ["card.description"]
    finding = report.failures[0]
    assert "missing" in finding.problem and "description" in finding.fix


async def test_an_operation_declared_on_another_origin_is_not_probed_there():
    """A card may not send the validator (and the role token the MCP check hands over) elsewhere."""
    hits = []

    async def elsewhere(request):
        hits.append(request.url.path)
        return JSONResponse({})

    decoy = Starlette(routes=[Route("/{path:path}", elsewhere, methods=["GET", "POST"])])

    async with serving(decoy) as other:

        def point_away(card: dict) -> None:
            for ext in card["capabilities"]["extensions"]:
                if ext["uri"] == "urn:agentenv:mcp-config/v1":
                    ext["params"]["methods"]["add"]["endpoint"] = other + "/ext/mcp-config"

        async with served(scripted(), card_edit=point_away) as url, httpx.AsyncClient() as http:
            report = await a2a_card.verify_agent_card(http, url)
    assert "ext.mcp-config/v1.params" in failed_checks(report)
    assert "ext.mcp-config/v1.add.served" in failed_checks(report) and hits == []


async def test_a_role_token_the_agent_echoes_never_reaches_the_report(run_task):
    """The MCP check hands the agent a role token; an agent that answers it back (in a refusal) gets its report
    written without it: reports go into the run's history."""
    card: dict = {}

    async def echo_refusal(request):
        return JSONResponse({"detail": json.loads(await request.body())["headers"]}, status_code=400)

    async def serve_card(request):
        return JSONResponse(card)

    app = Starlette(
        routes=[
            Route("/.well-known/agent-card.json", serve_card),
            Route("/ext/mcp-config", echo_refusal, methods=["POST"]),
        ]
    )
    async with serving(app) as base:
        card.update(MessageToDict(agent_card(IgnoresItsServer(), base + "/", extensions=True)))
        task, _ = validation_task(base + "/", 30)
        task["steps"] = [s for s in task["steps"] if s["id"] in ("mail", "verify_a2a_agent_mcp")]
        state = await run_task(task, timeout=60)
    report = ValidationReport.model_validate(state.steps["verify_a2a_agent_mcp"].outputs["report"])
    assert failed_checks(report) == ["mcp.add"] and "[role token]" in report.report()
    assert "aet_" not in state.model_dump_json()


# -- told by other steps of the run (the framework's fields) --


class Parrot(Agent):
    """Says back its system prompt and what it was asked: a system prompt's token reaches its answer."""

    name = "parrot"

    async def answer(self, turn: Turn) -> str:
        return f"{turn.system_prompt} | You said: {turn.prompt}"


def step(id: str, type: str, after: list[str], **config) -> dict:
    return {"id": id, "type": type, "depends_on": after, "on_failure": "continue", "config": config}


def report_of(state, step_id: str) -> dict[str, bool]:
    assert state.steps[step_id].status == "succeeded", state.steps[step_id].error
    return {c.name: c.passed for c in ValidationReport.model_validate(state.steps[step_id].outputs["report"]).checks}


async def test_validators_take_the_frameworks_fields_naming_the_agent_its_prompts_and_a_verifier(run_task):
    """A deployed agent named as the framework names it (`a2a_agent_id`, `agent_name`), the prompts other steps
    sent it (`prompt_id`, `peer_prompt_id` with `expected_token`, `probes`) and a rubrics_verifier's verdict
    (`rubric_verifier_id`, `rubric_criterion_id`) are graded into the validators' reports."""
    async with served(Parrot()) as url:
        record = {"name": "parrot", "type": "a2a", "config": {"url": url}}
        rubric = {
            "prompt_id": "p-ask",
            "default_model": "fake",
            "output_format": "rubric_binary",
            "criteria": [
                {"id": "echoed", "description": "The agent said 'PEER-TOKEN-42'."},
                {"id": "invented", "description": "The agent said 'NEVER-SAID-7'."},
            ],
        }
        task = {
            "id": "linked",
            "steps": [
                {"id": "deploy", "type": "deploy_agent", "config": {"record": record}},
                step(
                    "ask", "prompt_agent", ["deploy"], agent="deploy", prompt="relay PEER-TOKEN-42", prompt_id="p-ask"
                ),
                step("image", "prompt_agent", ["deploy"], agent="deploy", prompt="describe a red square"),
                step("rubric", "rubrics_verifier", ["ask"], **rubric),
                step("protocol", "verify_a2a_core_protocol", ["ask"], a2a_agent_id="parrot", prompt_id="p-ask"),
                step(
                    "peers",
                    "verify_a2a_peer_agents",
                    ["ask"],
                    agent_name="deploy",
                    peer_prompt_id="p-ask",
                    expected_token="PEER-TOKEN-42",
                ),
                step(
                    "modalities",
                    "verify_a2a_modalities",
                    ["ask", "image"],
                    a2a_agent_id="parrot",
                    probes=[
                        {"modality": "image", "prompt_id": "image", "expected": "Red Square"},
                        {"modality": "pdf", "prompt_id": "p-ask", "expected": "a page of text"},
                    ],
                ),
                step(
                    "snapshot",
                    "verify_a2a_snapshot",
                    ["rubric"],
                    a2a_agent_id="parrot",
                    rubric_verifier_id="rubric",
                    rubric_criterion_id="echoed",
                ),
                step("install", "verify_a2a_install", ["rubric"], agent_name="parrot", rubric_verifier_id="rubric"),
                step(
                    "system",
                    "verify_a2a_system_prompt",
                    ["deploy"],
                    a2a_agent_id="parrot",
                    poll_interval_seconds=0.05,
                    timeout_seconds=30,
                ),
            ],
        }
        state = await run_task(task, timeout=120)
    assert report_of(state, "protocol")["linked.prompt_answered"]
    assert report_of(state, "peers")["linked.peer_call"]
    modalities = report_of(state, "modalities")
    assert modalities["modality.image.probe"] and not modalities["modality.pdf.probe"]
    assert report_of(state, "snapshot")["linked.rubric.echoed"]
    install = ValidationReport.model_validate(state.steps["install"].outputs["report"])
    (rubric_finding,) = [c for c in install.checks if c.name == "linked.rubric"]
    assert not rubric_finding.passed and "invented" in rubric_finding.problem and not install.passed
    assert report_of(state, "system")["system_prompt.followed"]
    assert state.steps["system"].outputs["passed"]


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"prompt_id": "nowhere"}, "names no prompt_agent step"),
        ({"url": "http://127.0.0.1:9/", "expected_token": "T"}, "go together"),
        ({"url": "http://127.0.0.1:9/", "a2a_agent_version": 3}, "pinned there"),
        ({"url": "http://127.0.0.1:9/", "poll_interval_seconds": 1}, "verify_a2a_system_prompt"),
        ({}, "give the agent's `url`"),
    ],
)
def test_what_a_validator_cannot_be_told_is_refused_before_a_run_naming_the_field(config, says):
    from agent_env.planning.tasks import parse_task

    task = {"id": "t", "steps": [{"id": "v", "type": "verify_a2a_core_protocol", "config": config}]}
    with pytest.raises(BadInput) as e:
        parse_task(task, "test task")
    assert says in str(e.value)


def test_a_validator_checks_a_deployed_agent_at_its_own_url_never_one_the_gateway_hosts():
    from agent_env.steps.builtin.a2a_validators import A2AAgentCheck

    own = A2AAgentCheck(agent="a", agent_deployed={"url": "http://127.0.0.1:9/", "hosted": False})
    assert own.agent_url() == "http://127.0.0.1:9/"
    with pytest.raises(BadInput, match="hosted by the gateway"):
        A2AAgentCheck(agent="a", agent_deployed={"url": "http://127.0.0.1:9/agents/r.a/", "hosted": True}).agent_url()
    with pytest.raises(BadInput, match="no agent at an http"):
        A2AAgentCheck(agent="a", agent_deployed={"url": "file:///etc/passwd"}).agent_url()


# -- the command --


@contextlib.contextmanager
def in_a_thread(make_app: Callable[[str], Starlette]):
    """An agent served from a thread of its own (the CLI's worker reaches it while this test waits on it)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    server = uvicorn.Server(uvicorn.Config(make_app(url), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive()
        threading.Event().wait(0.01)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(10)


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **CLI_QUEUE}
    return subprocess.run([AGENT_ENV, *args], capture_output=True, text=True, env=env, timeout=180)


@pytest.mark.processes
def test_the_command_passes_a_good_agent_and_fails_one_that_ignores_its_tools(server):
    with in_a_thread(lambda url: agent_app(scripted(), url)) as url:
        done = cli("a2a-agent", "validate", url)
        as_json = cli("a2a-agent", "validate", url, "--json")  # again: it uses the server this run gave it
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"PASSED: the A2A agent at {url}" in done.stdout and "✓ mcp.tool_called" in done.stdout
    for name in OURS:
        assert f"{name} {url}: passed" in done.stdout
    result = json.loads(as_json.stdout)
    assert as_json.returncode == 0 and result["passed"] is True and set(OURS) <= set(result["validators"])
    assert all(result["validators"][name]["passed"] for name in OURS)

    with in_a_thread(lambda url: agent_app(IgnoresItsServer(), url)) as url:
        failing = cli("a2a-agent", "validate", url, "--json")
    assert failing.returncode == 1, failing.stdout + failing.stderr
    result = json.loads(failing.stdout)
    assert result["passed"] is False and result["validators"]["verify_a2a_agent_card"]["passed"] is True
    mcp = result["validators"]["verify_a2a_agent_mcp"]
    assert mcp["passed"] is False
    assert [c["name"] for c in mcp["checks"] if not c["passed"]] == ["mcp.tool_called"]


@pytest.mark.processes
def test_the_command_refuses_what_is_not_a_url_and_fails_an_agent_that_is_not_there(server):
    bad = cli("a2a-agent", "validate", "localhost:9")
    assert bad.returncode == 2 and "not an http(s) URL" in bad.stderr
    nobody = cli("a2a-agent", "validate", f"http://127.0.0.1:{free_port()}/")
    assert nobody.returncode == 1
    assert "✗ card.served: GET" in nobody.stdout and "got no answer" in nobody.stdout and "FAILED" in nobody.stdout


def test_help_is_fast_and_light():
    probe = (
        "import atexit, sys\n"
        "heavy = ('temporalio', 'mcp', 'a2a', 'httpx', 'agentenv_protocol')\n"
        "atexit.register(lambda: print('LOADED', sorted({m.split('.')[0] for m in sys.modules} & set(heavy))))\n"
        "sys.argv = ['agent-env', 'a2a-agent', 'validate', '--help']\n"
        "from agent_env.cli import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "Validate the A2A agent at URL" in out.stdout
    assert "LOADED []" in out.stdout


def test_validators_not_installed_are_skipped_with_a_note(monkeypatch):
    from agent_env.step_types import catalog

    names = [n for n in catalog.names() if n != "verify_a2a_role"]
    monkeypatch.setattr(catalog, "names", lambda: names)
    task, notes = validation_task("http://127.0.0.1:9/", 30)
    assert "verify_a2a_role" not in {s["id"] for s in task["steps"]}
    assert "verify_a2a_role is not installed: skipped" in notes


@pytest.mark.parametrize(
    "args",
    [
        ["env", "validate", "notes"],
        ["env", "validate", "http://127.0.0.1:9/", "--json", "--read-only"],
        ["env", "validate", "notes", "--bundle", "b"],
        ["env", "validate", "notes", "--bundle=b", "--json"],
        ["env", "validate", "notes", "--bundle"],
        ["env", "validate", "notes", "--timeout", "5"],
        ["env", "validate"],
        ["a2a-agent", "validate", "http://127.0.0.1:9/"],
        ["a2a-agent", "validate", "http://127.0.0.1:9/", "--json", "--timeout", "30"],
        ["a2a-agent", "validate", "http://127.0.0.1:9/", "--timeout=2.5"],
        ["a2a-agent", "validate", "http://127.0.0.1:9/", "--timeout", "x"],
        ["a2a-agent", "validate", "http://127.0.0.1:9/", "--read-only"],
        ["a2a-agent", "validate", "localhost:9"],
        ["a2a-agent", "validate", "http://a/", "http://b/"],
        ["a2a-agent", "validate", "--help"],
    ],
)
def test_the_fast_path_reads_validate_as_typer_does_or_leaves_it_to_typer(args):
    """`main` reads `env validate`'s and `a2a-agent validate`'s options before typer loads (the background worker
    runs them warm); what it reads is what typer's command would be called with, the rest goes to typer."""
    import typer

    from agent_env.cli.commands import app
    from agent_env.cli.run_args import parse_validate

    command = typer.main.get_command(app).commands[args[0]].commands["validate"]  # type: ignore[attr-defined]
    try:
        params = command.make_context("validate", list(args[2:])).params
    except Exception:  # noqa: BLE001 - typer refused them, or printed help and exited
        params = None
    fast = parse_validate(args[0], list(args[2:]))
    if fast is None:
        return
    assert params is not None, f"{args}: read by the fast path, refused by typer"
    assert (fast.target, fast.json_out) == (params.get("target", params.get("url")), params["json_out"])
    if args[0] == "env":
        assert (fast.read_only, fast.bundle) == (params["read_only"], params["bundle"])
    else:
        assert fast.timeout_s == params["timeout"]
