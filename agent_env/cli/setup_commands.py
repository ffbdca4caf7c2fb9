"""Command definitions of what an install is set up with and holds: its settings, secrets and model endpoints,
its registry and bundle files, its plugins and step types. Bodies live in sibling modules, imported only when
the command runs (`commands.py` adds these groups to `agent-env`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

_KIND_HELP = "envs | tasks | agents | artifacts | evals (or env, task, ...)."

secrets_app = typer.Typer(
    help="Secrets behind `secret:NAME` references (API keys). Values are never printed.", no_args_is_help=True
)

models_app = typer.Typer(
    help="Model endpoints: what each purpose uses, and a local fake to test without a network.", no_args_is_help=True
)

config_app = typer.Typer(
    help="This install's settings: .agentenv/config.toml (found upward, or AGENT_ENV_CONFIG), then the environment.",
    no_args_is_help=True,
)

registry_app = typer.Typer(
    help="The registry: immutable versions of envs, tasks, agents, artifacts and evals in this install's stores "
    "(shared by every install pointing at the same stores). A version's label is its record's `version`; "
    "pushing other content under a pushed label is refused: bump `version`. `agent-env run NAME[@VERSION]` "
    "runs a task from the registry when nothing here has that name.",
    no_args_is_help=True,
)

bundle_app = typer.Typer(
    help="Bundle files: tasks and the envs, agents and artifacts they use, with their files, in one file that "
    "carries them to another install's registry (other stores). Files are stored once however many tasks "
    "use them; everything is checked against its digest on import, and a damaged file imports nothing.",
    no_args_is_help=True,
)


@secrets_app.command("set")
def secrets_set(
    name: Annotated[str, typer.Argument(help="The secret's name, as in `secret:NAME` (letters, digits, . _ -).")],
    value: Annotated[
        str | None,
        typer.Option(help="The value (visible in your shell history: prefer the prompt, or pipe it on stdin)."),
    ] = None,
) -> None:
    """Store a secret in this install's secret file (mode 0600). Prompts for the value, hidden, unless given."""
    from agent_env.cli.secrets_cmd import set_command

    raise typer.Exit(set_command(name, value))


@secrets_app.command("list")
def secrets_list(
    json_out: Annotated[bool, typer.Option("--json", help="Print the names as JSON.")] = False,
) -> None:
    """List secret names: stored ones, and those set by AGENT_ENV_SECRET_* environment variables. No values."""
    from agent_env.cli.secrets_cmd import list_command

    raise typer.Exit(list_command(json_out))


@secrets_app.command("delete")
def secrets_delete(
    name: Annotated[str, typer.Argument(help="The secret's name.")],
) -> None:
    """Delete a stored secret."""
    from agent_env.cli.secrets_cmd import delete_command

    raise typer.Exit(delete_command(name))


@models_app.command("show")
def models_show(
    purpose: Annotated[str | None, typer.Argument(help="default | agent | persona | judge (default: all).")] = None,
) -> None:
    """Show the endpoint each purpose uses: base_url, model, API key reference and whether that secret is set."""
    from agent_env.cli.models_cmd import show_command

    raise typer.Exit(show_command(purpose))


@models_app.command("fake")
def models_fake(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8791,
    scripts: Annotated[
        list[Path] | None,
        typer.Option(
            "--scripts",
            metavar="FILE",
            help="JSON scripts {NAME: [steps]} added to the built-in bundles' scripts. Repeatable.",
        ),
    ] = None,
    api_key: Annotated[str | None, typer.Option(help="Require this API key (as a real endpoint would).")] = None,
) -> None:
    """Serve a local, deterministic fake of an OpenAI-compatible endpoint (scripted replies), until Ctrl-C."""
    from agent_env.cli.models_cmd import fake_command

    raise typer.Exit(fake_command(host, port, scripts or [], api_key))


@models_app.command("record")
def models_record(
    upstream: Annotated[
        str, typer.Option(help="The inference server's OpenAI-style base URL, e.g. http://127.0.0.1:8000/v1 (vLLM).")
    ],
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8799,
    upstream_key: Annotated[
        str | None, typer.Option(help="The upstream's API key, as a secret:NAME reference (sent only upstream).")
    ] = None,
    api_key: Annotated[str | None, typer.Option(help="Require this API key of agents and trainers.")] = None,
) -> None:
    """Serve the token recorder in front of an inference server, until Ctrl-C: agents call
    /episodes/KEY/v1/chat/completions as their model; each episode's exact token ids and log-probs are handed to
    its trainer (POST /episodes/KEY/trajectory, or episode.trajectory()), then forgotten."""
    from agent_env.cli.models_cmd import record_command

    raise typer.Exit(record_command(upstream, host, port, upstream_key, api_key))


@config_app.command("show")
def config_show(
    json_out: Annotated[
        bool, typer.Option("--json", help='Print {"config_file", "settings": {KEY: {value, source, name}}} as JSON.')
    ] = False,
) -> None:
    """Show the settings in effect, each with where it came from: `file` (with the file's path), `env` (the
    variable's name) or `default`. A file in the reference system's shape ([sandbox] default) shows how it
    wrote each value. Secrets are masked: `secret:NAME` references are shown, literal keys and tokens as ****.
    See .agentenv/config.example.toml for every setting."""
    from agent_env.cli.config_cmd import show_command

    raise typer.Exit(show_command(json_out))


@registry_app.command("push")
def registry_push(
    folder: Annotated[Path, typer.Argument(help="A bundle folder: tasks/, envs/NAME/, agents/NAME/, artifacts/.")],
) -> None:
    """Push every env, agent, artifact and task of a bundle as a version. All records are checked first (every
    problem listed, nothing pushed); each item is then `pushed` (a new version) or `unchanged` (its content is
    already stored under its label). A task records the versions of the envs, agents and artifacts it uses."""
    from agent_env.cli.registry_cmd import push_command

    raise typer.Exit(push_command(folder))


@registry_app.command("list")
def registry_list(
    kind: Annotated[str | None, typer.Argument(help=_KIND_HELP + " Omit for all.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """List the registry's items: kind, name, latest label and how many versions."""
    from agent_env.cli.registry_cmd import list_command

    raise typer.Exit(list_command(kind, json_out))


@registry_app.command("show")
def registry_show(
    kind: Annotated[str, typer.Argument(help=_KIND_HELP)],
    ref: Annotated[str, typer.Argument(help="NAME (every version) or NAME@VERSION.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print each version as a JSON line.")] = False,
) -> None:
    """Show an item's versions: digest, who pushed it and when, its files, what it uses, and the runs that
    used it (their pins name it)."""
    from agent_env.cli.registry_cmd import show_command

    raise typer.Exit(show_command(kind, ref, json_out))


@registry_app.command("pull")
def registry_pull(
    kind: Annotated[str, typer.Argument(help=_KIND_HELP)],
    ref: Annotated[str, typer.Argument(help="NAME (the latest version) or NAME@VERSION.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The folder to write into (bundle layout).")],
) -> None:
    """Write a version's files into a folder, in the bundle layout (a task brings the envs, agents and artifacts
    it uses, so the folder runs). Every file is checked against its digest first: an altered one is refused
    and nothing is written."""
    from agent_env.cli.registry_cmd import pull_command

    raise typer.Exit(pull_command(kind, ref, out))


@bundle_app.command("export")
def bundle_export(
    out: Annotated[Path, typer.Option("--out", "-o", help="The bundle file to write (a .tar.gz).")],
    tasks: Annotated[
        list[str] | None, typer.Argument(metavar="TASK[@VERSION]", help="Tasks in the registry (no @: the latest).")
    ] = None,
    evals: Annotated[
        list[str] | None,
        typer.Option("--eval", metavar="EVAL[@VERSION]", help="An eval in the registry, with its tasks. Repeatable."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace --out if it exists.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print what was written as JSON.")] = False,
) -> None:
    """Write tasks (and evals, with the tasks they name) from the registry, with every version they use and the
    files of each, to one file (written whole or not at all). Each version is checked against its digest first.
    Images named by `image` stay references: the importing install needs access to them; envs built from a
    `build` context carry it."""
    from agent_env.cli.bundle_cmd import export_command

    raise typer.Exit(export_command(tasks or [], out, force, json_out, evals or []))


@bundle_app.command("import")
def bundle_import(
    file: Annotated[Path, typer.Argument(help="A file written by `agent-env bundle export`.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print each version's outcome as a JSON line.")] = False,
) -> None:
    """Load a bundle file into this install's registry. Every version and file is checked against its digest,
    and every label against this registry, before anything is written: a damaged file or a label holding other
    content here imports nothing. Each version is `imported` or `unchanged` (already here). Then
    `agent-env run NAME` runs an imported task."""
    from agent_env.cli.bundle_cmd import import_command

    raise typer.Exit(import_command(file, json_out))


plugin_app = typer.Typer(
    help="Plugins: what other packages plug into agent-env (step types, sandbox providers, store backends), whether "
    "each works, and installing or removing them with pip in the environment agent-env runs from.",
    no_args_is_help=True,
)

steps_app = typer.Typer(help="Step types: what each does, its config fields and an example.", no_args_is_help=True)


@plugin_app.command("list")
def plugin_list(json_out: Annotated[bool, typer.Option("--json", help="Print the plugins as JSON.")] = False) -> None:
    """Every built-in and plugin in each entry-point group agent-env reads: who provides it and whether it loads."""
    from agent_env.cli.plugin_cmd import list_command

    raise typer.Exit(list_command(json_out))


@plugin_app.command("check")
def plugin_check(
    names: Annotated[
        list[str] | None, typer.Argument(help="Plugin or distribution names (default: every one).")
    ] = None,
) -> None:
    """Load plugins and hold each to what its group requires. Exit 1 when one is broken, naming the fix."""
    from agent_env.cli.plugin_cmd import check_command

    raise typer.Exit(check_command(names or []))


@plugin_app.command("add")
def plugin_add(
    spec: Annotated[str, typer.Argument(help="What pip installs: a name, name==version, a path, a URL.")],
) -> None:
    """pip-install a plugin package into the environment agent-env runs from, then show and check what it adds."""
    from agent_env.cli.plugin_cmd import add_command

    raise typer.Exit(add_command(spec))


@plugin_app.command("remove")
def plugin_remove(dist: Annotated[str, typer.Argument(help="The distribution that provides the plugins.")]) -> None:
    """pip-uninstall a plugin package (only one that provides agent-env plugins, never agent-env itself)."""
    from agent_env.cli.plugin_cmd import remove_command

    raise typer.Exit(remove_command(dist))


@steps_app.command("list")
def steps_list() -> None:
    """Every step type: built-in or plugin, its traits (local, timeout, retries, ...) and what it does."""
    from agent_env.cli.steps_cmd import list_command

    raise typer.Exit(list_command())


@steps_app.command("show")
def steps_show(
    step_type: Annotated[str, typer.Argument(metavar="TYPE", help="A step type, e.g. prompt_agent.")],
) -> None:
    """A step type's config fields (type, default, description) and an example task-file step."""
    from agent_env.cli.steps_cmd import show_command

    raise typer.Exit(show_command(step_type))
