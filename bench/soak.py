"""Training load: thousands of runs on one gateway, nothing grows, nothing wedges, nothing stalls.

Three parts, each selectable (`--parts`) and sized by flags; the defaults are the issue's full sizes
(long: about an hour in all). Every part has its own state directory and free ports (common.isolated_env)
and stops every process it started, even on error.

1. `--runs N` (1000): N consecutive `agent-env run hello` (the CLI, as a user types it) on one state dir:
   the first starts the embedded Temporal server and gateway, which stay up. The gateway's open fds and
   RSS after run N/10 (at most 100) vs after run N (goal: within 5%); median wall of the first 100 runs
   vs the last 100 (goal: within 10%). Progress every 50 runs.
2. `--episodes N --minutes M` (200, 5): N concurrent trainer episodes (bench/episodes.py's conversation
   task: 5 turns with a hosted scripted partner) looping for M minutes through one gateway and two
   `agent-env worker` processes. Turn latency (end_turn -> next turn offered) p50/p99, episodes completed,
   errors (any exception, stall or wrong score; the loop keeps going), and the RSS of every process
   (Temporal server, gateway, each worker, this trainer) at start, every 30 s, and at end; growth in the
   second half is what warm-up (caches, arenas) does not explain. Goal: no errors.
3. `--faults N` (20): a clean `workplace` run and a clean episode first; then N `workplace` runs and N
   episodes, each with a SIGKILL of a random process (worker, gateway, Temporal server; a subprocess
   env server or a sandboxed agent when the task has one) at a random moment (`--seed`), then
   restarted (a new `agent-env worker`, `agent-env gateway start`, `agent-env server start`). Each run
   must complete with the clean run's event log (kind, trigger, virtual time, detail of every world
   event), final state (the apps' `data/get` through the gateway) and scores. Reports runs x faults
   survived and each failure with its kill target and moment.

    .venv/bin/python bench/soak.py                                  # the full sizes
    .venv/bin/python bench/soak.py --runs 30 --episodes 10 --minutes 0.5 --faults 3
    .venv/bin/python bench/soak.py --parts faults --faults 5 --seed 7

Only 127.0.0.1 and the temp state directories are touched.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import random
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import AGENT_ENV, exit_now, isolated_env, row

PARTS = ("runs", "episodes", "faults")
SCRUB = ("TEMPORAL_ADDRESS", "AGENT_ENV_CONFIG", "AGENT_ENV_GATEWAY_URL", "AGENT_ENV_GATEWAY_TOKEN")


# -- processes --


def rss_mib(pid: int | None) -> float | None:
    if not pid:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def fd_count(pid: int | None) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd")) if pid else None
    except OSError:
        return None


def fd_kinds(pid: int | None) -> dict[str, int]:
    """What a process's fds point at, counted: socket, pipe, anon_inode:[eventpoll], *.sqlite-wal, ..."""
    kinds: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                kind = (
                    target.split(":")[0]
                    if target.startswith(("socket:", "pipe:"))
                    else target
                    if target.startswith("anon_inode:")
                    else "file *" + (Path(target).suffix or Path(target).name)
                )
                kinds[kind] = kinds.get(kind, 0) + 1
    return dict(sorted(kinds.items(), key=lambda kv: -kv[1]))


def alive(pid: int | None) -> bool:
    try:
        return bool(pid) and Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] not in "ZX"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int((proc / "stat").read_text().split(") ")[-1].split()[1]) == pid:
                    out.append(int(proc.name))
    return out


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def change(before: float | None, after: float | None) -> str:
    if not before or after is None:
        return "n/a"
    return f"{(after - before) / before * 100:+.1f}%"


class Cluster:
    """One isolated install: its state dir and ports, the daemons and the `agent-env worker`s it started.

    While it is open, os.environ points at it (so load_settings() and the product's clients in this
    process find the same state dir); close() stops everything and puts os.environ back."""

    def __init__(self) -> None:
        self.env = isolated_env()
        self.home = Path(self.env["AGENT_ENV_HOME"])
        self.saved = dict(os.environ)
        for var in SCRUB:
            os.environ.pop(var, None)
        os.environ.update(self.env)
        from agent_env.config import load_settings

        self.settings = load_settings(self.home)
        self.workers: list[subprocess.Popen] = []
        self.log = self.home / "bench-workers.log"

    def cli(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [AGENT_ENV, *args], env=self.env, cwd=self.home, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"agent-env {' '.join(args)} exited {done.returncode}: {done.stderr[-1500:]}")
        return done

    def start_worker(self) -> subprocess.Popen:
        with open(self.log, "a") as log:
            proc = subprocess.Popen(
                [AGENT_ENV, "worker"],
                env=self.env,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.workers.append(proc)
        return proc

    def live_workers(self) -> list[subprocess.Popen]:
        return [w for w in self.workers if w.poll() is None]

    def gateway_pid(self) -> int | None:
        from agent_env.gateway import embedded

        st = embedded.status(self.settings)
        return st.info.pid if st.running else None

    def server_pid(self) -> int | None:
        from agent_env.temporal_client import server

        st = server.status(self.settings)
        return st.info.pid if st.running else None

    def env_servers(self) -> list[int]:
        """`agent-env env serve` processes the gateway started for `run = "subprocess"` apps."""
        gw = self.gateway_pid()
        out = []
        for pid in children(gw) if gw else []:
            with contextlib.suppress(OSError):
                if b"env\x00serve" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    out.append(pid)
        return out

    def sandboxes(self) -> list[int]:
        """Processes of local sandboxes (sandboxed agents and apps) under this state dir."""
        out = []
        for meta in (self.home / "sandboxes" / "local").glob("*/sandbox.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                pid = int(json.loads(meta.read_text())["pid"])
                if alive(pid):
                    out.append(pid)
        return out

    def processes(self) -> dict[str, int | None]:
        procs = {"temporal server": self.server_pid(), "gateway": self.gateway_pid()}
        for n, w in enumerate(self.live_workers(), 1):
            procs[f"worker {n} (pid {w.pid})"] = w.pid
        for pid in self.env_servers():
            procs[f"env server (pid {pid})"] = pid
        for pid in self.sandboxes():
            procs[f"sandbox (pid {pid})"] = pid
        procs["trainer (this process)"] = os.getpid()
        return procs

    def close(self) -> None:
        for w in self.workers:
            if w.poll() is None:
                w.terminate()
        for w in self.workers:
            try:
                w.wait(20)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
        for what in ("gateway", "server"):
            with contextlib.suppress(Exception):
                self.cli(what, "stop", timeout=60, check=False)
        os.environ.clear()
        os.environ.update(self.saved)


# -- 1. thousands of `agent-env run hello` --


def part_runs(n: int) -> dict:
    print(f"soak 1: {n} x `agent-env run hello` on one gateway")
    sample_at = max(1, min(100, n // 10))
    window = max(1, min(100, (n - 1) // 2))  # runs compared at each end (run 1 is cold: not in a window)
    c = Cluster()
    walls: list[float] = []
    failures: list[str] = []
    samples: dict[int, dict] = {}
    gateway_pids: set[int] = set()
    try:
        started = time.monotonic()
        for i in range(1, n + 1):
            t = time.perf_counter()
            done = subprocess.run(
                [AGENT_ENV, "run", "hello"],
                env=c.env,
                cwd=c.home,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                timeout=300,
            )
            walls.append(time.perf_counter() - t)
            if done.returncode != 0:
                failures.append(f"run {i}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
            gw = c.gateway_pid()
            if gw:
                gateway_pids.add(gw)
            if i in (sample_at, n) or i % 50 == 0:
                server = c.server_pid()
                samples[i] = {
                    "gateway_fds": fd_count(gw),
                    "gateway_rss_mib": rss_mib(gw),
                    "server_rss_mib": rss_mib(server),
                    "gateway_fd_kinds": fd_kinds(gw),
                }
            if i % 50 == 0 or i == n:
                s = samples[i]
                recent = walls[-50:]
                print(
                    f"    run {i}/{n}: {time.monotonic() - started:.0f} s elapsed, median wall of the last "
                    f"{len(recent)} {statistics.median(recent):.2f} s, gateway {s['gateway_fds']} fds "
                    f"{s['gateway_rss_mib'] or 0:.0f} MiB, server {s['server_rss_mib'] or 0:.0f} MiB, "
                    f"{len(failures)} failed",
                    flush=True,
                )
    finally:
        c.close()
    first, last = walls[1 : 1 + window], walls[-window:]
    a, b = samples.get(sample_at, {}), samples.get(n, {})
    result = {
        "runs": n,
        "failed": len(failures),
        "failures": failures[:20],
        "cold_first_run_s": walls[0] if walls else None,
        "sample_at": sample_at,
        "gateway_restarts": max(0, len(gateway_pids) - 1),
        "gateway_fds": [a.get("gateway_fds"), b.get("gateway_fds")],
        "gateway_rss_mib": [a.get("gateway_rss_mib"), b.get("gateway_rss_mib")],
        "server_rss_mib": [a.get("server_rss_mib"), b.get("server_rss_mib")],
        "window": window,
        "wall_first_median_s": statistics.median(first) if first else None,
        "wall_last_median_s": statistics.median(last) if last else None,
        "samples": samples,
    }
    row(
        f"gateway fds after run {sample_at} -> {n}",
        f"{a.get('gateway_fds')} -> {b.get('gateway_fds')}",
        f"{change(a.get('gateway_fds'), b.get('gateway_fds'))}; goal within 5%",
    )
    row(
        f"gateway RSS after run {sample_at} -> {n}",
        f"{a.get('gateway_rss_mib') or 0:.0f} -> {b.get('gateway_rss_mib') or 0:.0f} MiB",
        f"{change(a.get('gateway_rss_mib'), b.get('gateway_rss_mib'))}; goal within 5%",
    )
    row(
        f"Temporal server RSS after run {sample_at} -> {n}",
        f"{a.get('server_rss_mib') or 0:.0f} -> {b.get('server_rss_mib') or 0:.0f} MiB",
        change(a.get("server_rss_mib"), b.get("server_rss_mib")),
    )
    if first and last:
        row(
            f"median wall, runs 2-{window + 1} vs last {window}",
            f"{result['wall_first_median_s']:.2f} -> {result['wall_last_median_s']:.2f} s",
            f"{change(result['wall_first_median_s'], result['wall_last_median_s'])}; goal within 10%; "
            f"cold first run {walls[0]:.2f} s",
        )
    row(
        "runs failed",
        f"{len(failures)}/{n}",
        f"gateway restarted {result['gateway_restarts']} times"
        if result["gateway_restarts"]
        else "one gateway throughout",
    )
    for f in failures[:5]:
        print(f"    {f}")
    if a.get("gateway_fd_kinds") and b.get("gateway_fd_kinds"):
        grown = {
            k: f"{a['gateway_fd_kinds'].get(k, 0)} -> {v}"
            for k, v in b["gateway_fd_kinds"].items()
            if v != a["gateway_fd_kinds"].get(k, 0)
        }
        print(f"    gateway fds by kind that changed, after run {sample_at} -> {n}: {grown or 'none'}")
    return result


# -- 2. concurrent trainer episodes --


def transient(e: BaseException) -> bool:
    """A failure a trainer's loop retries: a connection to the server or gateway broke or was refused."""
    import httpx
    from temporalio.service import RPCError, RPCStatusCode

    if isinstance(e, BaseExceptionGroup):  # e.g. the MCP client's task group around a broken connection
        return all(transient(x) for x in e.exceptions)
    if isinstance(e, RPCError):
        return e.status in (
            RPCStatusCode.UNAVAILABLE,
            RPCStatusCode.DEADLINE_EXCEEDED,
            RPCStatusCode.CANCELLED,
            RPCStatusCode.UNKNOWN,
            RPCStatusCode.INTERNAL,
        )
    if isinstance(e, (httpx.TransportError, ConnectionError, OSError)):
        return True
    if any(k.__name__ == "TransportError" for k in type(e).__mro__):  # httpx2 (the MCP client's), same shape
        return True
    return "connect" in str(e).lower() or "unavailable" in str(e).lower()


async def episode_loop(episodes, spec, deadline: float, stats: dict, cap: float) -> None:
    """Episodes one after another until the deadline; every failure is counted and the loop goes on."""
    while time.monotonic() < deadline:
        episode = None
        try:

            async def play():
                nonlocal episode
                episode = await spec.start(episodes)
                turn = await episode.next_turn()
                while turn is not None:
                    t = time.perf_counter()
                    await turn.end("ok")
                    turn = await episode.next_turn()
                    if turn is not None:
                        stats["latencies"].append(time.perf_counter() - t)
                scores = await episode.result()
                if scores != {"check": 1.0}:
                    raise AssertionError(f"scores {scores}, status {episode.state.status}")

            await asyncio.wait_for(play(), cap)
            stats["completed"] += 1
        except Exception as e:  # noqa: BLE001 - everything counts as an error; keep going
            what = (
                "stalled (no end within " + f"{cap:.0f} s)"
                if isinstance(e, TimeoutError)
                else f"{type(e).__name__}: {e}"
            )
            stats["errors"].append(f"{episode.run_id if episode else '(not started)'}: {what}"[:400])
            if episode is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(episode.abandon("soak: error"), 10)
            await asyncio.sleep(0.5)


async def episodes_async(c: Cluster, n: int, minutes: float) -> dict:
    from episodes import conversation_task

    from agent_env.episodes import Episodes, EpisodeSpec
    from agent_env.planning.tasks import parse_task

    episodes = await Episodes.connect(c.settings, worker=False)
    try:
        spec = EpisodeSpec.from_task(parse_task(conversation_task(), "soak"), ["writer"], turn_timeout=120)
        warm = {"completed": 0, "errors": [], "latencies": []}
        for _ in range(2):  # warm up: imports in both workers, connections, the gateway's first instance
            await episode_loop(episodes, spec, time.monotonic() + 0.001, warm, 120)
        if warm["errors"]:
            raise RuntimeError(f"warm-up episodes failed: {warm['errors']}")
        procs = c.processes()
        before = {name: rss_mib(pid) for name, pid in procs.items()}
        stats = {"completed": 0, "errors": [], "latencies": []}
        started = time.monotonic()
        deadline = started + minutes * 60
        cap = 300.0
        loops = [asyncio.create_task(episode_loop(episodes, spec, deadline, stats, cap)) for _ in range(n)]

        halfway: dict[str, float | None] = {}

        async def progress():
            while True:
                await asyncio.sleep(30)
                lat = stats["latencies"]
                rss = {name: rss_mib(pid) for name, pid in procs.items()}
                if not halfway and time.monotonic() - started >= minutes * 30:
                    halfway.update(rss)  # growth after it is what warm-up does not explain
                print(
                    f"    {time.monotonic() - started:.0f} s: {stats['completed']} episodes, "
                    f"{len(stats['errors'])} errors, turn p50 {percentile(lat, 0.5) * 1000:.0f} ms "
                    f"p99 {percentile(lat, 0.99) * 1000:.0f} ms; RSS MiB "
                    + ", ".join(f"{name} {mib or 0:.0f}" for name, mib in rss.items()),
                    flush=True,
                )

        reporter = asyncio.create_task(progress())
        _, pending = await asyncio.wait(loops, timeout=minutes * 60 + cap + 60)
        reporter.cancel()
        for t in pending:
            t.cancel()
            stats["errors"].append("a loop did not finish its last episode (cancelled)")
        await asyncio.gather(*pending, return_exceptions=True)
        elapsed = time.monotonic() - started
        after = {name: rss_mib(pid) for name, pid in procs.items()}
        return {"before": before, "halfway": halfway, "after": after, "elapsed": elapsed, **stats}
    finally:
        await episodes.close()


def part_episodes(n: int, minutes: float) -> dict:
    print(f"soak 2: {n} concurrent trainer episodes for {minutes:g} min (one gateway, two workers)")
    c = Cluster()
    try:
        c.cli("server", "start")
        c.cli("gateway", "start")
        c.start_worker()
        c.start_worker()
        out = asyncio.run(episodes_async(c, n, minutes))
    finally:
        c.close()
    lat = out["latencies"]
    result = {
        "concurrent": n,
        "minutes": minutes,
        "elapsed_s": out["elapsed"],
        "completed": out["completed"],
        "errors": len(out["errors"]),
        "error_samples": out["errors"][:20],
        "turns": len(lat),
        "turn_p50_ms": percentile(lat, 0.5) * 1000,
        "turn_p99_ms": percentile(lat, 0.99) * 1000,
        "rss_mib": {name: [out["before"][name], out["after"][name]] for name in out["before"]},
        "rss_mib_halfway": out["halfway"],
    }
    row(
        "episodes completed",
        f"{out['completed']}",
        f"{out['completed'] / out['elapsed'] * 60:.0f}/min over {out['elapsed']:.0f} s, {n} at once",
    )
    row("errors (exceptions, stalls, wrong scores)", f"{len(out['errors'])}", "goal 0")
    row(
        "turn latency p50 (end_turn -> next turn)",
        f"{result['turn_p50_ms']:.0f} ms",
        f"p99 {result['turn_p99_ms']:.0f} ms; {len(lat)} turns",
    )
    for name, (a, b) in result["rss_mib"].items():
        half = out["halfway"].get(name)
        second = f"; second half {change(half, b)} (from {half:.0f} MiB)" if half else ""
        row(f"RSS {name}", f"{a or 0:.0f} -> {b or 0:.0f} MiB", change(a, b) + second)
    for e in out["errors"][:5]:
        print(f"    {e}")
    return result


# -- 3. SIGKILL a random process at a random moment --


def fault_episode_task() -> dict:
    """The conversation task, with a final state to compare: the trainer writes one note per turn."""
    from episodes import conversation_task

    task = copy.deepcopy(conversation_task())
    task["id"] = "soak-episode"
    for step in task["steps"]:
        if step["id"] == "check":
            step["config"]["checks"][0]["equals"] = 5
            step["config"]["checks"][0]["name"] = "five notes"
    return task


def comparable(state, final_data) -> dict:
    """What must not depend on crashes: statuses, scores, the world's events and the apps' final data."""
    events = (
        [(e.kind, e.trigger, e.virtual_time.isoformat(), e.detail) for e in state.world.events]
        if state.world is not None
        else []
    )
    return {
        "status": str(state.status),
        "score": state.score,
        "error": state.error,
        "steps": {sid: (str(s.status), s.score.value if s.score else None) for sid, s in state.steps.items()},
        "events": events,
        "data": final_data,
    }


async def final_data(settings, state, env_step: str, notes_only: bool):
    from agent_env.gateway.embedded import connect as gateway_connect

    async with gateway_connect(settings) as gateway:
        data = await gateway.data(state.steps[env_step].outputs["instance"], "data/get")
    parts = data["parts"]
    if notes_only:  # notes are stamped with the real time when the task sets no clock: keep what was written
        return [(n["key"], n["text"]) for p in parts for n in p["data"].get("notes", [])]
    return parts


def describe(e: BaseException) -> str:
    """The exception and, for a group, the ones inside it (an empty message says little)."""
    if isinstance(e, BaseExceptionGroup):
        return f"{type(e).__name__}[" + ", ".join(describe(x) for x in e.exceptions) + "]"
    return f"{type(e).__name__}: {str(e)[:300] or repr(e)}"


def diff(a: dict, b: dict) -> str:
    out = []
    for key in a:
        if a[key] != b[key]:
            if key == "events":
                extra = [e for e in b[key] if e not in a[key]][:2]
                missing = [e for e in a[key] if e not in b[key]][:2]
                out.append(f"events differ ({len(a[key])} clean vs {len(b[key])}; missing {missing}; extra {extra})")
            else:
                out.append(f"{key}: clean {str(a[key])[:200]} vs {str(b[key])[:200]}")
    return "; ".join(out)


class Faults:
    def __init__(self, c: Cluster, rng: random.Random, downtime: float, timeout: float) -> None:
        self.c, self.rng, self.downtime, self.timeout = c, rng, downtime, timeout
        self.notes: list[str] = []  # things that happened by themselves (a process that died uncalled)
        self.client = None
        self.last_kill = ""

    async def connect(self):
        from agent_env.temporal_client.client import connect

        self.client = await connect(self.c.settings)
        return self.client

    def targets(self, seen_env_servers: bool, seen_sandboxes: bool) -> list[str]:
        return (
            ["worker", "gateway", "temporal server"]
            + (["env server"] if seen_env_servers else [])
            + (["sandboxed agent"] if seen_sandboxes else [])
        )

    def pid_of(self, target: str) -> int | None:
        c = self.c
        if target == "worker":
            live = c.live_workers()
            return self.rng.choice(live).pid if live else None
        if target == "gateway":
            return c.gateway_pid()
        if target == "temporal server":
            return c.server_pid()
        if target == "env server":
            pids = c.env_servers()
            return self.rng.choice(pids) if pids else None
        pids = c.sandboxes()
        return self.rng.choice(pids) if pids else None

    async def kill_and_restart(self, target: str, moment: float, t0: float, done: asyncio.Event) -> str:
        """At `moment` s after t0: SIGKILL the target (waiting for it to exist), then restart what is restarted."""
        await asyncio.sleep(max(0.0, t0 + moment - time.monotonic()))
        pid = self.pid_of(target)
        while pid is None and not done.is_set():  # e.g. an env server not started yet
            await asyncio.sleep(0.02)
            pid = self.pid_of(target)
        if pid is None:
            self.last_kill = "the run ended before the target existed: nothing killed"
            return self.last_kill
        killed_at = time.monotonic() - t0
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self.last_kill = f"killed pid {pid} at {killed_at:.2f} s"
        for w in self.c.workers:
            if w.pid == pid:
                await asyncio.to_thread(w.wait)
        await asyncio.sleep(self.downtime)
        if target == "worker":
            self.c.start_worker()
        elif target == "gateway":
            await asyncio.to_thread(self.c.cli, "gateway", "start")
        elif target == "temporal server":
            await asyncio.to_thread(self.c.cli, "server", "start")
        return self.last_kill

    async def heal(self) -> None:
        """Between runs: whatever died without being killed is noted and started again."""
        c = self.c
        if not c.server_pid():
            self.notes.append("the Temporal server was down after the run (restarted)")
            await asyncio.to_thread(c.cli, "server", "start")
        if not c.gateway_pid():
            self.notes.append("the gateway was down after the run (restarted)")
            await asyncio.to_thread(c.cli, "gateway", "start")
        for w in c.workers:
            if w.returncode is None and w.poll() is not None:
                self.notes.append(f"worker pid {w.pid} exited by itself with {w.returncode} (a new one started)")
                c.start_worker()
        if not c.live_workers():
            c.start_worker()

    async def retrying(self, make, deadline: float, retries: list):
        """make() until it returns; transient failures (server or gateway down) are retried until the deadline."""
        while True:
            try:
                return await asyncio.wait_for(make(), max(1.0, deadline - time.monotonic()))
            except Exception as e:  # noqa: BLE001
                if time.monotonic() > deadline or not transient(e):
                    raise
                retries.append(type(e).__name__)
                await asyncio.sleep(0.5)

    async def wait_run(self, run_id: str, deadline: float, retries: list):
        from agent_env.spec.run import RunState
        from agent_env.temporal import launch

        async def once():
            handle = self.client.get_workflow_handle(run_id, result_type=RunState)
            return await launch.wait_result(handle)

        return await self.retrying(once, deadline, retries)

    # a workplace run

    async def workplace(self, spec, kill: tuple[str, float] | None):
        from agent_env.temporal import launch

        t0 = time.monotonic()
        deadline = t0 + self.timeout
        retries: list[str] = []
        handle = await launch.start_run(self.client, self.c.settings, spec)
        done = asyncio.Event()
        killer = asyncio.create_task(self.kill_and_restart(*kill, t0, done)) if kill else None
        seen = {"env": False, "sandbox": False}

        async def watch():
            while not done.is_set():
                seen["env"] |= bool(self.c.env_servers())
                seen["sandbox"] |= bool(self.c.sandboxes())
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        try:
            state = await self.wait_run(handle.id, deadline, retries)
        finally:
            done.set()
            what = await killer if killer else ""
            await watcher
        data = await self.retrying(lambda: final_data(self.c.settings, state, "desk", False), deadline, retries)
        return state, comparable(state, data), time.monotonic() - t0, what, retries, seen

    # an episode

    async def episode(self, episodes, spec, kill: tuple[str, float] | None):
        t0 = time.monotonic()
        deadline = t0 + self.timeout
        retries: list[str] = []
        done = asyncio.Event()
        killer = asyncio.create_task(self.kill_and_restart(*kill, t0, done)) if kill else None
        try:
            from temporalio.exceptions import WorkflowAlreadyStartedError

            from agent_env.temporal.launch import new_run_id

            run_id = new_run_id(spec.task.id)

            async def start():  # one run id: a start retried after a lost answer finds the run it started
                try:
                    return await spec.start(episodes, run_id=run_id)
                except WorkflowAlreadyStartedError:
                    return episodes.episode(run_id)

            episode = await self.retrying(start, deadline, retries)
            turn = await self.retrying(episode.next_turn, deadline, retries)
            n = 0
            while turn is not None:
                n += 1

                async def write(turn=turn, n=n):
                    async with turn.tools() as tools:
                        await tools.call("write_note", {"key": f"turn{n}", "text": turn.prompt})

                await self.retrying(write, deadline, retries)
                await self.retrying(lambda turn=turn, n=n: turn.end(f"wrote turn{n}"), deadline, retries)
                turn = await self.retrying(episode.next_turn, deadline, retries)
            scores = await self.retrying(episode.result, deadline, retries)
        finally:
            done.set()
            what = await killer if killer else ""
        state = episode.state
        data = await self.retrying(lambda: final_data(self.c.settings, state, "pad", True), deadline, retries)
        return state, {**comparable(state, data), "scores": scores}, time.monotonic() - t0, what, retries


async def faults_async(c: Cluster, n: int, seed: int, downtime: float, timeout: float) -> dict:
    from agent_env.episodes import Episodes, EpisodeSpec
    from agent_env.planning.tasks import parse_task
    from agent_env.task_lookup import resolve_target

    rng = random.Random(seed)
    f = Faults(c, rng, downtime, timeout)
    await f.connect()
    out: dict = {}

    # workplace
    spec = resolve_target("workplace", None)
    _, clean, clean_wall, _, _, seen = await f.workplace(spec, None)
    if clean["status"] != "passed":
        raise RuntimeError(f"the clean workplace run did not pass: {clean['status']}")
    targets = f.targets(seen["env"], seen["sandbox"])
    survived, failures = 0, []
    print(
        f"    workplace clean run {clean_wall:.2f} s, {len(clean['events'])} world events; kill targets: "
        f"{', '.join(targets)}",
        flush=True,
    )
    for i in range(1, n + 1):
        target, moment = rng.choice(targets), rng.uniform(0.0, clean_wall)
        f.last_kill = ""
        try:
            _, got, wall, what, retries, _ = await f.workplace(spec, (target, moment))
            problem = diff(clean, got)
        except Exception as e:  # noqa: BLE001
            wall, what, retries, problem = float("nan"), f.last_kill, [], describe(e)
        await f.heal()
        line = f"workplace {i}: SIGKILL {target} at {moment:.2f} s ({what}); {wall:.1f} s; retries {len(retries)}"
        if problem:
            failures.append(f"{line}: {problem}")
        else:
            survived += 1
        print(f"    {line}: {'FAILED ' + problem if problem else 'same events, state and scores'}", flush=True)
    out["workplace"] = {
        "survived": survived,
        "runs": n,
        "failures": failures,
        "clean_wall_s": clean_wall,
        "targets": targets,
    }

    # episodes
    episodes = await Episodes.connect(c.settings, worker=False)
    try:
        espec = EpisodeSpec.from_task(parse_task(fault_episode_task(), "soak"), ["writer"], turn_timeout=120)
        _, eclean, eclean_wall, _, _ = await f.episode(episodes, espec, None)
        if eclean["scores"] != {"check": 1.0}:
            raise RuntimeError(f"the clean episode did not score 1.0: {eclean['scores']}")
        etargets = f.targets(bool(c.env_servers()), bool(c.sandboxes()))
        print(f"    episode clean run {eclean_wall:.2f} s, {len(eclean['data'])} notes", flush=True)
        esurvived, efailures = 0, []
        for i in range(1, n + 1):
            target, moment = rng.choice(etargets), rng.uniform(0.0, eclean_wall)
            f.last_kill = ""
            try:
                _, got, wall, what, retries = await f.episode(episodes, espec, (target, moment))
                problem = diff(eclean, got)
            except Exception as e:  # noqa: BLE001
                wall, what, retries, problem = float("nan"), f.last_kill, [], describe(e)
            await f.heal()
            line = (
                f"episode {i}: SIGKILL {target} at {moment:.2f} s ({what}); {wall:.1f} s; "
                f"trainer retries {len(retries)}{' ' + str(sorted(set(retries))) if retries else ''}"
            )
            if problem:
                efailures.append(f"{line}: {problem}")
            else:
                esurvived += 1
            print(f"    {line}: {'FAILED ' + problem if problem else 'same state and scores'}", flush=True)
        out["episodes"] = {
            "survived": esurvived,
            "runs": n,
            "failures": efailures,
            "clean_wall_s": eclean_wall,
            "targets": etargets,
        }
    finally:
        await episodes.close()
    out["notes"] = f.notes
    return out


def part_faults(n: int, seed: int, downtime: float, timeout: float) -> dict:
    print(f"soak 3: {n} workplace runs and {n} episodes, each with a SIGKILL of a random process (seed {seed})")
    c = Cluster()
    try:
        c.cli("server", "start")
        c.cli("gateway", "start")
        c.start_worker()
        result = asyncio.run(faults_async(c, n, seed, downtime, timeout))
    finally:
        c.close()
    w, e = result["workplace"], result["episodes"]
    row("workplace runs x faults survived", f"{w['survived']}/{w['runs']}", f"clean run {w['clean_wall_s']:.2f} s")
    row("episodes x faults survived", f"{e['survived']}/{e['runs']}", f"clean episode {e['clean_wall_s']:.2f} s")
    for line in w["failures"] + e["failures"]:
        print(f"    FAILED {line}")
    for note in result["notes"]:
        print(f"    note: {note}")
    return {"seed": seed, **result}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default=",".join(PARTS), help="which parts, comma-separated: runs,episodes,faults")
    p.add_argument("--runs", type=int, default=1000, help="consecutive `agent-env run hello` (part 1)")
    p.add_argument("--episodes", type=int, default=200, help="concurrent trainer episodes (part 2)")
    p.add_argument("--minutes", type=float, default=5.0, help="how long the episodes loop (part 2)")
    p.add_argument("--faults", type=int, default=20, help="workplace runs and episodes, each with a kill (part 3)")
    p.add_argument("--seed", type=int, default=1, help="seed of the kill targets and moments (part 3)")
    p.add_argument("--downtime", type=float, default=0.5, help="seconds a killed process stays down (part 3)")
    p.add_argument("--fault-timeout", type=float, default=240.0, help="seconds a killed run may take (part 3)")
    p.add_argument("--json-out", type=Path, help="also write the JSON summary to this file")
    args = p.parse_args()
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        p.error(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    print(f"machine: {os.cpu_count()} cores; temp dir {tempfile.gettempdir()}")
    summary: dict = {}
    if "runs" in parts and args.runs > 0:
        summary["runs"] = part_runs(args.runs)
    if "episodes" in parts and args.episodes > 0 and args.minutes > 0:
        summary["episodes"] = part_episodes(args.episodes, args.minutes)
    if "faults" in parts and args.faults > 0:
        summary["faults"] = part_faults(args.faults, args.seed, args.downtime, args.fault_timeout)
    text = json.dumps(summary, indent=2, default=str)
    print(text)
    if args.json_out:
        args.json_out.write_text(text)


if __name__ == "__main__":
    main()
    exit_now()  # a known temporalio interpreter-exit abort must not turn a finished soak red
