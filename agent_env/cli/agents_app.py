"""`agent-env agents`: the command group's surface (its work is in `agents_cmd`, imported when a command runs)."""

from __future__ import annotations

from typing import Annotated

import typer

agents_app = typer.Typer(
    help="The gateway's hosted agents, and the turns waiting for a person to answer.", no_args_is_help=True
)


@agents_app.command("list")
def agents_list(
    json_out: Annotated[bool, typer.Option("--json", help="Print the agents as JSON.")] = False,
) -> None:
    """List the agents the gateway hosts (deployed by runs)."""
    from agent_env.cli.agents_cmd import list_command

    raise typer.Exit(list_command(json_out))


@agents_app.command("pending")
def agents_pending(
    json_out: Annotated[bool, typer.Option("--json", help="Print the turns as JSON.")] = False,
) -> None:
    """List the turns waiting for a person (human agents): id, agent, when asked, prompt."""
    from agent_env.cli.agents_cmd import pending_command

    raise typer.Exit(pending_command(json_out))


@agents_app.command("answer")
def agents_answer(
    turn_id: Annotated[
        str,
        typer.Argument(help="The turn's id (or a unique prefix, or the agent's name when it has one turn waiting)."),
    ],
    text: Annotated[str, typer.Argument(help="What the person answers (a review: the reviewer's comment).")],
    score: Annotated[float | None, typer.Option(min=0, max=1, help="A review's score, 0..1.")] = None,
    abort: Annotated[
        bool, typer.Option("--abort", help="A review's verdict: abort the run (default: continue).")
    ] = False,
) -> None:
    """Answer a turn waiting for a person, or decide a review; the run that asked continues."""
    from agent_env.cli.agents_cmd import answer_command

    raise typer.Exit(answer_command(turn_id, text, score=score, abort=abort))
