"""`agent-env run`'s (and `env validate`'s, `a2a-agent validate`'s) options read before typer loads, for the warm fast path (`temporal/control_client.py`).

This typer validates every parameter through pydantic, which alone costs more than the rest of a warm
`run hello` (bench/hello.py). So `main` reads the one shape the background worker serves itself, and anything
else goes to typer. `tests/test_cli.py` holds this reading to typer's own for the same arguments.
"""

from __future__ import annotations

from pathlib import Path

from agent_env.temporal.control_client import RunOptions, ValidateOptions


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
    if not target or (task is None and _has_evals(target)):
        return None  # an eval's runs and table are typer's (`cli/eval_cmd.py`)
    return RunOptions(target, task, json_out=json_out, detach=detach)


def _has_evals(target: str) -> bool:
    """Whether `target` is a folder with evals/*.toml: `run` then runs its evals, not one task."""
    folder = Path(target).expanduser() / "evals"
    return folder.is_dir() and any(folder.glob("*.toml"))


def parse_validate(group: str, args: list[str]) -> ValidateOptions | None:
    """`env validate TARGET [--json] [--read-only] [--bundle B]`, `a2a-agent validate URL [--json] [--timeout S]`;
    None for anything else (typer's, which also says what is wrong)."""
    target: str | None = None
    bundle: str | None = None
    timeout = "60"
    json_out = read_only = False
    valued = "--bundle" if group == "env" else "--timeout"
    rest = iter(args)
    for arg in rest:
        name, eq, inline = arg.partition("=")
        if arg == "--json":
            json_out = True
        elif arg == "--read-only" and group == "env":
            read_only = True
        elif name == valued:
            value = inline if eq else next(rest, None)
            if value is None:
                return None
            bundle, timeout = (value, timeout) if group == "env" else (bundle, value)
        elif arg.startswith("-") or target is not None:
            return None
        else:
            target = arg
    try:
        timeout_s = float(timeout)
    except ValueError:
        return None
    if target is None or not 1 <= timeout_s <= 3600:
        return None
    if group == "a2a-agent" and not target.startswith(("http://", "https://")):
        return None
    return ValidateOptions(group, target, json_out=json_out, read_only=read_only, timeout_s=timeout_s, bundle=bundle)
