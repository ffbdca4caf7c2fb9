"""Print the A2A card of an agent written with our SDK, without serving it: `python3 -m agent_env.agents.card_of
FOLDER python3 agent.py` (or `... python3 -m MODULE`) runs the agent's entry point in FOLDER until it calls
`serve()`, then prints the card `serve` would serve (JSON, the extensions' params as served) and exits.

`install_agent` reads an agent's install/v1 declaration this way, in the sandbox it installs into, as the
framework reads its agents' cards from their images: the agent's code runs there, never in the worker.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from typing import Any, NoReturn

from agent_env.agents import sdk
from agent_env.gateway_client.wire import JsonObject


class _Served(Exception):
    def __init__(self, card: JsonObject) -> None:
        self.card = card


def _print_instead(agent: sdk.Agent, *args: Any, **kwargs: Any) -> NoReturn:
    raise _Served(sdk.card_body(sdk.agent_card(agent, sdk.RELATIVE_URL, extensions=True)))


def main(argv: list[str]) -> int:
    if len(argv) < 3 or os.path.basename(argv[1]) not in ("python", "python3") or argv[2] == "-c":
        print(
            "usage: card_of FOLDER python3 SCRIPT.py [ARGS] | card_of FOLDER python3 -m MODULE [ARGS]", file=sys.stderr
        )
        return 2
    os.chdir(argv[0])
    sys.path.insert(0, os.getcwd())
    sdk.serve = _print_instead  # (the entry point calls serve(): it prints instead)
    try:
        if argv[2] == "-m" and len(argv) > 3:
            sys.argv = [argv[3], *argv[4:]]
            runpy.run_module(argv[3], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv[2:]
            runpy.run_path(argv[2], run_name="__main__")
    except _Served as served:
        print(json.dumps(served.card))
        return 0
    print("the entry point ended without calling agent_env.agents.sdk.serve()", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
