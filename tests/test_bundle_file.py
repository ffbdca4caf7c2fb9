"""Bundle files: tasks exported from one registry with everything they use, imported into another with stores
of its own (local stores in temp dirs here), deduplicated by content, and refused whole when altered."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest
from test_registry import desk_bundle

from agent_env.config import Settings
from agent_env.errors import BadInput
from agent_env.registry.bundle_file import export_bundle, import_bundle
from agent_env.registry.models import KINDS
from agent_env.registry.store import Registry, open_registry
from agent_env.stores import keys

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")


def install(root: Path) -> Registry:
    return open_registry(Settings.model_validate({"state_dir": str(root)}))


@pytest.fixture
def source(tmp_path):
    reg = install(tmp_path / "source")
    yield reg
    reg.close()


@pytest.fixture
def target(tmp_path):
    reg = install(tmp_path / "target")
    yield reg
    reg.close()


@pytest.fixture
def exported(source, tmp_path) -> Path:
    """The support-desk task (an env with a data file, an artifact) pushed to `source` and exported."""
    source.push_bundle(desk_bundle(tmp_path))
    out = tmp_path / "desk.tar.gz"
    export_bundle(source, ["support-desk"], out)
    return out


def stored(registry: Registry) -> dict:
    """Everything a registry holds: its versions and its blobs."""
    versions = {k: {n: [v.model_dump() for v in vs] for n, vs in registry.all_versions(k).items()} for k in KINDS}
    return {"versions": versions, "blobs": registry.objects.list("registry/")}


def members(path: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(path, "r:gz") as tar:
        return [(m, tar.extractfile(m).read() if m.isreg() else b"") for m in tar]  # type: ignore[union-attr]


def rewrite(path: Path, entries: list[tuple[tarfile.TarInfo, bytes]]) -> None:
    with gzip.open(path, "wb") as zipped, tarfile.open(fileobj=zipped, mode="w") as tar:
        for info, data in entries:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)


def test_round_trip_between_registries_with_their_own_stores(source, target, exported, tmp_path):
    results = import_bundle(target, exported, tmp_path / "target")
    assert {f"{r.kind}/{r.name}@{r.label}": r.outcome for r in results} == {
        "artifacts/faq@1": "imported",
        "envs/support-desk@1": "imported",
        "tasks/support-desk@1": "imported",
    }
    assert str(results[0]).startswith("imported: artifact faq@1 sha256:")
    assert stored(target)["versions"] == stored(source)["versions"]  # records, digests, who pushed and when
    task = target.version("tasks", "support-desk")
    pulled_here, pulled_there = tmp_path / "here", tmp_path / "there"
    source.pull(source.version("tasks", "support-desk"), pulled_here)
    written = target.pull(task, pulled_there)
    assert len(written) == 4
    for path in written:
        assert path.read_bytes() == (pulled_here / path.relative_to(pulled_there)).read_bytes()
    assert [r.outcome for r in import_bundle(target, exported, tmp_path / "target")] == ["unchanged"] * 3
    assert not list((tmp_path / "target").glob(".bundle-import-*"))  # the spooled blobs are gone


def test_the_same_registry_exports_the_same_bytes(source, exported, tmp_path):
    again = tmp_path / "again.tar.gz"
    summary = export_bundle(source, ["support-desk@1"], again)
    assert again.read_bytes() == exported.read_bytes()
    assert summary.versions == ["artifact faq@1", "env support-desk@1", "task support-desk@1"]
    assert summary.blobs == 4 and summary.file_bytes == again.stat().st_size
    with pytest.raises(BadInput, match="(?s)already exists.*--force"):
        export_bundle(source, ["support-desk"], again)
    assert export_bundle(source, ["support-desk"], again, overwrite=True).file_bytes == summary.file_bytes


def test_a_label_holding_other_content_refuses_everything(source, target, exported, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(desk_bundle(tmp_path / "o"), other)
    shutil.rmtree(other / "tasks")
    shutil.rmtree(other / "artifacts")
    data = other / "envs" / "support-desk" / "data.json"
    data.write_text(data.read_text().replace("Dana", "Dora"))
    target.push_bundle(other)
    before = stored(target)
    with pytest.raises(BadInput) as conflict:
        import_bundle(target, exported, tmp_path / "target")
    message = str(conflict.value)
    assert "1 conflict(s) with this registry; nothing was imported" in message
    assert f"env support-desk@1: here {target.version('envs', 'support-desk').digest}" in message
    assert "bump `version`" in message
    assert stored(target) == before


def tamper_blob(entries):
    info, data = entries[1]
    entries[1] = (info, bytes([data[0] ^ 1]) + data[1:])  # same size, other bytes
    return entries


def tamper_record(entries):
    info, data = entries[0]
    manifest = json.loads(data)
    manifest["versions"][-1]["record"]["description"] = "something else"
    entries[0] = (info, json.dumps(manifest).encode())
    return entries


def drop_blob(entries):
    return entries[:-1]


def escape_member(entries):
    return [*entries, (tarfile.TarInfo("../x"), b"pwned")]


def absolute_member(entries):
    return [*entries, (tarfile.TarInfo("/tmp/x"), b"pwned")]


def symlink_blob(entries):
    info, _ = entries[1]
    link = tarfile.TarInfo(info.name)
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    entries[1] = (link, b"")
    return entries


def hardlink_blob(entries):
    info, _ = entries[1]
    link = tarfile.TarInfo(info.name)
    link.type, link.linkname = tarfile.LNKTYPE, "manifest.json"
    entries[1] = (link, b"")
    return entries


def drop_env_version(entries):
    info, data = entries[0]
    manifest = json.loads(data)
    manifest["versions"] = [v for v in manifest["versions"] if v["kind"] != "envs"]
    entries[0] = (info, json.dumps(manifest).encode())
    return entries


def manifest_not_first(entries):
    return [entries[1], entries[0], *entries[2:]]


@pytest.mark.parametrize(
    ("tamper", "refusal"),
    [
        (tamper_blob, r"was altered or damaged: blob [0-9a-f]{64} does not match its digest; nothing was imported"),
        (tamper_record, r"altered or damaged: the record of task support-desk@1 does not match its digest"),
        (drop_blob, r"altered or damaged: 1 blob\(s\) it lists are missing"),
        (escape_member, r"altered or damaged: member '\.\./x' leads out of the folder \('\.\.'\); nothing"),
        (absolute_member, r"altered or damaged: member '/tmp/x' has an absolute path; nothing was imported"),
        (symlink_blob, r"altered or damaged: member 'blobs/[0-9a-f]{64}' is a symbolic link \(to '/etc/passwd'\)"),
        (hardlink_blob, r"altered or damaged: member 'blobs/[0-9a-f]{64}' is a hard link \(to 'manifest.json'\)"),
        (drop_env_version, r"task support-desk@1 uses envs support-desk@1, which neither it nor this registry holds"),
        (manifest_not_first, r"is not an agent-env bundle file: it starts with 'blobs/"),
    ],
)
def test_an_altered_file_is_refused_and_nothing_is_written(target, exported, tmp_path, tamper, refusal):
    rewrite(exported, tamper(members(exported)))
    with pytest.raises(BadInput, match=refusal) as refused:
        import_bundle(target, exported, tmp_path / "target")
    assert "fix:" in str(refused.value)
    assert stored(target) == {"versions": {k: {} for k in KINDS}, "blobs": []}


@pytest.mark.parametrize("content", [b"hello, not a tar", gzip.compress(b"not a tar either"), b""])
def test_a_file_that_is_not_a_bundle_is_refused(target, tmp_path, content):
    path = tmp_path / "nope.tar.gz"
    path.write_bytes(content)
    with pytest.raises(BadInput, match="is not an agent-env bundle file"):
        import_bundle(target, path, tmp_path / "target")
    with pytest.raises(BadInput, match="cannot read the bundle file"):
        import_bundle(target, tmp_path / "missing.tar.gz", tmp_path / "target")
    assert stored(target)["blobs"] == []


def test_a_damaged_registry_is_not_exported(source, tmp_path):
    source.push_bundle(desk_bundle(tmp_path))
    env = source.version("envs", "support-desk")
    blob = keys.registry_blob(env.files[0].sha256)
    source.objects.put(blob, b"damaged")
    out = tmp_path / "desk.tar.gz"
    with pytest.raises(BadInput, match="does not match its digest.*nothing was exported"):
        export_bundle(source, ["support-desk"], out)
    assert not out.exists() and not list(tmp_path.glob(".desk.tar.gz.*"))


def test_tasks_sharing_an_env_carry_it_once(source, target, tmp_path):
    bundle = desk_bundle(tmp_path)
    text = (bundle / "tasks" / "support-desk.toml").read_text()
    for name in ("desk-2", "desk-3"):
        (bundle / "tasks" / f"{name}.toml").write_text(text.replace('\nid = "support-desk"', f'\nid = "{name}"'))
    source.push_bundle(bundle)
    out = tmp_path / "three.tar.gz"
    summary = export_bundle(source, ["support-desk", "desk-2", "desk-3"], out)
    names = [m.name for m, _ in members(out)]
    env_blobs = {f.sha256 for f in source.version("envs", "support-desk").files}
    assert names[0] == "manifest.json" and len(names) == len(set(names)) == 1 + summary.blobs
    assert {f"blobs/{sha}" for sha in env_blobs} <= set(names)
    assert len(summary.versions) == 5  # the artifact and the env once, three tasks
    results = import_bundle(target, out, tmp_path / "target")
    assert sorted(r.name for r in results if r.kind == "tasks") == ["desk-2", "desk-3", "support-desk"]


# --- through the CLI, between two installs, and running there ---


def cli(*args, env, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([AGENT_ENV, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def home(tmp_path: Path, name: str) -> dict[str, str]:
    """An install of its own: state dir (so stores), Temporal server and gateway ports."""
    from conftest import free_port

    return {
        **os.environ,
        "AGENT_ENV_HOME": str(tmp_path / name),
        "AGENT_ENV_SERVER_PORT": str(free_port()),
        "AGENT_ENV_UI_PORT": str(free_port()),
        "AGENT_ENV_GATEWAY_PORT": str(free_port()),
        "AGENT_ENV_TASK_QUEUE": f"bundle-tests-{name}",
    }


def run_record(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout[done.stdout.index("{") :])


@pytest.mark.processes
def test_export_import_then_run_in_another_install(tmp_path):
    name = f"desk-{uuid.uuid4().hex[:6]}"  # not a built-in's name: the run finds it in the registry
    bundle = desk_bundle(tmp_path)
    task = bundle / "tasks" / "support-desk.toml"
    task.rename(bundle / "tasks" / f"{name}.toml")
    text = (bundle / "tasks" / f"{name}.toml").read_text()
    (bundle / "tasks" / f"{name}.toml").write_text(text.replace('\nid = "support-desk"', f'\nid = "{name}"'))
    a, b = home(tmp_path, "a"), home(tmp_path, "b")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "travel.tar.gz"
    try:
        assert cli("registry", "push", str(bundle), env=a).returncode == 0
        there = run_record(cli("run", name, "--json", env=a, cwd=elsewhere))
        exported = cli("bundle", "export", name, "--out", str(out), env=a)
        assert exported.returncode == 0, exported.stderr
        assert f"wrote {out}: 3 versions, 4 distinct blobs" in exported.stdout
        assert cli("bundle", "export", name, "--out", str(out), env=a).returncode == 2  # no --force
        imported = cli("bundle", "import", str(out), env=b)
        assert imported.returncode == 0, imported.stderr
        assert "3 imported, 0 unchanged" in imported.stdout and f"imported: task {name}@1" in imported.stdout
        again = cli("bundle", "import", str(out), "--json", env=b)
        assert {json.loads(line)["outcome"] for line in again.stdout.splitlines()} == {"unchanged"}
        here = run_record(cli("run", name, "--json", env=b, cwd=elsewhere))
        assert here["status"] == there["status"] == "passed"
        assert here["score"] == there["score"] and here["pins"]["task"] == there["pins"]["task"] == f"{name}@1"
        assert here["run_id"] != there["run_id"]
        out.write_bytes(out.read_bytes()[:-100])
        truncated = cli("bundle", "import", str(out), env=home(tmp_path, "c"))
        assert truncated.returncode == 2 and "or it is truncated" in truncated.stderr
    finally:
        for env in (a, b):
            cli("gateway", "stop", env=env)
            cli("server", "stop", env=env)
