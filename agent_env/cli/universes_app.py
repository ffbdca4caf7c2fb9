"""`agent-env universe` and `agent-env artifact`: the command groups' surface (their work is in `universe_cmd`,
imported when a command runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

universe_app = typer.Typer(
    help="Universes: named sets of environment artifacts (each one app's data) in the registry, loaded together "
    "into one composed environment (load_artifact with env_id, or the universe validator's round trip) and "
    "exported back (snapshot_env with snapshot_id) as their next versions.",
    no_args_is_help=True,
)
artifact_app = typer.Typer(
    help="New versions of an artifact in the registry, from local files or what a run kept, with their lineage.",
    no_args_is_help=True,
)


@universe_app.command("create")
def universe_create(
    name: Annotated[str, typer.Argument(help="The universe's name (its next version is made).")],
    environment_artifacts: Annotated[
        list[str], typer.Argument(help="Environment artifacts, NAME or NAME@VERSION (latest when none): one per app.")
    ],
    description: Annotated[str | None, typer.Option(help="What the universe is.")] = None,
) -> None:
    """Make a new version of a universe over environment artifacts, each pinned to its version."""
    from agent_env.cli.universe_cmd import create_command

    raise typer.Exit(create_command(name, environment_artifacts, description))


@universe_app.command("list")
def universe_list(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """List the universes: latest version, how many versions, the environment artifacts it pins."""
    from agent_env.cli.universe_cmd import list_command

    raise typer.Exit(list_command(json_out))


@universe_app.command("show")
def universe_show(
    ref: Annotated[str, typer.Argument(help="NAME (its latest version) or NAME@VERSION; an environment artifact too.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print it as JSON.")] = False,
) -> None:
    """Show a universe: each app's environment artifact and tables (rows), and its lineage (the run that made it)."""
    from agent_env.cli.universe_cmd import show_command

    raise typer.Exit(show_command(ref, json_out))


@artifact_app.command("push")
def artifact_push(
    name: Annotated[str, typer.Argument(help="The artifact's name: its next version is made (1 for a new one).")],
    paths: Annotated[list[Path] | None, typer.Argument(help="Its files or folders (or give --run).")] = None,
    run: Annotated[str | None, typer.Option("--run", help="Take what this run kept (its lineage names it).")] = None,
    output: Annotated[
        str,
        typer.Option(help="With --run: what of the run's folder (artifacts: collect_artifacts'; a file or a folder)."),
    ] = "artifacts",
    environment_name: Annotated[
        str | None, typer.Option(help="An environment artifact: the app whose data its one JSON file is.")
    ] = None,
    parent: Annotated[
        list[str] | None, typer.Option("--from", help="An artifact version it was made from (repeatable).")
    ] = None,
    description: Annotated[str | None, typer.Option(help="What it is.")] = None,
) -> None:
    """Push a new version of an artifact, from local files or from a run's output (with its lineage)."""
    from agent_env.cli.universe_cmd import push_command

    raise typer.Exit(push_command(name, paths or [], run, output, environment_name, parent or [], description))
