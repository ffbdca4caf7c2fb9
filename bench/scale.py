"""Scaling out on one machine: trainer episodes per second and turn latency with 1 worker + 1 gateway against
2 workers (+ `--gateways` gateways), and where the CPU goes.

- The workload: CONCURRENT trainer episodes at once, each a 5-turn conversation with a hosted scripted partner
  (bench/episodes.py's `conversation_task`), ROUNDS rounds. Episodes per second = episodes finished / wall
  time; turn latency = from `end_turn` to the next turn being offered.
- Each variant gets its own Temporal dev server, its gateways as `python -m agent_env.gateway` processes in one
  `[gateway] pool` (sharing a key through the secret store, as a cluster's would), `agent-env worker`
  processes on one task queue, and the trainer in this process. The first variant is the baseline.
- CPU: every process's user + system seconds over the measured window (from psutil if installed, else
  /proc/PID/stat; a process's children count towards it), next to the machine's limit (cores, or the
  cgroup's cpu.max), so the report says whether more processes can help and which one is the bottleneck.

.venv/bin/python bench/scale.py [--gateways N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import AGENT_ENV, exit_now, free_port, isolated_env, row, summarize

CONCURRENT = 10
ROUNDS = 3
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_limit() -> tuple[float, str]:
    """How many CPU-seconds per second this machine gives us, and where that figure comes from."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            return int(quota) / int(period), f"cgroup cpu.max {quota}/{period}"
    except (OSError, ValueError):
        pass
    cores = len(os.sched_getaffinity(0))
    return float(cores), f"{cores} cores, no cgroup quota"


def machine_busy_seconds() -> float:
    """CPU seconds every process on the machine has used (ours and anyone else's), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its descendants (live ones, and those it has reaped). This
    process counts alone: its children are the workers and gateways, counted apart."""
    if pid == os.getpid():
        own = os.times()
        return own.user + own.system
    try:
        import psutil  # type: ignore[import-not-found]

        proc = psutil.Process(pid)
        total = 0.0
        for p in (proc, *proc.children(recursive=True)):
            with_children = p.cpu_times()
            total += with_children.user + with_children.system + with_children.children_user
            total += with_children.children_system
        return total
    except ImportError:
        pass
    tree = _children()
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / CLK_TCK  # utime, stime, cutime, cstime
        todo += tree.get(current, [])
    return total


@dataclass
class Variant:
    """One deployment on this machine: its server, gateways and workers, and what it measured."""

    workers: int
    gateways: int
    env: dict[str, str] = field(default_factory=dict)
    processes: dict[str, int] = field(default_factory=dict)  # name -> pid
    owned: list[subprocess.Popen] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.workers} worker{'s' * (self.workers > 1)} + {self.gateways} gateway{'s' * (self.gateways > 1)}"

    def start(self) -> None:
        from agent_env.config import load_settings
        from agent_env.temporal_client import server

        self.env = isolated_env()
        root = Path(self.env["AGENT_ENV_HOME"])
        # The gateways form one pool (placement and ownership, agent_env/gateway_client/pool.py); their shared key
        # comes from the secret store (here the local one, reading AGENT_ENV_SECRET_POOL_KEY).
        urls = [f"http://127.0.0.1:{free_port()}" for _ in range(self.gateways)]
        config = root / "config.toml"
        pool = ", ".join(f'"{u}"' for u in urls)
        config.write_text(f'[gateway]\npool = [{pool}]\nkey_secret = "pool-key"\n\n[sandboxes]\nreap_every = 0\n')
        self.env |= {"AGENT_ENV_CONFIG": str(config), "AGENT_ENV_SECRET_POOL_KEY": secrets.token_hex(32)}
        subprocess.run([AGENT_ENV, "server", "start"], env=self.env, capture_output=True, check=True, timeout=120)
        os.environ.update(self.env)
        self.processes["temporal server"] = server.status(load_settings()).info.pid
        for n, url in enumerate(urls):
            command = [sys.executable, "-m", "agent_env.gateway", "--root", str(root / f"gateway-{n}")]
            port = url.rsplit(":", 1)[1]
            self.spawn(f"gateway {n}", [*command, "--port", port], {"AGENT_ENV_GATEWAY_URL": url})
        for url in urls:
            self.wait_up(url)
        for n in range(self.workers):
            self.spawn(f"worker {n}", [AGENT_ENV, "worker", "--identity", f"bench-{n}"])
        self.processes["trainer (this process)"] = os.getpid()

    def spawn(self, name: str, command: list[str], extra: dict[str, str] | None = None) -> None:
        log = open(Path(self.env["AGENT_ENV_HOME"]) / f"{name.replace(' ', '-')}.log", "ab")  # noqa: SIM115
        process = subprocess.Popen(command, env={**self.env, **(extra or {})}, stdout=log, stderr=log)
        self.owned.append(process)
        self.processes[name] = process.pid

    def wait_up(self, url: str) -> None:
        import httpx

        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/admin/openapi.json", timeout=1).status_code in (200, 401):
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"the gateway at {url} did not start (logs in {self.env['AGENT_ENV_HOME']})")
            time.sleep(0.1)

    def stop(self) -> None:
        for process in self.owned:
            process.terminate()
        for process in self.owned:
            process.wait(60)
        subprocess.run([AGENT_ENV, "server", "stop"], env=self.env, capture_output=True, timeout=60)


async def run_episodes(variant: Variant) -> dict:
    from episodes import conversation, conversation_task

    from agent_env.config import load_settings
    from agent_env.episodes import Episodes, EpisodeSpec
    from agent_env.planning.tasks import parse_task

    episodes = await Episodes.connect(load_settings(), worker=False)
    try:
        chat = EpisodeSpec.from_task(parse_task(conversation_task(), "bench"), ["writer"], turn_timeout=120)
        await asyncio.gather(*(conversation(episodes, chat, []) for _ in range(variant.workers * 2)))  # warm up
        before = {name: cpu_seconds(pid) for name, pid in variant.processes.items()}
        busy = machine_busy_seconds()
        latencies: list[float] = []
        start = time.perf_counter()
        for _ in range(ROUNDS):
            await asyncio.gather(*(conversation(episodes, chat, latencies) for _ in range(CONCURRENT)))
        wall = time.perf_counter() - start
        cpu = {name: cpu_seconds(pid) - before[name] for name, pid in variant.processes.items()}
        busy = machine_busy_seconds() - busy
    finally:
        await episodes.close()
    ordered = sorted(latencies)
    return {
        "episodes_per_s": CONCURRENT * ROUNDS / wall,
        "turn_p50_ms": summarize(latencies)["median"] * 1000,
        "turn_p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "wall_s": wall,
        "cpu_s": cpu,
        "machine_busy_s": busy,
    }


def measure_variant(variant: Variant) -> dict:
    saved = dict(os.environ)
    try:
        variant.start()
        return asyncio.run(run_episodes(variant))
    finally:
        variant.stop()
        os.environ.clear()
        os.environ.update(saved)


def measure(gateways: int = 2) -> dict:
    """`gateways`: how many the 2-worker variant runs (the baseline always has 1)."""
    limit, where = cpu_limit()
    print(f"scale ({CONCURRENT} concurrent 5-turn episodes x {ROUNDS} rounds; CPU limit {limit:g} CPU-s/s: {where})")
    results = {}
    baseline = None
    for variant in (Variant(workers=1, gateways=1), Variant(workers=2, gateways=gateways)):
        got = measure_variant(variant)
        results[variant.name] = got
        baseline = baseline or got
        vs = "baseline" if got is baseline else f"{got['episodes_per_s'] / baseline['episodes_per_s']:.2f}x baseline"
        row(f"{variant.name}: episodes/s", f"{got['episodes_per_s']:.2f}", vs)
        row(f"{variant.name}: turn latency p50", f"{got['turn_p50_ms']:.1f} ms", f"p99 {got['turn_p99_ms']:.1f} ms")
        used = sum(got["cpu_s"].values())
        row(
            f"{variant.name}: CPU used",
            f"{used / got['wall_s']:.2f} CPU-s/s",
            f"{used / got['wall_s'] / limit:.0%} of the limit over {got['wall_s']:.1f} s",
        )
        row(
            f"{variant.name}: whole machine busy",
            f"{got['machine_busy_s'] / got['wall_s']:.2f} CPU-s/s",
            "ours and any other load on the machine",
        )
        for name, seconds in sorted(got["cpu_s"].items(), key=lambda kv: -kv[1]):
            row(
                f"    {name}",
                f"{seconds / got['wall_s']:.2f} CPU-s/s",
                f"{seconds / max(used, 1e-9):.0%} of the CPU used",
            )
    return {"cpu_limit": limit, "cpu_limit_source": where, "variants": results}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateways", type=int, default=2, help="gateways of the 2-worker variant (a pool)")
    measure(parser.parse_args().gateways)
    exit_now()
