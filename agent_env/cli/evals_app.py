"""`agent-env eval`: the command group's surface (its work is in `eval_cmd`, imported when a command runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

eval_app = typer.Typer(
    help="Evals in the registry: versioned sets of task references. Make one from a JSON file of references, add "
    "tasks to it (each change a new version), run its tasks and see each task's score and the aggregate.",
    no_args_is_help=True,
)

RefsFile = Annotated[
    Path,
    typer.Argument(
        metavar="FILEPATH",
        help='A JSON list of task references: [{"task_id": "NAME", "task_version": N}, {"task_id": "OTHER"}] '
        "(no task_version: the latest when the eval runs).",
    ),
]
EvalId = Annotated[str, typer.Option("--id", help="The eval's id.")]
EvalVersion = Annotated[int | None, typer.Option("--version", min=1, help="The eval's version (default: the latest).")]


@eval_app.command("create")
def eval_create(filepath: RefsFile, eval_id: EvalId) -> None:
    """Make a new version of an eval (its first, for a new id) from a JSON file of task references. Each task
    must be in the registry (`agent-env registry push FOLDER`), at its task_version when one is given."""
    from agent_env.cli.eval_cmd import create_command

    raise typer.Exit(create_command(filepath, eval_id))


@eval_app.command("add-tasks")
def eval_add_tasks(filepath: RefsFile, eval_id: EvalId, version: EvalVersion = None) -> None:
    """Make a new version of an eval: the tasks of --version (the latest) with those in the file added. A task
    the eval already names is replaced by the file's reference, so each task is listed once."""
    from agent_env.cli.eval_cmd import add_tasks_command

    raise typer.Exit(add_tasks_command(filepath, eval_id, version))


@eval_app.command("run")
def eval_run(
    eval_id: EvalId,
    version: EvalVersion = None,
    k: Annotated[int, typer.Option("--k", min=1, max=100, help="Runs of each task (the table shows pass@k).")] = 1,
    concurrency: Annotated[int, typer.Option("--max-concurrency", min=1, max=64, help="Runs at a time.")] = 4,
    output_dir: Annotated[
        Path | None,
        typer.Option("--output-dir", file_okay=False, help="Write each run's result (its final state) as JSON here."),
    ] = None,
    agent_model: Annotated[
        str | None, typer.Option("--agent-model", help="The agent's model for these runs (`run --model agent=M`).")
    ] = None,
    user_model: Annotated[
        str | None,
        typer.Option("--user-model", help="The simulated user's model for these runs (`run --model persona=M`)."),
    ] = None,
    judge_model: Annotated[
        str | None, typer.Option("--judge-model", help="The judge's model for these runs (`run --model judge=M`).")
    ] = None,
    agent_artifact_id: Annotated[
        str | None,
        typer.Option(
            "--agent-artifact-id",
            help="NAME[@VERSION]: every deploy_agent step deploys this registry agent (its image) instead.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the table as JSON.")] = False,
) -> None:
    """Run every task of an eval from the registry (--k times each, at most --max-concurrency at a time), each a
    task run like `agent-env run`'s, then a table: each run's status and score, each task's mean and pass@k, and
    the aggregate. Exit 0 when every run passed."""
    from agent_env.cli.eval_cmd import EvalRunOptions, run_registry_eval

    raise typer.Exit(
        run_registry_eval(
            EvalRunOptions(
                eval_id=eval_id,
                version=version,
                k=k,
                concurrency=concurrency,
                output_dir=output_dir,
                models={"agent": agent_model, "persona": user_model, "judge": judge_model},
                agent_artifact_id=agent_artifact_id,
                json_out=json_out,
            )
        )
    )
