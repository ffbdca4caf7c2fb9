"""Probes and Prometheus metrics: the gateway's /healthz, /readyz and /metrics over real HTTP (counters checked
against the calls made), and `agent-env worker --health-port` as a process against the session's Temporal
server (readiness, the Temporal SDK's own metrics, readiness dropping while it drains on SIGTERM)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import httpx2
import pytest
from conftest import free_port, plan_key_of
from gateway_util import mcp_client, running_gateway, support_data, support_spec
from prometheus_client.parser import text_string_to_metric_families

from agent_env.gateway.http import create_app
from agent_env.gateway.service import Gateway


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of a Prometheus text exposition: (name, labels) -> value."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(metrics: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    return metrics.get((name, frozenset(labels.items())), 0.0)


# -- the gateway --


@pytest.fixture
async def desk(tmp_path):
    # One call in flight per agent: a slow upload holding it makes the next call a 429.
    async with running_gateway(tmp_path / "gw", max_calls_per_agent=1) as (gateway, base, admin):
        yield gateway, base, admin


async def deploy_desk(admin) -> None:
    await admin.put_instance(support_spec())
    await admin.data("desk-1", "data/add", {"parts": [{"kind": "data", "data": support_data()}]})


async def scrape(http, gateway) -> dict[tuple[str, frozenset], float]:
    answer = await http.get("/metrics", headers=bearer(gateway.admin_token))
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=")
    return samples(answer.text)


async def test_probes_answer_without_a_token_and_behind_the_host_check(desk):
    gateway, base, admin = desk
    async with httpx2.AsyncClient(base_url=base) as http:
        assert (await http.get("/healthz")).status_code == 200
        ready = await http.get("/readyz")
        assert ready.status_code == 200 and ready.json() == {"ready": True}
        pod = await http.get("/readyz", headers={"host": "10.12.0.7:8790"})  # a Kubernetes probe: the pod's IP
        assert pod.status_code == 200, pod.text
        assert (await http.get("/healthz", headers={"host": "evil.example"})).status_code == 421, "DNS rebinding"
        assert (await http.get("/metrics")).status_code == 401
        assert (await http.get("/metrics", headers=bearer("aea_wrong"))).status_code == 401
        await deploy_desk(admin)
        role_token = await admin.token("desk-1", "sam")
        assert (await http.get("/metrics", headers=bearer(role_token))).status_code == 401, "a role token is not admin"


async def test_readyz_is_503_until_started_and_once_data_is_lost(tmp_path):
    gateway = Gateway(tmp_path / "gw")
    try:
        # No lifespan: the app has not started (MCP sessions not served, pending hits not resent).
        transport = httpx.ASGITransport(app=create_app(gateway))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            assert (await http.get("/healthz")).status_code == 200
            ready = await http.get("/readyz")
            assert ready.status_code == 503 and "starting up" in ready.json()["reason"]
    finally:
        gateway.close()
    async with running_gateway(tmp_path / "gw2") as (gateway, base, admin):
        await admin.put_instance({"id": "bad-1", "apps": [{"app": "notes"}], "roles": {"r": {"tools": ["*"]}}})
        gateway.folder("bad-1").joinpath("trajectory.sqlite").mkdir(parents=True)  # SQLite cannot open it
        await admin.call_as("bad-1", "write_note", {"key": "k", "text": "x"}, role="r")
        gateway.trajectory.flush()
        async with httpx2.AsyncClient(base_url=base) as http:
            ready = await http.get("/readyz")
            assert ready.status_code == 503 and "lost data" in ready.json()["reason"], ready.text
            assert (await http.get("/healthz")).status_code == 200, "still alive: restarting would not help"


async def test_metrics_count_calls_refusals_and_what_the_gateway_holds(desk):
    gateway, base, admin = desk
    rest_calls, mcp_calls = 5, 3
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        before = await scrape(http, gateway)
        assert value(before, "agentenv_gateway_instances") == 0
        await deploy_desk(admin)
        assert value(await scrape(http, gateway), "agentenv_gateway_instances") == 1, "deployed: open"
        sam = await admin.token("desk-1", "sam")
        for _ in range(rest_calls):
            ok = await http.post("/envs/desk-1/tools/list_tickets", json={}, headers=bearer(sam))
            assert ok.status_code == 200, ok.text
        hidden = await http.post("/envs/desk-1/tools/issue_refund", json={}, headers=bearer(sam))
        assert hidden.status_code == 403, hidden.text
        assert (await http.post("/envs/desk-1/tools/list_tickets", json={})).status_code == 401
        assert (await http.post("/envs/desk-1/tools/list_tickets", json={}, headers=bearer("aet_x"))).status_code == 403

        # A slow upload holds sam's one call slot: the next call is refused with 429.
        release = asyncio.Event()

        async def slow_body():
            yield b"{"
            await release.wait()
            yield b"}"

        held = asyncio.create_task(
            http.post(
                "/envs/desk-1/tools/list_tickets",
                content=slow_body(),
                headers={**bearer(sam), "content-type": "application/json"},
            )
        )
        deadline = time.monotonic() + 10
        while not gateway.limits._calls:  # the upload reached the gateway and holds its slot
            assert time.monotonic() < deadline and not held.done(), "the held call never arrived"
            await asyncio.sleep(0.01)
        over = await http.post("/envs/desk-1/tools/list_tickets", json={}, headers=bearer(sam))
        assert over.status_code == 429, over.text
        release.set()
        assert (await held).status_code == 200

        async with mcp_client(base, "desk-1", sam, "legacy") as mcp:
            for _ in range(mcp_calls):
                assert not (await mcp.call_tool("list_tickets", {})).is_error
            during = await scrape(http, gateway)
        after = await scrape(http, gateway)
        await admin.end_run("run-1")  # the run is over: its instances close
        closed = await scrape(http, gateway)

    calls = "agentenv_gateway_tool_calls_total"
    assert value(after, calls, transport="rest", outcome="ok") == rest_calls + 1, "+1: the held call"
    assert value(after, calls, transport="rest", outcome="refused") == 2, "the hidden tool and the 429"
    assert value(after, calls, transport="mcp", outcome="ok") == mcp_calls
    assert value(after, calls, transport="rest", outcome="error") == 0
    refusals = "agentenv_gateway_refusals_total"
    assert value(after, refusals, reason="role") == 1
    assert value(after, refusals, reason="rate_limit") == 1
    assert value(after, refusals, reason="token") == 2
    # Latency: every call the gateway answered (the 429 never ran).
    assert value(after, "agentenv_gateway_tool_call_seconds_count", transport="rest") == rest_calls + 2
    assert value(after, "agentenv_gateway_tool_call_seconds_count", transport="mcp") == mcp_calls
    assert value(after, "agentenv_gateway_tool_call_seconds_sum", transport="rest") > 0
    assert value(during, "agentenv_gateway_mcp_sessions") == 1
    assert value(after, "agentenv_gateway_mcp_sessions") == 0, "the client ended its session"
    assert value(after, "agentenv_gateway_hosted_agents") == 0
    assert value(closed, "agentenv_gateway_instances") == 0, "closed at the run's end"


async def test_each_gateway_counts_its_own(tmp_path):
    """Two gateways in one process: a per-gateway registry, not the global one."""
    async with running_gateway(tmp_path / "a") as (a, base_a, admin_a), running_gateway(tmp_path / "b") as (b, *_):
        await deploy_desk(admin_a)
        await admin_a.call_tool("desk-1", await admin_a.token("desk-1", "sam"), "list_tickets", {})
        key = ("agentenv_gateway_tool_calls_total", frozenset({"transport": "rest", "outcome": "ok"}.items()))
        assert samples(a.metrics.exposition().decode()).get(key) == 1
        assert samples(b.metrics.exposition().decode()).get(key) is None


# -- the worker --

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")


class WorkerProcess:
    """`agent-env worker --health-port` on its own queue of the session's Temporal server."""

    def __init__(self, tmp_path: Path, address: str, queue: str, plan_key: dict[str, str]) -> None:
        self.base = f"http://127.0.0.1:{free_port()}"
        env = {
            **os.environ,
            **plan_key,  # it executes what this session plans
            "AGENT_ENV_HOME": str(tmp_path / "home"),
            "AGENT_ENV_GATEWAY_PORT": str(free_port()),
            "TEMPORAL_ADDRESS": address,
            "AGENT_ENV_TASK_QUEUE": queue,
        }
        self.log = tmp_path / "worker.log"
        port = self.base.rsplit(":", 1)[1]
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [AGENT_ENV, "worker", "--health-port", port], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        self.http = httpx2.AsyncClient(base_url=self.base, timeout=5)

    async def get(self, path: str) -> httpx2.Response | None:
        try:
            return await self.http.get(path)
        except httpx2.TransportError:
            return None

    async def until(self, check, what: str, timeout: float = 60.0):
        """The first truthy value of `await check()`, while the worker runs."""
        deadline = time.monotonic() + timeout
        while not (found := await check()):
            assert self.proc.poll() is None, f"the worker exited ({self.proc.returncode}) before {what}:\n{self.output}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{self.output}"
            await asyncio.sleep(0.1)
        return found

    async def status_is(self, path: str, status: int) -> httpx2.Response | None:
        answer = await self.get(path)
        return answer if answer is not None and answer.status_code == status else None

    @property
    def output(self) -> str:
        return self.log.read_text()

    async def close(self) -> None:
        await self.http.aclose()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.mark.processes
async def test_worker_health_port_probes_sdk_metrics_and_drain(server, settings, client, tmp_path):
    from agent_env.planning.tasks import parse_task
    from agent_env.temporal import launch

    queue = f"health-{uuid.uuid4().hex[:8]}"
    on_queue = settings.model_copy(update={"temporal": settings.temporal.model_copy(update={"task_queue": queue})})
    worker = WorkerProcess(tmp_path, settings.address, queue, plan_key_of(settings))
    napping = None
    try:
        await worker.until(lambda: worker.status_is("/readyz", 200), "ready")
        assert (await worker.get("/readyz")).json() == {"ready": True}
        assert (await worker.get("/healthz")).status_code == 200
        assert (
            await worker.get(
                "/metrics",
            )
        ).status_code == 200

        spec = parse_task({"id": "probe", "steps": [{"id": "say", "type": "echo", "config": {"value": 1}}]}, "t")
        state = await asyncio.wait_for(launch.wait_result(await launch.start_run(client, on_queue, spec)), 60)
        assert state.status == "passed", state

        expected = {
            "temporal_workflow_completed_total",
            "temporal_workflow_task_execution_latency_count",  # histograms, in seconds
            "temporal_local_activity_execution_latency_count",  # the echo step
            "temporal_local_activity_total",  # a counter the SDK names ..._total itself: not ..._total_total
            "temporal_worker_task_slots_available",  # a gauge
        }

        async def sdk_metrics() -> dict | None:
            # The SDK records a finished task's metrics one by one: wait until all of them are there.
            scraped = samples((await worker.get("/metrics")).text)
            return scraped if expected <= {name for name, _ in scraped} else None

        scraped = await worker.until(sdk_metrics, "the SDK's metrics")
        completed = {
            dict(labels).get("task_queue"): v
            for (name, labels), v in scraped.items()
            if name == "temporal_workflow_completed_total"
        }
        assert completed == {queue: 1.0}, completed
        assert not {name for name, _ in scraped if name.endswith("_total_total")}, "counters named once"

        # SIGTERM while an activity runs: not ready while it drains, alive, then it exits 0.
        nap = parse_task({"id": "nap", "steps": [{"id": "nap", "type": "sleep", "config": {"seconds": 3}}]}, "t")
        napping = await launch.start_run(client, on_queue, nap)

        async def nap_running() -> bool:
            return (await launch.query_state(napping)).steps["nap"].status == "running"

        await worker.until(nap_running, "the nap step to run")
        worker.proc.send_signal(signal.SIGTERM)
        draining = await worker.until(lambda: worker.status_is("/readyz", 503), "not ready while draining")
        assert "draining" in draining.json()["reason"], draining.text
        assert (await worker.get("/healthz")).status_code == 200, "alive while it drains"
        assert await asyncio.to_thread(worker.proc.wait, 60) == 0, worker.output
    finally:
        await worker.close()
        if napping is not None:
            with contextlib.suppress(Exception):
                await napping.terminate("test over")
