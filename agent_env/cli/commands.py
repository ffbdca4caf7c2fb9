"""Command definitions. Bodies live in sibling modules, imported only when the command runs."""

from __future__ import annotations

from typing import Annotated

import typer

from agent_env.cli.a2a_agent_cmd import a2a_agent_app
from agent_env.cli.agents_app import agents_app
from agent_env.cli.docs_cmd import docs_app
from agent_env.cli.episodes_cmd import episodes_app
from agent_env.cli.evals_app import eval_app
from agent_env.cli.setup_commands import (
    bundle_app,
    config_app,
    models_app,
    plugin_app,
    registry_app,
    secrets_app,
    steps_app,
)
from agent_env.cli.task_cmd import task_app
from agent_env.cli.universes_app import artifact_app, universe_app

app = typer.Typer(
    name="agent-env",
    help="agent-env: durable environments, tasks and grading for AI agents, on Temporal.\n\n"
    "Start with `agent-env run hello`. Exit codes: 0 success or run passed, 1 run failed or errored, "
    "2 bad input, 3 Temporal server problem, 130 interrupted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# Options that `run` and `runs rerun` share.
Detach = Annotated[
    bool,
    typer.Option(
        "--detach",
        "-d",
        help="Start the run and return; the background worker (embedded server) or a worker elsewhere "
        "(`agent-env worker`) executes it.",
    ),
]
FinalJson = Annotated[bool, typer.Option("--json", help="Print the final run record as JSON.")]

runs_app = typer.Typer(help="List, inspect and cancel runs.", no_args_is_help=True)
server_app = typer.Typer(
    help="The embedded Temporal dev server (used when no address is configured).", no_args_is_help=True
)
env_app = typer.Typer(help="Environments: serve an app on its own, validate one.", no_args_is_help=True)
gateway_app = typer.Typer(help="The embedded gateway (used when no [gateway] url is configured).", no_args_is_help=True)
tools_app = typer.Typer(help="An environment instance's tools, called as one of its agents.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")
app.add_typer(server_app, name="server")
app.add_typer(env_app, name="env")
app.add_typer(gateway_app, name="gateway")
app.add_typer(tools_app, name="tools")
app.add_typer(secrets_app, name="secrets")
app.add_typer(models_app, name="models")
app.add_typer(agents_app, name="agents")
sandboxes_app = typer.Typer(
    help="Sandboxes (containers, processes, cloud VMs) that runs started for their envs and agents.",
    no_args_is_help=True,
)
app.add_typer(sandboxes_app, name="sandboxes")
app.add_typer(episodes_app, name="episodes")
app.add_typer(docs_app, name="docs")
app.add_typer(config_app, name="config")
app.add_typer(registry_app, name="registry")
app.add_typer(universe_app, name="universe")
app.add_typer(artifact_app, name="artifact")
app.add_typer(bundle_app, name="bundle")
app.add_typer(eval_app, name="eval")
app.add_typer(a2a_agent_app, name="a2a-agent")
app.add_typer(task_app, name="task")


def _version(value: bool) -> None:
    if value:
        from agent_env import __version__

        print(f"agent-env {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    pass


@app.command()
def run(
    target: Annotated[str | None, typer.Argument(help="Bundle (name or folder) or task file; omit to list")] = None,
    task: Annotated[str | None, typer.Option("--task", "-t", help="Which task of a bundle with several.")] = None,
    detach: Detach = False,
    json_out: FinalJson = False,
    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            metavar="PURPOSE=NAME",
            help="Use this model name for this run only; PURPOSE is default, agent, "
            "persona or judge (a bare NAME is for default, which serves purposes without their own [models.PURPOSE]). "
            "Repeatable.",
        ),
    ] = None,
    model_url: Annotated[
        list[str] | None,
        typer.Option(
            "--model-url", metavar="PURPOSE=URL", help="Use this endpoint base URL for this run only (like --model)."
        ),
    ] = None,
    dry: Annotated[bool, typer.Option("--dry-run", help="Check and plan the task, show it; start nothing.")] = False,
    evals: Annotated[
        list[str] | None,
        typer.Option("--eval", help="Run evals/NAME.toml, else the registry's NAME[@VERSION]. Repeatable."),
    ] = None,
    concurrency: Annotated[int, typer.Option("--max-concurrency", min=1, max=64, help="An eval's runs at a time.")] = 4,
    agent_artifact_id: Annotated[
        str | None,
        typer.Option(
            "--agent-artifact-id",
            metavar="NAME[@VERSION]",
            help="Every deploy_agent step deploys this registry agent (its image) instead of its own.",
        ),
    ] = None,
) -> None:
    """Run a task and show its steps, result and scores. Exit 0 when the run passes.

    A bundle with evals/ runs its evals (--eval NAME: one) unless --task names a task: a run per task, then a
    table of scores, mean and pass rate (exit 0 when all pass).

    The run executes in Temporal; this command follows it and prints its progress and outcome only. With the
    embedded server, a background worker executes it (started on demand: `agent-env worker status`), so an
    interrupted `run` leaves the run going (`agent-env runs show ID`, `agent-env runs cancel ID`). With a
    cluster, workers run elsewhere (`agent-env worker`); with none polling, the run waits, durably.
    """
    from agent_env.cli.run_cmd import run_command

    raise typer.Exit(
        run_command(
            target,
            task,
            detach=detach,
            json_out=json_out,
            models=model or [],
            urls=model_url or [],
            dry=dry,
            evals=evals or [],
            concurrency=concurrency,
            agent_artifact_id=agent_artifact_id,
        )
    )


worker_app = typer.Typer(
    help="Run a worker in the foreground, or manage the background worker of the embedded services.\n\n"
    "`agent-env worker [--identity ...]` runs a worker in this process until SIGTERM or Ctrl-C: the way to run "
    "workers for a Temporal cluster (under your supervisor). `agent-env worker start|stop|status` manage the "
    "background worker that comes with the embedded server: `agent-env run` starts it on demand, `agent-env server "
    "stop` stops it too.",
    invoke_without_command=True,
)
app.add_typer(worker_app, name="worker")


@worker_app.callback()
def worker(
    ctx: typer.Context,
    identity: Annotated[str | None, typer.Option(help="Name shown for this worker in Temporal.")] = None,
    health_port: Annotated[
        int | None,
        typer.Option(
            help="Serve /healthz, /readyz and /metrics (the Temporal SDK's worker metrics) on this port "
            "([worker] health_port; 0: off)."
        ),
    ] = None,
    health_host: Annotated[
        str | None,
        typer.Option(help="The address the health port binds ([worker] health_host; 0.0.0.0 in a container)."),
    ] = None,
) -> None:
    """Run a worker in this process that executes runs (including paused ones) until interrupted.

    SIGTERM or Ctrl-C drains it: no new tasks, running steps finish within [worker] drain_timeout (else they
    go back to Temporal for another worker), then it exits 0. A second signal stops it at once."""
    if ctx.invoked_subcommand is not None:
        return
    from agent_env.cli.run_cmd import worker_command

    raise typer.Exit(worker_command(identity, health_port, health_host))


@worker_app.command("start")
def worker_start() -> None:
    """Start the background worker of the embedded services (and the server), or reuse the running one.

    One per task queue, logging under the state dir. It runs the code and settings it started with; when they
    changed, the next start (or `agent-env run`) replaces it: the old one drains, a new one starts."""
    from agent_env.cli.run_cmd import background_command

    raise typer.Exit(background_command("start"))


@worker_app.command("stop")
def worker_stop() -> None:
    """Stop (drain) the background worker. Runs in flight wait, paused, until a worker runs again."""
    from agent_env.cli.run_cmd import background_command

    raise typer.Exit(background_command("stop"))


@worker_app.command("status")
def worker_status() -> None:
    """Show whether the background worker runs, on which task queue, whether it is up to date. Exit 1 if not."""
    from agent_env.cli.run_cmd import background_command

    raise typer.Exit(background_command("status"))


@app.command()
def up(
    port: Annotated[int, typer.Option(help="The explorer's port on 127.0.0.1 (0: any free port).")] = 8234,
    open_browser: Annotated[bool, typer.Option("--open/--no-open", help="Open the one-time link in a browser.")] = True,
) -> None:
    """Start what is not running (the embedded Temporal server, gateway and background worker) and serve the
    explorer.

    The explorer is a web page on 127.0.0.1 showing runs (filter by task, status, score, time; live while they
    go), each run's steps, world timeline in virtual time, tool calls, conversations, scores and artifacts, and
    the registry. Only you get in: open the one-time link printed here (it works once, for 5 minutes; press
    Enter for a new one). With a Temporal cluster, a worker runs in this process unless one already polls the
    task queue. Ctrl-C stops the explorer (and that worker); the server, gateway and background worker keep
    running (`agent-env server stop` stops them)."""
    from agent_env.cli.up_cmd import up_command

    raise typer.Exit(up_command(port, open_browser))


@app.command()
def schema(
    what: Annotated[str, typer.Argument(help="task | config | run")] = "task",
) -> None:
    """Print the JSON Schema of task files (with every step type's config), the config file, or a run record."""
    from agent_env.cli.misc_cmd import schema_command

    raise typer.Exit(schema_command(what))


@runs_app.command("list")
def runs_list(
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="How many, newest first.")] = 20,
    status: Annotated[str | None, typer.Option(help="Only runs with this status (passed, failed, error, ...).")] = None,
    task: Annotated[str | None, typer.Option("--task", "-t", help="Only runs of this task id.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """List recent runs recorded in this install's store."""
    from agent_env.cli.runs_cmd import list_command

    raise typer.Exit(list_command(limit, status, task, json_out))


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="Run id, or a unique prefix of it.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the run record as JSON.")] = False,
) -> None:
    """Show a run: status, per-step results, outputs and scores (live if it is still running)."""
    from agent_env.cli.runs_cmd import show_command

    raise typer.Exit(show_command(run_id, json_out))


@runs_app.command("rerun")
def runs_rerun(
    run_id: Annotated[str, typer.Argument(help="Run id, or a unique prefix of it.")],
    detach: Detach = False,
    json_out: FinalJson = False,
) -> None:
    """Run again exactly what a run used: the plan it pinned (task, env and agent records, data, images,
    model endpoints, seed), read from the stores. Works after the bundle folder changed, and on any install
    sharing the stores. Exit 0 when the new run passes."""
    from agent_env.cli.run_cmd import rerun_command

    raise typer.Exit(rerun_command(run_id, detach=detach, json_out=json_out))


@runs_app.command("cancel")
def runs_cancel(
    run_id: Annotated[str, typer.Argument(help="Run id, or a unique prefix of it.")],
    wait: Annotated[bool, typer.Option(help="Wait until the run has recorded its cancellation.")] = True,
) -> None:
    """Cancel a running run: running steps are cancelled, the rest skipped, the run recorded as cancelled."""
    from agent_env.cli.runs_cmd import cancel_command

    raise typer.Exit(cancel_command(run_id, wait))


@server_app.command("start")
def server_start() -> None:
    """Start the embedded Temporal dev server in the background (reused if already running)."""
    from agent_env.cli.misc_cmd import server_start_command

    raise typer.Exit(server_start_command())


@server_app.command("stop")
def server_stop() -> None:
    """Stop the embedded Temporal dev server. Runs are kept and resume when it starts again."""
    from agent_env.cli.misc_cmd import server_stop_command

    raise typer.Exit(server_stop_command())


@server_app.command("status")
def server_status() -> None:
    """Show whether the embedded server runs, where, and where its data and log are. Exit 1 if stopped."""
    from agent_env.cli.misc_cmd import server_status_command

    raise typer.Exit(server_status_command())


@env_app.command("serve")
def env_serve(
    target: Annotated[
        str, typer.Argument(help="A built-in app (notes, mail, chat, helpdesk, billing) or MODULE:Class.")
    ],
    host: Annotated[
        str,
        typer.Option(
            envvar="MCP_HOST",
            help="Address to bind. Anything but 127.0.0.1 "
            "without --token exposes an unauthenticated data plane to the network.",
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="MCP_PORT", help="Port to bind.")] = 18765,
    state: Annotated[
        str | None, typer.Option(help="Folder of the instance's state (default: under the state directory, per app).")
    ] = None,
    data_root: Annotated[
        str | None,
        typer.Option(help="Folder that data/add may read file:// URIs from (default: none; send data inline)."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            help="Require 'Authorization: Bearer TOKEN' on every request but "
            "/ready (default: $AGENT_ENV_SERVER_TOKEN, else none). Prefer the "
            "variable: `ps` shows a command line to every local user."
        ),
    ] = None,
) -> None:
    """Serve one app alone: MCP at /mcp, its card at /.well-known/agent-env.json, its data plane at /agentenv.

    Without a token it is open to every local process (protocol-v1 clients send no auth): keep it on
    127.0.0.1. It has no roles: every tool, hidden ones too, is served to every caller, and a role a
    caller claims in `_meta` only labels what it writes. Requests naming another Host, from another
    site's page (Origin) or with a text/plain or form body are refused. The gateway starts its
    `run = "subprocess"` apps with a token only it holds.
    """
    from agent_env.cli.env_cmd import serve_command

    raise typer.Exit(serve_command(target, host, port, state, data_root, token))


@env_app.command("validate")
def env_validate(
    target: Annotated[
        str, typer.Argument(help="An env server's URL, or an env's name: the bundle's, built-in, or registry's.")
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print the reports as JSON.")] = False,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Skip the checks that change the env's data (data/reset).")
    ] = False,
    bundle: Annotated[
        str | None, typer.Option(help="The bundle folder whose envs/ holds TARGET (default: the working directory).")
    ] = None,
) -> None:
    """Check that an environment speaks agentenv protocol v1: its card, its data plane, its MCP tools.

    A named environment is deployed by a run and checked through the gateway; a URL is checked where it is, sent
    no credential. Prints each check (✓, or ✗ with the fix); exits 0 only if every required check passed."""
    from agent_env.cli.env_validate import validate_command

    raise typer.Exit(validate_command(target, json_out=json_out, read_only=read_only, bundle=bundle))


@gateway_app.command("start")
def gateway_start() -> None:
    """Start the embedded gateway in the background (reused if already running)."""
    from agent_env.cli.misc_cmd import gateway_command

    raise typer.Exit(gateway_command("start"))


@gateway_app.command("stop")
def gateway_stop() -> None:
    """Stop the embedded gateway. Instances and their data are kept and served again when it starts."""
    from agent_env.cli.misc_cmd import gateway_command

    raise typer.Exit(gateway_command("stop"))


@gateway_app.command("status")
def gateway_status() -> None:
    """Show whether the embedded gateway runs and where. Exit 1 if stopped."""
    from agent_env.cli.misc_cmd import gateway_command

    raise typer.Exit(gateway_command("status"))


@tools_app.command("list")
def tools_list(
    instance: Annotated[str, typer.Argument(help="Instance id (RUN_ID.STEP_ID, or a unique part of it).")],
    agent: Annotated[str | None, typer.Option("--as", help="Act as this agent (default: the only one).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the tools as JSON.")] = False,
) -> None:
    """List the tools an agent of an instance sees."""
    from agent_env.cli.tools_cmd import list_command

    raise typer.Exit(list_command(instance, agent, json_out))


@tools_app.command(
    "call", context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
)
def tools_call(
    ctx: typer.Context,
    instance: Annotated[str, typer.Argument(help="Instance id (RUN_ID.STEP_ID, or a unique part of it).")],
    tool: Annotated[str, typer.Argument(help="The tool; then its arguments as --name value (--help lists them).")],
    agent: Annotated[str | None, typer.Option("--as", help="Act as this agent (default: the only one).")] = None,
    raw_json: Annotated[str | None, typer.Option("--json", help="All arguments as one JSON object.")] = None,
) -> None:
    """Call a tool as an agent: `agent-env tools call INSTANCE write_note --key ada --text Hi`."""
    from agent_env.cli.tools_cmd import call_command

    raise typer.Exit(call_command(instance, tool, agent, raw_json, list(ctx.args)))


@tools_app.command("token")
def tools_token(
    instance: Annotated[str, typer.Argument(help="Instance id.")],
    agent: Annotated[str, typer.Argument(help="The agent whose role token to print.")],
) -> None:
    """Print an agent's role token (for MCP clients: Authorization: Bearer <token>)."""
    from agent_env.cli.tools_cmd import token_command

    raise typer.Exit(token_command(instance, agent))


@runs_app.command("trajectory")
def runs_trajectory(
    run_id: Annotated[str, typer.Argument(help="Run id, or a unique prefix of it.")],
    jsonl: Annotated[bool, typer.Option("--jsonl", help="Print every entry as a JSON line.")] = False,
) -> None:
    """Every tool call the run's environments received: who, role, tool, arguments, result, times."""
    from agent_env.cli.runs_cmd import trajectory_command

    raise typer.Exit(trajectory_command(run_id, jsonl))


@sandboxes_app.command("list")
def sandboxes_list(
    run: Annotated[str | None, typer.Option("--run", help="Only this run's sandboxes.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the sandboxes as JSON.")] = False,
) -> None:
    """List this install's sandboxes on every usable provider: provider, id, run, owner, status, expiry, and
    whether the reaper would remove it (its run is over, or it is past its TTL)."""
    from agent_env.cli.sandboxes_cmd import list_command

    raise typer.Exit(list_command(run, json_out))


@sandboxes_app.command("reap")
def sandboxes_reap(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be removed.")] = False,
    everything: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Remove every sandbox of this install, even of running "
            "runs (other installs' sandboxes are never touched).",
        ),
    ] = False,
) -> None:
    """Remove sandboxes whose run is over (ended, failed, cancelled, terminated, timed out or unknown) or
    that are past their TTL. Workers do this every [sandboxes] reap_every seconds."""
    from agent_env.cli.sandboxes_cmd import reap_command

    raise typer.Exit(reap_command(dry_run, everything))


app.add_typer(plugin_app, name="plugin")
app.add_typer(steps_app, name="steps")
