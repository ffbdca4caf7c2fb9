"""The smol_vm provider: a microVM from create to its first exec answered (goal: ≤ 2 s), and its teardown,
beside Docker's warm start measured in the same run (a container of an image already on the daemon, through
the docker provider, to its first exec). Then an image workload's start: the same tiny image (FROM scratch, a
static busybox) run by Docker inside a microVM (boot, dockerd, the image's copy and load, the container, its
first exec), against Docker's warm start of that image on the host.

Needs /dev/kvm, qemu-system-x86 and the guests (scripts/smol-vm-image, and --docker for the image workload);
Docker's rows need a daemon and agentenv/base:bookworm (scripts/docker-setup). What is missing is named and
its rows left out. AGENT_ENV_SMOL_VM_ACCEL=tcg runs the VMs in software emulation (fewer runs: it is slow).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import time
from pathlib import Path

from common import row, temp_dir

from agent_env.config import SandboxSettings, Settings
from agent_env.errors import AgentEnvError
from agent_env.providers import SandboxSpec, by_name
from agent_env.providers.smol_vm import guest_dir

RUNS = 5
TCG_RUNS = 2  # an emulated boot takes tens of seconds
GOAL_MS = 2000
SMOL = "smol_vm (QEMU microvm, {accel})"
SMOL_IMAGE = "smol_vm image workload (Docker in the VM, {accel})"
DOCKER = "docker, warm image (baseline)"
DOCKER_TINY = "docker, warm tiny image (baseline)"


def tiny_image(settings: Settings) -> Path | str:
    """A build context FROM scratch with the Docker guest's static busybox, or why there is none."""
    busybox = guest_dir(None, settings.state_dir, docker=True) / "busybox"
    if not busybox.is_file():
        return f"no {busybox} (build the Docker guest with scripts/smol-vm-image --docker)"
    folder = temp_dir() / "tiny"
    folder.mkdir()
    shutil.copy(busybox, folder / "busybox")
    (folder / "Dockerfile").write_text(
        'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\nCMD ["sleep", "600"]\n'
    )
    return folder


async def _start_to_exec(
    provider_name: str, settings: Settings, n: int, *, warmup: bool = False, **fields
) -> tuple[float, float] | str:
    """Median seconds from create to the first exec's answer, and of the teardown; or why it cannot run.
    `warmup`: one uncounted start first (it builds the image: the counted ones find it built)."""
    provider = by_name.load(provider_name, settings)
    try:
        await provider.check()
    except AgentEnvError as e:
        return f"{e.problem} ({e.fix})"
    ups, downs = [], []
    for i in range(n + warmup):
        spec = SandboxSpec(name=f"bench-{i}", run_id="bench", command=["sleep", "600"], **fields)
        t0 = time.perf_counter()
        try:
            box = await provider.create(spec)
        except AgentEnvError as e:
            return f"{e.problem} ({e.fix})"
        result = await box.exec(["true"])
        t1 = time.perf_counter()
        assert result.exit_code == 0, result
        await box.stop()
        if i or not warmup:
            ups.append(t1 - t0)
            downs.append(time.perf_counter() - t1)
    return statistics.median(ups), statistics.median(downs)


async def _measure() -> dict:
    accel = os.environ.get("AGENT_ENV_SMOL_VM_ACCEL", "kvm")
    own = {"accel": accel, "boot_timeout": "600"} if accel != "kvm" else {}
    settings = Settings(state_dir=temp_dir(), sandboxes=SandboxSettings(providers={"smol_vm": own}))
    vm_runs = RUNS if accel == "kvm" else TCG_RUNS
    tiny = tiny_image(settings)
    results: dict = {}
    plan: list[tuple[str, str, int, dict]] = [
        (DOCKER, "docker", RUNS, {"image": "agentenv/base:bookworm"}),
        (DOCKER_TINY, "docker", RUNS, {"build": str(tiny), "warmup": True}),
        (SMOL.format(accel=accel), "smol_vm", vm_runs, {}),
        (SMOL_IMAGE.format(accel=accel), "smol_vm", vm_runs, {"build": str(tiny)}),
    ]
    for label, name, n, fields in plan:
        if isinstance(tiny, str) and "build" in fields:
            results[label] = {"skipped": tiny}
            continue
        got = await _start_to_exec(name, settings, n, **fields)
        results[label] = (
            {"skipped": got} if isinstance(got, str) else {"first_exec_ms": got[0] * 1000, "teardown_ms": got[1] * 1000}
        )
    return results


def measure() -> dict:
    print(f"smol_vm: sandbox create → first exec answered, and teardown (median of {RUNS}; {TCG_RUNS} emulated)")
    results = asyncio.run(_measure())
    for label, r in results.items():
        if "skipped" in r:
            row(label, "skipped", r["skipped"])
            continue
        note = ""
        if label.startswith("smol_vm"):
            baseline = results[DOCKER_TINY if "image workload" in label else DOCKER].get("first_exec_ms")
            note = "" if "image workload" in label else f"goal ≤ {GOAL_MS} ms"
            if baseline:
                note += f"{', ' if note else ''}{r['first_exec_ms'] / baseline:.1f}x Docker warm"
        row(f"{label}: create → first exec", f"{r['first_exec_ms']:.0f} ms", note)
        row(f"{label}: teardown", f"{r['teardown_ms']:.0f} ms")
    return results


if __name__ == "__main__":
    measure()
