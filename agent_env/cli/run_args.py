"""`agent-env run`'s options read before typer loads, for the warm fast path (`temporal/control_client.py`).

This typer validates every parameter through pydantic, which alone costs more than the rest of a warm
`run hello` (bench/hello.py). So `main` reads the one shape the background worker serves itself, and anything
else goes to typer. `tests/test_cli.py` holds this reading to typer's own for the same arguments.
"""

from __future__ import annotations

from agent_env.temporal.control_client import RunOptions


def parse_run(args: list[str]) -> RunOptions | None:
    """`TARGET [--task T | -t T | --task=T] [--json] [--detach | -d]`; None for anything else (typer's)."""
    target: str | None = None
    task: str | None = None
    json_out = detach = False
    rest = iter(args)
    for arg in rest:
        if arg == "--json":
            json_out = True
        elif arg in ("--detach", "-d"):
            detach = True
        elif arg in ("--task", "-t"):
            task = next(rest, None)
            if task is None:
                return None
        elif arg.startswith("--task="):
            task = arg.removeprefix("--task=")
        elif arg.startswith("-") or target is not None:
            return None
        else:
            target = arg
    return RunOptions(target, task, json_out=json_out, detach=detach) if target else None
