"""deploy_agent takes the framework's fields that shape what is deployed: the agent's sandbox (its environment,
model endpoint, size, lifetime, network), its description, system prompt and skills, its registry version, and a
registry snapshot to restore it from. Real runs on the Temporal dev server, the agent in a local sandbox."""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
from pathlib import Path

import pytest
from test_agent_sandboxes import run, write_agent_bundle
from test_object_transfers import Notes, trusting  # noqa: F401 - a fixture
from test_security_secrets import temporal_history

from agent_env.errors import BadInput
from agent_env.planning.tasks import load_task, parse_task
from agent_env.providers import by_name
from agent_env.registry.store import Registry
from agent_env.spec.run import RunStatus
from agent_env.steps.builtin.agent_deploy_fields import NetworkPolicy
from agent_env.stores import open_stores
from agent_env.temporal import launch

PROBE = """
import hashlib, json, os

from agent_env.agents import sdk


class Probe(sdk.Agent):
    name = "shout"
    description = "its own description"

    async def answer(self, turn):
        key = os.environ.get("API_KEY", "")
        return json.dumps({
            "greeting": os.environ.get("GREETING"),
            "api_key_sha256": hashlib.sha256(key.encode()).hexdigest() if key else None,
            "litellm": os.environ.get("LITELLM_BASE_URL"),
            "system_prompt": turn.system_prompt,
            "description": turn.config.get("description"),
            "skills": sorted(s["name"] for s in turn.skills),
        })


sdk.serve(Probe(), os.environ["HOST"], int(os.environ["PORT"]))
"""

DEPLOYED = """
    id = "fields"
    [[steps]]
    id = "agent"
    type = "deploy_agent"
    [steps.config]
    agent = "shout"
    {fields}
    [[steps]]
    id = "ask"
    type = "prompt_agent"
    depends_on = ["agent"]
    config = {{ agent = "agent", prompt = "what do you see?", turn_deadline = "30s" }}
    """


def probe_bundle(root: Path, fields: str) -> Path:
    """The `shout` bundle with an agent that answers with what the run gave it."""
    bundle = write_agent_bundle(root, DEPLOYED.format(fields=textwrap.dedent(fields)))
    (bundle / "agents" / "shout" / "app" / "agent.py").write_text(PROBE)
    return bundle


async def test_a_sandboxed_agent_gets_the_steps_environment_prompt_description_skills_and_size(
    client, settings, worker, tmp_path, monkeypatch
):
    key = f"sk-probe-{os.urandom(8).hex()}"
    monkeypatch.setenv("AGENT_ENV_SECRET_PROBE_KEY", key)
    bundle = probe_bundle(
        tmp_path / "b",
        """
        agent_description = "the run's own probe"
        system_prompt = "Answer in JSON."
        litellm_base_url = "https://models.example.test/v1"
        cpu = 0.5
        memory_mb = 256
        disk_size_gb = 4
        ttl_seconds = 600
        metadata = { team = "evals" }
        env_vars = { GREETING = "hello", API_KEY = "secret:probe-key" }
        skills = [{ name = "tidy", description = "keep things tidy", content = "# Tidy\\nPut things back." }]
        """,
    )
    state = await run(client, settings, bundle)
    assert state.status is RunStatus.PASSED, state.error or state.steps["agent"].error
    seen = json.loads(state.steps["ask"].outputs["answer"])
    assert seen == {
        "greeting": "hello",
        "api_key_sha256": hashlib.sha256(key.encode()).hexdigest(),
        "litellm": "https://models.example.test/v1",
        "system_prompt": "Answer in JSON.",
        "description": "the run's own probe",
        "skills": ["tidy"],
    }, "the sandbox's env (the reference resolved inside it), agent-config/v1 and skill-config/v1"
    deployed = state.steps["agent"].outputs
    assert deployed["description"] == "the run's own probe" and deployed["metadata"] == {"team": "evals"}
    assert deployed["requested"] == {
        "ttl_seconds": 600,
        "cpu": 0.5,
        "memory_mb": 256,
        "disk_size_gb": 4,
        "resources_applied": False,  # the local provider limits nothing: recorded only
        "env_vars": ["API_KEY", "GREETING"],
    }
    history = temporal_history(settings, state.run_id)
    assert "secret:probe-key" in history and key not in history, "history holds the reference, never the value"
    assert await by_name.load("local", settings).list(state.run_id) == []


async def test_a_network_policy_the_provider_cannot_enforce_fails_the_deploy(client, settings, worker, tmp_path):
    bundle = probe_bundle(tmp_path / "b", 'network_policy = { mode = "allowlist" }')
    state = await run(client, settings, bundle)
    assert state.status is RunStatus.ERROR
    error = state.steps["agent"].error
    assert "the local provider cannot enforce network 'none'" in error, error


async def test_an_agent_without_agent_config_fails_when_given_a_system_prompt(run_task, settings):
    from starlette.applications import Starlette
    from test_agents import serving

    from agent_env.agents.sdk import Agent, a2a_routes

    class Plain(Agent):
        name = "plain"

        async def answer(self, turn):
            return "ok"

    app = Starlette()
    async with serving(app) as url:
        routes, handler = a2a_routes(Plain(), url + "/", extensions=False)
        app.router.routes.extend(routes)
        record = {"name": "plain", "type": "a2a", "config": {"url": url + "/"}}
        step = {"id": "a", "type": "deploy_agent", "config": {"record": record, "system_prompt": "be brief"}}
        state = await run_task({"id": "no-config", "steps": [step]})
        await handler.aclose()
    assert state.status is RunStatus.ERROR
    assert "is given `system_prompt`, but its card declares no urn:agentenv:agent-config" in state.steps["a"].error


# -- when the run is planned --


def planned(settings, steps: list[dict], bundle: Path | None = None) -> dict:
    task = {"id": "t", "steps": steps}
    if bundle is not None:
        (bundle / "tasks").mkdir(exist_ok=True)
        (bundle / "tasks" / "t.json").write_text(json.dumps(steps))
        spec = load_task(bundle / "tasks" / "t.json")
    else:
        spec = parse_task(task, "test task")
    return {s.id: s.config for s in launch.plan(spec, "plan-1", settings).steps}


NOTES = {"name": "notes", "type": "a2a"}
LLM = {"name": "helper", "type": "llm", "config": {"system_prompt": "its own"}}


def test_a_hosted_llm_agent_takes_the_system_prompt_description_and_endpoint_without_the_key(settings):
    config = planned(
        settings,
        [
            {
                "id": "a",
                "type": "deploy_agent",
                "config": {
                    "record": LLM,
                    "system_prompt": "the step's",
                    "agent_description": "a helper",
                    "litellm_base_url": "http://127.0.0.1:1/v1",
                },
            }
        ],
    )["a"]
    assert config["record"]["config"]["system_prompt"] == "the step's"
    assert config["record"]["description"] == "a helper"
    endpoint = config["models"]["agent"]
    assert endpoint["base_url"] == "http://127.0.0.1:1/v1"
    configured = settings.model("agent")
    if configured.api_key:  # the configured key stays with the configured endpoint
        assert endpoint.get("api_key") is None


@pytest.mark.parametrize(
    ("record", "fields", "message"),
    [
        (LLM, {"env_vars": {"A": "1"}}, "`env_vars` shapes the agent's sandbox, and this agent runs in none"),
        (LLM, {"network_policy": {"mode": "allowlist"}}, "`network_policy` shapes the agent's sandbox"),
        (
            {"name": "s", "type": "scripted", "config": {"turns": [[{"say": "hi"}]]}},
            {"system_prompt": "x"},
            "a scripted agent takes none here",
        ),
        (
            {"name": "u", "type": "a2a", "config": {"url": "http://127.0.0.1:1/"}},
            {"litellm_base_url": "http://127.0.0.1:2/v1"},
            "`litellm_base_url` is a model endpoint, and this agent has none here",
        ),
        (LLM, {"env_vars": {"1BAD": "x"}}, "is not a variable name"),
        (LLM, {"env_vars": {"PORT": "1"}}, "set by agent-env or the sandbox's provider"),
        (LLM, {"env_vars": {"AGENT_ENV_SERVER_TOKEN": "1"}}, "set by agent-env or the sandbox's provider"),
        (LLM, {"env_vars": {"BIG": "x" * 9000}}, "a value holds at most 8192"),
        (LLM, {"env_vars": {f"V{i}": "1" for i in range(65)}}, "at most 64"),
        (LLM, {"litellm_base_url": "https://user:pw@models.example/v1"}, "carries credentials"),
        (LLM, {"litellm_base_url": "file:///etc/passwd"}, "is not an http(s) URL"),
        (LLM, {"network_policy": {"mode": "allowlist", "allow_hosts": ["pypi.org"]}}, "give the hosts' addresses"),
        (LLM, {"network_policy": {"mode": "allowlist", "allow_cidrs": ["nowhere"]}}, "is not an IP address"),
    ],
)
def test_a_field_that_does_not_fit_the_agent_fails_when_planned(settings, record, fields, message):
    with pytest.raises(BadInput) as e:
        planned(settings, [{"id": "a", "type": "deploy_agent", "config": {"record": record, **fields}}])
    assert message in str(e.value), e.value


def test_a_network_policy_becomes_the_sandboxs_network():
    for policy, network in [
        ({"mode": "allow_all"}, "open"),
        ({"mode": "allowlist"}, "none"),
        ({"mode": "allowlist", "allow_cidrs": ["10.0.0.0/8"]}, ["10.0.0.0/8"]),
    ]:
        assert NetworkPolicy.model_validate(policy).network() == network


def test_a2a_agent_version_deploys_the_registrys_version(settings, tmp_path):
    bundle = write_agent_bundle(tmp_path / "b", DEPLOYED.format(fields=""))
    stores = open_stores(settings)
    Registry(stores.documents, stores.objects).push_bundle(bundle)
    toml = bundle / "agents" / "shout" / "agent.toml"
    toml.write_text(toml.read_text().replace('provider = "local"', 'provider = "docker"'))  # the bundle moved on
    steps = [{"id": "a", "type": "deploy_agent", "a2a_agent_id": "shout", "a2a_agent_version": 1}]  # a framework task
    config = planned(settings, steps, bundle)["a"]
    assert config["record"]["config"]["sandbox"]["provider"] == "local", "version 1, as pushed"
    assert config["build"].startswith("artifacts/sha256-")
    with pytest.raises(BadInput, match="a2a_agent_version 7 of agent 'shout'"):
        planned(settings, [{**steps[0], "a2a_agent_version": 7}], bundle)


async def test_an_agent_is_restored_from_a_registry_snapshot_artifact(run_task, settings, trusting):  # noqa: F811
    """snapshot_agent_state keeps an agent's state as an artifact; a later run's deploy_agent restores another agent
    from it with the framework's agent_snapshot_files_artifact_id."""
    from starlette.applications import Starlette
    from test_agents import serving

    from agent_env.agents.sdk import a2a_routes

    first, second = Notes(), Notes()
    apps = [Starlette(), Starlette()]
    async with serving(apps[0]) as url_a, serving(apps[1]) as url_b:
        handlers = []
        for app, agent, url in ((apps[0], first, url_a), (apps[1], second, url_b)):
            routes, handler = a2a_routes(agent, url + "/", extensions=True)
            app.router.routes.extend(routes)
            handlers.append(handler)

        def deploy(step: str, url: str, **more) -> dict:
            return {
                "id": step,
                "type": "deploy_agent",
                "config": {"record": {**NOTES, "config": {"url": url + "/"}}, **more},
            }

        def ask(step: str, agent: str, prompt: str) -> dict:
            return {"id": step, "type": "prompt_agent", "config": {"agent": agent, "prompt": prompt}}

        saved = await run_task(
            {
                "id": "save",
                "steps": [
                    deploy("a", url_a),
                    {**ask("p1", "a", "blue door"), "depends_on": ["a"]},
                    {
                        "id": "snap",
                        "type": "snapshot_agent_state",
                        "depends_on": ["p1"],
                        "config": {"agent": "a", "prompt": "p1", "artifact_id": "door-state"},
                    },
                ],
            }
        )
        assert saved.status is RunStatus.PASSED, saved.error or saved
        assert saved.steps["snap"].outputs["artifact"] == {"id": "door-state", "version": "1"}
        restored = await run_task(
            {
                "id": "restore",
                "steps": [
                    deploy("b", url_b, agent_snapshot_files_artifact_id="door-state"),
                    {**ask("p2", "b", "which door?"), "depends_on": ["b"]},
                ],
            }
        )
        for handler in handlers:
            await handler.aclose()
    assert restored.status is RunStatus.PASSED, restored.error or restored
    assert restored.steps["b"].outputs["restored_context_id"]
    assert [s.workspace for s, _ in second.loaded] == [b"files"]
    assert restored.steps["p2"].outputs["answer"] == "blue door | which door?", "it went on from the saved state"


def test_a_snapshot_artifact_that_is_no_agents_state_is_refused_when_planned(settings, tmp_path):
    from agent_env.registry.universes import push_new_version

    stores = open_stores(settings)
    push_new_version(Registry(stores.documents, stores.objects), "notes-data", {"type": "data"}, {"a.json": b"{}"})
    record = {**NOTES, "config": {"url": "http://127.0.0.1:1/"}}
    fields = {"record": record, "agent_snapshot_files_artifact_id": "notes-data"}
    with pytest.raises(BadInput, match="'notes-data' is no agent's saved state"):
        planned(settings, [{"id": "a", "type": "deploy_agent", "config": fields}])
    with pytest.raises(BadInput, match="no-such-state"):
        planned(
            settings,
            [
                {
                    "id": "a",
                    "type": "deploy_agent",
                    "config": {**fields, "agent_snapshot_files_artifact_id": "no-such-state"},
                }
            ],
        )


async def test_a_hosted_llm_agent_runs_with_the_steps_prompt_endpoint_and_skills(client, settings, worker, tmp_path):
    """The record's model and prompt are its own; the step's system_prompt, litellm_base_url and skills (an artifact
    and one inline) are what its model is sent."""
    from test_skills_hosted import TONE_MD, recorded_model, skilled_bundle, system_prompts

    async with recorded_model({"skilled": [{"say": "Done."}]}) as (url, bodies):
        bundle = skilled_bundle(
            tmp_path / "b",
            f"""
[[steps]]
id = "agent"
type = "deploy_agent"
[steps.config]
system_prompt = "The step's prompt."
litellm_base_url = "{url}"
skills = ["tone", {{ name = "wrap", description = "wrap up", skill_md = "# Wrap\\nwrap-marker-93c1." }}]
[steps.config.record]
name = "sorter"
type = "llm"
config = {{ system_prompt = "Its own prompt.", model = {{ base_url = "http://127.0.0.1:1/v1", model = "skilled" }} }}

[[steps]]
id = "ask"
type = "prompt_agent"
depends_on = ["agent"]
config = {{ agent = "agent", prompt = "Go." }}
""",
        )
        state = await run(client, settings, bundle)
    assert state.status is RunStatus.PASSED, state.error or state.steps["agent"].error
    (prompt,) = system_prompts(bodies, "skilled")
    assert prompt.startswith("The step's prompt.\n\n") and "Its own prompt." not in prompt
    assert TONE_MD.strip() in prompt and "wrap-marker-93c1." in prompt, "the artifact's skill and the inline one"


PLACED = """
    id = "placed"
    [[steps]]
    id = "box"
    type = "deploy_sandbox"
    config = { sandbox_name = "work", sandbox_mode = "vm", sandbox_type = "local" }
    [[steps]]
    id = "agent"
    type = "deploy_agent"
    depends_on = ["box"]
    config = { agent = "shout", sandbox_name = "work", env_vars = { GREETING = "placed" } }
    [[steps]]
    id = "ask"
    type = "prompt_agent"
    depends_on = ["agent"]
    config = { agent = "agent", prompt = "where are you?", turn_deadline = "30s" }
    """


async def test_an_agent_is_served_in_a_sandbox_a_deploy_sandbox_step_runs(client, settings, worker, tmp_path):
    bundle = write_agent_bundle(tmp_path / "b", PLACED)
    (bundle / "agents" / "shout" / "app" / "agent.py").write_text(PROBE)
    state = await run(client, settings, bundle)
    assert state.status is RunStatus.PASSED, state.error or state.steps["agent"].error
    assert json.loads(state.steps["ask"].outputs["answer"])["greeting"] == "placed"
    placed = state.steps["agent"].outputs["sandbox"]
    assert placed["sandbox_name"] == "work" and placed["id"] == state.steps["box"].outputs["sandbox"]["id"]
    local = by_name.load("local", settings)
    assert await local.list(state.run_id) == [], "the agent went with the sandbox, at the run's end"


def test_sandbox_name_needs_an_agent_with_a_program_and_a_deploy_sandbox_step(settings, tmp_path):
    steps = [{"id": "a", "type": "deploy_agent", "config": {"record": LLM, "sandbox_name": "work"}}]
    with pytest.raises(BadInput, match="places the agent's program in a deployed sandbox, and this agent has none"):
        planned(settings, steps)
    bundle = write_agent_bundle(
        tmp_path / "b", PLACED.replace('sandbox_name = "work", env', 'sandbox_name = "w2", env')
    )
    with pytest.raises(BadInput, match="sandbox_name 'w2' is given by no deploy_sandbox step"):
        launch.plan(load_task(bundle / "tasks" / "t.toml"), "plan-1", settings)


async def test_an_agent_that_dies_in_a_deployed_sandbox_fails_the_deploy_with_its_output(
    client, settings, worker, tmp_path, monkeypatch
):
    key = f"sk-placed-{os.urandom(8).hex()}"
    monkeypatch.setenv("AGENT_ENV_SECRET_PLACED_KEY", key)
    bundle = write_agent_bundle(tmp_path / "b", PLACED.replace('GREETING = "placed"', 'KEY = "secret:placed-key"'))
    (bundle / "agents" / "shout" / "app" / "agent.py").write_text(
        'import os\nraise SystemExit("no model for shout, key " + os.environ["KEY"])\n'
    )
    state = await run(client, settings, bundle)
    assert state.status is RunStatus.ERROR
    error = state.steps["agent"].error
    assert "agent 'shout' (in sandbox 'work') exited before serving A2A" in error, error
    assert "no model for shout, key" in error and key not in error, "its output, its secret redacted"
