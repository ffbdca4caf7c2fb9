"""What the Temporal UI shows of a run: each activity's summary, the run's static summary and details, and its
current details (the running steps, the virtual time, what the run waits for).

Summaries are user metadata on commands: the server records them with the event, replay ignores them, so a
change here changes no run's commands. Current details live in the worker's memory and are read through the
`__temporal_workflow_metadata` query (the UI's "current details"): setting them costs no workflow task and no
history event. Everything here is bounded and names things only (ids, types, times): never arguments, outputs
or secrets.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from agent_env.spec.run import RunInput, RunState
from agent_env.spec.times import iso

if TYPE_CHECKING:
    from agent_env.workflows.world_rules import World

MAX_SUMMARY = 200  # characters of one summary (the UI shows one line)
MAX_LISTED = 20  # steps listed in details; the rest are counted
MAX_DESCRIPTION = 1000
MAX_DETAILS = 8000  # characters of the static details


def summary(text: str) -> str:
    """One short line: newlines flattened, cut to MAX_SUMMARY."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_SUMMARY else line[: MAX_SUMMARY - 1] + "…"


def step_summary(step_id: str, step_type: str) -> str:
    return summary(f"{step_id} ({step_type})")


def static_summary(inp: RunInput) -> str:
    """The run's one line: task, version, what it is a rerun of."""
    rerun = f" (rerun of {inp.pins['rerun_of']})" if inp.pins.get("rerun_of") else ""
    return summary(f"{inp.task_id} v{inp.task_version}{rerun}")


def static_details(inp: RunInput) -> str:
    """The run's fixed details (markdown): the task, its description, its steps (what each comes after), its
    triggers. Bounded: a long description is cut, long lists are counted."""
    description = inp.description.strip()
    if len(description) > MAX_DESCRIPTION:
        description = description[: MAX_DESCRIPTION - 1] + "…"
    lines = [f"**Task** `{inp.task_id}` version `{inp.task_version}`", ""]
    if description:
        lines += [description, ""]
    lines.append(f"**Steps** ({len(inp.steps)})")
    for plan in inp.steps[:MAX_LISTED]:
        after = f" after {', '.join(f'`{d}`' for d in plan.depends_on[:5])}" if plan.depends_on else ""
        lines.append(f"- {step_summary(f'`{plan.id}`', plan.type)}{after}")
    if len(inp.steps) > MAX_LISTED:
        lines.append(f"- … and {len(inp.steps) - MAX_LISTED} more")
    triggers = inp.world.triggers if inp.world is not None else []
    if triggers:
        named = ", ".join(f"`{t.id}`" for t in triggers[:MAX_LISTED])
        more = f" and {len(triggers) - MAX_LISTED} more" if len(triggers) > MAX_LISTED else ""
        lines += ["", f"**Triggers** ({len(triggers)}) {named}{more}"]
    text = "\n".join(lines)
    return text if len(text) <= MAX_DETAILS else text[: MAX_DETAILS - 1] + "…"


def current_details(
    state: RunState, running: list[str], world: World | None, real: datetime, trainer_turns: list[str]
) -> str:
    """The run right now (markdown): its running steps and since when, the virtual time, what it waits for."""
    lines = [f"**Running** {len(running) or 'nothing'}"]
    for step_id in running[:MAX_LISTED]:
        step = state.steps[step_id]
        since = f" since {iso(step.started_at)}" if step.started_at else ""
        lines.append(f"- {step_summary(f'`{step_id}`', step.type)}{since}")
    if len(running) > MAX_LISTED:
        lines.append(f"- … and {len(running) - MAX_LISTED} more")
    clock = world.state.clock if world is not None else None
    if world is not None and clock is not None:
        zone = f", zone {clock.zone}" if clock.zone else ""
        rate = f" × {clock.rate:g}" if clock.mode == "paced" else ""
        lines.append(f"\n**Virtual time** {iso(world.now(real))} ({clock.mode}{rate}{zone}, as of {iso(real)})")
    waits = [f"step `{sid}`" for sid in running[:5]] + [f"the trainer's turn `{t}`" for t in trainer_turns[:5]]
    if world is not None and world.state.queue:
        head = world.state.queue[0]
        what = {"trigger": f"trigger `{head.trigger}`", "action": f"a delayed action of trigger `{head.trigger}`"}
        waits.append(summary(f"the clock: {what.get(head.kind, f'step `{head.step}` wakes')} at {iso(head.at)}"))
    if world is not None and world.state.ended:
        waits = ["the run to end (the world ended)"]
    if waits:
        lines.append("\n**Waiting for** " + "; ".join(waits))
    return "\n".join(lines)


def finished_details(state: RunState) -> str:
    score = f", score {state.score:g}" if state.score is not None else ""
    ended = f" at {iso(state.finished_at)}" if state.finished_at else ""
    return f"**Finished** {state.status.value}{score}{ended}"
