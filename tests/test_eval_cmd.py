"""`agent-env eval create|add-tasks|run`: evals in the registry made from the framework's JSON file of task
references, each change a new version; `eval run` runs an eval's tasks (k times each) as task runs on the
session's real Temporal server, then prints each run's score, each task's mean and pass@k, and the aggregate;
`--output-dir` keeps each run's result. `bundle export --eval` carries an eval and its tasks to another registry."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from test_cli import cli
from test_evals import check_task

from agent_env.config import Settings
from agent_env.registry.bundle_file import import_bundle
from agent_env.registry.store import open_registry


def refs_file(path: Path, entries: object) -> Path:
    path.write_text(json.dumps(entries))
    return path


@pytest.fixture
def pushed(tmp_path):
    """Tasks in the session's registry, named uniquely: `good` passes (4/4), `half` fails at 0.5, `two` has
    versions 1 (passes) and 2 (fails at 0.25)."""
    tag = uuid.uuid4().hex[:8]
    names = {key: f"{key}-{tag}" for key in ("good", "half", "two")}
    first, second = tmp_path / "b1", tmp_path / "b2"
    check_task(first, names["good"], 4)
    check_task(first, names["half"], 2)
    check_task(first, names["two"], 4, version="1")
    check_task(second, names["two"], 1, version="2")
    for bundle in (first, second):
        done = cli("registry", "push", str(bundle))
        assert done.returncode == 0, done.stdout + done.stderr
    return names


def test_create_and_add_tasks_make_new_versions(server, tmp_path, pushed):
    good, half, two = pushed["good"], pushed["half"], pushed["two"]
    eval_id = f"ev-{uuid.uuid4().hex[:8]}"
    made = cli(
        "eval",
        "create",
        str(refs_file(tmp_path / "a.json", [{"task_id": good}, {"task_id": two, "task_version": 1}])),
        "--id",
        eval_id,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert f"eval {eval_id}: made version 1 · 2 task(s)" in made.stdout
    added = cli(
        "eval",
        "add-tasks",
        str(refs_file(tmp_path / "b.json", [{"task_id": half}, {"task_id": two, "task_version": 2}])),
        "--id",
        eval_id,
    )
    assert added.returncode == 0, added.stdout + added.stderr
    assert f"eval {eval_id}: made version 2 · 3 task(s)" in added.stdout
    shown = cli("registry", "show", "evals", eval_id)
    assert f"tasks: {good}@latest, {two}@2, {half}@latest" in shown.stdout, shown.stdout  # `two` replaced, listed once
    from_first = cli("eval", "add-tasks", str(tmp_path / "b.json"), "--id", eval_id, "--version", "1")
    assert "made version 3 · 3 task(s)" in from_first.stdout, from_first.stdout + from_first.stderr


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ({"task_id": "x"}, "expected a non-empty list"),
        ([], "expected a non-empty list"),
        ([{"task_id": "x"}, {"task_version": 1}], "[1].task_id: Field required"),
        ([{"task_id": "x", "task_version": "two"}], "[0].task_version: Input should be a valid integer"),
        ([{"task_id": "x", "task_version": 0}], "[0].task_version: Input should be greater than or equal to 1"),
        ([{"task_id": "x", "version": 1}], "[0].version: Extra inputs are not permitted"),
        ([{"task_id": "x"}, {"task_id": "x"}], "[1]: task 'x' is also [0]"),
    ],
)
def test_a_bad_file_names_the_entry_and_the_field(tmp_path, entries, says):
    path = refs_file(tmp_path / "refs.json", entries)
    done = cli("eval", "create", str(path), "--id", "bad")
    assert done.returncode == 2 and says in done.stderr and str(path) in done.stderr, done.stderr


def test_create_refuses_what_is_not_json_or_names_no_task(server, tmp_path, pushed):
    path = tmp_path / "refs.json"
    path.write_text("[{")
    done = cli("eval", "create", str(path), "--id", "bad")
    assert done.returncode == 2 and "is not valid JSON" in done.stderr, done.stderr
    missing = refs_file(path, [{"task_id": pushed["good"]}, {"task_id": pushed["two"], "task_version": 9}])
    done = cli("eval", "create", str(missing), "--id", f"ev-{uuid.uuid4().hex[:8]}")
    assert done.returncode == 2 and f"[1]: task {pushed['two']} has no version '9'" in done.stderr, done.stderr
    bad_id = cli("eval", "create", str(refs_file(path, [{"task_id": pushed["good"]}])), "--id", "../up")
    assert bad_id.returncode == 2 and "--id: '../up' is not a valid eval id" in bad_id.stderr


def test_eval_run_with_k_2_prints_each_tasks_mean_and_pass_at_k(server, tmp_path, pushed):
    eval_id = f"ev-{uuid.uuid4().hex[:8]}"
    path = refs_file(tmp_path / "refs.json", [{"task_id": pushed["good"]}, {"task_id": pushed["half"]}])
    assert cli("eval", "create", str(path), "--id", eval_id).returncode == 0
    out_dir = tmp_path / "out"
    done = cli("eval", "run", "--id", eval_id, "--k", "2", "--output-dir", str(out_dir), timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr  # `half` fails both its runs
    assert f"eval {eval_id} v1 · 4 tasks" in done.stdout
    rows = [line.split() for line in done.stdout.splitlines()]
    per_task = {r[0]: r[1:] for r in rows if r[:1] in ([pushed["good"]], [pushed["half"]]) and "/" in r[2]}
    assert per_task[pushed["good"]] == ["1", "2/2", "1.00", "yes"], done.stdout
    assert per_task[pushed["half"]] == ["1", "0/2", "0.50", "no"], done.stdout
    assert "pass@2 0.50" in done.stdout and "mean 0.75 · pass rate 0.50 (2/4 passed)" in done.stdout

    written = sorted(out_dir.glob("*.json"))
    assert len(written) == 4
    results = [json.loads(p.read_text()) for p in written]
    assert sorted(r["status"] for r in results) == ["failed", "failed", "passed", "passed"]
    assert all(p.name == f"{r['task_id']}_{r['run_id']}.json" for p, r in zip(written, results, strict=True))

    as_json = cli("eval", "run", "--id", eval_id, "--version", "1", "--k", "2", "--json", timeout=240)
    table = json.loads(as_json.stdout)
    assert table["k"] == 2 and len(table["rows"]) == 4 and table["pass_at_k"] == 0.5
    assert [(t["task"], t["runs"], t["passed"], t["mean"], t["pass_at_k"]) for t in table["tasks"]] == [
        (pushed["good"], 2, 2, 1.0, True),
        (pushed["half"], 2, 0, 0.5, False),
    ]


def test_eval_run_model_overrides_and_what_has_no_counterpart(server, tmp_path, pushed):
    eval_id = f"ev-{uuid.uuid4().hex[:8]}"
    assert (
        cli(
            "eval", "create", str(refs_file(tmp_path / "r.json", [{"task_id": pushed["good"]}])), "--id", eval_id
        ).returncode
        == 0
    )
    done = cli(
        "eval", "run", "--id", eval_id, "--judge-model", "judge-x", "--user-model", "user-x", "--json", timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["passed"] == 1
    missing = cli("eval", "run", "--id", eval_id, "--agent-artifact-id", f"img-{uuid.uuid4().hex[:6]}")
    assert missing.returncode == 2 and "--agent-artifact-id 'img-" in missing.stderr, missing.stderr
    assert "no agent" in missing.stderr and "agent-env registry list agents" in missing.stderr
    unknown = cli("eval", "run", "--id", f"none-{uuid.uuid4().hex[:6]}")
    assert unknown.returncode == 2 and "no eval" in unknown.stderr


def test_bundle_export_carries_an_eval_and_its_tasks(server, settings, tmp_path, pushed):
    eval_id = f"ev-{uuid.uuid4().hex[:8]}"
    path = refs_file(tmp_path / "r.json", [{"task_id": pushed["good"]}, {"task_id": pushed["two"], "task_version": 1}])
    assert cli("eval", "create", str(path), "--id", eval_id).returncode == 0
    out = tmp_path / "travel.tar.gz"
    exported = cli("bundle", "export", "--eval", eval_id, "--out", str(out), "--json")
    assert exported.returncode == 0, exported.stdout + exported.stderr
    carried = json.loads(exported.stdout)["versions"]
    assert carried == [f"task {pushed['good']}@1", f"task {pushed['two']}@1", f"eval {eval_id}@1"], carried

    other = Settings.model_validate({"state_dir": str(tmp_path / "other")})
    registry = open_registry(other)
    try:
        results = import_bundle(registry, out, other.state_dir)
        assert {r.outcome for r in results} == {"imported"} and len(results) == 3
        assert [str(r) for r in registry.eval(eval_id).tasks] == [pushed["good"], f"{pushed['two']}@1"]
    finally:
        registry.close()


SHOUTED = """
    id = "{task}"
    [[steps]]
    id = "agent"
    type = "deploy_agent"
    config = {{ agent = "{agent}" }}
    [[steps]]
    id = "ask"
    type = "prompt_agent"
    depends_on = ["agent"]
    config = {{ agent = "agent", prompt = "hello there", turn_deadline = "30s" }}
    [[steps]]
    id = "answer"
    type = "check_response"
    depends_on = ["ask"]
    [steps.config]
    response = "${{steps.ask.outputs.answer}}"
    checks = [{{ name = "shouted", equals = "HELLO THERE" }}]
    """


def test_eval_run_agent_artifact_id_deploys_that_registry_agent_in_every_deploy_agent_step(server, tmp_path):
    """Version 1 of the agent shouts (the task passes), version 2 whispers: `--agent-artifact-id NAME@2` deploys
    version 2 in the task's deploy_agent step, and the task fails; `NAME@1` passes again; `@9` is refused."""
    from test_agent_sandboxes import write_agent_bundle

    tag = uuid.uuid4().hex[:8]
    agent, task = f"shout-{tag}", f"shouted-{tag}"
    bundle = write_agent_bundle(tmp_path / "b", SHOUTED.format(task=task, agent=agent))
    (bundle / "agents" / "shout").rename(bundle / "agents" / agent)
    (bundle / "tasks" / "t.toml").rename(bundle / "tasks" / f"{task}.toml")
    assert cli("registry", "push", str(bundle)).returncode == 0
    code = bundle / "agents" / agent / "app" / "agent.py"
    code.write_text(code.read_text().replace("turn.prompt.upper()", "turn.prompt.lower()"))
    toml = bundle / "agents" / agent / "agent.toml"
    toml.write_text('version = "2"\n' + toml.read_text())
    (bundle / "tasks" / f"{task}.toml").unlink()  # the task as pushed names the agent's version 1
    pushed = cli("registry", "push", str(bundle))
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    eval_id = f"ev-{tag}"
    assert (
        cli("eval", "create", str(refs_file(tmp_path / "r.json", [{"task_id": task}])), "--id", eval_id).returncode == 0
    )

    def scored(*extra: str) -> dict:
        done = cli("eval", "run", "--id", eval_id, "--json", *extra, timeout=180)
        assert done.returncode in (0, 1), done.stdout + done.stderr
        return json.loads(done.stdout)

    assert scored()["passed"] == 1, "the task's own agent (version 1) shouts"
    whispered = scored("--agent-artifact-id", f"{agent}@2")
    assert whispered["passed"] == 0 and whispered["rows"][0]["status"] == "failed", whispered
    assert scored("--agent-artifact-id", f"{agent}@1")["passed"] == 1
    latest = scored("--agent-artifact-id", agent)
    assert latest["passed"] == 0, "the latest version, 2, whispers"
    refused = cli("eval", "run", "--id", eval_id, "--agent-artifact-id", f"{agent}@9")
    assert refused.returncode == 2 and f"agent {agent} has no version '9'" in refused.stderr, refused.stderr

    # `agent-env run` takes it too: the bundle's own agent is now the whispering one; version 1 shouts
    solo = bundle / "tasks" / f"{task}.toml"
    solo.write_text(SHOUTED.format(task=task, agent=agent))
    assert cli("run", str(solo), "--json", timeout=120).returncode == 1
    shouted = cli("run", str(solo), "--json", "--agent-artifact-id", f"{agent}@1", timeout=120)
    assert shouted.returncode == 0, shouted.stdout + shouted.stderr
    planned = cli("run", str(solo), "--dry-run", "--json", "--agent-artifact-id", f"{agent}@1")
    deploy = next(s for s in json.loads(planned.stdout)["steps"] if s["type"] == "deploy_agent")
    assert (deploy["config"]["agent"], deploy["config"]["agent_version"]) == (agent, 1)
