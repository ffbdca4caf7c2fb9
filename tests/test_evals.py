"""Evals: versioned sets of task references (the framework's `evals/NAME.toml`). An eval of 20 tasks (the built-in
notes app and `check` steps, and one task pinned at an older version in the registry) runs as 20 task-run
workflows on the session's real Temporal server, four at a time; each task's score and status and the aggregate
(mean, pass rate) are checked, in the result and in the explorer over HTTP. Eval files' errors name the file and
the field; an eval version goes to the registry and back; `agent-env run BUNDLE` runs a bundle's evals."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import explorer_util
import httpx
import pytest
from test_cli import cli

from agent_env.cli.run_args import parse_run
from agent_env.config import Settings
from agent_env.errors import BadInput, NotFound
from agent_env.explorer.auth import Door
from agent_env.explorer.server import create_app
from agent_env.registry.store import open_registry
from agent_env.spec.evals import EvalRun, EvalTable, EvalTaskRun, eval_toml, read_eval_file
from agent_env.stores import keys
from agent_env.task_lookup import eval_tasks, evals_to_run
from agent_env.temporal.eval_runs import plan_eval, run_eval

# -- bundles written for the tests --


def check_task(bundle: Path, name: str, passing: int, total: int = 4, version: str = "1") -> None:
    """A task whose one `check` step scores passing/total (it passes only at total/total)."""
    checks = "\n".join(
        f'[[steps.config.checks]]\nname = "c{i}"\nvalue = {i}\nequals = {i if i < passing else -1}\n'
        for i in range(total)
    )
    text = f'id = "{name}"\nversion = "{version}"\n[[steps]]\nid = "grade"\ntype = "check"\n{checks}'
    (bundle / "tasks").mkdir(parents=True, exist_ok=True)
    (bundle / "tasks" / f"{name}.toml").write_text(text)


def notes_task(bundle: Path, name: str, text: str, expected: str) -> None:
    """A task on the built-in notes app: write a note, then check its text (and that one note is stored)."""
    (bundle / "tasks").mkdir(parents=True, exist_ok=True)
    (bundle / "tasks" / f"{name}.toml").write_text(
        textwrap.dedent(f"""\
            id = "{name}"
            [[steps]]
            id = "notes"
            type = "deploy_env"
            config = {{ env_id = "notes" }}

            [[steps]]
            id = "write"
            type = "call_tool"
            depends_on = ["notes"]
            config = {{ env = "notes", tool = "write_note", arguments = {{ key = "k", text = "{text}" }} }}

            [[steps]]
            id = "verify"
            type = "check_state"
            depends_on = ["write"]
            [steps.config]
            env = "notes"
            [[steps.config.checks]]
            name = "one note"
            tool = "list_notes"
            path = "count"
            equals = 1
            [[steps.config.checks]]
            name = "its text"
            tool = "read_note"
            arguments = {{ key = "k" }}
            path = "text"
            equals = "{expected}"
            """)
    )


def write_eval(bundle: Path, name: str, body: str) -> Path:
    (bundle / "evals").mkdir(parents=True, exist_ok=True)
    path = bundle / "evals" / f"{name}.toml"
    path.write_text(body)
    return path


# -- the eval file --


def test_an_eval_file_in_the_framework_form_is_read(tmp_path):
    spec = read_eval_file(
        write_eval(
            tmp_path / "a",
            "smoke",
            'type = "eval"\ntasks = ["greet", { task = "refund", version = 2 }, { task = "desk", version = "1.2" }]\n',
        )
    )
    assert spec.name == spec.id == "smoke" and spec.version == "1"
    assert [(r.task, r.version) for r in spec.tasks] == [("greet", None), ("refund", "2"), ("desk", "1.2")]
    again = read_eval_file(write_eval(tmp_path / "b", "smoke", eval_toml(spec)))
    assert again.tasks == spec.tasks and again.id == spec.id, "what pull writes reads back the same"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("tasks = [\n", "is not valid TOML"),
        ('task = ["a"]\n', "unknown key 'task'"),
        ('type = "suite"\ntasks = ["a"]\n', "type: 'suite'"),
        ("tasks = []\n", "tasks: empty"),
        ('id = "x"\n', "tasks: missing"),
        ('tasks = "a"\n', "tasks: 'a' is not a list"),
        ('tasks = ["a", 3]\n', "tasks[1]: expected"),
        ('tasks = ["a", { name = "b" }]\n', "tasks[1]: unknown key 'name'"),
        ('tasks = [{ task = "" }]\n', "tasks[0].task: must name a task"),
        ('tasks = [{ task = "a", version = 0 }]\n', "tasks[0].version: 0 is not a version"),
        ('tasks = [{ task = "a", version = true }]\n', "tasks[0].version: True is not a version"),
        ('tasks = ["a", { task = "a", version = 2 }]\n', "tasks[1]: task 'a' is also tasks[0]"),
        ('id = 3\ntasks = ["a"]\n', "id: must be a non-empty string"),
        ('version = ""\ntasks = ["a"]\n', "version: is empty"),
    ],
)
def test_eval_file_errors_name_the_file_and_the_field(tmp_path, body, field):
    path = write_eval(tmp_path, "bad", body)
    with pytest.raises(BadInput) as e:
        read_eval_file(path)
    assert str(path) in e.value.problem and field in e.value.problem, e.value.problem
    assert e.value.fix


def test_a_reference_to_no_task_names_the_eval_file_and_its_index(tmp_path):
    check_task(tmp_path, "a", 4)
    path = write_eval(tmp_path, "smoke", f'tasks = ["a", "nowhere-{uuid.uuid4().hex[:8]}"]\n')
    [spec] = evals_to_run(str(tmp_path))
    with pytest.raises(NotFound) as e:
        eval_tasks(spec, tmp_path)
    assert f"{path}: tasks[1]: no task 'nowhere-" in e.value.problem
    with pytest.raises(NotFound, match="has no eval 'other'"):
        evals_to_run(str(tmp_path), ["other"])


def test_the_table_counts_a_finished_run_without_a_score_as_zero():
    run = EvalRun(
        eval_run_id="e",
        eval="x",
        version="1",
        source="here",
        started_at="2026-01-01T00:00:00Z",
        tasks=[EvalTaskRun(task=t, version="1", ref=t, run_id=f"r-{t}") for t in "abcd"],
    )
    table = EvalTable.of(run, {"r-a": ("passed", 1.0), "r-b": ("failed", 0.5), "r-c": ("error", None)})
    assert [r.status for r in table.rows] == ["passed", "failed", "error", "pending"]
    assert (table.finished, table.passed, table.mean, table.pass_rate) == (3, 1, 0.5, 0.25)
    assert not table.complete


# -- the registry --


@pytest.fixture
def registry(tmp_path):
    reg = open_registry(Settings.model_validate({"state_dir": str(tmp_path / "state")}))
    yield reg
    reg.close()


def test_an_eval_version_goes_to_the_registry_and_back(registry, tmp_path):
    bundle = tmp_path / "b"
    check_task(bundle, "a", 4, version="3")
    check_task(bundle, "b", 2)
    write_eval(bundle, "smoke", 'tasks = ["a", { task = "b" }, { task = "elsewhere", version = 7 }]\n')
    pushed = {f"{r.kind}/{r.name}@{r.label}": r.outcome for r in registry.push_bundle(bundle)}
    assert pushed == {"tasks/a@3": "pushed", "tasks/b@1": "pushed", "evals/smoke@1": "pushed"}
    stored = registry.eval("smoke")
    # the bundle's own tasks are pinned to the versions pushed with it; the registry's keeps its pin
    assert [str(r) for r in stored.tasks] == ["a@3", "b@1", "elsewhere@7"] and stored.source == "registry"
    assert [r.outcome for r in registry.push_bundle(bundle)] == ["unchanged"] * 3

    write_eval(bundle, "smoke", 'tasks = ["a"]\n')
    with pytest.raises(BadInput, match="eval smoke@1 is already in the registry with other content"):
        registry.push_bundle(bundle)
    write_eval(bundle, "smoke", 'version = "2"\ntasks = ["a"]\n')
    assert registry.push_bundle(bundle)[-1].outcome == "pushed"
    assert [v.label for v in registry.versions("evals", "smoke")] == ["1", "2"]
    assert [str(r) for r in registry.eval("smoke").tasks] == ["a@3"], "the latest version by default"

    out = tmp_path / "pulled"
    written = registry.pull(registry.version("evals", "smoke", "1"), out)
    assert written == [out / "evals" / "smoke.toml"]
    pulled = read_eval_file(out / "evals" / "smoke.toml")
    assert [str(r) for r in pulled.tasks] == ["a@3", "b@1", "elsewhere@7"] and pulled.version == "1"

    # an altered record is refused, as a task's is
    doc_key = keys.registry_version("evals", "smoke", "1")
    doc = registry.documents.get(keys.REGISTRY, doc_key)
    assert doc is not None, "the eval's version is a document of the registry"
    doc["record"]["tasks"] = [{"task": "evil"}]
    registry.documents.put(keys.REGISTRY, doc_key, doc)
    with pytest.raises(BadInput, match="does not match its digest"):
        registry.eval("smoke", "1")


# -- an eval of 20 tasks on the real Temporal server --

# name -> (status, score) each task of the 20 should end with
CHECKS = {f"c{i:02d}": i % 5 for i in range(16)}  # passing checks of 4: scores 0, .25, .5, .75, 1
NOTES = {"n1": ("hi", "hi"), "n2": ("hello", "hello"), "n3": ("typo", "type")}


@pytest.fixture
def twenty(tmp_path, settings) -> tuple[Path, str]:
    """A bundle of 19 tasks and an eval of 20: those 19 and a registry task pinned at its first version (its
    latest, version 2, would score 1)."""
    bundle = tmp_path / "twenty"
    for name, passing in CHECKS.items():
        check_task(bundle, name, passing)
    for name, (text, expected) in NOTES.items():
        notes_task(bundle, name, text, expected)
    elsewhere = tmp_path / "elsewhere"
    registered = f"reg-{uuid.uuid4().hex[:8]}"
    registry = open_registry(settings)
    try:
        check_task(elsewhere, registered, 1, version="1")
        registry.push_bundle(elsewhere)
        check_task(elsewhere, registered, 4, version="2")
        registry.push_bundle(elsewhere)
    finally:
        registry.close()
    refs = [*(f'"{n}"' for n in [*CHECKS, *NOTES]), f'{{ task = "{registered}", version = 1 }}']
    write_eval(bundle, "twenty", "tasks = [\n  " + ",\n  ".join(refs) + ",\n]\n")
    return bundle, registered


def expected_rows(registered: str) -> dict[str, tuple[str, float]]:
    rows = {name: ("passed" if k == 4 else "failed", k / 4) for name, k in CHECKS.items()}
    rows.update({"n1": ("passed", 1.0), "n2": ("passed", 1.0), "n3": ("failed", 0.5), registered: ("failed", 0.25)})
    return rows


async def test_an_eval_of_20_tasks_runs_as_20_workflows_and_the_explorer_shows_its_table(
    client, settings, worker, twenty
):
    bundle, registered = twenty
    [spec] = evals_to_run(str(bundle))  # with none named, every eval of the bundle
    tasks = eval_tasks(spec, bundle)
    assert len(tasks) == 20 and tasks[-1].id == registered and tasks[-1].version == "1"
    record, inputs = plan_eval(settings, spec, tasks)
    heard: list[str] = []
    table = await run_eval(
        client, settings, record, inputs, concurrency=4, on_done=lambda state, inp, error: heard.append(inp.task_id)
    )

    want = expected_rows(registered)
    assert {r.task: (r.status, r.score) for r in table.rows} == want
    assert [r.task for r in table.rows] == [*CHECKS, *NOTES, registered], "in the eval's order"
    assert sorted(heard) == sorted(want)
    assert table.finished == 20 and table.passed == sum(s == "passed" for s, _ in want.values()) == 5
    assert table.mean == round(sum(score for _, score in want.values()) / 20, 6)
    assert table.pass_rate == 0.25
    for row in table.rows:  # each is a task run of its own, a workflow in Temporal
        described = await client.get_workflow_handle(row.run_id).describe()
        assert described.workflow_type == "agentenv.TaskRun" and described.status is not None

    door = Door()
    with explorer_util.serving(create_app(settings, door, temporal=client)) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            await explorer_util.sign_in(http, door)
            listed = (await http.get("/api/evals")).json()["evals"]
            mine = next(e for e in listed if e["eval_run_id"] == record.eval_run_id)
            assert (mine["eval"], mine["passed"], mine["finished"], mine["pass_rate"]) == ("twenty", 5, 20, 0.25)
            shown = (await http.get(f"/api/evals/{record.eval_run_id}")).json()
            assert {r["task"]: (r["status"], r["score"]) for r in shown["rows"]} == want
            assert shown["mean"] == table.mean and shown["pass_rate"] == 0.25
            assert (await http.get("/api/evals/nope")).status_code == 404
            page = (await http.get("/")).text
            assert 'href="#/evals"' in page
            script = (await http.get("/static/evals.js")).text
            assert "/api/evals/" in script and "eval-tasks" in script and "pass rate" in script


async def test_the_explorer_shows_a_k_2_eval_runs_tasks_with_mean_and_pass_at_k(client, settings, worker, tmp_path):
    """Two runs of each task: the explorer's eval run holds each task's runs, mean and pass@2 and the share of
    tasks with a passing run, the very table `eval run` prints (`EvalTable`); its page shows them per task."""
    bundle = tmp_path / "k2"
    check_task(bundle, "good", 4)
    check_task(bundle, "half", 2)
    write_eval(bundle, "twice", 'tasks = ["good", "half"]\n')
    [spec] = evals_to_run(str(bundle))
    record, inputs = plan_eval(settings, spec, eval_tasks(spec, bundle), k=2)
    table = await run_eval(client, settings, record, inputs, concurrency=4)

    door = Door()
    with explorer_util.serving(create_app(settings, door, temporal=client)) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            await explorer_util.sign_in(http, door)
            shown = (await http.get(f"/api/evals/{record.eval_run_id}")).json()
            assert shown == json.loads(table.model_dump_json()), "the explorer's table is `eval run`'s"
            assert shown["k"] == 2 and len(shown["rows"]) == 4 and shown["pass_at_k"] == 0.5
            assert [(t["task"], t["runs"], t["passed"], t["mean"], t["pass_at_k"]) for t in shown["tasks"]] == [
                ("good", 2, 2, 1.0, True),
                ("half", 2, 0, 0.5, False),
            ]
            runs = {r["task"]: [] for r in shown["rows"]}
            for r in shown["rows"]:
                runs[r["task"]].append(r["run_id"])
            assert {t: len(set(ids)) for t, ids in runs.items()} == {"good": 2, "half": 2}, "each run its own"
            listed = (await http.get("/api/evals")).json()["evals"]
            mine = next(e for e in listed if e["eval_run_id"] == record.eval_run_id)
            assert (mine["k"], mine["pass_at_k"], mine["mean"], mine["pass_rate"]) == (2, 0.5, 0.75, 0.5)
            script = (await http.get("/static/evals.js")).text
            assert "eval-per-task" in script and "pass_at_k" in script


# -- agent-env run BUNDLE --


def test_agent_env_run_runs_a_bundles_evals_and_prints_the_table(server, tmp_path):
    bundle = tmp_path / "b"
    check_task(bundle, "good", 4)
    check_task(bundle, "half", 2)
    check_task(bundle, "alone", 4)
    write_eval(bundle, "smoke", 'tasks = ["good", "half"]\n')
    write_eval(bundle, "solo", 'tasks = ["good"]\n')

    dry = cli("run", str(bundle), "--eval", "smoke", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "eval smoke v1 · 2 tasks · planned, not started" in dry.stdout and "half v1" in dry.stdout

    done = cli("run", str(bundle), "--eval", "smoke", timeout=180)
    assert done.returncode == 1, done.stdout + done.stderr  # one of its tasks failed
    out = done.stdout
    assert "eval smoke v1 · 2 tasks" in out
    assert "mean 0.75 · pass rate 0.50 (1/2 passed)" in out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (["good"], ["half"])}
    assert lines["good"][1:4] == ["1", "passed", "1.00"] and lines["half"][1:4] == ["1", "failed", "0.50"]

    both = cli("run", str(bundle), "--json", timeout=180)  # with none named: every eval, not one task
    tables = [json.loads(line) for line in both.stdout.splitlines()]
    assert sorted(t["eval"] for t in tables) == ["smoke", "solo"] and both.returncode == 1
    solo = next(t for t in tables if t["eval"] == "solo")
    assert (solo["passed"], solo["mean"], solo["pass_rate"]) == (1, 1.0, 1.0)

    assert parse_run([str(bundle)]) is None, "a bundle's evals are not the fast path's (it runs one task)"
    assert parse_run([str(bundle), "--task", "alone"]) is not None
    alone = cli("run", str(bundle), "--task", "alone", timeout=120)  # a task on its own still runs alone
    assert alone.returncode == 0 and "PASSED" in alone.stdout, alone.stdout + alone.stderr
    mixed = cli("run", str(bundle), "--task", "alone", "--eval", "smoke")
    assert mixed.returncode == 2 and "--task and --eval" in mixed.stderr


def test_an_eval_pushed_to_the_registry_runs_by_name_from_anywhere(server, tmp_path):
    name = f"ev-{uuid.uuid4().hex[:8]}"
    bundle = tmp_path / name
    check_task(bundle, f"{name}-a", 4)
    check_task(bundle, f"{name}-b", 4, version="2")
    write_eval(bundle, name, f'tasks = ["{name}-a", "{name}-b"]\n')
    pushed = cli("registry", "push", str(bundle))
    assert pushed.returncode == 0 and f"pushed: eval {name}@1" in pushed.stdout, pushed.stdout + pushed.stderr
    shown = cli("registry", "show", "evals", name)
    assert f"tasks: {name}-a@1, {name}-b@2" in shown.stdout, shown.stdout
    pulled = cli("registry", "pull", "evals", name, "--out", str(tmp_path / "pulled"))
    assert pulled.returncode == 0 and (tmp_path / "pulled" / "evals" / f"{name}.toml").is_file()

    elsewhere = tmp_path / "empty"
    elsewhere.mkdir()
    done = cli("run", "--eval", f"{name}@1", "--json", cwd=elsewhere, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    table = json.loads(done.stdout)
    assert (table["eval"], table["version"], table["source"]) == (name, "1", "registry")
    assert [(r["task"], r["version"], r["status"]) for r in table["rows"]] == [
        (f"{name}-a", "1", "passed"),
        (f"{name}-b", "2", "passed"),
    ]
    assert (table["mean"], table["pass_rate"]) == (1.0, 1.0)
