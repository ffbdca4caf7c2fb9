"""deploy_env's `gateway_mode` on the gateway: `consistent` serves an instance's tool calls one at a time, in the
order they arrive (its trajectory's order is the order they ran in); `performance`, the default, concurrently."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from gateway_util import running_gateway

from agent_env.envs import App, tool


class Turnstile(App):
    """A tool that notes who is inside it at once: each caller waits (a bounded while) for a second one to join."""

    name = "turnstile"
    description = "One tool, pass, that counts the callers inside it at once."
    inside = 0
    most = 0
    ran: list[str] = []
    met = asyncio.Event()

    @tool
    async def pass_through(self, label: str) -> dict:
        """Go through the turnstile.

        Args:
            label: who goes through
        """
        cls = type(self)
        cls.ran.append(label)
        cls.inside += 1
        cls.most = max(cls.most, cls.inside)
        if cls.inside >= 2:
            cls.met.set()
        try:
            with contextlib.suppress(TimeoutError):  # alone in consistent mode: it goes on after the wait
                await asyncio.wait_for(cls.met.wait(), 1)
        finally:
            cls.inside -= 1
        return {"label": label}


@pytest.fixture
def turnstile():
    Turnstile.inside, Turnstile.most, Turnstile.ran, Turnstile.met = 0, 0, [], asyncio.Event()
    return Turnstile


def spec(mode: str | None) -> dict:
    return {
        "id": "gate-1",
        "run_id": "run-1",
        "apps": [{"app": f"{__name__}:Turnstile"}],
        **({"gateway_mode": mode} if mode else {}),
    }


async def three_calls(admin) -> list[dict]:
    calls = [admin.call_as("gate-1", "pass_through", {"label": label}, role="agent") for label in ("a", "b", "c")]
    return await asyncio.gather(*calls)


async def test_consistent_mode_serves_one_call_at_a_time_in_order(tmp_path, turnstile):
    async with running_gateway(tmp_path / "gw") as (_, _, admin):
        await admin.put_instance(spec("consistent"))
        outcomes = await three_calls(admin)
        assert sorted(o["result"]["label"] for o in outcomes) == ["a", "b", "c"]
        assert turnstile.most == 1, "no call ran while another was inside"
        entries = [e for e in await admin.trajectory("gate-1") if e["tool"] == "pass_through"]
    assert [e["arguments"]["label"] for e in entries] == turnstile.ran, "recorded in the order they ran"


async def test_performance_mode_serves_calls_concurrently(tmp_path, turnstile):
    async with running_gateway(tmp_path / "gw") as (_, _, admin):
        await admin.put_instance(spec(None))
        await three_calls(admin)
    assert turnstile.most >= 2, "calls overlapped"


async def test_an_unknown_mode_is_refused(tmp_path):
    async with running_gateway(tmp_path / "gw") as (_, _, admin):
        with pytest.raises(Exception, match="gateway_mode"):
            await admin.put_instance(spec("eventual"))
