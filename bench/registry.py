"""The registry: `registry push` of an unchanged 100-file bundle (the common case: pushing again what is already
there), measured in-process (the push function, not the CLI's start-up), on the local stores. The push reads and
hashes every file, validates every record as a run would, and reads one version document per item.

Goal: an unchanged push within 200 ms. The first push (blobs and documents written) is printed beside it.

Then bundle files: 200 tasks sharing that env, exported to one file and imported into a fresh registry. Content
is stored once, so the file should cost about one env plus 200 small records: its size is printed beside the
export of one task, with the ratio of the two.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
import time
from pathlib import Path

from common import row, summarize

FILES = 100
RUNS = 20
TASKS = 200
GOAL_MS = 200.0


def make_bundle(root: Path) -> Path:
    """A task deploying one env whose folder holds the rest of the 100 files (1 KiB each)."""
    env = root / "envs" / "bench-env"
    (env / "files").mkdir(parents=True)
    (env / "env.toml").write_text('name = "bench-env"\nversion = "1"\napps = [{app = "notes"}]\n')
    for i in range(FILES - 2):
        # Random text: data that compresses as real data does, not to nothing (which would hide the env's size).
        (env / "files" / f"f{i:03}.txt").write_text(f"{i:03} " + base64.b64encode(os.urandom(765)).decode())
    (root / "tasks").mkdir()
    (root / "tasks" / "bench.toml").write_text(
        'id = "bench"\n\n[[steps]]\nid = "env"\ntype = "deploy_env"\nconfig = { env_id = "bench-env" }\n'
    )
    assert sum(1 for p in root.rglob("*") if p.is_file()) == FILES
    return root


def make_many_tasks(root: Path) -> Path:
    """make_bundle's env, used by TASKS small tasks."""
    make_bundle(root)
    task = (root / "tasks" / "bench.toml").read_text()
    (root / "tasks" / "bench.toml").unlink()
    for i in range(TASKS):
        (root / "tasks" / f"t{i:03}.toml").write_text(task.replace('id = "bench"', f'id = "t{i:03}"'))
    return root


def measure_bundle_files(state: Path) -> dict:
    """Export TASKS tasks sharing one env, and one of them alone; import the big file into a fresh registry."""
    from agent_env.config import Settings
    from agent_env.registry.bundle_file import export_bundle, import_bundle
    from agent_env.registry.store import open_registry

    print(f"bundle files ({TASKS} tasks sharing the {FILES}-file env, in-process, local stores)")
    names = [f"t{i:03}" for i in range(TASKS)]
    source = open_registry(Settings.model_validate({"state_dir": str(state / "source")}))
    try:
        source.push_bundle(make_many_tasks(state / "many"))
        start = time.perf_counter()
        many = export_bundle(source, names, state / "many.tar.gz")
        export_ms = (time.perf_counter() - start) * 1000
        one = export_bundle(source, names[:1], state / "one.tar.gz")
    finally:
        source.close()
    target = open_registry(Settings.model_validate({"state_dir": str(state / "target")}))
    try:
        start = time.perf_counter()
        imported = import_bundle(target, state / "many.tar.gz", state / "target")
        import_ms = (time.perf_counter() - start) * 1000
        assert len(imported) == TASKS + 1 and {r.outcome for r in imported} == {"imported"}
    finally:
        target.close()
    ratio = many.file_bytes / one.file_bytes
    row(f"export of {TASKS} tasks", f"{export_ms:.1f} ms", f"{many.blobs} distinct blobs")
    row(f"import of {TASKS} tasks", f"{import_ms:.1f} ms", "into a fresh registry, everything verified first")
    row(f"file of {TASKS} tasks", f"{many.file_bytes} B", f"{many.file_bytes / 1024:.1f} KiB")
    row("file of 1 task (the env alone, in effect)", f"{one.file_bytes} B", f"{one.file_bytes / 1024:.1f} KiB")
    per_task = (many.file_bytes - one.file_bytes) / (TASKS - 1)
    row(f"ratio {TASKS} tasks / 1 task", f"{ratio:.2f}", f"{TASKS} separate exports would be {TASKS:.0f}x")
    row("each task beyond the first", f"{per_task:.0f} B", "its record and task file, compressed")
    return {
        "bundle_tasks": TASKS,
        "bundle_export_ms": export_ms,
        "bundle_import_ms": import_ms,
        "bundle_file_bytes": many.file_bytes,
        "bundle_one_task_file_bytes": one.file_bytes,
        "bundle_size_ratio": ratio,
        "bundle_bytes_per_extra_task": per_task,
    }


def measure() -> dict:
    from agent_env.config import Settings
    from agent_env.registry.store import open_registry

    print(f"registry (push of a {FILES}-file bundle, in-process, local stores)")
    state = Path(tempfile.mkdtemp(prefix="agentenv-bench-registry-"))
    bundle = make_bundle(state / "bundle")
    registry = open_registry(Settings.model_validate({"state_dir": str(state / "home")}))
    try:
        start = time.perf_counter()
        first = registry.push_bundle(bundle)
        first_ms = (time.perf_counter() - start) * 1000
        assert {r.outcome for r in first} == {"pushed"}
        samples = []
        for _ in range(RUNS):
            start = time.perf_counter()
            again = registry.push_bundle(bundle)
            samples.append(time.perf_counter() - start)
            assert {r.outcome for r in again} == {"unchanged"}
    finally:
        registry.close()
    unchanged = summarize(samples)
    unchanged_ms = unchanged["median"] * 1000
    row("first push (100 blobs written)", f"{first_ms:.1f} ms")
    row(
        "unchanged push, p50",
        f"{unchanged_ms:.1f} ms",
        f"p90 {unchanged['p90'] * 1000:.1f} ms; goal ≤ {GOAL_MS:.0f} ms: {'met' if unchanged_ms <= GOAL_MS else 'MISSED'}",
    )
    try:
        bundle_files = measure_bundle_files(state)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return {"first_push_ms": first_ms, "unchanged_push_p50_ms": unchanged_ms, "goal_ms": GOAL_MS, **bundle_files}


if __name__ == "__main__":
    measure()
