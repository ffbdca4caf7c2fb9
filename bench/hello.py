"""`agent-env run hello`, cold (server not running) and warm (server running), next to the reference system's.

Goals on the 2-core reference machine: cold <= 2.0 s, warm <= 1.0 s, and warm <= 0.15x the reference
system's zero-config hello (`agent-env run hello` of PyPI's `agentenv-framework`, in a side venv: see
peers.py). Ours warm and theirs run interleaved, one each per round, the order alternated each round, so
both see the same load. Baseline, measured in the same run: a bare temporalio script doing the same shape
of work (connect, in-process worker, a workflow of two parallel activities, one dependent activity and a
local activity).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from common import AGENT_ENV, isolated_env, row, summarize, timed
from peers import reference_hello, reference_setup

COLD_RUNS = 5
WARM_RUNS = 10  # the bare temporalio baseline's runs
ROUNDS = 7  # ours warm, interleaved with the reference's hello: one each per round
BARE = Path(__file__).with_name("bare_temporal_hello.py")


def stop(env) -> None:
    """Cold means neither daemon runs: stop the Temporal server and the gateway."""
    subprocess.run([AGENT_ENV, "server", "stop"], env=env, capture_output=True, check=True)
    subprocess.run([AGENT_ENV, "gateway", "stop"], env=env, capture_output=True, check=True)


def measure() -> dict:
    reference = reference_setup()  # first: it may build a venv (about a minute, once)
    fresh, restarted, warm, bare, theirs = [], [], [], [], []
    for _ in range(COLD_RUNS):
        env = isolated_env()
        fresh.append(timed([AGENT_ENV, "run", "hello"], env)[0])  # new state dir: creates the database
        stop(env)
        restarted.append(timed([AGENT_ENV, "run", "hello"], env)[0])  # server stopped, state kept
        stop(env)
    env = isolated_env()
    timed([AGENT_ENV, "server", "start"], env)
    timed([AGENT_ENV, "run", "hello"], env)  # first run also registers search attributes
    warm_mib = 0.0

    def ours() -> None:
        nonlocal warm_mib
        wall, mib = timed([AGENT_ENV, "run", "hello"], env)
        warm.append(wall)
        warm_mib = max(warm_mib, mib)

    def reference_once() -> None:
        theirs.append(reference_hello(reference))

    for r in range(ROUNDS):
        for turn in (ours, reference_once) if r % 2 == 0 else (reference_once, ours):
            turn()
    address = f"127.0.0.1:{env['AGENT_ENV_SERVER_PORT']}"
    for _ in range(WARM_RUNS):
        bare.append(timed([sys.executable, str(BARE), address], env)[0])
    stop(env)

    result = {
        "cold_fresh_s": summarize(fresh)["median"],
        "cold_restart_s": summarize(restarted)["median"],
        "warm_s": summarize(warm)["median"],
        "warm_p90_s": summarize(warm)["p90"],
        "warm_mib": warm_mib,
        "bare_temporal_s": summarize(bare)["median"],
        "reference_hello_s": summarize(theirs)["median"],
    }
    result["warm_vs_reference"] = result["warm_s"] / result["reference_hello_s"]
    print("agent-env run hello")
    row(f"cold, fresh state dir (median of {COLD_RUNS})", f"{result['cold_fresh_s']:.2f} s", "goal <= 2.0 s")
    row(f"cold, server stopped (median of {COLD_RUNS})", f"{result['cold_restart_s']:.2f} s", "goal <= 2.0 s")
    row(
        f"warm (median of {ROUNDS})",
        f"{result['warm_s']:.2f} s",
        f"goal <= 1.0 s; p90 {result['warm_p90_s']:.2f} s; peak {warm_mib:.0f} MiB",
    )
    row(
        "baseline: bare temporalio script, same DAG shape",
        f"{result['bare_temporal_s']:.2f} s",
        f"ratio {result['warm_s'] / result['bare_temporal_s']:.2f}x",
    )
    row(
        f"peer: reference system's hello (median of {ROUNDS})",
        f"{result['reference_hello_s']:.2f} s",
        f"interleaved with ours warm; p90 {summarize(theirs)['p90']:.2f} s",
    )
    row(
        "ours warm / reference hello",
        f"{result['warm_vs_reference']:.2f}x",
        "goal <= 0.15x",
    )
    return result


if __name__ == "__main__":
    measure()
