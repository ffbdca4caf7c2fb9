"""The registry: `registry push` of an unchanged 100-file bundle (the common case: pushing again what is already
there), measured in-process (the push function, not the CLI's start-up), on the local stores. The push reads and
hashes every file, validates every record as a run would, and reads one version document per item.

Goal: an unchanged push within 200 ms. The first push (blobs and documents written) is printed beside it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from common import row, summarize

FILES = 100
RUNS = 20
GOAL_MS = 200.0


def make_bundle(root: Path) -> Path:
    """A task deploying one env whose folder holds the rest of the 100 files (1 KiB each)."""
    env = root / "envs" / "bench-env"
    (env / "files").mkdir(parents=True)
    (env / "env.toml").write_text('name = "bench-env"\nversion = "1"\napps = [{app = "notes"}]\n')
    for i in range(FILES - 2):
        (env / "files" / f"f{i:03}.txt").write_text(f"{i:03} " + "x" * 1020)
    (root / "tasks").mkdir()
    (root / "tasks" / "bench.toml").write_text(
        'id = "bench"\n\n[[steps]]\nid = "env"\ntype = "deploy_env"\nconfig = { env = "bench-env" }\n'
    )
    assert sum(1 for p in root.rglob("*") if p.is_file()) == FILES
    return root


def measure() -> dict:
    from agentenv.config import Settings
    from agentenv.registry.store import open_registry

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
    return {"first_push_ms": first_ms, "unchanged_push_p50_ms": unchanged_ms, "goal_ms": GOAL_MS}


if __name__ == "__main__":
    measure()
