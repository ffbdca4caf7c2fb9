"""The world's rules as the run applies them: clock, trigger registry, the queue of due events, firings.

Plain deterministic code over `WorldState` (no Temporal calls: the workflow passes `real` times from
`workflow.now()` and runs the actions). Events due at the same virtual time fire in the order they
were scheduled; the clock never passes the earliest unfired event (its horizon).
"""

from __future__ import annotations

import bisect
import hashlib
import math
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from agent_env.spec.world import (
    MAX_RATE,
    ClockSpec,
    ExpInterval,
    PersonaSpec,
    PersonaWhen,
    RandomInterval,
    StateWhen,
    TimeWhen,
    ToolCallWhen,
    TriggerSpec,
    parse_time,
)
from agent_env.spec.world_state import (
    Awaiting,
    ClockState,
    Scheduled,
    TriggerStatus,
    Watch,
    WorldEvent,
    WorldSpec,
    WorldState,
)

EventKind = Literal["fired", "action", "clock", "registered", "cancelled", "ended", "ignored"]  # WorldEvent.kind

LEASE = timedelta(seconds=1.5)  # how long the gateway's clock runs on without hearing from the run
MAX_FIRINGS = 10_000  # a runaway loop of triggers ends the run instead of running forever


class WorldError(Exception):
    pass


def checked_time(value: Any, start: datetime | None) -> datetime:
    """A time from data (a step's config after templates, an action): parsed, or a WorldError saying why."""
    if not isinstance(value, (str, datetime)):
        raise WorldError(f"a time is RFC 3339 text or +DURATION, not {str(value)[:80]!r}")
    try:
        return parse_time(value, start).astimezone(UTC)
    except (ValueError, TypeError, ArithmeticError) as e:  # OverflowError: past year 9999
        raise WorldError(f"time {str(value)[:80]!r}: {str(e) or type(e).__name__}") from None


def _checked_rate(rate: Any) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= MAX_RATE:
        raise WorldError(f"the clock's rate must be a number above 0 and at most {MAX_RATE:g}, not {str(rate)[:80]!r}")
    return float(rate)


class World:
    def __init__(self, spec: WorldSpec, state: WorldState) -> None:
        self.spec = spec
        self.state = state
        self.clock_spec = ClockSpec.model_validate(spec.clock) if spec.clock else None
        self.triggers: dict[str, TriggerSpec] = {t.id: t for t in spec.triggers}
        self.hold: datetime | None = None  # while an event's actions run, the clock stays at its time
        for tid in self.triggers:
            state.triggers.setdefault(tid, TriggerStatus(id=tid))

    # -- the clock --

    @property
    def start(self) -> datetime | None:
        return self.clock_spec.start.astimezone(UTC) if self.clock_spec else None

    def start_clock(self, real: datetime) -> None:
        if self.clock_spec is None or self.state.clock is not None:
            return
        spec = self.clock_spec
        self.state.clock = ClockState(
            mode=spec.mode,
            virtual_anchor=spec.start.astimezone(UTC),
            real_anchor=real,
            rate=spec.rate if spec.mode == "paced" else 0.0,
            zone=spec.zone,
            lease_until=real + LEASE,
            running=spec.mode != "paced",
        )
        self.log("clock", self.state.clock.virtual_anchor, detail={"mode": spec.mode, "rate": spec.rate})

    def begin(self, real: datetime) -> None:
        """The task acts on the world for the first time: a paced clock starts moving now."""
        clock = self.state.clock
        if clock is not None and not clock.running:
            clock.running, clock.real_anchor, clock.lease_until = True, real, real + LEASE
            self.log("clock", clock.virtual_anchor, detail={"mode": clock.mode, "rate": clock.rate, "started": True})

    def now(self, real: datetime) -> datetime:
        return self.state.clock.now(real) if self.state.clock else real

    def reanchor(self, real: datetime) -> None:
        """Fix the current virtual time as the new anchor (time stopped at the lease, if it ran out)."""
        clock = self.state.clock
        if clock is None:
            return
        clock.virtual_anchor = clock.now(real)
        clock.real_anchor = real
        clock.horizon = self.horizon()
        clock.lease_until = real + LEASE

    def set_clock(
        self, real: datetime, *, time: Any = None, rate: float | None = None, mode: str | None = None, cause: str
    ) -> None:
        if self.state.clock is None:
            raise WorldError("this run has no clock to set: give the task a [clock]")
        self.begin(real)
        self.reanchor(real)
        clock = self.state.clock
        if rate is not None:
            rate = _checked_rate(rate)
        if mode is not None and mode not in ("frozen", "paced", "event_driven"):
            raise WorldError(f"mode {mode!r} is not one of frozen, paced, event_driven")
        if time is not None:
            clock.virtual_anchor = checked_time(time, self.start)
        if mode is not None:
            clock.mode = mode  # type: ignore[assignment]  # (one of the three: checked above)
        paced_rate = rate if rate is not None else (clock.rate or (self.clock_spec.rate if self.clock_spec else 1.0))
        clock.rate = paced_rate if clock.mode == "paced" else 0.0
        clock.horizon = self.horizon()
        self.log("clock", clock.virtual_anchor, detail={"mode": clock.mode, "rate": clock.rate, "by": cause})

    def horizon(self) -> datetime | None:
        head = self.state.queue[0].at if self.state.queue else None
        if self.hold is not None:
            return min(head, self.hold) if head is not None else self.hold
        return head

    def arrive_early(self, real: datetime, tolerance_s: float) -> None:
        """Paced: if the next event is due within `tolerance_s` real seconds, step the clock onto it now.
        The clock reaches the event a few milliseconds early instead of late; it never passes it."""
        clock = self.state.clock
        if clock is None or clock.mode != "paced" or not clock.running or not self.state.queue or self.hold:
            return
        target = self.state.queue[0].at
        now = clock.now(real)
        if now < target and (target - now).total_seconds() / clock.rate <= tolerance_s:
            clock.virtual_anchor, clock.real_anchor = target, real

    def jump(self, real: datetime) -> bool:
        """Event-driven mode: move the clock straight to the next event. True if it moved."""
        clock = self.state.clock
        if clock is None or clock.mode != "event_driven" or not self.state.queue:
            return False
        target = self.state.queue[0].at
        if target <= clock.virtual_anchor:
            return False
        clock.virtual_anchor, clock.real_anchor, clock.horizon = target, real, target
        return True

    # -- the queue --

    def _seq(self) -> int:
        seq = self.state.next_seq
        self.state.next_seq += 1
        return seq

    def schedule(self, item: Scheduled) -> None:
        keys = [(q.at, q.seq) for q in self.state.queue]
        self.state.queue.insert(bisect.bisect(keys, (item.at, item.seq)), item)
        if self.state.clock is not None:
            self.state.clock.horizon = self.horizon()

    def due(self, real: datetime) -> Scheduled | None:
        """Pop the next event whose time has come, if any."""
        if (
            self.state.queue
            and self.state.queue[0].at <= self.now(real)
            and (self.hold is None or self.state.queue[0].at <= self.hold)
        ):
            item = self.state.queue.pop(0)
            if self.state.clock is not None:
                self.state.clock.horizon = self.horizon()
            return item
        return None

    def wake_at(self, step: str, at: datetime, real: datetime) -> None:
        self.begin(real)
        self.schedule(Scheduled(at=at, seq=self._seq(), kind="wake", step=step))

    def log(
        self,
        kind: EventKind,
        at: datetime,
        *,
        trigger: str | None = None,
        firing: int | None = None,
        detail: dict[str, Any] | None = None,
    ) -> WorldEvent:
        event = WorldEvent(
            seq=self._seq(), virtual_time=at, kind=kind, trigger=trigger, firing=firing, detail=detail or {}
        )
        self.state.events.append(event)
        return event

    # -- triggers --

    def register(self, ids: list[str], real: datetime) -> list[str]:
        """Register triggers by id ("*" for all). Returns the ids newly registered."""
        chosen = list(self.triggers) if ids == ["*"] else ids
        unknown = [i for i in chosen if i not in self.triggers]
        if unknown:
            raise WorldError(f"no trigger {unknown[0]!r} (triggers: {', '.join(self.triggers)})")
        self.begin(real)
        added = []
        now = self.now(real)
        for tid in chosen:
            status = self.state.triggers[tid]
            if status.registered or status.done:
                continue
            status.registered = True
            added.append(tid)
            when = self.triggers[tid].when
            if isinstance(when, TimeWhen) and when.at is not None:
                self._schedule_trigger(tid, max(parse_time(when.at, self.start).astimezone(UTC), now))
            elif isinstance(when, TimeWhen) and when.after is None and when.every is not None:
                first = parse_time("+0s", self.start) + self._interval(tid, when.every, 0)  # one interval in
                self._schedule_trigger(tid, max(first, now))
        if added:
            self.log("registered", now, detail={"triggers": added})
        return added

    def cancel(self, ids: list[str], real: datetime, cause: str) -> list[str]:
        cancelled = []
        for tid in ids:
            status = self.state.triggers.get(tid)
            if status is None or status.done:
                continue
            status.done, status.next_at = True, None
            self.state.queue = [q for q in self.state.queue if not (q.kind == "trigger" and q.trigger == tid)]
            cancelled.append(tid)
        if self.state.clock is not None:
            self.state.clock.horizon = self.horizon()
        if cancelled:
            self.log("cancelled", self.now(real), detail={"triggers": cancelled, "by": cause})
        return cancelled

    def _schedule_trigger(self, tid: str, at: datetime) -> None:
        when = self.triggers[tid].when
        if isinstance(when, TimeWhen) and when.until is not None and at > parse_time(when.until, self.start):
            self.state.triggers[tid].done = True
            return
        self.state.triggers[tid].next_at = at
        self.schedule(Scheduled(at=at, seq=self._seq(), kind="trigger", trigger=tid))

    def accepts(self, tid: str) -> str | None:
        """Why a firing of `tid` would be refused now, or None."""
        status = self.state.triggers.get(tid)
        if status is None:
            return f"no trigger {tid!r}"
        if not status.registered:
            return f"trigger {tid!r} is not registered"
        if status.done:
            return f"trigger {tid!r} is done"
        return None

    def fire(self, tid: str, at: datetime, match: dict[str, Any]) -> tuple[int, list[int]]:
        """Record a firing; schedule its delayed actions, its repetition and triggers `after` it.

        Returns (firing seq, indexes of the actions to run now).
        """
        spec, status = self.triggers[tid], self.state.triggers[tid]
        if self.state.count("fired") >= MAX_FIRINGS:
            raise WorldError(f"{MAX_FIRINGS} trigger firings: the triggers are probably firing each other in a loop")
        status.fires += 1
        status.next_at = None
        firing = self.log("fired", at, trigger=tid, detail={"match": match, "n": status.fires}).seq
        immediate = []
        for i, action in enumerate(spec.actions):
            delay = action.delay
            if isinstance(delay, ExpInterval):
                delay = _exp(delay, self.spec.seed, f"{tid}/action{i}/{status.fires}")
            if delay > timedelta(0):
                self.schedule(
                    Scheduled(
                        at=at + delay,
                        seq=self._seq(),
                        kind="action",
                        trigger=tid,
                        firing=firing,
                        action=i,
                        match=match,
                    )
                )
            else:
                immediate.append(i)
        when = spec.when
        if isinstance(when, TimeWhen):
            if when.every is not None and (when.count is None or status.fires < when.count):
                self._schedule_trigger(tid, at + self._interval(tid, when.every, status.fires))
            else:
                status.done = True
        elif not spec.repeat:
            status.done = True
        if spec.max_fires is not None and status.fires >= spec.max_fires:
            status.done = True
            self.state.queue = [q for q in self.state.queue if not (q.kind == "trigger" and q.trigger == tid)]
        for other in self.triggers.values():
            w = other.when
            if (
                isinstance(w, TimeWhen)
                and w.after == tid
                and self.state.triggers[other.id].registered
                and not self.state.triggers[other.id].done
            ):
                self._schedule_trigger(other.id, at + w.delay)
        if self.state.clock is not None:
            self.state.clock.horizon = self.horizon()
        return firing, immediate

    def _interval(self, tid: str, every: timedelta | RandomInterval | ExpInterval, n: int) -> timedelta:
        if isinstance(every, timedelta):
            return every
        if isinstance(every, ExpInterval):
            return _exp(every, self.spec.seed, f"{tid}/{n}")
        return every.min + (every.max - every.min) * _fraction(f"{self.spec.seed}/{tid}/{n}")

    # -- what the gateway watches --

    def watches(self, env_step: str) -> list[Watch]:
        out: list[Watch] = []
        for tid, spec in self.triggers.items():
            status = self.state.triggers[tid]
            if not status.registered or status.done:
                continue
            when = spec.when
            if isinstance(when, ToolCallWhen) and when.env == env_step:
                out.append(
                    Watch(
                        trigger=tid,
                        kind="tool_call",
                        spec=when.model_dump(mode="json"),
                        barrier_s=when.barrier.total_seconds() if when.barrier else None,
                    )
                )
            elif isinstance(when, StateWhen) and when.env == env_step:
                out.append(Watch(trigger=tid, kind="state", spec=when.model_dump(mode="json")))
            elif isinstance(when, PersonaWhen) and when.env == env_step:
                persona = self.spec.personas[when.persona]
                out += [Watch(trigger=tid, kind="tool_call", spec=s) for s in persona_matches(persona, when)]
            elif isinstance(when, TimeWhen) and when.unless is not None and when.unless.env == env_step:
                out.append(Watch(trigger=f"{tid}#unless", kind="tool_call", spec=when.unless.model_dump(mode="json")))
        return out


# -- steps held until triggers fire (register_env_triggers' await_fired) --


def await_fired(world: World, step: str, ids: list[str], deadline: datetime, registered: list[str]) -> None:
    """`step` holds until each of `ids` has fired once (see `settled`), or `deadline` (real time) passes."""
    unknown = [i for i in ids if i not in world.triggers]
    if unknown:
        raise WorldError(f"await_fired: no trigger {unknown[0]!r} (triggers: {', '.join(world.triggers)})")
    world.state.awaiting[step] = Awaiting(triggers=ids, deadline=deadline, registered=registered)


def settled(world: World, real: datetime) -> list[tuple[str, dict[str, object] | None, str | None]]:
    """The held steps that are done: (step, its outputs, None) once all its triggers fired; (step, None, why) once
    one of them can no longer fire, or its deadline has passed. They are held no more."""
    out: list[tuple[str, dict[str, object] | None, str | None]] = []
    for step, waits in list(world.state.awaiting.items()):
        statuses = {t: world.state.triggers[t] for t in waits.triggers}
        unfired = [t for t, s in statuses.items() if s.fires == 0]
        ended = [t for t in unfired if statuses[t].done or not statuses[t].registered]
        if not unfired:
            out.append(
                (step, {"registered": waits.registered, "fired": {t: s.fires for t, s in statuses.items()}}, None)
            )
        elif ended:
            out.append((step, None, f"awaited trigger(s) {ended} can no longer fire (cancelled or ended)"))
        elif real >= waits.deadline:
            out.append((step, None, f"awaited trigger(s) {unfired} did not fire within await_timeout_seconds"))
        else:
            continue
        del world.state.awaiting[step]
    return out


def next_deadline(world: World) -> datetime | None:
    return min((w.deadline for w in world.state.awaiting.values()), default=None)


def persona_matches(persona: PersonaSpec, when: PersonaWhen) -> list[dict[str, Any]]:
    """What counts as saying something to the persona: an email to their address, a DM to their handle."""
    says = when.says.model_dump(exclude_none=True)
    common = {"env": when.env, "agents": when.from_agents, "outcome": "success"}
    out = []
    if persona.email:
        out.append(
            {
                **common,
                "tool": "send_email",
                "where": [{"path": "arguments.to", "contains": persona.email}, {"path": "arguments.body", **says}],
            }
        )
    if persona.chat:
        out.append(
            {
                **common,
                "tool": "send_direct_message",
                "where": [
                    {"path": "arguments.recipient", "equals": persona.chat},
                    {"path": "arguments.text", **says},
                ],
            }
        )
    return out


def _fraction(key: str) -> float:
    """A number in [0, 1) that `key` alone decides."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:13], 16) / 16**13


def _exp(dist: ExpInterval, run_seed: int, key: str) -> timedelta:
    """An exponential draw (mean `dist.mean`), a pure function of its seed (else the run's) and `key`: a replay,
    and every run with that seed, draws the same. Workflow code may not use a random source, nor needs one."""
    seed = run_seed if dist.seed is None else dist.seed
    return -dist.mean * math.log1p(-_fraction(f"exp/{seed}/{key}"))
