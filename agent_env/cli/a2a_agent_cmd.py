"""`agent-env a2a-agent validate URL`: check that an A2A agent speaks protocol v1's agent side.

The validators run as a task, as the framework runs them: a mail environment of our own is deployed beside the
checks, so `verify_a2a_agent_mcp` has a real MCP server to hand the agent and the gateway's trajectory to read.
The validators are step types found by name in the installed catalog: one that is not installed is skipped, with
a note. Exit 0 only if every required check of every validator passed. The task and the report are
`temporal/validation.py`'s; warm, the background worker runs it all (`cli.main`, before this module loads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from agent_env.cli import aio
from agent_env.errors import BadInput

if TYPE_CHECKING:
    pass

a2a_agent_app = typer.Typer(help="A2A agents: check one speaks agentenv protocol v1.", no_args_is_help=True)


@a2a_agent_app.command("validate")
def validate(
    url: Annotated[str, typer.Argument(help="The agent's A2A URL (its card is at URL/.well-known/agent-card.json).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the reports as one JSON object.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds one task of the agent may take.", min=1)] = 60.0,
) -> None:
    """Validate the A2A agent at URL: its card and the extensions it declares, A2A's core protocol, agent-config,
    modalities, and that it calls an MCP server it is given (a mail environment deployed for the check).
    Prints each validator's report; exit 0 only if every required check passed."""
    raise typer.Exit(validate_command(url, json_out=json_out, timeout_s=timeout))


def validate_command(url: str, *, json_out: bool, timeout_s: float) -> int:
    if not url.startswith(("http://", "https://")):
        raise BadInput(f"{url!r} is not an http(s) URL", "give the agent's base URL, e.g. http://127.0.0.1:9000/")
    from agent_env.cli.env_validate import run_validation
    from agent_env.config import load_settings
    from agent_env.temporal.control_client import ValidateOptions

    options = ValidateOptions("a2a-agent", url, json_out=json_out, timeout_s=timeout_s)
    return aio.run(run_validation(load_settings(), options))
