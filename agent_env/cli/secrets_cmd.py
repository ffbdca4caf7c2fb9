"""`agent-env secrets set|list|delete`: the values behind `secret:NAME` references. Values are never printed."""

from __future__ import annotations

import json
import os
import sys

from agent_env.cli.output import console, notice
from agent_env.config import load_settings
from agent_env.errors import BadInput, NotFound


def _store():
    """The secret store this install's settings configure ([stores.secrets]; a file in the state dir by default)."""
    from agent_env.stores import open_secrets

    return open_secrets(load_settings())


def _env_secrets() -> list[str]:
    """The AGENT_ENV_SECRET_* variables that hold a value (an empty one does not count, as in the store)."""
    return sorted(k for k, v in os.environ.items() if k.startswith("AGENT_ENV_SECRET_") and v)


def _read_value(name: str) -> str:
    if sys.stdin.isatty():
        import typer

        return typer.prompt(f"value of secret {name} (hidden)", hide_input=True, prompt_suffix=": ")
    return sys.stdin.read().rstrip("\r\n")


def set_command(name: str, value: str | None) -> int:
    from agent_env.stores.secrets import NAME, env_var

    store = _store()
    if not NAME.match(name):
        store.set(name, "")  # refused before anything is written: the store's own BadInput, before any prompt
    if value is None:
        value = _read_value(name)
    if not value:
        raise BadInput(
            f"no value given for secret {name!r}", "type it at the prompt, pipe it on stdin, or pass --value"
        )
    store.set(name, value)
    console().print(f"stored secret [bold]{name}[/] in {store.where()}; reference it as secret:{name}")
    if os.environ.get(env_var(name)):
        notice(f"the environment variable {env_var(name)} is set too, and wins over the stored value")
    return 0


def list_command(json_out: bool) -> int:
    from agent_env.stores.secrets import env_var

    store = _store()
    names, env = store.names(), _env_secrets()
    if json_out:
        print(json.dumps({"store": store.where(), "names": names, "environment": env}))
        return 0
    out = console()
    if not names and not env:
        out.print(f"no secrets yet ({store.where()}) — add one with `agent-env secrets set NAME`")
        return 0
    if names:
        out.print(f"in {store.where()}:")
        for name in names:
            shadow = (
                f"  [dim](overridden by the environment variable {env_var(name)})[/]" if env_var(name) in env else ""
            )
            out.print(f"  [bold]{name}[/]{shadow}")
    if env:
        out.print("from environment variables:")
        for var in env:
            name = var.removeprefix("AGENT_ENV_SECRET_").lower()
            spelled = "; '-' and '.' in names map to '_'" if "_" in name else ""
            out.print(f"  [bold]{var}[/]  [dim](serves secret:{name}{spelled})[/]")
    return 0


def delete_command(name: str) -> int:
    from agent_env.stores.secrets import env_var

    store = _store()
    in_env = bool(os.environ.get(env_var(name)))
    if not store.delete(name):
        raise NotFound(
            f"no secret {name!r} in {store.where()}"
            + (f"; it comes from the environment variable {env_var(name)}" if in_env else ""),
            f"unset {env_var(name)} in your environment" if in_env else "list them with `agent-env secrets list`",
        )
    console().print(f"deleted secret [bold]{name}[/]")
    if in_env:
        notice(f"secret:{name} still resolves: the environment variable {env_var(name)} is set")
    return 0
