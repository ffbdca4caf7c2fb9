"""register_env_triggers steps that hold until their triggers have fired (the framework's `await_fired`), so the
steps after them start once those triggers' effects are in the world.

The world's rules decide (world_rules: `await_fired`, `settled`); this ends the steps it settles and keeps one
durable timer to the earliest deadline (`await_timeout_seconds`, real time) for the run's loop to wake on. The
timer is a command runs before this change never issued: it is behind `workflow.patched`. Deterministic workflow
code; the state it reads is carried across continue-as-new in the world's state (`WorldState.awaiting`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_env.spec.duration import checked_seconds
    from agent_env.spec.times import iso
    from agent_env.workflows.dag import Dag
    from agent_env.workflows.details import summary
    from agent_env.workflows.world_driver import WorldDriver
    from agent_env.workflows.world_rules import await_fired, next_deadline, settled

PATCH_AWAIT_FIRED = "await-fired"  # (workflow.patched) a register_env_triggers step may wait for its triggers


class Awaits:
    def __init__(self, dag: Dag, driver: WorldDriver, changed: Callable[[str], bool]) -> None:
        self.dag = dag
        self.driver = driver
        self.changed = changed  # whether the run takes a patched behaviour (continuation.changed)
        self._timer: asyncio.Task[None] | None = None
        self._timer_at: datetime | None = None

    def start(self, step: str, config: Mapping[str, Any], real: datetime, registered: list[str]) -> bool:
        """Hold `step` if its config awaits triggers (True: it ends later). WorldError if it names an unknown one."""
        world = self.driver.world
        if world is None or not config.get("await_fired") or not self.changed(PATCH_AWAIT_FIRED):
            return False
        seconds = checked_seconds(config.get("await_timeout_seconds", 120), "`await_timeout_seconds`")
        await_fired(world, step, list(config["await_fired"]), real + timedelta(seconds=seconds), registered)
        return True

    @property
    def holding(self) -> bool:
        """Steps wait for triggers to fire (the timer wakes the run at their deadline)."""
        world = self.driver.world
        return world is not None and bool(world.state.awaiting)

    def held(self) -> list[str]:
        world = self.driver.world
        return sorted(world.state.awaiting) if world is not None else []

    def settle(self) -> None:
        """End the steps whose triggers fired (succeeded), can fire no more or ran out of time (failed)."""
        world = self.driver.world
        if world is None or not world.state.awaiting:
            return
        for step, outputs, error in settled(world, self.driver.now_real()):
            if error is not None:
                self.dag.fail(step, error, workflow.now())
            else:
                self.dag.succeed(step, workflow.now(), dict(outputs or {}))

    def timer(self) -> asyncio.Task[None] | None:
        """A timer to the earliest deadline, for the run's loop to wait on (None: no step waits)."""
        world = self.driver.world
        deadline = next_deadline(world) if world is not None else None
        timer = self._timer
        if timer is not None and (deadline != self._timer_at or timer.done()):
            if not timer.done():
                timer.cancel()
            timer = self._timer = None
        if deadline is not None and timer is None and self.changed(PATCH_AWAIT_FIRED):
            seconds = max((deadline - workflow.now()).total_seconds(), 0.001)
            timer = self._timer = asyncio.create_task(
                workflow.sleep(seconds, summary=summary(f"await_fired deadline {iso(deadline)}"))
            )
            self._timer_at = deadline
        return timer

    def cancel(self, reason: str | None) -> None:
        """The run stops: steps still waiting for their triggers are cancelled."""
        world = self.driver.world
        for step in self.held():
            self.dag.cancel(step, workflow.now(), reason)
        if world is not None:
            world.state.awaiting.clear()
        if self._timer is not None and not self._timer.done():
            self._timer.cancel()
