"""`agent-env runs list|show|cancel`."""

from __future__ import annotations

import asyncio
import json

from agent_env.cli import aio
from agent_env.cli.output import console, notice
from agent_env.config import load_settings
from agent_env.errors import BadInput
from agent_env.spec.run import RunState, RunStatus
from agent_env.temporal.run_view import RUN_STYLE, event_lines, step_line, summary_line


def list_command(limit: int, status: str | None, task: str | None, json_out: bool) -> int:
    from agent_env.stores import keys, open_stores

    if status is not None and status not in {s.value for s in RunStatus}:
        raise BadInput(f"unknown status '{status}'", f"use one of: {', '.join(s.value for s in RunStatus)}")
    settings = load_settings()
    stores = open_stores(settings)
    where = {k: v for k, v in (("status", status), ("task_id", task)) if v}
    records = stores.documents.query(keys.RUNS, where=where, order_by="started_at", descending=True, limit=limit)
    if json_out:
        for r in records:
            print(json.dumps(r))
        return 0
    if not records:
        console().print("no runs yet — try `agent-env run hello`")
        return 0
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    table.add_column("run", no_wrap=True, min_width=max(len(r["run_id"]) for r in records))
    for col in ("task", "status", "score", "started", "took"):
        table.add_column(col, no_wrap=True)
    for r in records:
        state = RunState.model_validate(r)
        took = f"{(state.finished_at - state.started_at).total_seconds():.2f} s" if state.finished_at else ""
        table.add_row(
            state.run_id,
            f"{state.task_id} v{state.task_version}",
            f"[{RUN_STYLE[state.status]}]{state.status.value}[/]",
            "" if state.score is None else f"{state.score:.2f}",
            state.started_at.astimezone().strftime("%Y-%m-%d %H:%M:%S"),
            took,
        )
    console().print(table)
    return 0


def show_command(run_id: str, json_out: bool) -> int:
    from agent_env.temporal.launch import find_run

    settings = load_settings()
    state = RunState.model_validate(find_run(settings, run_id))
    live = False
    if not state.status.finished:
        try:
            state, live = aio.run(_live_state(settings, state.run_id)), True
        except Exception as e:  # noqa: BLE001 - the stored record is still worth showing
            notice(
                f"showing the last recorded state; live state unavailable ({e}). "
                "Is a worker running? Start one with `agent-env worker`."
            )
    if json_out:
        print(json.dumps(state.model_dump(mode="json"), indent=2))
        return 0
    from rich.markup import escape

    out = console()
    out.print(
        f"[bold]{state.task_id}[/] v{state.task_version} · run [bold]{state.run_id}[/]"
        + (" [cyan](live)[/]" if live else "")
    )
    if state.description:
        out.print(f"  [dim]{state.description}[/]")
    out.print(f"  started {state.started_at.astimezone():%Y-%m-%d %H:%M:%S}")
    if url := settings.run_url(state.run_id):
        out.print(f"  [dim]Temporal UI:[/] {url}")
    for line in _pin_lines(state.pins):
        out.print(f"  [dim]{escape(line)}[/]")
    for line in _restorations(settings, state.run_id):
        out.print(f"  [yellow]{escape(line)}[/]")
    width = max(len(s) for s in state.steps)
    type_width = max(len(s.type) for s in state.steps.values())
    for step in state.steps.values():
        out.print(step_line(step, width, type_width))
        if step.outputs:
            out.print(f"      [dim]outputs: {json.dumps(step.outputs)[:300]}[/]")
    for model, row in run_usage(state).items():
        out.print(
            f"  usage {escape(model)}: {row['calls']} calls, {row['input_tokens']} input tokens, "
            f"{row['output_tokens']} output tokens"
        )
    if state.world is not None and state.world.events:
        out.print("  [bold]world[/]")
        for line in event_lines(state):
            out.print("  " + line)
    for hit in _parked_hits(settings, state):
        parked = hit.get("parked") or {}
        out.print(f"  [yellow]trigger hit {hit['hit'].get('trigger')!r} was not delivered: {parked.get('error')}[/]")
    if state.error:
        out.print(f"  [red]{state.error}[/]")
    out.print(summary_line(state))
    return 0


def run_usage(state: RunState) -> dict[str, dict[str, int]]:
    """The tokens a run's model calls used, per model: its steps' and its world's instructed agents'."""
    from agent_env.agents.usage import summed

    world = [e.detail.get("usage") for e in state.world.events] if state.world else []
    return summed([*(s.outputs.get("usage") for s in state.steps.values() if s.outputs), *world])


def _pin_lines(pins: dict) -> list[str]:
    """What the run used, a line per kind (the full digests are in `runs show --json`)."""
    lines = []
    if rerun_of := pins.get("rerun_of"):
        lines.append(f"rerun of {rerun_of}")
    if plan := pins.get("plan"):
        lines.append(f"plan {plan[:19]}… (`agent-env runs rerun` runs it again)")
    for kind in ("envs", "agents", "models", "images"):
        if pins.get(kind):
            lines.append(f"{kind}: " + ", ".join(f"{k} {v}" for k, v in pins[kind].items()))
    if pins.get("artifacts"):
        lines.append(f"artifacts: {len(pins['artifacts'])}")
    return lines


def _restorations(settings, run_id: str) -> list[str]:
    """Instances of the run that a gateway pool rebuilt on another gateway after theirs was lost."""
    from agent_env.gateway_client.placement import Placement
    from agent_env.stores import keys, open_stores

    stores = open_stores(settings)
    try:
        placements = [
            (key.rsplit("/", 1)[-1].removesuffix(".json"), Placement.model_validate_json(stores.objects.get(key)))
            for key in stores.objects.list(keys.placements(run_id))
        ]
    finally:
        stores.close()
    return [
        f"instance {instance}: its gateway {r.lost} was lost; restored on {r.on} at {r.at} "
        f"from {r.snapshot or 'its deploy-time data'}"
        for instance, placement in placements
        for r in placement.restored
    ]


def _parked_hits(settings, state: RunState) -> list[dict]:
    """Hits of the run's triggers that the gateway parked (the run refused them): they never reached the
    run's history, so only the gateway can tell. Nothing when the run had no world or no gateway answers."""
    if state.world is None:
        return []
    from agent_env.gateway.embedded import connect

    async def fetch() -> list[dict]:
        async with connect(settings, start_daemon=False) as client:
            return await client.parked_hits(state.run_id)

    try:
        return aio.run(fetch())
    except Exception:  # noqa: BLE001 - a note on the side: the run's own record is what matters here
        return []


async def _live_state(settings, run_id: str) -> RunState:
    from agent_env.temporal.launch import query_state
    from agent_env.temporal_client.client import connect

    client = await connect(settings, start_server=False)
    return await query_state(client.get_workflow_handle(run_id, result_type=RunState), timeout=3.0)


def cancel_command(run_id: str, wait: bool) -> int:
    from agent_env.temporal.launch import find_run

    settings = load_settings()
    record = find_run(settings, run_id)
    if record["status"] != RunStatus.RUNNING.value:
        raise BadInput(
            f"run {record['run_id']} already ended ({record['status']}); there is nothing to cancel",
            "list running runs with `agent-env runs list --status running`",
        )
    return aio.run(_cancel(settings, record["run_id"], wait))


async def _cancel(settings, run_id: str, wait: bool) -> int:
    from agent_env.temporal.launch import wait_result
    from agent_env.temporal.worker import create_worker
    from agent_env.temporal_client.client import connect

    client = await connect(settings, on_notice=notice)
    handle = client.get_workflow_handle(run_id, result_type=RunState)
    await handle.cancel()
    console().print(f"cancellation of run {run_id} requested")
    if not wait:
        return 0
    # A worker must process the cancellation; run one here in case none is running elsewhere.
    worker = create_worker(client, settings)
    task = asyncio.create_task(worker.run())
    try:
        state = await asyncio.wait_for(wait_result(handle), timeout=60)
    finally:
        task.cancel()
    console().print(summary_line(state))
    return 0


def trajectory_command(run_id: str, jsonl: bool) -> int:
    from agent_env.gateway import trajectory
    from agent_env.stores import keys, open_stores
    from agent_env.temporal.launch import find_run

    settings = load_settings()
    state = RunState.model_validate(find_run(settings, run_id))
    instances = [s.outputs["instance"] for s in state.steps.values() if "instance" in s.outputs]
    if not instances:
        raise BadInput(f"run {state.run_id} deployed no environment, so it has no trajectory")
    stores = open_stores(settings)

    async def fetch(instance: str) -> list[dict]:
        from agent_env.gateway.embedded import connect

        async with connect(settings, start_daemon=False) as client:
            return await client.trajectory(instance)

    from agent_env.gateway_client import GatewayRefused, GatewayUnavailable

    entries: list[dict] = []
    for instance in instances:
        key = keys.trajectory(state.run_id, instance)
        try:  # while the gateway still holds the instance, its copy is the whole of it (calls made since included)
            entries += aio.run(fetch(instance))
            continue
        except (GatewayRefused, GatewayUnavailable, BadInput):
            if not stores.objects.exists(key):
                raise
        # the copy kept when the instance was torn down or its run ended
        entries += trajectory.decode_lines(stores.objects.get(key))
    entries.sort(key=lambda e: (e.get("real_time", ""), e.get("seq", 0)))
    if jsonl:
        for entry in entries:
            print(json.dumps(entry, ensure_ascii=False))
        return 0
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("virtual time", "agent", "role", "tool", "arguments", "outcome", "ms"):
        table.add_column(col, no_wrap=col not in ("arguments", "outcome"), overflow="fold")
    for e in entries:
        outcome = (
            f"[yellow]{escape(e['unreadable'])}[/]"  # an entry that could not be read back: said, not skipped
            if "unreadable" in e
            else f"[red]refused: {e['error']}[/]"
            if e.get("refused")
            else f"[red]{e['error']}[/]"
            if "error" in e
            else json.dumps(e.get("result"), ensure_ascii=False)
        )
        table.add_row(
            e.get("virtual_time", ""),
            e.get("agent", ""),
            e.get("role", ""),
            e.get("tool", ""),
            json.dumps(e.get("arguments"), ensure_ascii=False)[:120] if "arguments" in e else "",
            outcome[:160],
            f"{e['duration_ms']:.1f}" if "duration_ms" in e else "",
        )
    console().print(table)
    console().print(f"{len(entries)} calls")
    return 0
