"""A pool of gateways serving one install (`[gateway] pool`): real gateway processes sharing a key through the
secret store, a worker routing every request about an instance to the gateway that holds it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from conftest import free_port, plan_key_of

from agent_env.config import load_settings
from agent_env.gateway_client import GatewayRefused
from agent_env.spec.run import RunStatus
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch
from agent_env.waiting import until

pytestmark = pytest.mark.processes


class Pool:
    """Two gateway processes, each with its own state folder, sharing the key in `secret:pool-key`."""

    def __init__(self, root: Path, temporal: str, plan_key: dict[str, str]) -> None:
        self.root = root
        self.ports = [free_port(), free_port()]
        self.urls = [f"http://127.0.0.1:{port}" for port in self.ports]
        self.key = secrets.token_hex(32)
        self.project = root / "project"
        (self.project / ".agentenv").mkdir(parents=True)
        pool = ", ".join(f'"{u}"' for u in self.urls)
        (self.project / ".agentenv" / "config.toml").write_text(
            f'[gateway]\npool = [{pool}]\nkey_secret = "pool-key"\n\n[temporal]\ntask_queue = "pool-{uuid.uuid4().hex[:6]}"\n'
        )
        # The session plans and its worker executes; the gateways' trigger hits are sealed with the same key.
        self.env = {**os.environ, **plan_key, "AGENT_ENV_SECRET_POOL_KEY": self.key, "TEMPORAL_ADDRESS": temporal}
        self.processes: list[subprocess.Popen | None] = [None, None]

    def start(self, n: int) -> None:
        folder = self.root / f"gateway-{n}"
        log = (self.root / f"gateway-{n}.log").open("ab")
        self.processes[n] = subprocess.Popen(
            [sys.executable, "-m", "agent_env.gateway", "--root", str(folder), "--port", str(self.ports[n])],
            env={**self.env, "AGENT_ENV_GATEWAY_URL": self.urls[n], "AGENT_ENV_HOME": str(self.root / f"home-{n}")},
            cwd=self.project,
            stdout=log,
            stderr=log,
        )
        until_up(self.urls[n], self.processes[n], self.root / f"gateway-{n}.log")

    def stop(self, n: int, sig: int = signal.SIGTERM) -> None:
        process = self.processes[n]
        if process is not None and process.poll() is None:
            process.send_signal(sig)
            process.wait(20)

    def settings(self):
        os.environ["AGENT_ENV_SECRET_POOL_KEY"] = self.key  # the worker reads the shared key from the secret store
        return load_settings(self.project)


def until_up(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, f"the gateway exited: {log.read_text()[-2000:]}"
        try:
            if httpx.get(f"{url}/admin/openapi.json", timeout=1).status_code in (200, 401):
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"the gateway at {url} did not start: {log.read_text()[-2000:]}"
        time.sleep(0.1)


@pytest.fixture
async def pool(tmp_path, settings, server):
    made = Pool(tmp_path, settings.address, plan_key_of(settings))
    made.start(0)
    made.start(1)
    try:
        yield made
    finally:
        for n in (0, 1):
            made.stop(n)
        os.environ.pop("AGENT_ENV_SECRET_POOL_KEY", None)


@pytest.fixture
async def pool_worker(pool, client):
    from agent_env.temporal.worker import create_worker

    settings = pool.settings()
    worker = create_worker(client, settings)
    task = asyncio.create_task(worker.run())
    try:
        yield settings
    finally:
        task.cancel()


async def finish(client, settings, target: str, timeout: float = 120):
    spec = resolve_target(target)
    handle = await launch.start_run(client, settings, spec)
    return await asyncio.wait_for(launch.wait_result(handle), timeout)


async def test_runs_spread_over_the_pool_and_each_instance_is_reached_on_its_own_gateway(pool, pool_worker, client):
    states = await asyncio.gather(*(finish(client, pool_worker, "hello") for _ in range(2)))
    states += [await finish(client, pool_worker, "hello")]
    for state in states:
        assert state.status is RunStatus.PASSED, state.error
        assert state.steps["notes"].outputs["urls"]["mcp"].startswith(state.steps["notes"].outputs["gateway"])
    used = [s.steps["notes"].outputs["gateway"] for s in states]
    assert set(used) == set(pool.urls), f"placed on {used}: both gateways take instances"


async def test_agents_and_triggers_reach_the_gateway_holding_their_instance(pool, pool_worker, client):
    workplace, refund = await asyncio.gather(
        finish(client, pool_worker, "workplace"), finish(client, pool_worker, "refund")
    )
    assert workplace.status is RunStatus.PASSED and workplace.score == 1.0, workplace.error
    assert len([e for e in workplace.world.events if e.kind == "fired"]) == 12
    assert refund.status is RunStatus.PASSED, refund.error
    agent = next(s.outputs for s in refund.steps.values() if s.type == "deploy_agent" and s.outputs.get("hosted"))
    env = next(s.outputs for s in refund.steps.values() if s.type == "deploy_env")
    assert agent["url"].startswith(env["gateway"]) and agent["mcp_url"].startswith(env["gateway"])


async def test_a_role_token_works_only_on_the_gateway_holding_its_instance(pool, pool_worker, client):
    from agent_env.gateway.embedded import connect

    async with connect(pool_worker) as gateway:
        specs = [
            {"id": f"tok-{n}-{uuid.uuid4().hex[:6]}", "run_id": f"tok-run-{n}", "apps": [{"app": "notes"}]}
            for n in range(2)
        ]
        for spec in specs:
            await gateway.put_instance(spec)
        owners = [await gateway.url_for(spec["id"]) for spec in specs]
        assert set(owners) == set(pool.urls), "one instance on each gateway"
        token = await gateway.token(specs[0]["id"], "agent")
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {token}"}) as http:
            here = await http.get(f"{owners[0]}/envs/{specs[0]['id']}/tools")
            assert here.status_code == 200 and here.json()["tools"]
            elsewhere = await http.get(f"{owners[1]}/envs/{specs[0]['id']}/tools")
            assert elsewhere.status_code == 404, "the other gateway does not hold that instance"
            other = await http.get(f"{owners[1]}/envs/{specs[1]['id']}/tools")
            assert other.status_code in (401, 403), "a token of one instance opens no other"
        for spec in specs:
            assert await gateway.delete_instance(spec["id"])


async def test_a_gateway_restarted_mid_run_and_the_run_completes(pool, pool_worker, client):
    spec = resolve_target("workplace")
    handle = await launch.start_run(client, pool_worker, spec)

    async def placed() -> str | None:
        state = await launch.query_state(handle)
        return (state.steps["desk"].outputs or {}).get("gateway")

    owner = await until(placed, what="the env placed", timeout=60, interval=0.1)
    n = pool.urls.index(owner)
    pool.stop(n, signal.SIGKILL)
    assert not (await launch.query_state(handle)).status.finished, "killed mid-run"
    await asyncio.sleep(1)
    pool.start(n)
    state = await asyncio.wait_for(launch.wait_result(handle), 180)
    assert state.status is RunStatus.PASSED and state.score == 1.0, state.error


LOST = {
    "id": "pool-lost",
    "steps": [
        {"id": "pad", "type": "deploy_env", "config": {"env_id": "notes"}},
        {
            "id": "first",
            "type": "call_tool",
            "depends_on": ["pad"],
            "config": {"env": "pad", "tool": "write_note", "arguments": {"key": "a", "text": "kept"}},
        },
        {"id": "saved", "type": "snapshot_env", "depends_on": ["first"], "config": {"env": "pad"}},
        {"id": "wait", "type": "sleep", "depends_on": ["saved"], "config": {"seconds": 4}},
        {
            "id": "second",
            "type": "call_tool",
            "depends_on": ["wait"],
            "config": {"env": "pad", "tool": "write_note", "arguments": {"key": "b", "text": "after"}},
        },
        {
            "id": "both",
            "type": "check_state",
            "depends_on": ["second"],
            "config": {
                "env": "pad",
                "checks": [{"name": "both notes", "tool": "list_notes", "path": "count", "equals": 2}],
            },
        },
    ],
}


async def test_an_instance_whose_gateway_is_gone_for_good_is_restored_on_another(pool, client, tmp_path):
    """The gateway holding the run's instance dies and is taken out of the pool (workers restarted with the
    smaller pool): the instance is rebuilt on the other gateway from its last snapshot, and the run passes."""
    from agent_env.planning.tasks import parse_task
    from agent_env.temporal.worker import create_worker

    first = pool.settings()
    worker = asyncio.create_task(create_worker(client, first).run())
    handle = await launch.start_run(client, first, parse_task(LOST, "test"))

    async def waiting() -> str | None:
        state = await launch.query_state(handle)
        return state.steps["pad"].outputs.get("gateway") if state.steps["wait"].status == "running" else None

    lost = await until(waiting, what="the run waiting", timeout=60, interval=0.1)
    survivor = next(u for u in pool.urls if u != lost)
    pool.stop(pool.urls.index(lost), signal.SIGKILL)
    worker.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await worker  # shut down: one worker per task queue in a process
    config = pool.project / ".agentenv" / "config.toml"
    config.write_text(config.read_text().replace(f'"{lost}", ', "").replace(f', "{lost}"', ""))
    second = pool.settings()
    assert second.gateway.pool == [survivor]
    worker = asyncio.create_task(create_worker(client, second).run())
    try:
        state = await asyncio.wait_for(launch.wait_result(handle), 120)
    finally:
        worker.cancel()
    assert state.status is RunStatus.PASSED, state.error
    from agent_env.cli.runs_cmd import _restorations

    said = _restorations(second, state.run_id)
    assert len(said) == 1 and f"its gateway {lost} was lost; restored on {survivor}" in said[0]
    assert "snapshots/saved.tar" in said[0], "restored from the run's last snapshot"


async def test_a_remembered_owner_that_lost_the_instance_is_forgotten(pool, pool_worker):
    """An instance deleted on one gateway and put again on the other: the pool asks again instead of failing."""
    from agent_env.gateway.embedded import admin_token, connect
    from agent_env.gateway_client.single import SingleGateway

    spec = {"id": f"moved-{uuid.uuid4().hex[:6]}", "run_id": "moved-run", "apps": [{"app": "notes"}]}
    async with connect(pool_worker) as gateway:
        await gateway.put_instance(spec)
        first = await gateway.url_for(spec["id"])
        other = next(u for u in pool.urls if u != first)
        async with (
            SingleGateway(first, admin_token(pool_worker)) as there,
            SingleGateway(other, admin_token(pool_worker)) as here,
        ):
            assert await there.delete_instance(spec["id"])
            await here.put_instance(spec)
        assert (await gateway.get_instance(spec["id"]))["id"] == spec["id"]
        assert await gateway.url_for(spec["id"]) == other
        assert await gateway.delete_instance(spec["id"])


async def test_a_review_lives_on_one_gateway_and_the_pool_finds_it(pool, pool_worker):
    """Opened through the pool (placed with its run), found again by a pool that never saw it (a retried step on a
    new worker), listed among the pool's waiting turns and decided through it."""
    from agent_env.gateway.embedded import admin_token, connect
    from agent_env.gateway_client.single import SingleGateway

    request = {"id": "rv-run.look/review", "run_id": "rv-run", "step": "look", "upstream": {}, "timeout_s": 300}
    async with connect(pool_worker) as gateway:
        opened = await gateway.open_review(request)
    async with connect(pool_worker) as fresh:
        assert (await fresh.open_review(request))["deadline"] == opened["deadline"], "the same review, found"
        assert request["id"] in [t["id"] for t in await fresh.human_turns()]
        await fresh.answer_human_turn(request["id"], "fine", score=1.0)
        assert (await fresh.human_turn(request["id"]))["verdict"] == "continue"
    held = []
    for url in pool.urls:
        async with SingleGateway(url, admin_token(pool_worker)) as one:
            held += [url for t in await one.human_turns() if t["id"] == request["id"]]
            with contextlib.suppress(GatewayRefused):
                held += [url] if (await one.human_turn(request["id"]))["state"] == "answered" else []
    assert len(held) == 1, "kept on one gateway only"
