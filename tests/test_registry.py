"""The registry: content-addressed, immutable versions of a bundle's envs, tasks, agents and artifacts in the
stores (local here; AWS through moto's server below), the `agent-env registry` commands, and `agent-env run NAME`
finding a task in the registry when its folder is gone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import moto_util
import pytest

from agent_env.bundles import BUILTIN_ROOT
from agent_env.config import Settings
from agent_env.errors import BadInput, NotFound
from agent_env.registry.bundle_items import read_bundle
from agent_env.registry.store import Registry, open_registry
from agent_env.stores import keys

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
endpoint = moto_util.endpoint  # moto's server for this module's AWS test (a fixture), started only if used


@pytest.fixture
def registry(tmp_path):
    reg = open_registry(Settings.model_validate({"state_dir": str(tmp_path / "state")}))
    yield reg
    reg.close()


def desk_bundle(root: Path) -> Path:
    """A copy of the built-in support-desk bundle (an env with a data file, and a task), plus an artifact."""
    bundle = root / "desk"
    shutil.copytree(BUILTIN_ROOT / "support-desk", bundle)
    (bundle / "artifacts" / "faq").mkdir(parents=True)
    (bundle / "artifacts" / "faq" / "faq.md").write_text("# FAQ\nRefunds take 3 days.\n")
    return bundle


def bump(path: Path, label: str) -> None:
    text = path.read_text()
    path.write_text(text.replace('version = "1"', f'version = "{label}"', 1))


def outcomes(results) -> dict[str, str]:
    return {f"{r.kind}/{r.name}@{r.label}": r.outcome for r in results}


def test_push_then_push_again_unchanged(registry, tmp_path):
    bundle = desk_bundle(tmp_path)
    first = registry.push_bundle(bundle)
    assert outcomes(first) == {
        "artifacts/faq@1": "pushed",
        "envs/support-desk@1": "pushed",
        "tasks/support-desk@1": "pushed",
    }
    again = registry.push_bundle(bundle)
    assert [r.outcome for r in again] == ["unchanged"] * 3
    assert [r.digest for r in again] == [r.digest for r in first]
    assert str(again[1]).startswith("unchanged: env support-desk@1 sha256:")
    task = registry.version("tasks", "support-desk")
    assert task.uses == {"artifacts": {"faq": "1"}, "envs": {"support-desk": "1"}}
    assert "@" in task.pushed_by and task.pushed_at.endswith("Z")  # UTC, as the project writes times


def test_changed_content_under_the_same_label_is_a_conflict(registry, tmp_path):
    bundle = desk_bundle(tmp_path)
    registry.push_bundle(bundle)
    stored = registry.version("envs", "support-desk").digest
    data = bundle / "envs" / "support-desk" / "data.json"
    data.write_text(data.read_text().replace("Dana", "Dora"))
    with pytest.raises(BadInput) as conflict:
        registry.push_bundle(bundle)
    message = str(conflict.value)
    assert "env support-desk@1" in message and stored in message
    assert message.count("sha256:") == 2 and "bump `version`" in message and "'2'" in message
    assert [v.digest for v in registry.versions("envs", "support-desk")] == [stored]  # the label did not move


def test_bumped_version_is_a_new_version_and_the_task_records_it(registry, tmp_path):
    bundle = desk_bundle(tmp_path)
    registry.push_bundle(bundle)
    data = bundle / "envs" / "support-desk" / "data.json"
    data.write_text(data.read_text().replace("Dana", "Dora"))
    bump(bundle / "envs" / "support-desk" / "env.toml", "2")
    with pytest.raises(BadInput, match="task support-desk@1 is already in the registry with other content"):
        registry.push_bundle(bundle)  # the task's env changed: so did the task
    bump(bundle / "tasks" / "support-desk.toml", "2")
    assert outcomes(registry.push_bundle(bundle)) == {
        "artifacts/faq@1": "unchanged",
        "envs/support-desk@2": "pushed",
        "tasks/support-desk@2": "pushed",
    }
    assert [v.label for v in registry.versions("envs", "support-desk")] == ["1", "2"]
    assert registry.version("tasks", "support-desk").uses["envs"] == {"support-desk": "2"}
    assert registry.version("tasks", "support-desk", "1").uses["envs"] == {"support-desk": "1"}


def test_pull_round_trip_and_a_tampered_blob_is_refused(registry, tmp_path):
    bundle = desk_bundle(tmp_path)
    registry.push_bundle(bundle)
    out = tmp_path / "pulled"
    written = registry.pull(registry.version("tasks", "support-desk", "1"), out)
    originals = sorted(p.relative_to(bundle) for p in bundle.rglob("*") if p.is_file())
    assert sorted(p.relative_to(out) for p in written) == originals  # a task brings what it uses
    for rel in originals:
        assert (out / rel).read_bytes() == (bundle / rel).read_bytes()

    env = registry.version("envs", "support-desk")
    data = next(f for f in env.files if f.path.endswith("data.json"))
    registry.objects.put(keys.registry_blob(data.sha256), b'{"tampered": true}')
    with pytest.raises(BadInput, match="envs/support-desk/data.json do not match its digest"):
        registry.pull(env, tmp_path / "again")
    assert not (tmp_path / "again").exists()  # nothing was written


def test_invalid_records_are_all_listed_and_nothing_is_pushed(registry, tmp_path):
    bundle = desk_bundle(tmp_path)
    (bundle / "envs" / "support-desk" / "env.toml").write_text('name = "support-desk"\napps = [{app = "nope"}]\n')
    (bundle / "agents" / "bad").mkdir(parents=True)
    (bundle / "agents" / "bad" / "agent.toml").write_text('type = "wizard"\n')
    (bundle / "tasks" / "broken.toml").write_text('id = "broken"\n[[steps]]\nid = "x"\ntype = "no_such_step"\n')
    with pytest.raises(BadInput) as bad:
        registry.push_bundle(bundle)
    message = str(bad.value)
    assert "invalid records; nothing was pushed" in message
    for where in ("env.toml", "agents/bad/agent.toml", "tasks/broken.toml"):
        assert where in message, where
    assert registry.all_versions("envs") == {} and registry.all_versions("artifacts") == {}


def test_unknown_item_names_close_matches(registry, tmp_path):
    registry.push_bundle(desk_bundle(tmp_path))
    with pytest.raises(NotFound, match="no env 'suport-desk' in the registry \\(did you mean support-desk\\?\\)"):
        registry.versions("envs", "suport-desk")
    with pytest.raises(NotFound, match="has no version '7'"):
        registry.version("envs", "support-desk", "7")


def test_concurrent_pushes_of_different_content_under_one_label(tmp_path):
    """Two installs push different content as env race@N at the same moment: one wins, one is told."""
    settings = Settings.model_validate({"state_dir": str(tmp_path / "state")})
    installs = [open_registry(settings), open_registry(settings)]  # two connections to the same stores
    try:
        for attempt in range(5):
            items = []
            for side in ("a", "b"):
                env = tmp_path / f"{side}{attempt}" / "envs" / "race"
                env.mkdir(parents=True)
                (env / "env.toml").write_text(
                    f'name = "race"\nversion = "{attempt}"\ndata = ["d.json"]\napps = [{{app = "notes"}}]\n'
                )
                (env / "d.json").write_text(json.dumps({"side": side}))
                items += read_bundle(env.parent.parent)
            barrier = threading.Barrier(2, timeout=30)
            results: list[str] = []

            def push(reg, item, barrier=barrier, results=results):
                barrier.wait()
                try:
                    results.append(reg.push(item).outcome)
                except BadInput as e:
                    results.append(str(e))

            threads = [
                threading.Thread(target=push, args=pair, daemon=True) for pair in zip(installs, items, strict=True)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            won, lost = sorted(results, key=len)
            assert won == "pushed"
            assert f"env race@{attempt} is already in the registry with other content" in lost
    finally:
        for reg in installs:
            reg.close()


def test_show_names_the_runs_that_used_a_version(registry, tmp_path):
    registry.push_bundle(desk_bundle(tmp_path))
    pins = {"task": "support-desk@1", "envs": {"desk": "support-desk@1"}}
    registry.documents.put(keys.RUNS, "r1", {"run_id": "r1", "started_at": "2026-01-01T00:00:00Z", "pins": pins})
    registry.documents.put(keys.RUNS, "r2", {"run_id": "r2", "started_at": "2026-01-02T00:00:00Z", "pins": {}})
    assert [r["run_id"] for r in registry.runs_using(registry.version("envs", "support-desk"))] == ["r1"]
    assert [r["run_id"] for r in registry.runs_using(registry.version("tasks", "support-desk"))] == ["r1"]


# --- the CLI, and running from the registry ---


def cli(*args, env=None, cwd=None, timeout=90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [AGENT_ENV, *args],
        capture_output=True,
        text=True,
        env={**(env or os.environ), "AGENT_ENV_TASK_QUEUE": "agentenv-cli-tests"},
        cwd=cwd,
        timeout=timeout,
    )


@pytest.mark.processes
def test_cli_push_list_show_pull(tmp_path):
    env = {**os.environ, "AGENT_ENV_HOME": str(tmp_path / "home")}
    bundle = desk_bundle(tmp_path)
    pushed = cli("registry", "push", str(bundle), env=env)
    assert pushed.returncode == 0, pushed.stderr
    assert "pushed: env support-desk@1 sha256:" in pushed.stdout and "[2/3] env support-desk@1" in pushed.stderr
    assert "unchanged: task support-desk@1" in cli("registry", "push", str(bundle), env=env).stdout
    listed = [json.loads(line) for line in cli("registry", "list", "envs", "--json", env=env).stdout.splitlines()]
    assert listed == [{"kind": "envs", "name": "support-desk", "latest": "1", "versions": 1}]
    shown = cli("registry", "show", "env", "support-desk", env=env)
    assert "envs/support-desk/data.json" in shown.stdout and "pushed by" in shown.stdout
    pulled = cli("registry", "pull", "task", "support-desk@1", "--out", str(tmp_path / "out"), env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "out" / "envs" / "support-desk" / "data.json").read_bytes() == (
        bundle / "envs" / "support-desk" / "data.json"
    ).read_bytes()
    unknown = cli("registry", "show", "task", "suport-desk", env=env)
    assert unknown.returncode == 2 and "did you mean support-desk" in unknown.stderr
    assert "registry" in cli("--help", env=env).stdout


def test_run_from_the_registry_after_the_folder_is_gone(server, tmp_path):
    name = f"greet-{uuid.uuid4().hex[:6]}"
    bundle = tmp_path / "bundle"
    (bundle / "tasks").mkdir(parents=True)
    hello = (BUILTIN_ROOT / "hello" / "tasks" / "hello.toml").read_text()
    (bundle / "tasks" / f"{name}.toml").write_text(hello.replace('id = "hello"', f'id = "{name}"'))
    assert cli("registry", "push", str(bundle)).returncode == 0
    shutil.rmtree(bundle)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = cli("run", f"{name}@2", "--json", cwd=elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(done.stdout[done.stdout.index("{") :])
    assert record["status"] == "passed" and record["pins"]["task"] == f"{name}@2"
    shown = cli("registry", "show", "task", name)
    assert record["run_id"] in shown.stdout
    missing = cli("run", "no-such-task-anywhere", cwd=elsewhere)
    assert missing.returncode == 2 and "task in the registry" in missing.stderr


# --- two installs sharing AWS stores (moto's server, over real HTTP) ---


@pytest.mark.processes
def test_two_installs_sharing_aws_stores_see_the_same_items(tmp_path, request):
    pytest.importorskip("boto3", reason="the AWS stores need boto3 (pip install 'agentenv-framework[aws]')")
    pytest.importorskip("moto.server", reason="sharing AWS stores is tested against moto's server (the dev extra)")
    import boto3

    unique = moto_util.unique
    endpoint = request.getfixturevalue("endpoint")
    bucket = unique("bucket")
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    stores = {
        "documents": {"backend": "aws", "endpoint_url": endpoint, "table": unique("table")},
        "objects": {"backend": "aws", "endpoint_url": endpoint, "bucket": bucket},
    }

    def install(name: str) -> Registry:
        return open_registry(Settings.model_validate({"state_dir": str(tmp_path / name), "stores": stores}))

    a, b = install("a"), install("b")
    try:
        bundle = desk_bundle(tmp_path)
        assert {r.outcome for r in a.push_bundle(bundle)} == {"pushed"}
        assert {name: [v.label for v in vs] for name, vs in b.all_versions("envs").items()} == {"support-desk": ["1"]}
        assert {r.outcome for r in b.push_bundle(bundle)} == {"unchanged"}
        written = b.pull(b.version("tasks", "support-desk"), tmp_path / "pulled")
        assert len(written) == len([p for p in bundle.rglob("*") if p.is_file()])
        data = bundle / "envs" / "support-desk" / "data.json"
        assert (tmp_path / "pulled" / "envs" / "support-desk" / "data.json").read_bytes() == data.read_bytes()
        data.write_text("{}")
        with pytest.raises(BadInput, match="env support-desk@1 is already in the registry"):
            b.push_bundle(bundle)
    finally:
        a.close()
        b.close()
