"""One agent cannot stall the others: hostile arguments are refused fast, sync tools run off the gateway's
event loop (yet one instance's calls stay serialised), and patterns from specs run in linear time."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx2
import pytest
from gateway_util import mcp_client, running_gateway, support_data, support_spec
from pydantic import ValidationError

from agent_env.envs import App, Ctx, tool
from agent_env.envs.app_instance import AppInstance
from agent_env.envs.builtin.fields import MAX_ADDRESS, is_address
from agent_env.envs.builtin.mail import Mail
from agent_env.spec import patterns, predicates
from agent_env.spec.world import Predicate, Says, StateWhen
from agent_env.steps.builtin.agents import StopWhen
from agent_env.steps.builtin.check import Check
from agent_env.steps.builtin.grading import json_in

READY_WITHIN = 0.05
HOSTILE_EMAILS = ["a@" + "." * 30_000, "a@" + "." * 30_000 + "@", "a@" + "." * 120_000 + " "]
CATASTROPHIC = r"(a+)+$"  # exponential on a backtracking engine
VICTIM = "a" * 50_000 + "b"


class Journal:
    """What the Slow app's tools did, in order, across threads."""

    events: list[tuple[str, str]] = []
    entered = threading.Event()

    @classmethod
    def reset(cls) -> None:
        cls.events, cls.entered = [], threading.Event()


class Slow(App):
    name = "slow"
    schema = "CREATE TABLE naps (label TEXT NOT NULL);"

    @tool
    def nap(self, label: str, seconds: float = 1.0) -> dict:
        """Sleep (a sync tool hogging its thread), recording when it enters and leaves.

        Args:
            label: how the journal names this call
            seconds: how long to sleep
        """
        Journal.events.append(("enter", label))
        Journal.entered.set()
        time.sleep(seconds)
        self.db.execute("INSERT INTO naps VALUES (?)", (label,))
        Journal.events.append(("exit", label))
        return {"slept": label}

    @tool(read_only=True)
    def ping(self) -> dict:
        """Answer at once."""
        return {"pong": True}


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


class ReadyProbe(threading.Thread):
    """GET /ready again and again from its own thread, so a blocked gateway loop shows in the timings
    (a probe on the test's loop, which is also the gateway's, would only start once the loop is free)."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base, self.seconds, self.stop = base, [], threading.Event()
        self.warm = threading.Event()

    def run(self) -> None:
        with httpx2.Client(base_url=self.base, timeout=30) as http:
            http.get("/ready")  # a warm connection: we time the gateway, not the handshake
            self.warm.set()
            while not self.stop.is_set() or len(self.seconds) < 5:
                started = time.perf_counter()
                assert http.get("/ready").status_code == 200
                self.seconds.append(time.perf_counter() - started)
                time.sleep(0.005)

    async def __aenter__(self) -> ReadyProbe:
        self.start()
        await asyncio.to_thread(self.warm.wait, 10)
        return self

    async def __aexit__(self, *exc) -> None:
        self.stop.set()
        await asyncio.to_thread(self.join, 10)

    def worst(self) -> float:
        assert len(self.seconds) >= 5
        return max(self.seconds)


# -- hostile arguments --


def test_the_email_check_is_linear():
    for value in HOSTILE_EMAILS:
        started = time.perf_counter()
        is_address(value)
        assert time.perf_counter() - started < 0.05, "the old regex took seconds here"
    assert is_address("dana@example.com") and not is_address("dana@example") and not is_address("a b@c.d")
    assert not is_address("a@b.c\n"), "a trailing newline is not part of an address"


async def test_a_hostile_email_is_refused_fast_while_ready_stays_prompt(tmp_path):
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(support_spec())
        await admin.data("desk-1", "data/add", {"parts": [{"kind": "data", "data": support_data()}]})
        sam = await admin.token("desk-1", "sam")
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http, mcp_client(base, "desk-1", sam) as mcp:
            for email in HOSTILE_EMAILS:
                arguments = {"customer_email": email, "subject": "help", "description": "it broke"}
                started = time.perf_counter()
                async with ReadyProbe(base) as probe:
                    answer, result = await asyncio.gather(
                        http.post("/envs/desk-1/tools/create_ticket", json=arguments, headers=bearer(sam)),
                        mcp.call_tool("create_ticket", arguments),
                    )
                    assert time.perf_counter() - started < 1.0, "the hostile call ended quickly"
                assert probe.worst() < READY_WITHIN, f"/ready took {probe.worst() * 1000:.1f} ms"
                assert answer.status_code == 422
                error = answer.json()["error"]
                assert "customer_email" in error and f"at most {MAX_ADDRESS}" in error, error
                assert result.is_error and f"at most {MAX_ADDRESS}" in result.content[0].text
            tickets = await admin.call_tool("desk-1", sam, "list_tickets", {})
            assert all(len(t["customer_email"]) <= MAX_ADDRESS for t in tickets["tickets"])


def test_builtin_string_arguments_are_bounded_and_say_so():
    spec = Mail.tools["send_email"]
    schema = spec.input_schema["properties"]
    assert schema["sender"]["maxLength"] == MAX_ADDRESS and schema["to"]["maxItems"] == 100
    for arguments, named in [
        ({"sender": "a@b.co", "to": ["x@y.co"] * 101, "body": "hi", "subject": "s"}, "to: is 101 items long"),
        ({"sender": "a@b.co", "to": ["x@y.co"], "body": "b" * 50_001, "subject": "s"}, "body: is 50001 characters"),
        ({"sender": "a@b.co", "to": ["x" * 300], "body": "hi", "subject": "s"}, "to.0: is 300 characters"),
    ]:
        with pytest.raises(Exception, match=named) as e:
            spec.parse_arguments(arguments)
        assert "x" * 300 not in str(e.value), "the refusal does not echo the value"


# -- sync tools off the event loop, serialised per instance --


@pytest.fixture
async def slow_gateway(tmp_path):
    Journal.reset()
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        for instance in ("s1", "s2"):
            await admin.put_instance(
                {
                    "id": instance,
                    "run_id": "run-s",
                    "apps": [{"app": f"{__name__}:Slow"}],
                    "roles": {"agent": {"tools": ["*"]}},
                    "agents": {"a": "agent"},
                }
            )
        yield gateway, base, admin


async def test_a_slow_sync_tool_blocks_neither_ready_nor_another_instance(slow_gateway):
    gateway, base, admin = slow_gateway
    a1, a2 = await admin.token("s1", "a"), await admin.token("s2", "a")
    other: list[float] = []
    client = httpx2.Client(base_url=base, timeout=30)  # made here: making one holds the GIL for a while

    def ping_the_other_instance_once_napping() -> None:
        """From a thread, so it is not held up by the loop it is testing."""
        Journal.entered.wait(10)
        started = time.perf_counter()
        answer = client.post("/envs/s2/tools/ping", json={}, headers=bearer(a2))
        other.append(time.perf_counter() - started)
        assert answer.json() == {"result": {"pong": True}}

    with client:
        await nap_while_probing(base, a1, ping_the_other_instance_once_napping)
    assert other[0] < 0.25, f"another instance's call waited {other[0]:.2f} s"


async def nap_while_probing(base: str, token: str, alongside) -> None:
    """A 1 s sync call on s1, with `alongside` in a thread and /ready probed; /ready stays prompt."""
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http, ReadyProbe(base) as probe:
        started = time.perf_counter()
        pinging = asyncio.create_task(asyncio.to_thread(alongside))
        napping = await http.post("/envs/s1/tools/nap", json={"label": "long", "seconds": 1.0}, headers=bearer(token))
        assert napping.json() == {"result": {"slept": "long"}} and time.perf_counter() - started >= 1.0
        await pinging
    assert probe.worst() < READY_WITHIN, f"/ready took {probe.worst() * 1000:.1f} ms"


async def test_calls_of_one_instance_stay_serialised_and_in_order(slow_gateway):
    gateway, base, admin = slow_gateway
    a1 = await admin.token("s1", "a")
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http, mcp_client(base, "s1", a1) as mcp:
        first = asyncio.create_task(
            http.post("/envs/s1/tools/nap", json={"label": "one", "seconds": 0.3}, headers=bearer(a1))
        )
        while not Journal.entered.is_set():
            await asyncio.sleep(0.005)
        second = asyncio.create_task(mcp.call_tool("nap", {"label": "two", "seconds": 0.1}))
        await asyncio.sleep(0.02)
        third = asyncio.create_task(
            http.post("/envs/s1/tools/nap", json={"label": "three", "seconds": 0.1}, headers=bearer(a1))
        )
        await asyncio.gather(first, second, third)
    assert Journal.events == [
        ("enter", "one"),
        ("exit", "one"),
        ("enter", "two"),
        ("exit", "two"),
        ("enter", "three"),
        ("exit", "three"),
    ]


async def test_the_data_plane_waits_for_a_running_call(tmp_path):
    """Tool calls run in worker threads; reset/load/export take the same lock, from any thread."""
    Journal.reset()
    inst = AppInstance(Slow, tmp_path / "slow")
    try:
        napping = asyncio.create_task(inst.call_async("nap", {"label": "n", "seconds": 0.3}, Ctx()))
        await asyncio.to_thread(Journal.entered.wait, 5)
        exported = await asyncio.to_thread(inst.export)
        assert Journal.events[-1] == ("exit", "n") and exported == {"naps": [{"label": "n"}]}
        await napping
        calls = [inst.call_async("nap", {"label": str(i), "seconds": 0.01}, Ctx()) for i in range(5)]
        await asyncio.gather(*calls, inst.run_in_turn(inst.reset))
        assert inst.export() == {"naps": []}, "the reset ran after the calls queued before it"
    finally:
        inst.close()


# -- patterns from specs --


def test_a_catastrophic_spec_pattern_runs_in_linear_time():
    assert patterns.LINEAR, "google-re2 is installed (a dependency)"
    started = time.perf_counter()
    assert predicates.test("matches", VICTIM, CATASTROPHIC)[0] is False
    assert not predicates.passes("matches", VICTIM, CATASTROPHIC)
    assert Check(name="c", value=VICTIM, matches=CATASTROPHIC).evaluate().passed is False
    assert not StopWhen(matches=CATASTROPHIC).hit(VICTIM)
    assert predicates.passes("matches", "a" * 50_000, CATASTROPHIC)
    assert time.perf_counter() - started < 0.5
    assert StopWhen(matches="goodbye").hit("OK, GOODBYE then"), "stop_when stays case-insensitive"


@pytest.mark.parametrize(
    "build, field",
    [
        (lambda p: Predicate(path="arguments.body", matches=p), "predicate on 'arguments.body': matches"),
        (lambda p: Says(matches=p), "says.matches"),
        (lambda p: StateWhen(type="state", env="e", tool="t", matches=p), "state condition on t: matches"),
        (lambda p: Check(name="c", value="x", matches=p), "check 'c': 'matches'"),
        (lambda p: StopWhen(matches=p), "stop_when.matches"),
    ],
)
@pytest.mark.parametrize("pattern", [r"(a)\1", r"x(?=y)", r"(?<!\$)x"])
def test_a_spec_pattern_re2_cannot_run_is_refused_at_load(build, field, pattern):
    with pytest.raises(ValidationError) as e:
        build(pattern)
    message = str(e.value)
    assert field in message and "RE2" in message and "backreferences" in message, message


def test_an_invalid_spec_pattern_still_says_so():
    with pytest.raises(ValidationError, match="says.matches is not a valid regular expression"):
        Says(matches="(unclosed")


def test_fenced_json_is_found_in_linear_time():
    assert json_in('Here:\n```json\n{"a": 1}\n```\nbye') == {"a": 1}
    assert json_in('```\n[1, 2]\n``` and ```json {"b": 2}```') == [1, 2]
    started = time.perf_counter()
    with pytest.raises(ValueError):
        json_in("```" + " " * 100_000)
    assert time.perf_counter() - started < 0.1, "the lazy regex took seconds here"
