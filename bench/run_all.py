"""Run every benchmark and print its figures next to baselines measured in the same run.

.venv/bin/python bench/run_all.py
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import agents  # noqa: E402
import cli_help  # noqa: E402
import coding_agents  # noqa: E402
import docs_search  # noqa: E402
import docs_site  # noqa: E402
import episodes  # noqa: E402
import episodes_density  # noqa: E402
import executor  # noqa: E402
import explorer  # noqa: E402
import gateway  # noqa: E402
import groups  # noqa: E402
import hello  # noqa: E402
import json_depth  # noqa: E402
import models  # noqa: E402
import registry  # noqa: E402
import sandboxes  # noqa: E402
import scale  # noqa: E402
import seals  # noqa: E402
import stores  # noqa: E402
import telemetry  # noqa: E402
import validate  # noqa: E402
import validate_agent  # noqa: E402
import world  # noqa: E402
from common import exit_now  # noqa: E402


def main() -> None:
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, {platform.machine()}")
    results = {
        "cli_help": cli_help.measure(),
        "hello": hello.measure(),
        "executor": executor.measure(),
        "gateway": gateway.measure(),
        "json_depth": json_depth.measure(),
        "seals": seals.measure(),
        "world": world.measure(),
        "agents": agents.measure(),
        "models": models.measure(),
        "coding_agents": coding_agents.measure(),
        "episodes": episodes.measure(),
        "groups": groups.measure(),
        "episodes_density": episodes_density.measure(),  # N = 50; the ladder: bench/episodes_density.py --ladder
        "sandboxes": sandboxes.measure(),
        "stores": stores.measure(),
        "registry": registry.measure(),
        "scale": scale.measure(),
        "telemetry": telemetry.measure(),
        "validate": validate.measure(),
        "validate_agent": validate_agent.measure(),
        "explorer": explorer.measure(),
        "docs_search": docs_search.measure(),
        "docs_site": docs_site.measure(),
    }
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.json").write_text(json.dumps(results, indent=2))
    print(f"figures saved to {out / 'latest.json'}")


if __name__ == "__main__":
    main()
    exit_now()
