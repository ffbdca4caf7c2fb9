"""Universes and new versions of artifacts in the registry: environment artifacts (one app's data each) bundled
into a universe, loaded together into one composed environment and exported back (the universe validator's round
trip, on the real dev server); a deployed env's state captured by snapshot_env as the universe's next version and
loaded by a later run; an agent's state kept as an artifact by snapshot_agent_state; the `agent-env universe` and
`agent-env artifact push` commands."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from test_object_transfers import Notes, trusting  # noqa: F401 - its agent, and the fixture trusting our CA

from agent_env.config import Settings
from agent_env.errors import BadInput
from agent_env.planning.tasks import load_task
from agent_env.registry.store import Registry, open_registry
from agent_env.registry.universes import (
    create_universe,
    environment_data,
    push_environment,
    push_new_version,
    push_universe,
)
from agent_env.spec.artifacts import ArtifactPin, Lineage
from agent_env.spec.run import RunStatus
from agent_env.stores import keys
from agent_env.temporal import launch
from agent_env.validators.universe import load_issues

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")

NOTES = {"notes": [{"key": "plan", "text": "ship on Friday", "updated_at": "2026-03-02T09:00:00Z"}]}
HELPDESK = {
    "agents": [{"email": "sam@acme.example", "name": "Sam Ortiz"}],
    "customers": [{"email": "dana@example.com", "name": "Dana Whitfield"}],
    "tickets": [
        {
            "id": "TCK-1001",
            "customer_email": "dana@example.com",
            "subject": "Charged twice",
            "description": "ORD-1001 was charged twice.",
            "priority": "high",
            "status": "open",
            "assignee": "sam@acme.example",
            "created_at": "2026-03-01T10:00:00Z",
            "updated_at": "2026-03-01T10:00:00Z",
        }
    ],
}
OFFICE_ENV = """
name = "office"
[[apps]]
app = "notes"
[[apps]]
app = "helpdesk"
[roles.agent]
tools = ["*"]
"""


@pytest.fixture
def registry(tmp_path):
    reg = open_registry(Settings.model_validate({"state_dir": str(tmp_path / "state")}))
    yield reg
    reg.close()


@pytest.fixture
def shared(settings):
    """The registry of the stores the test runs use."""
    reg = open_registry(settings)
    yield reg
    reg.close()


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def office_universe(registry: Registry, name: str) -> tuple[str, str]:
    """Environment artifacts for notes and helpdesk, and universe `name` over them; their names."""
    notes, desk = f"{name}-notes", f"{name}-desk"
    push_environment(registry, notes, "notes", NOTES, None)
    push_environment(registry, desk, "helpdesk", HELPDESK, None)
    create_universe(registry, name, [notes, desk], description="an office: notes and a helpdesk")
    return notes, desk


def write_bundle(root: Path, tasks: dict[str, list[dict[str, Any]]]) -> Path:
    """A bundle with the composed env `office` (notes and helpdesk, no data) and framework JSON tasks."""
    (root / "envs" / "office").mkdir(parents=True)
    (root / "envs" / "office" / "env.toml").write_text(OFFICE_ENV)
    (root / "tasks").mkdir()
    for name, steps in tasks.items():
        (root / "tasks" / f"{name}.json").write_text(json.dumps(steps))
    return root


async def run(client, settings, path: Path):
    state = await launch.wait_result(await launch.start_run(client, settings, load_task(path)))
    failed = {
        sid: s.error or [c for c in s.score.criteria if not c.passed]
        for sid, s in state.steps.items()
        if s.error or (s.score and not s.score.passed)
    }
    assert state.status is RunStatus.PASSED, (state.error, failed)
    return state


# -- the registry side --


def test_a_universe_pins_its_environment_artifacts_and_gives_each_app_its_data(registry):
    notes, desk = office_universe(registry, "office")
    found = environment_data(registry, "office")
    assert found.pin == ArtifactPin(id="office", version="1")
    assert found.data == {"notes": NOTES, "helpdesk": HELPDESK}
    assert {app: str(pin) for app, pin in found.environments.items()} == {
        "notes": f"{notes}@1",
        "helpdesk": f"{desk}@1",
    }
    push_environment(registry, notes, "notes", {"notes": []}, None)  # notes-data@2: the universe still pins @1
    assert environment_data(registry, "office").data["notes"] == NOTES
    assert environment_data(registry, notes).data == {"notes": {"notes": []}}
    assert environment_data(registry, notes, "1").data == {"notes": NOTES}


def test_a_universe_refuses_two_artifacts_of_one_app_and_artifacts_that_are_no_environment(registry, tmp_path):
    push_environment(registry, "a", "notes", NOTES, None)
    push_environment(registry, "b", "notes", NOTES, None)
    with pytest.raises(BadInput, match="two environment artifacts seed the same app"):
        create_universe(registry, "u", ["a", "b"])
    push_new_version(registry, "plain", {"description": "just files"}, {"readme.md": b"hi"})
    with pytest.raises(BadInput, match="plain@1 is not an environment artifact"):
        create_universe(registry, "u", ["a", "plain"])
    with pytest.raises(BadInput, match="is plain files, not an environment's data"):
        environment_data(registry, "plain")
    assert "u" not in registry.all_versions("artifacts")  # nothing was pushed


def test_new_versions_count_up_and_a_run_step_pushes_once(registry):
    lineage = Lineage(run_id="run-1", step="snap", source="runs/run-1/x")
    first = push_new_version(registry, "state", {"lineage": lineage.model_dump()}, {"a.txt": b"one"})
    again = push_new_version(registry, "state", {"lineage": lineage.model_dump()}, {"a.txt": b"one"})
    assert (first.label, first.outcome) == ("1", "pushed")
    assert (again.label, again.outcome) == ("1", "unchanged")  # a retried step finds what it made
    other = Lineage(run_id="run-2", step="snap")
    second = push_new_version(registry, "state", {"lineage": other.model_dump()}, {"a.txt": b"two"})
    assert second.label == "2"
    version = registry.version("artifacts", "state")
    assert version.record["lineage"]["run_id"] == "run-2" and version.record["version"] == "2"


def test_an_export_back_into_its_own_universe_makes_new_versions_of_its_artifacts(registry):
    notes, desk = office_universe(registry, "office")
    changed = {"notes": {"notes": [*NOTES["notes"], {"key": "new", "text": "x"}]}, "helpdesk": HELPDESK}
    pin = push_universe(registry, "office", changed, Lineage(run_id="r", step="s"), parent="office@1")
    assert pin == ArtifactPin(id="office", version="2")
    found = environment_data(registry, "office")
    assert {app: str(p) for app, p in found.environments.items()} == {"notes": f"{notes}@2", "helpdesk": f"{desk}@2"}
    assert found.data == changed
    lineage = registry.version("artifacts", "office").record["lineage"]
    assert lineage["parents"] == [{"id": "office", "version": "1"}]
    elsewhere = push_universe(registry, "copy", changed, Lineage(run_id="r", step="t"), parent="office@2")
    assert {str(p) for p in environment_data(registry, elsewhere.id).environments.values()} == {
        "copy.notes@1",
        "copy.helpdesk@1",
    }


def test_a_tampered_environment_artifact_is_refused(registry):
    push_environment(registry, "n", "notes", NOTES, None)
    entry = registry.version("artifacts", "n").files[0]
    registry.objects.put(keys.registry_blob(entry.sha256), b'{"notes": {"notes": []}}')
    with pytest.raises(BadInput, match="do not match their digest"):
        environment_data(registry, "n")


# -- in runs, on the dev server --


async def test_a_universe_of_two_envs_loads_into_one_composed_env_and_exports_back_equal(
    client, settings, worker, shared, tmp_path
):
    name = unique("office")
    office_universe(shared, name)
    trip = [
        {"id": "deploy", "type": "deploy_env", "env_id": "office"},
        {"id": "trip", "type": "verify_universe_load_export_roundtrip", "env": "deploy", "universe_artifact_id": name},
        {"id": "compat", "type": "combine_universe_verdicts", "roundtrip": "trip"},
    ]
    state = await run(client, settings, write_bundle(tmp_path, {"trip": trip}) / "tasks" / "trip.json")
    verdict = state.steps["compat"].outputs["verdict"]
    assert verdict["compatible"] is True, state.steps["trip"].outputs["report"]
    assert sorted(verdict["environments"]) == ["helpdesk", "notes"]
    assert all(v["compatible"] for v in verdict["environments"].values())
    assert state.steps["trip"].outputs["universe"] == f"{name}@1"  # pinned when the run was planned

    exported = environment_data(shared, f"{name}.export")  # exported back: each env's data, as artifacts again
    assert verdict["exported_universe_artifact_id"] == f"{name}.export@1" == str(exported.pin)
    assert sorted(exported.environments) == ["helpdesk", "notes"]
    assert load_issues(NOTES, exported.data["notes"]) == [] and load_issues(HELPDESK, exported.data["helpdesk"]) == []
    lineage = shared.version("artifacts", f"{name}.export").record["lineage"]
    assert lineage["run_id"] == state.run_id and lineage["parents"] == [{"id": name, "version": "1"}]


async def test_the_round_trip_keeps_its_exports_for_a_judge_and_the_verdict_for_the_env(
    client, settings, worker, shared, tmp_path
):
    """The framework's fields: env_id and a pinned universe version; emit_file_artifact_universe (the universe and
    both exports as files of one artifact), persist_result and the combined verdict (the env's compatibility with
    the universe, kept across runs; the combining step writes last)."""
    name = unique("office")
    office_universe(shared, name)
    at = {"env_id": "office", "universe_artifact_id": name, "universe_artifact_version": 1}
    trip = [
        {"id": "deploy", "type": "deploy_env", "env_id": "office"},
        {"id": "trip", "type": "verify_universe_load_export_roundtrip", **at, "emit_file_artifact_universe": True,
         "persist_result": True},
        {"id": "compat", "type": "combine_universe_verdicts", "roundtrip": "trip", **at},
    ]  # fmt: skip
    state = await run(client, settings, write_bundle(tmp_path, {"trip": trip}) / "tasks" / "trip.json")
    verdict = state.steps["trip"].outputs["verdict"]
    assert verdict["file_artifact_universe_id"] == f"{name}.roundtrip@1"
    files = shared.version("artifacts", f"{name}.roundtrip")
    assert files.record["type"] == "file_artifact_universe"
    prefix = f"artifacts/{name}.roundtrip/"
    assert sorted(f.path.removeprefix(prefix) for f in files.files) == [
        f"{which}/{app}.json" for which in ("export_1", "export_2", "original") for app in ("helpdesk", "notes")
    ]
    original = next(f for f in files.files if f.path == prefix + "original/notes.json")
    assert json.loads(shared.objects.get(keys.registry_blob(original.sha256))) == NOTES
    key = keys.compatibility("office", f"{name}@1")
    assert verdict["persisted"] == key == state.steps["compat"].outputs["verdict"]["persisted"]
    kept = json.loads(shared.objects.get(key))
    assert kept["step"] == "compat" and kept["compatible"] is True and kept["agent_judge_skipped"] is True
    assert kept["run_id"] == state.run_id and sorted(kept["environments"]) == ["helpdesk", "notes"]


async def test_an_env_state_captured_as_version_2_is_loaded_by_a_later_run(client, settings, worker, shared, tmp_path):
    name = unique("office")
    notes, desk = office_universe(shared, name)
    read_later = {"name": "run 1's note", "tool": "read_note", "arguments": {"key": "later"}, "path": "text"}
    capture = [
        {"id": "deploy", "type": "deploy_env", "env_id": "office", "load_data": False},
        {"id": "load", "type": "load_artifact", "env_step_id": "deploy", "artifact_id": name},
        {
            "id": "write",
            "type": "call_tool",
            "env": "deploy",
            "tool": "write_note",
            "arguments": {"key": "later", "text": "from run 1"},
        },
        {
            "id": "snap",
            "type": "snapshot_env",
            "env_step_id": "deploy",
            "snapshot_id": name,
            "original_universe_artifact_id": name,
        },
        # a judge in the same run: a fresh instance given what snap captured
        {"id": "judge_env", "type": "deploy_env", "env_id": "office", "load_data": False},
        {"id": "judge_load", "type": "load_artifact", "env_step_id": "judge_env", "artifact_from_step_id": "snap"},
        {"id": "judge", "type": "check_state", "env": "judge_env", "checks": [{**read_later, "equals": "from run 1"}]},
    ]
    later = [
        {"id": "deploy", "type": "deploy_env", "env_id": "office", "load_data": False},
        {"id": "load", "type": "load_artifact", "env_id": "office", "artifact_id": name},
        {
            "id": "check",
            "type": "check_state",
            "env": "deploy",
            "checks": [
                {**read_later, "equals": "from run 1"},
                {
                    "name": "the plan",
                    "tool": "read_note",
                    "arguments": {"key": "plan"},
                    "path": "text",
                    "equals": NOTES["notes"][0]["text"],
                },
                {
                    "name": "the ticket",
                    "tool": "get_ticket",
                    "arguments": {"ticket_id": "TCK-1001"},
                    "path": "status",
                    "equals": "open",
                },
            ],
        },
    ]
    # deploy_env's own artifact_id takes the universe too: the same data, with no load step
    by_deploy = [{"id": "deploy", "type": "deploy_env", "env_id": "office", "artifact_id": name}, later[2]]
    bundle = write_bundle(tmp_path, {"capture": capture, "later": later, "by_deploy": by_deploy})
    first = await run(client, settings, bundle / "tasks" / "capture.json")
    snap = first.steps["snap"].outputs
    assert (snap["environment_universe_artifact_id"], snap["environment_universe_artifact_version"]) == (name, "2")
    assert snap["environments_snapshotted"] == ["helpdesk", "notes"]
    assert first.steps["judge_load"].outputs["loaded"] == [f"{name}@2"]
    assert first.steps["judge"].score is not None and first.steps["judge"].score.value == 1.0

    captured = environment_data(shared, name)
    assert captured.pin == ArtifactPin(id=name, version="2")  # the universe's own artifacts, at version 2
    assert {app: str(p) for app, p in captured.environments.items()} == {"notes": f"{notes}@2", "helpdesk": f"{desk}@2"}
    assert {"key": "later", "text": "from run 1"}.items() <= next(
        n for n in captured.data["notes"]["notes"] if n["key"] == "later"
    ).items()
    record = shared.version("artifacts", name).record
    assert record["lineage"]["run_id"] == first.run_id and record["lineage"]["step"] == "snap"
    assert record["lineage"]["parents"] == [{"id": name, "version": "1"}]
    assert record["lineage"]["source"] == f"runs/{first.run_id}/snapshots/snap.tar"

    second = await run(client, settings, bundle / "tasks" / "later.json")
    assert second.steps["load"].outputs == {"apps": ["helpdesk", "notes"], "loaded": [f"{name}@2"]}
    check = second.steps["check"]
    assert check.score is not None and check.score.value == 1.0, check.outputs
    third = await run(client, settings, bundle / "tasks" / "by_deploy.json")
    check = third.steps["check"]
    assert check.score is not None and check.score.value == 1.0, (third.error, check.outputs)


async def test_an_agents_state_is_kept_as_an_artifact_a_later_run_reads(
    run_task,
    client,
    settings,
    shared,
    trusting,  # noqa: F811
    tmp_path,
):
    from starlette.applications import Starlette
    from test_agents import serving

    from agent_env.agents.sdk import a2a_routes

    name = unique("agent-state")
    app = Starlette()
    async with serving(app) as url:
        routes, handler = a2a_routes(Notes(), url + "/", extensions=True)
        app.router.routes.extend(routes)
        record = {"name": "a", "type": "a2a", "config": {"url": url + "/"}}
        state = await run_task(
            {
                "id": "agent-artifact",
                "steps": [
                    {"id": "a", "type": "deploy_agent", "config": {"record": record}},
                    {
                        "id": "p",
                        "type": "prompt_agent",
                        "depends_on": ["a"],
                        "config": {"agent": "a", "prompt": "blue door"},
                    },
                    {
                        "id": "snap",
                        "type": "snapshot_agent_state",
                        "depends_on": ["p"],
                        "config": {"agent": "a", "prompt": "p", "artifact_id": name},
                    },
                ],
            }
        )
        await handler.aclose()
    assert state.status is RunStatus.PASSED, state.error or state
    snap = state.steps["snap"].outputs
    assert snap["artifact"] == {"id": name, "version": "1"}
    version = shared.version("artifacts", name)
    assert version.record["type"] == "agent_state" and version.record["context_id"] == f"{state.run_id}/p/agent"
    assert version.record["lineage"] == {
        "run_id": state.run_id,
        "step": "snap",
        "source": snap["snapshot"],
        "parents": [],
    }
    assert sorted(f.path for f in version.files) == [f"artifacts/{name}/trajectory", f"artifacts/{name}/workspace"]

    # a later run (a judge, say) reads it: load_artifact puts it into its sandbox, a verifier looks
    judge = [
        {"id": "box", "type": "deploy_sandbox", "sandbox_name": "box", "sandbox_mode": "vm", "sandbox_type": "local"},
        {
            "id": "load",
            "type": "load_artifact",
            "sandbox_name": "box",
            "artifact_id": name,
            "destination_path": "/app/state",
        },
        {
            "id": "look",
            "type": "verify_sandbox",
            "sandbox_name": "box",
            "base_dir": "/app/state",
            "criteria": [
                {
                    "type": "probe_file_contains",
                    "criterion": "remembers",
                    "paths": ["trajectory"],
                    "expected": "blue door",
                },
                {"type": "probe_file_contains", "criterion": "workspace", "paths": ["workspace"], "expected": "files"},
            ],
        },
    ]
    (tmp_path / "judge" / "tasks").mkdir(parents=True)
    (tmp_path / "judge" / "tasks" / "judge.json").write_text(json.dumps(judge))
    later = await run(client, settings, tmp_path / "judge" / "tasks" / "judge.json")
    assert later.status is RunStatus.PASSED, later.error or later.steps
    assert [f["path"] for f in later.steps["load"].outputs["files"]] == [
        "/app/state/trajectory",
        "/app/state/workspace",
    ]


# -- the commands --


def cli(*args: str) -> Result:
    """The command, run in this process (its own exit code and output)."""
    from typer.testing import CliRunner

    from agent_env.cli.commands import app

    done = CliRunner().invoke(app, list(args))
    assert done.exit_code == 0, (done.output, done.exception)
    return done


async def test_cli_pushes_artifacts_makes_a_universe_and_a_new_version_from_a_runs_output(
    client, settings, worker, shared, tmp_path
):
    name = unique("cli")
    (tmp_path / "notes.json").write_text(json.dumps(NOTES))
    (tmp_path / "desk.json").write_text(json.dumps(HELPDESK))
    pushed = cli("artifact", "push", f"{name}-notes", str(tmp_path / "notes.json"), "--environment-name", "notes")
    assert f"pushed: artifact {name}-notes@1 (1 files)" in pushed.stdout
    cli("artifact", "push", f"{name}-desk", str(tmp_path / "desk.json"), "--environment-name", "helpdesk")
    made = cli("universe", "create", name, f"{name}-notes", f"{name}-desk@1", "--description", "from the CLI")
    assert f"pushed: universe {name}@1 of {name}-notes@1, {name}-desk@1" in made.stdout
    listed = [json.loads(line) for line in cli("universe", "list", "--json").stdout.splitlines()]
    assert {
        "name": name,
        "latest": "1",
        "versions": 1,
        "environment_artifacts": [f"{name}-notes@1", f"{name}-desk@1"],
    } in listed
    shown = json.loads(cli("universe", "show", name, "--json").stdout)
    assert shown["environments"] == {
        "helpdesk": {"artifact": f"{name}-desk@1", "tables": {"agents": 1, "customers": 1, "tickets": 1}},
        "notes": {"artifact": f"{name}-notes@1", "tables": {"notes": 1}},
    }
    assert f"notes: {name}-notes@1  notes (1)" in cli("universe", "show", name).stdout

    # a run loads the universe, an agent's call changes it, collect_artifacts keeps the export ...
    steps = [
        {"id": "deploy", "type": "deploy_env", "env_id": "office", "load_data": False},
        {"id": "load", "type": "load_artifact", "env_id": "office", "artifact_id": name},
        {
            "id": "write",
            "type": "call_tool",
            "env": "deploy",
            "tool": "write_note",
            "arguments": {"key": "k", "text": "v"},
        },
        {"id": "keep", "type": "collect_artifacts", "envs": ["deploy"]},
    ]
    state = await run(client, settings, write_bundle(tmp_path / "b", {"keep": steps}) / "tasks" / "keep.json")
    # ... and its notes become the artifact's version 2, made from version 1 by that run
    again = cli(
        "artifact", "push", f"{name}-notes", "--run", state.run_id, "--output", "artifacts/deploy/data.json",
        "--environment-name", "notes", "--from", f"{name}-notes@1",
    )  # fmt: skip
    assert f"pushed: artifact {name}-notes@2" in again.stdout
    version = shared.version("artifacts", f"{name}-notes")
    assert version.record["lineage"] == {
        "run_id": state.run_id,
        "source": f"runs/{state.run_id}/artifacts/deploy/data.json",
        "parents": [{"id": f"{name}-notes", "version": "1"}],
    }
    notes = environment_data(shared, f"{name}-notes").data["notes"]["notes"]
    assert sorted(n["key"] for n in notes) == ["k", "plan"]
    refused = subprocess.run(
        [AGENT_ENV, "universe", "create", name, f"{name}-notes", f"{name}-notes@1"], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "named twice" in refused.stderr


def test_a_step_taking_any_artifact_as_data_finds_a_universes_data_and_leaves_plain_artifacts(registry):
    from agent_env.registry.universes import registry_environment_data

    office_universe(registry, "office")
    key = registry_environment_data(registry.documents, registry.objects, "office", 1)
    assert key is not None and json.loads(registry.objects.get(key)) == {"notes": NOTES, "helpdesk": HELPDESK}
    push_new_version(registry, "plain", {}, {"data.json": b"{}"})
    assert registry_environment_data(registry.documents, registry.objects, "plain") is None
    assert registry_environment_data(registry.documents, registry.objects, "nowhere") is None
    assert registry_environment_data(registry.documents, registry.objects, "office", 7) is None


def test_snapshot_agent_state_pins_the_universe_whose_apps_it_keeps(shared, settings, tmp_path):
    """The framework's env_id and universe_artifact_id: the env becomes its deploy_env step, the universe is pinned
    when the run is planned, and its apps are those whose data the step keeps beside the agent's state."""
    from agent_env.planning.runs import plan

    name = unique("office")
    office_universe(shared, name)
    record = {"name": "a", "type": "a2a", "config": {"url": "http://127.0.0.1:9/"}}
    steps = [
        {"id": "pad", "type": "deploy_env", "env_id": "notes"},
        {"id": "a", "type": "deploy_agent", "record": record},
        {"id": "p", "type": "prompt_agent", "agent": "a", "prompt": "hi"},
        {"id": "snap", "type": "snapshot_agent_state", "agent": "a", "prompt": "p", "env_id": "notes",
         "universe_artifact_id": name},
    ]  # fmt: skip
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.json").write_text(json.dumps(steps))
    planned = {s.id: s for s in plan(load_task(tmp_path / "tasks" / "t.json"), "r-1", settings).steps}
    config = planned["snap"].config
    assert config["env"] == "pad"
    assert config["universe_artifact_id"] == f"{name}@1" and config["universe_apps"] == ["helpdesk", "notes"]
    (tmp_path / "tasks" / "t.json").write_text(json.dumps([*steps[:3], {**steps[3], "universe_artifact_id": "nope"}]))
    with pytest.raises(BadInput, match="universe_artifact_id"):
        plan(load_task(tmp_path / "tasks" / "t.json"), "r-1", settings)
