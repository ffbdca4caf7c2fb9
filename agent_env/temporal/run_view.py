"""How a run looks on a terminal: its steps, its outcome, the world's log, and progress while it runs (rich
markup, printed by `agent-env run` and `agent-env runs`, or by the background worker for a command's terminal)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from agent_env.spec.run import RunState, RunStatus, StepState, StepStatus
from agent_env.spec.times import iso

if TYPE_CHECKING:
    from rich.console import Console

    from agent_env.config import Settings

ICONS = {
    StepStatus.SUCCEEDED: ("✓", "green"),
    StepStatus.FAILED: ("✗", "red"),
    StepStatus.SKIPPED: ("-", "yellow"),
    StepStatus.CANCELLED: ("⊘", "yellow"),
    StepStatus.RUNNING: ("…", "cyan"),
    StepStatus.PENDING: (" ", "white"),
}
RUN_STYLE = {
    RunStatus.PASSED: "bold green",
    RunStatus.FAILED: "bold red",
    RunStatus.ERROR: "bold red",
    RunStatus.CANCELLED: "bold yellow",
    RunStatus.RUNNING: "bold cyan",
}


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return ""
    return f"{ms:.0f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


def step_line(step: StepState, width: int, type_width: int = 0, *, criteria: str = "all") -> str:
    """One step: status, id, type, time, score; then its error and its score's criteria, one per line
    (`criteria="failed"`: only the failed ones, as live progress shows them)."""
    icon, color = ICONS[step.status]
    line = f"  [{color}]{icon}[/] {escape(step.id):<{width}}  [dim]{escape(step.type):<{type_width}}[/]"
    if step.status is StepStatus.SUCCEEDED and step.started_at and step.finished_at:
        line += f"  [dim]{fmt_ms((step.finished_at - step.started_at).total_seconds() * 1000)}[/]"
    if step.attempts > 1:
        line += f"  [yellow]({step.attempts} attempts)[/]"
    if step.score is not None:
        passed = sum(c.passed for c in step.score.criteria)
        color = "green" if step.score.passed else "red"
        line += f"  [{color}]score {step.score.value:.2f}[/] ({passed}/{len(step.score.criteria)})"
    if step.error and step.status is not StepStatus.SKIPPED:
        line += f"\n      [red]{escape(step.error)}[/]"
    elif step.error:
        line += f"  [dim]{escape(step.error)}[/]"
    if step.score is not None:
        for c in step.score.criteria:
            weight = f" [dim](weight {c.weight:g})[/]" if c.weight != 1 else ""
            if not c.passed:
                line += f"\n      [red]✗ {escape(c.name)}[/]{weight}: {escape(c.detail)}"
            elif criteria == "all":
                line += f"\n      [green]✓[/] {escape(c.name)}{weight}" + (
                    f": [dim]{escape(c.detail)}[/]" if c.detail else ""
                )
    return line


def summary_line(state: RunState, wall: float | None = None) -> str:
    style = RUN_STYLE[state.status]
    parts = [f"[{style}]{state.status.value.upper()}[/]"]
    if state.score is not None:
        parts.append(f"score {state.score:.2f}")
    if wall is not None:
        parts.append(f"{wall:.2f} s")
    elif state.finished_at:
        parts.append(f"{(state.finished_at - state.started_at).total_seconds():.2f} s")
    if state.world is not None and state.world.clock is not None and state.world.events:
        fired = sum(e.kind == "fired" for e in state.world.events)
        parts.append(
            f"world at {iso(max(state.world.clock.virtual_anchor, state.world.events[-1].virtual_time))}, "
            f"{fired} firings"
        )
    parts.append(f"run {state.run_id}")
    return " · ".join(parts)


def event_lines(state: RunState, limit: int | None = None) -> list[str]:
    """The world's log, one line per event: virtual time, what happened, why."""
    if state.world is None:
        return []
    lines = []
    for e in state.world.events[-limit:] if limit else state.world.events:
        d = e.detail
        if e.kind == "fired":
            what = f"[bold]{e.trigger}[/] fired"
            match = d.get("match", {})
            if "tool" in match:
                what += f" [dim]({match.get('agent')} called {match['tool']})[/]"
        elif e.kind == "action":
            target = d.get("tool") or d.get("role") or d.get("type")
            outcome = f"[red]{escape(str(d['error']))}[/]" if "error" in d else "[green]ok[/]"
            what = f"  → {d.get('type')} {target}" + (f" as {d['agent']}" if d.get("agent") else "") + f": {outcome}"
        elif e.kind == "clock":
            what = f"clock {d.get('mode')}" + (f" ×{d['rate']:g}" if d.get("mode") == "paced" else "")
        elif e.kind in ("registered", "cancelled"):
            what = f"{e.kind} {', '.join(d.get('triggers', []))}" + (
                f" [dim]({escape(str(d['by']))[:80]})[/]" if d.get("by") else ""
            )
        else:
            what = f"{e.kind} {escape(str(d.get('reason', '')))}"
        lines.append(f"  [dim]{iso(e.virtual_time)}[/] {what}")
    return lines


class Progress:
    """Prints each step once when it finishes, and once when it has been running a while."""

    SLOW = 2.0

    def __init__(self, width: int, type_width: int, out: Console) -> None:
        self.width, self.type_width = width, type_width
        self.out = out  # this process's console, or the background worker's rendering for a command's terminal
        self.shown: dict[str, StepStatus] = {}

    def update(self, state: RunState, now) -> None:
        for step in state.steps.values():
            if step.status.finished and self.shown.get(step.id) is not step.status:
                self.out.print(step_line(step, self.width, self.type_width, criteria="failed"))
                self.shown[step.id] = step.status
            elif (
                step.status is StepStatus.RUNNING
                and step.id not in self.shown
                and step.started_at
                and (now - step.started_at).total_seconds() > self.SLOW
            ):
                self.out.print(f"  [cyan]…[/] {step.id:<{self.width}}  [dim]{step.type} running[/]")
                self.shown[step.id] = StepStatus.RUNNING


def who_executes(settings: Settings) -> str:
    if settings.embedded:
        return "the background worker (`agent-env worker status`)"
    return f"a worker on task queue '{settings.temporal.task_queue}' (`agent-env worker` if none runs)"


def interrupted_line(settings: Settings, run_id: str) -> str:
    return (
        f"\n[yellow]interrupted:[/] run {run_id} goes on: {who_executes(settings)} executes it. "
        f"Follow it with `agent-env runs show {run_id}`, cancel it with `agent-env runs cancel {run_id}`."
    )
