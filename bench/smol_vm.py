"""The smol_vm provider: a microVM from create to its first exec answered (goal: ≤ 2 s), and its teardown,
beside Docker's warm start measured in the same run (a container of an image already on the daemon, through
the docker provider, to its first exec).

Needs /dev/kvm, qemu-system-x86 and the guest (scripts/smol-vm-image); Docker's row needs a daemon and
agentenv/base:bookworm (scripts/docker-setup). What is missing is named and its rows left out.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from common import row, temp_dir

from agent_env.config import Settings
from agent_env.errors import AgentEnvError
from agent_env.providers import SandboxSpec, by_name

RUNS = 5
GOAL_MS = 2000


async def _start_to_exec(provider_name: str, settings: Settings, n: int, **fields) -> tuple[float, float] | str:
    """Median seconds from create to the first exec's answer, and of the teardown; or why it cannot run."""
    provider = by_name.load(provider_name, settings)
    try:
        await provider.check()
    except AgentEnvError as e:
        return f"{e.problem} ({e.fix})"
    ups, downs = [], []
    for i in range(n):
        spec = SandboxSpec(name=f"bench-{i}", run_id="bench", command=["sleep", "600"], **fields)
        t0 = time.perf_counter()
        box = await provider.create(spec)
        result = await box.exec(["true"])
        t1 = time.perf_counter()
        assert result.exit_code == 0, result
        await box.stop()
        ups.append(t1 - t0)
        downs.append(time.perf_counter() - t1)
    return statistics.median(ups), statistics.median(downs)


async def _measure() -> dict:
    settings = Settings(state_dir=temp_dir())
    results: dict = {}
    for label, name, fields in (
        ("smol_vm (QEMU microvm, KVM)", "smol_vm", {}),
        ("docker, warm image (baseline)", "docker", {"image": "agentenv/base:bookworm"}),
    ):
        got = await _start_to_exec(name, settings, RUNS, **fields)
        results[label] = (
            {"skipped": got} if isinstance(got, str) else {"first_exec_ms": got[0] * 1000, "teardown_ms": got[1] * 1000}
        )
    return results


def measure() -> dict:
    print(f"smol_vm: sandbox create → first exec answered, and teardown (median of {RUNS})")
    results = asyncio.run(_measure())
    docker = results["docker, warm image (baseline)"].get("first_exec_ms")
    for label, r in results.items():
        if "skipped" in r:
            row(label, "skipped", r["skipped"])
            continue
        note = f"goal ≤ {GOAL_MS} ms" if label.startswith("smol_vm") else ""
        if docker and label.startswith("smol_vm"):
            note += f", {r['first_exec_ms'] / docker:.1f}x Docker warm"
        row(f"{label}: create → first exec", f"{r['first_exec_ms']:.0f} ms", note)
        row(f"{label}: teardown", f"{r['teardown_ms']:.0f} ms")
    return results


if __name__ == "__main__":
    measure()
