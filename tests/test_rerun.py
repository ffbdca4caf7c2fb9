"""Pinned reruns: a run keeps its plan (records inline, data and build contexts by content) in the object store
under its digest, and `runs rerun` starts exactly that plan again, whatever happened to the bundle folder since."""

from __future__ import annotations

import asyncio
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent_env.bundles import BUILTIN_ROOT
from agent_env.config import Settings
from agent_env.errors import BadInput, NotFound
from agent_env.planning.runs import json_digest, replan
from agent_env.planning.tasks import load_task
from agent_env.spec.run import RunState, RunStatus
from agent_env.stores import keys, open_stores
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch


def workplace_bundle(root: Path) -> Path:
    """The built-in workplace task with the support-desk env beside it: one folder holding all it reads."""
    bundle = root / "workplace"
    shutil.copytree(BUILTIN_ROOT / "workplace", bundle)
    shutil.copytree(BUILTIN_ROOT / "support-desk" / "envs", bundle / "envs")
    return bundle


def edit_bundle(bundle: Path) -> None:
    """Change what the task and its env say: one morning rush instead of three, and other customer data."""
    task = bundle / "tasks" / "workplace.toml"
    text = task.read_text()
    assert "count = 3" in text
    task.write_text(text.replace("count = 3", "count = 1"))
    data_file = bundle / "envs" / "support-desk" / "data.json"
    data = json.loads(data_file.read_text())
    data_file.write_text(json.dumps(data).replace("Dana Whitfield", "Dana Edited"))
    assert "Dana Edited" in data_file.read_text()


def events(state):
    return [(e.kind, e.trigger, e.virtual_time, e.detail) for e in state.world.events]


async def final_data(settings, state):
    from agent_env.gateway.embedded import connect

    async with connect(settings) as gateway:
        return (await gateway.data(state.steps["desk"].outputs["instance"], "data/get"))["parts"]


async def finish(client, settings, inp):
    return await asyncio.wait_for(launch.wait_result(await launch.start(client, settings, inp)), 120)


async def test_rerun_reproduces_workplace_after_its_bundle_changed(client, settings, worker, tmp_path):
    bundle = workplace_bundle(tmp_path)
    task = load_task(bundle / "tasks" / "workplace.toml")
    original = await finish(client, settings, launch.plan(task, launch.new_run_id(task.id), settings))
    assert original.status is RunStatus.PASSED, original.error
    pins = original.pins
    assert pins["plan"].startswith("sha256:") and pins["seed"] == 42
    assert set(pins["digests"]) == {"task", "envs.desk"}
    assert pins["artifacts"] and all(keys.is_content(k) for k in pins["artifacts"])

    edit_bundle(bundle)
    edited = await finish(
        client, settings, launch.plan(load_task(bundle / "tasks" / "workplace.toml"), "edited-" + task.id, settings)
    )
    assert events(edited) != events(original), "the edit changes a fresh run (so the rerun proves something)"
    assert edited.pins["plan"] != pins["plan"] and edited.pins["digests"] != pins["digests"]

    again = await finish(client, settings, launch.replan(settings, original.run_id))
    assert again.run_id != original.run_id
    assert again.status is RunStatus.PASSED and again.score == original.score
    assert events(again) == events(original), "the same events, in the same order, at the same virtual times"
    assert await final_data(settings, again) == await final_data(settings, original), "the same final state"
    assert "Dana Whitfield" in json.dumps(await final_data(settings, again)), "the pinned data, not the edited file"
    assert again.pins == {**pins, "rerun_of": original.run_id}


@pytest.fixture
def stores(tmp_path):
    opened = open_stores(Settings.model_validate({"state_dir": str(tmp_path / "state")}))
    yield opened
    opened.close()


def kept_plan(state_dir: Path) -> tuple[dict, str]:
    """A planned hello run's record (as `launch.start` writes it) and its plan's digest, kept in the stores
    of `state_dir`."""
    inp = launch.plan(resolve_target("hello"), "hello-1", Settings.model_validate({"state_dir": str(state_dir)}))
    return RunState.start(inp, datetime.now(UTC)).model_dump(mode="json"), inp.pins["plan"]


def test_a_plan_is_kept_once_by_its_digest(stores, tmp_path):
    record, digest = kept_plan(tmp_path / "state")
    _, again = kept_plan(tmp_path / "state")
    assert again == digest, "the same task planned twice is the same plan"
    document = json.loads(stores.objects.get(keys.plan(digest)))
    assert json_digest(document) == digest
    assert "run_id" not in document and "plan" not in document["pins"]
    rerun = replan(stores, record, "hello-2")
    assert rerun.run_id == "hello-2" and rerun.pins["rerun_of"] == "hello-1" and rerun.pins["plan"] == digest
    assert [s.model_dump() for s in rerun.steps] == [s.model_dump() for s in replan(stores, record, "x").steps]


def test_an_altered_plan_is_refused(stores, tmp_path):
    record, digest = kept_plan(tmp_path / "state")
    document = json.loads(stores.objects.get(keys.plan(digest)))
    document["pins"]["seed"] = 7
    stores.objects.put(keys.plan(digest), json.dumps(document).encode())
    with pytest.raises(BadInput, match="does not match its digest"):
        replan(stores, record, "hello-2")


def test_a_run_without_a_kept_plan_says_why(stores, tmp_path):
    record, digest = kept_plan(tmp_path / "state")
    stores.objects.delete(keys.plan(digest))
    with pytest.raises(NotFound, match="not in this install's object store") as missing:
        replan(stores, record, "hello-2")
    assert "config show" in missing.value.fix
    old = {**record, "pins": {k: v for k, v in record["pins"].items() if k != "plan"}}
    with pytest.raises(BadInput, match="pins no plan") as none:
        replan(stores, old, "hello-2")
    assert "agent-env run hello" in none.value.fix
    forged = {**record, "pins": {**record["pins"], "plan": "sha256:../../etc/passwd"}}
    with pytest.raises(BadInput, match="pins no plan"):
        replan(stores, forged, "hello-2")
