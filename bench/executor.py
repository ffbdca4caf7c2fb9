"""Executor overhead per step, and trivial runs per second with one worker.

Per-step overhead = (T(chain of 21 steps) - T(chain of 1)) / 20, for activity steps and local steps.
Baselines, measured in the same run on the same server: raw temporalio workflows executing the same
number of no-op activities in sequence, and raw single-activity workflows for throughput.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from datetime import timedelta

from common import exit_now, isolated_env, row
from temporalio import activity, workflow
from temporalio.worker import Worker

REPEATS = 5
LONG = 21
THROUGHPUT_RUNS = 100


@activity.defn(name="bench.noop")
async def noop_activity(x: int) -> int:
    return x


@workflow.defn(name="bench.BareChain")
class BareChain:
    @workflow.run
    async def run(self, n: int, local: bool) -> int:
        for i in range(n):
            call = workflow.execute_local_activity if local else workflow.execute_activity
            await call(noop_activity, i, start_to_close_timeout=timedelta(seconds=30))
        return n


def chain(n: int, step_type: str):
    from agent_env.planning.tasks import parse_task

    steps = [{"id": f"s{i}", "type": step_type, "depends_on": [f"s{i - 1}"] if i else []} for i in range(n)]
    return parse_task({"id": "bench", "steps": steps}, "bench")


async def measure_async() -> dict:
    from agent_env.config import load_settings
    from agent_env.steps import catalog, step_type
    from agent_env.temporal import background, launch
    from agent_env.temporal.worker import create_worker
    from agent_env.temporal_client import server
    from agent_env.temporal_client.client import connect

    os.environ.update(isolated_env())
    settings = load_settings()
    server.start(settings)
    client = await connect(settings)

    async def noop(ctx, config):
        return {}

    catalog.register(step_type("bench_noop", retries=0)(noop))
    catalog.register(step_type("bench_noop_local", local=True, retries=0)(noop))
    ours = create_worker(client, settings)
    bare_queue = f"bare-{uuid.uuid4().hex[:6]}"
    bare = Worker(client, task_queue=bare_queue, workflows=[BareChain], activities=[noop_activity])
    tasks = [asyncio.create_task(ours.run()), asyncio.create_task(bare.run())]

    async def ours_once(spec) -> float:
        t = time.perf_counter()
        state = await launch.wait_result(await launch.start_run(client, settings, spec))
        assert state.status == "passed", state
        return time.perf_counter() - t

    async def bare_once(n: int, local: bool) -> float:
        t = time.perf_counter()
        await client.execute_workflow(
            BareChain.run,
            args=[n, local],
            id=f"bare-{uuid.uuid4().hex}",
            task_queue=bare_queue,
            request_eager_start=True,
        )
        return time.perf_counter() - t

    async def median(fn, *args) -> float:
        return statistics.median([await fn(*args) for _ in range(REPEATS)])

    await ours_once(chain(1, "bench_noop"))  # warm up both paths
    await bare_once(1, False)
    result = {}
    for kind, local in (("activity", False), ("local", True)):
        st = "bench_noop_local" if local else "bench_noop"
        ours_short, ours_long = await median(ours_once, chain(1, st)), await median(ours_once, chain(LONG, st))
        bare_short, bare_long = await median(bare_once, 1, local), await median(bare_once, LONG, local)
        result[f"{kind}_step_ms"] = (ours_long - ours_short) / (LONG - 1) * 1000
        result[f"{kind}_bare_ms"] = (bare_long - bare_short) / (LONG - 1) * 1000
        result[f"{kind}_run_1_step_ms"] = ours_short * 1000
        result[f"{kind}_bare_1_ms"] = bare_short * 1000

    spec = chain(1, "bench_noop")
    t = time.perf_counter()
    handles = await asyncio.gather(*(launch.start_run(client, settings, spec) for _ in range(THROUGHPUT_RUNS)))
    await asyncio.gather(*(launch.wait_result(h) for h in handles))
    result["runs_per_s"] = THROUGHPUT_RUNS / (time.perf_counter() - t)
    t = time.perf_counter()
    await asyncio.gather(*(bare_once(1, False) for _ in range(THROUGHPUT_RUNS)))
    result["bare_runs_per_s"] = THROUGHPUT_RUNS / (time.perf_counter() - t)

    for task in tasks:
        task.cancel()
    background.stop_all(settings)
    server.stop(settings)

    print("executor")
    for kind in ("activity", "local"):
        ours, bare = result[f"{kind}_step_ms"], result[f"{kind}_bare_ms"]
        row(
            f"per {kind} step in a chain",
            f"{ours:.1f} ms",
            f"bare temporalio {bare:.1f} ms per {kind}; ratio {ours / bare:.2f}x",
        )
        row(
            f"one-step run, start to result ({kind})",
            f"{result[f'{kind}_run_1_step_ms']:.0f} ms",
            f"bare temporalio {result[f'{kind}_bare_1_ms']:.0f} ms",
        )
    row(
        f"trivial runs/s, one worker ({THROUGHPUT_RUNS} at once)",
        f"{result['runs_per_s']:.1f} /s",
        f"bare temporalio {result['bare_runs_per_s']:.1f} /s; ratio {result['runs_per_s'] / result['bare_runs_per_s']:.2f}x",
    )
    return result


def measure() -> dict:
    return asyncio.run(measure_async())


if __name__ == "__main__":
    measure()
    exit_now()
