"""The world's rules without Temporal: clock math, the queue, firings, repetition, chains, watches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent_env.spec.world_state import ClockState, WorldSpec, WorldState
from agent_env.workflows.world_rules import LEASE, World, WorldError

T0 = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)  # 09:00 in New York
REAL = datetime(2030, 1, 1, tzinfo=UTC)


def world(triggers, mode="event_driven", rate=1.0, seed=0, personas=None):
    spec = WorldSpec.model_validate(
        {
            "seed": seed,
            "clock": {"start": "2026-03-02T09:00:00-05:00", "mode": mode, "rate": rate},
            "triggers": triggers,
            "personas": personas or {},
        }
    )
    w = World(spec, WorldState())
    w.start_clock(REAL)
    return w


def drain(w: World, real=REAL):
    """Run the world event-driven until its queue is empty; return (trigger, virtual time) of firings."""
    fired = []
    while True:
        item = w.due(real)
        if item is None:
            if not w.jump(real):
                return fired
            continue
        if item.kind == "trigger":
            w.fire(item.trigger, item.at, {})
            fired.append((item.trigger, item.at))


ACTION = [{"type": "end_run"}]


def test_paced_clock_stops_at_the_horizon_and_the_lease():
    clock = ClockState(
        mode="paced",
        virtual_anchor=T0,
        real_anchor=REAL,
        rate=3600,
        horizon=T0 + timedelta(hours=2),
        lease_until=REAL + timedelta(seconds=10),
    )
    assert clock.now(REAL + timedelta(seconds=1)) == T0 + timedelta(hours=1)
    assert clock.now(REAL + timedelta(seconds=5)) == T0 + timedelta(hours=2), "never past the horizon"
    clock.horizon = None
    assert clock.now(REAL + timedelta(seconds=100)) == T0 + timedelta(hours=10), "stops at the lease"


def test_repeating_and_chained_triggers_fire_at_exact_times_in_order():
    w = world(
        [
            {"id": "rush", "when": {"type": "time", "at": "+30m", "every": "1d", "count": 3}, "actions": ACTION},
            {"id": "follow_up", "when": {"type": "time", "after": "rush", "delay": "2h"}, "actions": ACTION},
            {"id": "deadline", "when": {"type": "time", "at": "2026-03-04T17:00:00-05:00"}, "actions": ACTION},
        ]
    )
    w.register(["*"], REAL)
    fired = drain(w)
    local = [(t, v.astimezone(UTC).strftime("%d %H:%M")) for t, v in fired]
    assert local == [
        ("rush", "02 14:30"),
        ("follow_up", "02 16:30"),
        ("rush", "03 14:30"),
        ("rush", "04 14:30"),
        ("deadline", "04 22:00"),
    ]
    assert w.state.triggers["rush"].done and w.state.triggers["rush"].fires == 3
    assert w.state.triggers["follow_up"].fires == 1, "a one-shot `after` trigger fires once"


def test_simultaneous_events_fire_in_scheduling_order():
    w = world([{"id": f"t{i}", "when": {"type": "time", "at": "+1h"}, "actions": ACTION} for i in range(5)])
    w.register(["t3", "t1", "t4", "t0", "t2"], REAL)
    assert [t for t, _ in drain(w)] == ["t3", "t1", "t4", "t0", "t2"]


def test_seeded_random_intervals_are_reproducible():
    spec = [
        {
            "id": "r",
            "when": {"type": "time", "at": "+0s", "every": {"min": "1h", "max": "5h"}, "count": 6},
            "actions": ACTION,
        }
    ]
    first = [v for _, v in drain(_registered(world(spec, seed=7)))]
    again = [v for _, v in drain(_registered(world(spec, seed=7)))]
    other = [v for _, v in drain(_registered(world(spec, seed=8)))]
    assert first == again and first != other
    gaps = [b - a for a, b in zip(first, first[1:], strict=False)]
    assert all(timedelta(hours=1) <= g <= timedelta(hours=5) for g in gaps) and len(set(gaps)) > 1


def test_exponential_intervals_follow_their_seed_else_the_runs():
    def fires(every: dict, seed: int) -> list[datetime]:
        spec = [{"id": "p", "when": {"type": "time", "every": every, "count": 40}, "actions": ACTION}]
        return [v for _, v in drain(_registered(world(spec, seed=seed)))]

    own = {"dist": "exp", "mean": "1h", "seed": 3}
    assert fires(own, seed=7) == fires(own, seed=8), "a seed of its own: the run's does not matter"
    assert fires(own, seed=7) != fires({**own, "seed": 4}, seed=7)
    runs = {"dist": "exp", "mean": "1h"}
    assert fires(runs, seed=7) == fires(runs, seed=7) != fires(runs, seed=8), "no seed: the run's"
    marks = fires(own, seed=0)
    gaps = [b - a for a, b in zip([T0, *marks], marks, strict=False)]
    assert marks[0] > T0, "with `every` alone the first is one drawn interval from the start"
    mean = sum(gaps, timedelta()) / len(gaps)
    assert timedelta(minutes=30) < mean < timedelta(hours=2), mean  # 40 draws of mean 1h
    assert min(gaps) < timedelta(minutes=30) and max(gaps) > timedelta(hours=2), "spread as an exponential is"


def _registered(w: World) -> World:
    w.register(["*"], REAL)
    return w


def test_until_count_cancel_and_delayed_actions():
    w = world(
        [
            {
                "id": "ping",
                "when": {"type": "time", "at": "+0s", "every": "1h", "until": "+150m"},
                "actions": [{"type": "end_run", "delay": "10m"}],
            },
            {"id": "never", "when": {"type": "time", "at": "+5h"}, "actions": ACTION},
        ]
    )
    w.register(["*"], REAL)
    w.cancel(["never"], REAL, cause="test")
    firings, delayed = [], []
    while True:
        item = w.due(REAL)
        if item is None:
            if not w.jump(REAL):
                break
            continue
        if item.kind == "trigger":
            firings.append(item.at)
            w.fire(item.trigger, item.at, {})
        else:
            delayed.append(item.at)
    assert [f - T0 for f in firings] == [timedelta(0), timedelta(hours=1), timedelta(hours=2)]
    assert [d - T0 for d in delayed] == [
        timedelta(minutes=10),
        timedelta(hours=1, minutes=10),
        timedelta(hours=2, minutes=10),
    ]
    assert not w.state.triggers["never"].fires


def test_set_clock_and_lease():
    w = world([], mode="paced", rate=60)
    assert w.now(REAL + timedelta(seconds=5)) == T0, "a paced world waits for the task's first world step"
    w.begin(REAL)
    later = REAL + timedelta(seconds=1)
    assert w.now(later) == T0 + timedelta(minutes=1)
    assert w.now(REAL + timedelta(hours=1)) == T0 + LEASE * 60, "no word from the run: the clock stops"
    w.reanchor(REAL + timedelta(hours=1))
    assert w.now(REAL + timedelta(hours=1)) == T0 + LEASE * 60, "re-anchoring does not jump"
    w.set_clock(later, time="+1d", cause="test")
    assert w.now(later) == T0 + timedelta(days=1)
    w.set_clock(later, mode="frozen", cause="test")
    assert w.now(later + timedelta(seconds=1)) == T0 + timedelta(days=1)
    assert [e.kind for e in w.state.events] == ["clock", "clock", "clock", "clock"]


def test_registering_unknown_triggers_and_persona_watches():
    w = world(
        [
            {
                "id": "dana_hears",
                "when": {"type": "persona", "env": "desk", "persona": "dana", "says": {"contains": "refund"}},
                "actions": ACTION,
            }
        ],
        personas={"dana": {"agent": "dana", "email": "dana@example.com", "chat": "dana"}},
    )
    with pytest.raises(WorldError, match="no trigger 'nope'"):
        w.register(["nope"], REAL)
    assert w.watches("desk") == [], "unregistered triggers are not watched"
    w.register(["dana_hears"], REAL)
    watches = w.watches("desk")
    assert [x.spec["tool"] for x in watches] == ["send_email", "send_direct_message"]
    assert watches[0].spec["where"] == [
        {"path": "arguments.to", "contains": "dana@example.com"},
        {"path": "arguments.body", "contains": "refund"},
    ]
