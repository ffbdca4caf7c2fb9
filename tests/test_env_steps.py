"""Environment steps in real runs: deploy, load, reset, snapshot/restore, roles, calls, checks, teardown."""

from __future__ import annotations

import json

import pytest

from agent_env.errors import BadInput
from agent_env.gateway.embedded import connect
from agent_env.planning.tasks import load_task
from agent_env.spec.run import RunStatus, StepStatus
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch


async def run_spec(client, settings, spec):
    return await launch.wait_result(await launch.start_run(client, settings, spec))


async def test_support_desk_bundle(client, settings, worker):
    state = await run_spec(client, settings, resolve_target("support-desk"))
    assert state.status is RunStatus.PASSED, state
    assert "not available to role 'support'" in state.steps["support_cannot_refund"].outputs["error"]
    assert state.steps["refund"].outputs["result"]["amount_cents"] == 4900
    desk = state.steps["desk"].outputs
    assert desk["apps"] == ["mail", "chat", "helpdesk", "billing"]
    assert desk["agents"] == {
        "sam": {"role": "support", "token_ref": f"gateway-token:{desk['instance']}/sam"},
        "lee": {"role": "billing_lead", "token_ref": f"gateway-token:{desk['instance']}/lee"},
    }
    assert desk["urls"]["mcp"].endswith(f"/envs/{desk['instance']}/mcp")
    snapshot = state.steps["end_state"].outputs
    assert snapshot["snapshot"] == f"runs/{state.run_id}/snapshots/end_state.tar" and snapshot["bytes"] > 10_000
    record = json.dumps(state.model_dump(mode="json"))
    assert "aet_" not in record, "no role token ever lands in the run's record or history"


def write_bundle(root, task: str, env: str | None = None, data: dict | None = None):
    (root / "tasks").mkdir(parents=True)
    (root / "tasks" / "t.toml").write_text(task)
    if env is not None:
        (root / "envs" / "shop").mkdir(parents=True)
        (root / "envs" / "shop" / "env.toml").write_text(env)
    if data is not None:
        (root / "seed.json").write_text(json.dumps(data))
    return root / "tasks" / "t.toml"


NOTES_ENV = """
name = "shop"
data = []
[[apps]]
app = "notes"
[roles.writer]
tools = ["*"]
[roles.reader]
tools = ["read_note", "list_notes"]
"""

TASK = """
id = "life"
[[steps]]
id = "env"
type = "deploy_env"
config = { env_id = "shop", agents = { ann = "reader" } }
[[steps]]
id = "seed"
type = "load_data"
depends_on = ["env"]
config = { env = "env", file = "seed.json" }
[[steps]]
id = "before"
type = "snapshot_env"
depends_on = ["seed"]
config = { env = "env" }
[[steps]]
id = "promote"
type = "modify_env_tool_access"
depends_on = ["before"]
config = { env = "env", role = "reader", tools = ["*"] }
[[steps]]
id = "ann_writes"
type = "call_tool"
depends_on = ["promote"]
config = { env = "env", agent = "ann", tool = "write_note", arguments = { key = "ann", text = "now I can" } }
[[steps]]
id = "rewind"
type = "restore_env"
depends_on = ["ann_writes"]
config = { env = "env", snapshot = "before" }
[[steps]]
id = "check"
type = "check_state"
depends_on = ["rewind"]
[steps.config]
env = "env"
role = "reader"
[[steps.config.checks]]
name = "the seed is back"
tool = "list_notes"
path = "notes"
equals = { seeded = "from a file" }
[[steps.config.checks]]
name = "a missing note fails its check, not the step"
tool = "read_note"
arguments = { key = "ann" }
path = "text"
equals = "now I can"
weight = 0.5
[[steps]]
id = "wipe"
type = "reset_env"
depends_on = ["check"]
config = { env = "env" }
[[steps]]
id = "done"
type = "teardown_env"
depends_on = ["wipe"]
config = { env = "env" }
"""


async def test_environment_lifecycle(client, settings, worker, tmp_path):
    path = write_bundle(
        tmp_path / "bundle",
        TASK,
        NOTES_ENV,
        {"notes": {"notes": [{"key": "seeded", "text": "from a file", "updated_at": "t"}]}},
    )
    state = await run_spec(client, settings, load_task(path))
    assert all(s.status is StepStatus.SUCCEEDED for s in state.steps.values()), state
    score = state.steps["check"].score
    assert score.value == pytest.approx(1 / 1.5, rel=1e-4) and not score.passed
    assert "no note named 'ann'" in score.criteria[1].detail
    assert state.status is RunStatus.FAILED, "a score below threshold fails the run"
    assert state.steps["promote"].outputs["tools"] == [
        "delete_note",
        "get_time",
        "list_notes",
        "read_note",
        "write_note",
    ]
    instance = state.steps["env"].outputs["instance"]
    trajectory = state.steps["done"].outputs["trajectory"]
    stores = __import__("agent_env.stores", fromlist=["open_stores"]).open_stores(settings)
    lines = [json.loads(line) for line in stores.objects.get(trajectory).decode().splitlines()]
    assert [e["tool"] for e in lines] == ["write_note", "list_notes", "read_note"]
    assert lines[0]["agent"] == "ann" and lines[0]["role"] == "reader"
    async with connect(settings) as gateway:
        with pytest.raises(Exception, match="no environment instance"):
            await gateway.get_instance(instance)


def test_env_references_are_checked_before_the_run(tmp_path):
    bad_ref = """
id = "t"
[[steps]]
id = "env"
type = "deploy_env"
config = { env_id = "notes" }
[[steps]]
id = "call"
type = "call_tool"
config = { env = "env", tool = "list_notes" }
"""
    with pytest.raises(BadInput, match="refers to step 'env', but 'call' does not depend on it"):
        load_task(write_bundle(tmp_path / "a", bad_ref))
    # The hint lists every env the bundle can reach: its own and the built-in ones.
    with pytest.raises(BadInput, match=r"no environment 'nowhere' in bundle b — use one of: .*\bshop\b.*\bnotes\b"):
        load_task(write_bundle(tmp_path / "b", TASK.replace('env_id = "shop"', 'env_id = "nowhere"'), NOTES_ENV))
    with pytest.raises(BadInput, match="agent 'ann' has role 'owner'"):
        load_task(write_bundle(tmp_path / "c", TASK.replace('ann = "reader"', 'ann = "owner"'), NOTES_ENV))
    with pytest.raises(BadInput, match="'erase_everything' matches no tool"):
        load_task(write_bundle(tmp_path / "d", TASK, NOTES_ENV.replace('"read_note"', '"erase_everything"')))
    with pytest.raises(BadInput, match="outside the environment's folder"):
        load_task(write_bundle(tmp_path / "e", TASK, NOTES_ENV.replace("data = []", 'data = ["../../seed.json"]')))


async def test_load_data_files_cannot_escape_the_bundle(client, settings, worker, tmp_path):
    path = write_bundle(tmp_path / "bundle", TASK.replace('file = "seed.json"', 'file = "../../etc/passwd"'), NOTES_ENV)
    with pytest.raises(BadInput, match="is not a file inside the bundle"):
        await launch.start_run(client, settings, load_task(path))


async def test_an_app_from_a_plugin_deploys_by_its_name(client, settings, worker, tmp_path):
    """`tally` comes from the test plugin package's `agent_env.envs` entry point: a task names it like a built-in."""
    task = """
id = "tally"
[[steps]]
id = "env"
type = "deploy_env"
config = { env_id = "tally" }
[[steps]]
id = "add"
type = "call_tool"
depends_on = ["env"]
config = { env = "env", tool = "add", arguments = { amount = 3 } }
"""
    state = await run_spec(client, settings, load_task(write_bundle(tmp_path / "bundle", task)))
    assert state.steps["add"].status is StepStatus.SUCCEEDED, state.steps["env"].error
    assert state.steps["add"].outputs["result"] == {"total": 3}
