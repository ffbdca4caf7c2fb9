"""`agent-env models show|fake`, and `agent-env run --model/--model-url` (endpoint overrides for one run).

API keys are shown as their `secret:NAME` reference and whether that secret is set; never as values.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from agent_env.cli.output import console, notice
from agent_env.config import Settings, load_settings
from agent_env.errors import BadInput

PURPOSES = ("default", "agent", "persona", "judge")
_PURPOSE_LIKE = re.compile(r"^[A-Za-z_]+$")


def _check_purpose(purpose: str, where: str) -> str:
    if purpose not in PURPOSES:
        raise BadInput(f"unknown model purpose {purpose!r}{where}", f"use one of: {', '.join(PURPOSES)}")
    return purpose


def parse_overrides(models: list[str], urls: list[str]) -> dict[str, dict[str, str]]:
    """`--model PURPOSE=NAME` / `--model-url PURPOSE=URL` (a bare value is for `default`), by purpose."""
    overrides: dict[str, dict[str, str]] = {}
    for flag, field, values in (("--model", "model", models), ("--model-url", "base_url", urls)):
        for given in values:
            head, sep, tail = given.partition("=")
            purpose, value = (head, tail) if sep and _PURPOSE_LIKE.match(head) else ("default", given)
            _check_purpose(purpose, f" in {flag} {given}")
            if not value:
                raise BadInput(f"{flag} {given}: no value after '='", f"write {flag} {purpose}=VALUE")
            if field == "base_url" and not value.startswith(("http://", "https://")):
                raise BadInput(
                    f"{flag} {given}: {value!r} is not an http(s) URL",
                    f"e.g. {flag} {purpose}=http://127.0.0.1:8791/v1",
                )
            overrides.setdefault(purpose, {})[field] = value
    return overrides


def apply_overrides(settings: Settings, overrides: dict[str, dict[str, str]]) -> Settings:
    """Change `settings.models` in place (default first, so other purposes start from the new default).
    A URL on another origin leaves the configured key behind (it belongs to its own endpoint): said here."""
    for purpose in PURPOSES:
        if purpose in overrides:
            base = settings.models.get(purpose) or settings.model(purpose)
            settings.models[purpose] = base.overridden(overrides[purpose])
            if said := settings.models[purpose].withheld_notice():
                notice(f"{purpose}: {said}")
    return settings


def _key_status(api_key: str | None, secrets) -> tuple[str, str, bool | None]:
    """(what to show for the key, its status, whether it is usable), as markup — never the value."""
    from rich.markup import escape

    from agent_env.stores.secrets import PREFIX, env_var, is_reference

    if not api_key:
        return "none", "[dim]no key sent[/]", None
    if not is_reference(api_key):
        return "[red]plain text (hidden)[/]", "[red]move it to a secret[/]", False
    name = api_key[len(PREFIX) :]
    if not secrets.has(name):
        return escape(api_key), "[red]not set[/]", False
    where = f" (from {env_var(name)})" if os.environ.get(env_var(name)) else ""
    return escape(api_key), f"[green]set[/]{where}", True


def show_command(purpose: str | None) -> int:
    from rich.markup import escape
    from rich.table import Table

    from agent_env.stores import open_secrets
    from agent_env.stores.secrets import PREFIX, is_reference

    settings = load_settings()
    purposes = [_check_purpose(purpose, "")] if purpose else list(PURPOSES)
    secrets = open_secrets(settings)
    table = Table(box=None, pad_edge=False)
    for col in ("purpose", "from", "provider", "base_url", "model", "api key", "key"):
        table.add_column(col, no_wrap=True)
    fixes: list[str] = []
    for p in purposes:
        endpoint = settings.model(p)
        source = p if p in settings.models else "default" if "default" in settings.models else "built-in defaults"
        shown_key, status, usable = _key_status(endpoint.api_key, secrets)
        table.add_row(
            p,
            source,
            endpoint.provider + (f" ({endpoint.api})" if endpoint.provider == "openai" else ""),
            escape(endpoint.base_url or "") or "[red]not set[/]",
            escape(endpoint.model or "") or "[red]not set[/]",
            shown_key,
            status,
        )
        if usable is False and is_reference(endpoint.api_key):
            fixes.append(f"set {endpoint.api_key}: `agent-env secrets set {endpoint.api_key[len(PREFIX) :]}`")
        elif usable is False:
            fixes.append(
                f"the {p!r} api_key is written out in plain text: store it with `agent-env secrets set "
                'NAME` and write api_key = "secret:NAME"'
            )
        if not endpoint.base_url or not endpoint.model:
            fixes.append(
                "set [models.default] (or [models.PURPOSE]) base_url and model in .agentenv/config.toml, or "
                "AGENT_ENV_MODEL_BASE_URL and AGENT_ENV_MODEL (no network? `agent-env models fake`)"
            )
    out = console()
    out.print(table)
    out.print(
        f"[dim]config: {settings.config_file or 'no config file'}; environment: AGENT_ENV_MODEL_* applies to "
        "default; override one run with `agent-env run ... --model PURPOSE=NAME`[/]"
    )
    for fix in dict.fromkeys(fixes):
        out.print(f"  [bold]fix:[/] {escape(fix)}")
    return 0


def _load_script_files(paths: list[Path]) -> dict:
    import json

    from agent_env.agents.fake_model import load_scripts

    for path in paths:
        if not path.is_file():
            raise BadInput(f"--scripts {path}: no such file", 'give a JSON file of {"NAME": [steps...]}')
        try:
            data = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as e:
            raise BadInput(f"--scripts {path} is not valid JSON: {e}") from None
        if not isinstance(data, dict) or not all(
            isinstance(script, list | dict) and script for script in data.values()
        ):
            raise BadInput(
                f"--scripts {path}: expected an object of script name -> steps",
                'e.g. {"tester": [{"tool": "get_time", "arguments": {}}, {"say": "done"}]}',
            )
    return load_scripts(paths)


def _check_port(host: str, port: int) -> None:
    import socket

    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        raise BadInput(
            f"cannot listen on {host}:{port} ({e.strerror or e})", "choose another port with --port"
        ) from None


def fake_command(host: str, port: int, script_files: list[Path], api_key: str | None) -> int:
    import uvicorn

    from agent_env.agents.fake_model import builtin_scripts, create_app
    from agent_env.stores import open_secrets
    from agent_env.stores.secrets import PREFIX, is_reference

    scripts = {**builtin_scripts(), **_load_script_files(script_files)}
    _check_port(host, port)
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    url = f"http://{'[' + shown_host + ']' if ':' in shown_host else shown_host}:{port}/v1"
    out = console()
    out.print(
        f"fake model at [bold]{url}[/] · scripts: {', '.join(scripts) or 'none'} · also fake-judge, "
        "fake-garbage, fake-slow-N · speaks chat completions, responses and Anthropic messages · Ctrl-C to stop"
    )
    if api_key:
        out.print(
            f"export AGENT_ENV_MODEL_BASE_URL={url} AGENT_ENV_MODEL=fake AGENT_ENV_MODEL_API_KEY={PREFIX}fake-model"
            "   # requests need the --api-key value: store it with `agent-env secrets set fake-model`"
        )
    else:
        out.print(f"export AGENT_ENV_MODEL_BASE_URL={url} AGENT_ENV_MODEL=fake   # no API key needed")
        settings = load_settings()
        configured = settings.model("default").api_key
        if is_reference(configured) and not open_secrets(settings).has(configured[len(PREFIX) :]):
            notice(
                f"runs check that the configured key {configured} is set, though this fake ignores it: "
                f"`agent-env secrets set {configured[len(PREFIX) :]} --value unused`, "
                'or write api_key = "" under [models.default] in .agentenv/config.toml'
            )
    uvicorn.run(create_app(scripts, api_key, host_names=(host,)), host=host, port=port, log_level="warning")
    return 0


def record_command(upstream: str, host: str, port: int, upstream_key: str | None, api_key: str | None) -> int:
    import uvicorn

    from agent_env.episodes.recording import create_app
    from agent_env.stores import open_secrets
    from agent_env.stores.secrets import is_reference

    if not upstream.startswith(("http://", "https://")):
        raise BadInput(f"--upstream {upstream!r} is not an http(s) URL", "e.g. --upstream http://127.0.0.1:8000/v1")
    if upstream_key is not None and not is_reference(upstream_key):
        raise BadInput(
            "--upstream-key takes a secret:NAME reference, not the key itself",
            "store it with `agent-env secrets set NAME` and pass --upstream-key secret:NAME",
        )
    key = open_secrets(load_settings()).resolve(upstream_key) if upstream_key else None
    _check_port(host, port)
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    url = f"http://{'[' + shown_host + ']' if ':' in shown_host else shown_host}:{port}"
    console().print(
        f"token recorder at [bold]{url}[/] in front of {upstream} · agents call {url}/episodes/KEY/v1 · "
        f"EpisodeSpec.from_task(task, recorded_agents=[...], recorder={url!r}) · Ctrl-C to stop"
    )
    app = create_app(upstream, upstream_key=key, api_key=api_key, host_names=(host,))
    uvicorn.run(app, host=host, port=port, log_level="warning")
    return 0
