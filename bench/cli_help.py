"""`agent-env --help`: wall time and peak memory, against the interpreter's own floor. Goal <= 0.3 s."""

from __future__ import annotations

import sys

from common import AGENT_ENV, row, summarize, timed

RUNS = 20


def measure() -> dict:
    help_samples = [timed([AGENT_ENV, "--help"]) for _ in range(RUNS)]
    floor = [timed([sys.executable, "-c", "pass"]) for _ in range(RUNS)]
    eager = [timed([sys.executable, "-c", "import temporalio.client, temporalio.worker"]) for _ in range(5)]
    help_wall = summarize([w for w, _ in help_samples])["median"]
    result = {
        "help_s": help_wall,
        "help_mib": max(m for _, m in help_samples),
        "python_floor_s": summarize([w for w, _ in floor])["median"],
        "import_temporalio_s": summarize([w for w, _ in eager])["median"],
    }
    print("agent-env --help")
    row(
        f"agent-env --help (median of {RUNS})",
        f"{help_wall * 1000:.0f} ms",
        f"goal <= 300 ms; peak {result['help_mib']:.0f} MiB",
    )
    row(
        "baseline: python -c pass",
        f"{result['python_floor_s'] * 1000:.0f} ms",
        f"ratio {help_wall / result['python_floor_s']:.1f}x",
    )
    row(
        "baseline: importing temporalio eagerly",
        f"{result['import_temporalio_s'] * 1000:.0f} ms",
        "what --help would cost if it imported Temporal",
    )
    return result


if __name__ == "__main__":
    measure()
