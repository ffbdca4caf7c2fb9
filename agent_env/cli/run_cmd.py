"""`agent-env run`, `agent-env runs rerun` and `agent-env worker`: their options to the run service
(`temporal/follow.py`) and the worker loop (`temporal/worker.py`).

`run` starts its run and follows it; it never hosts a worker (one would execute every run on the shared task
queue and print their errors). With the embedded server, a background worker (`agent_env.temporal.background`)
runs beside it, so an interrupted `run` leaves its run going; with a cluster, workers are `agent-env worker`
processes run elsewhere. Warm, `run` goes through that worker (`temporal/control_client.py`) before this
module is imported.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agent_env.cli import aio
from agent_env.cli.output import console, not_running_line, notice
from agent_env.config import Settings, load_settings
from agent_env.spec.run import RunInput

if TYPE_CHECKING:
    from agent_env.temporal.bring_up import BringUp


def run_command(
    target: str | None,
    task: str | None,
    *,
    detach: bool,
    json_out: bool,
    models: Sequence[str] = (),
    urls: Sequence[str] = (),
    dry: bool = False,
    evals: Sequence[str] = (),
    concurrency: int = 4,
    agent_artifact_id: str | None = None,
) -> int:
    """`models`/`urls`: `--model`/`--model-url` overrides of the model endpoints, for this run only. `dry`: plan
    the run and show it, starting nothing (no server, worker, gateway or sandbox; the plan and the files it pins
    are kept in the object store, content-addressed, as a run's are). `evals`: the evals to run (`--eval`); a
    bundle with evals runs them all unless a `task` is named (`cli/eval_cmd.py`). `agent_artifact_id`: the registry agent
    (NAME[@VERSION]) every deploy_agent step deploys instead of its own."""
    settings = load_settings()
    install = settings  # what the background worker runs with: the overrides are pinned in this run's plan only
    if models or urls:
        from agent_env.cli.models_cmd import apply_overrides, parse_overrides

        install = settings.model_copy(deep=True)
        apply_overrides(settings, parse_overrides(list(models), list(urls)))
    if evals and task:
        from agent_env.errors import BadInput

        raise BadInput("--task and --eval both name what to run", "give one: a task with --task, or evals with --eval")
    if target is None and not evals:
        return _list_runnables()
    early = None
    if target is not None and not dry:
        from agent_env.temporal import bring_up

        if bring_up.names_a_local_task(target):  # cold, the server and worker start while the run is planned
            early = bring_up.begin(settings, install, notice)
    agent = None
    if agent_artifact_id is not None:
        from agent_env.cli.eval_cmd import agent_artifact

        agent = agent_artifact(settings, agent_artifact_id)
    if task is None:
        from agent_env.task_lookup import evals_to_run

        if specs := evals_to_run(target, evals):
            from agent_env.cli.eval_cmd import run_evals

            return run_evals(
                settings,
                install,
                target,
                specs,
                json_out=json_out,
                detach=detach,
                dry=dry,
                concurrency=concurrency,
                agent=agent,
            )
    assert target is not None
    from agent_env.temporal.follow import plan_target

    inp = plan_target(settings, target, task, agent)
    if dry:
        return _show_plan(inp, json_out)
    return aio.run(_run(settings, inp, detach=detach, json_out=json_out, install=install, early=early))


def rerun_command(run_id: str, *, detach: bool, json_out: bool) -> int:
    """A new run of exactly the plan `run_id` pinned (its records, data, images and model endpoints)."""
    from agent_env.temporal.launch import replan

    settings = load_settings()
    inp = replan(settings, run_id)
    if not json_out:
        notice(f"rerun of {inp.pins['rerun_of']}: plan {inp.pins['plan'][:19]}…, task {inp.pins.get('task')}")
    return aio.run(_run(settings, inp, detach=detach, json_out=json_out, install=settings))


def _show_plan(inp: RunInput, json_out: bool) -> int:
    if json_out:
        print(inp.model_dump_json(include={"task_id", "task_version", "steps", "pins"}))
        return 0
    from rich.markup import escape

    out = console()
    out.print(f"[bold]{escape(inp.task_id)}[/] v{escape(inp.task_version)} · planned, not started (--dry-run)")
    width = max(len(s.id) for s in inp.steps)
    for s in inp.steps:
        after = f"  [dim]after {escape(', '.join(s.depends_on))}[/]" if s.depends_on else ""
        out.print(f"  {escape(s.id.ljust(width))}  {escape(s.type)}{after}")
    pinned = len(inp.pins.get("artifacts", []))
    out.print(f"plan {inp.pins['plan'][:19]}…" + (f", {pinned} pinned file(s)" if pinned else ""))
    return 0


def _list_runnables() -> int:
    from agent_env.bundles import runnables

    rows = runnables()
    out = console()
    out.print("What can run (agent-env run NAME):")
    for r in rows:
        where = "built-in" if r.builtin else str(r.path)
        tasks = f" [dim](tasks: {', '.join(r.tasks)})[/]" if len(r.tasks) > 1 else ""
        out.print(f"  [bold]{r.name}[/]  [dim]{where}[/]{tasks}")
    out.print("Or give the path of a task .toml file. Write your own: `agent-env schema task`.")
    return 0


async def _run(
    settings: Settings,
    inp: RunInput,
    *,
    detach: bool,
    json_out: bool,
    install: Settings,
    early: BringUp | None = None,
) -> int:
    """Bring up what the run needs, start it and follow it on this terminal, under the trace's root span."""
    from agent_env import telemetry
    from agent_env.temporal import follow

    telemetry.setup(settings, "cli")
    with telemetry.span(f"agent-env run {inp.task_id}"):  # the trace's root (a null context when tracing is off)
        wall_start = time.monotonic()
        client = await follow.prepare(settings, inp, install=install, note=notice, early=early)
        term = follow.Terminal(console(), notice, print)
        return await follow.start_and_follow(
            client, settings, inp, detach=detach, json_out=json_out, term=term, wall_start=wall_start
        )


def worker_command(identity: str | None, health_port: int | None = None, health_host: str | None = None) -> int:
    from agent_env.temporal.worker import run_worker

    settings = load_settings()
    if health_port is not None:
        settings.worker.health_port = health_port
    if health_host is not None:
        settings.worker.health_host = health_host
    return aio.run(run_worker(settings, identity, note=notice))


def background_command(action: str) -> int:
    """`agent-env worker start|stop|status`: the background worker of the embedded services."""
    from agent_env.errors import BadInput
    from agent_env.temporal import background

    settings = load_settings()
    queue = settings.temporal.task_queue
    if not settings.embedded:
        if action == "status":
            console().print(
                f"using the Temporal server at {settings.temporal.address}: no background worker; run "
                "`agent-env worker` (in the foreground, under your supervisor) where runs should execute"
            )
            return 0
        raise BadInput(
            "the background worker comes with the embedded Temporal server, and a Temporal address is configured",
            "run `agent-env worker` (in the foreground, under your supervisor) where runs should execute",
        )
    if action == "start":
        from agent_env.temporal_client import server

        server.start(settings, on_notice=notice)
        info, started = background.start(settings, on_notice=notice)
        verb = "started" if started else "already running"
        console().print(f"background worker {verb} (pid {info.pid}) on task queue '{queue}'\n  log: {info.log}")
        return 0
    if action == "stop":
        stopped = background.stop(settings)
        console().print(
            f"stopped the background worker (pid {stopped.pid}); runs in flight wait until a worker runs again"
            if stopped
            else "the background worker was not running"
        )
        return 0
    st = background.status(settings)
    if st.running and st.info:
        fresh = "" if st.current else " — out of date: the next `agent-env run` or `agent-env worker start` replaces it"
        console().print(f"running (pid {st.info.pid}) on task queue '{queue}'{fresh}\n  log: {st.info.log}")
        return 0
    console().print(not_running_line(st.stale_pidfile, "`agent-env worker start`, or just `agent-env run`"))
    return 1
