"""Many workers on many machines. Two installs ("machines": each its own state directory, project folder and
worker processes) share the session's Temporal server, one task queue, AWS stores (moto's S3 and DynamoDB over
real HTTP) and a pool of two gateway processes, driven through the real CLI. A run started on one machine is
executed by the other's worker; a worker SIGKILLed mid-run loses nothing; a worker sent SIGTERM drains: it
finishes what it runs (or, past `[worker] drain_timeout`, hands it back to Temporal) and exits 0."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import moto_util
import pytest
from conftest import free_port
from test_gateway_pool import until_up

from agent_env.bundles import BUILTIN_ROOT
from agent_env.spec.run import RunState
from agent_env.temporal import launch
from agent_env.waiting import until

pytestmark = pytest.mark.processes
AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
endpoint = moto_util.endpoint


class Cluster:
    """What the machines share: the stores' settings, the pool's and the plan key, and its two gateway processes."""

    def __init__(self, root: Path, url: str, temporal: str) -> None:
        import boto3

        self.root = root
        self.temporal = temporal
        bucket = moto_util.unique("bucket")
        boto3.client("s3", endpoint_url=url).create_bucket(Bucket=bucket)
        self.key = secrets.token_hex(32)
        self.gateway_ports = [free_port(), free_port()]
        self.gateways = [f"http://127.0.0.1:{port}" for port in self.gateway_ports]
        pool = ", ".join(json.dumps(u) for u in self.gateways)
        self.config = (
            f'[stores.documents]\nbackend = "aws"\nendpoint_url = "{url}"\ntable = "{moto_util.unique("table")}"\n'
            f'[stores.objects]\nbackend = "aws"\nendpoint_url = "{url}"\nbucket = "{bucket}"\n'
            f'[gateway]\npool = [{pool}]\nkey_secret = "pool-key"\n'
            '[temporal]\nplan_key_secret = "plan-key"\n'  # planned on one machine, executed on another: one key
        )
        self.plan_key = secrets.token_hex(32)
        self.processes: list[subprocess.Popen] = []

    def environment(self, home: Path) -> dict:
        return {
            **os.environ,
            "AGENT_ENV_HOME": str(home),
            "AGENT_ENV_SECRET_POOL_KEY": self.key,
            "AGENT_ENV_SECRET_PLAN_KEY": self.plan_key,
        }

    def start_gateways(self) -> None:
        """Gateway n runs on machine n: its own state folder, the shared stores, the pool's key."""
        project = self.project(self.root / "gateways", self.config)
        for n, port in enumerate(self.gateway_ports):
            log_path = self.root / f"gateway-{n}.log"
            with log_path.open("ab") as log:
                env = {**self.environment(self.root / f"gateway-{n}-home"), "AGENT_ENV_GATEWAY_URL": self.gateways[n]}
                command = [sys.executable, "-m", "agent_env.gateway", "--root", str(self.root / f"gateway-{n}")]
                self.processes.append(
                    subprocess.Popen([*command, "--port", str(port)], env=env, cwd=project, stdout=log, stderr=log)
                )
            until_up(self.gateways[n], self.processes[n], log_path)

    @staticmethod
    def project(folder: Path, config: str) -> Path:
        (folder / ".agentenv").mkdir(parents=True, exist_ok=True)
        (folder / ".agentenv" / "config.toml").write_text(config)
        return folder

    def close(self) -> None:
        for process in self.processes:
            process.terminate()
            process.wait(20)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, settings, server, request):
    pytest.importorskip("boto3", reason="the AWS stores need boto3 (pip install 'agentenv-framework[aws]')")
    pytest.importorskip("moto.server", reason="sharing AWS stores is tested against moto's server (the dev extra)")
    made = Cluster(tmp_path_factory.mktemp("cluster"), request.getfixturevalue("endpoint"), settings.address)
    try:
        made.start_gateways()
        yield made
    finally:
        made.close()


class Machine:
    """One install: a project folder whose config points at the shared stores and gateways, its own state
    directory, and the `agent-env worker` processes it started."""

    def __init__(self, cluster: Cluster, root: Path, name: str, queue: str, extra_config: str = "") -> None:
        self.name = name
        self.project = cluster.project(root / name, cluster.config + extra_config)
        self.env = {
            **cluster.environment(root / f"{name}-home"),
            "TEMPORAL_ADDRESS": cluster.temporal,
            "AGENT_ENV_TASK_QUEUE": queue,
        }
        self.log = root / f"{name}-worker.log"
        self.workers: list[subprocess.Popen] = []

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [AGENT_ENV, *args], capture_output=True, text=True, env=self.env, cwd=self.project, timeout=timeout
        )

    def start_worker(self) -> subprocess.Popen:
        with self.log.open("a") as log:
            process = subprocess.Popen(
                [AGENT_ENV, "worker", "--identity", f"machine-{self.name}"],
                env=self.env,
                cwd=self.project,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.workers.append(process)
        return process

    def start_detached(self, target: str) -> str:
        done = self.cli("run", target, "--detach")
        assert done.returncode == 0, done.stdout + done.stderr
        return re.search(r"started run (\S+)", done.stdout)[1]

    def show(self, run_id: str) -> dict:
        done = self.cli("runs", "show", run_id, "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout[done.stdout.index("{") :])

    def worker_log(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def close(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                process.kill()
            process.wait(30)


@pytest.fixture
def machines(cluster, tmp_path):
    queue = f"many-{uuid.uuid4().hex[:6]}"
    made: list[Machine] = []

    def machine(name: str, extra_config: str = "") -> Machine:
        made.append(Machine(cluster, tmp_path, name, queue, extra_config))
        return made[-1]

    try:
        yield machine
    finally:
        for m in made:
            m.close()


async def state_of(client, run_id: str) -> RunState:
    return await launch.query_state(client.get_workflow_handle(run_id), timeout=5.0)


async def finished(client, run_id: str, timeout: float = 180) -> RunState:
    return await asyncio.wait_for(launch.wait_result(client.get_workflow_handle(run_id, result_type=RunState)), timeout)


def events(state: dict) -> list:
    return [(e["kind"], e["trigger"], e["virtual_time"], e["detail"]) for e in state["world"]["events"]]


async def test_a_run_started_on_one_machine_completes_on_the_others_worker(machines, cluster, client):
    a, b = machines("a"), machines("b")
    b.start_worker()
    run_id = a.start_detached("hello")  # A runs no worker: `--detach` only starts the run
    state = await finished(client, run_id)
    assert state.status == "passed", state.error
    shown = a.show(run_id)  # A reads the record B's worker wrote to the shared document store
    assert shown["status"] == "passed" and shown["score"] == state.score == 1.0
    assert shown["steps"]["notes"]["outputs"]["gateway"] in cluster.gateways, "placed on the pool"
    assert not (Path(a.env["AGENT_ENV_HOME"]) / "gateway").exists(), "A started no gateway of its own"


@pytest.mark.durability
async def test_a_workplace_run_whose_worker_is_killed_completes_on_another_machine(machines, client, tmp_path):
    a, b = machines("a"), machines("b")
    name = f"workplace-{uuid.uuid4().hex[:6]}"
    # The built-in task renamed, with its env beside it, pushed to the registry. Its three days are paced at
    # half a day per second instead of jumping from event to event, so the worker can die in the middle of them.
    bundle = tmp_path / "bundle"
    shutil.copytree(BUILTIN_ROOT / "workplace", bundle)
    shutil.copytree(BUILTIN_ROOT / "support-desk" / "envs", bundle / "envs")
    task = bundle / "tasks" / "workplace.toml"
    text = task.read_text().replace('id = "workplace"', f'id = "{name}"')
    assert 'mode = "event_driven"' in text
    (bundle / "tasks" / f"{name}.toml").write_text(
        text.replace('mode = "event_driven"', 'mode = "paced"\nrate = 43200')
    )
    task.unlink()
    pushed = a.cli("registry", "push", str(bundle))
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    shutil.rmtree(bundle)

    b_worker = b.start_worker()  # `run` follows; one worker, B's own, runs it from start to end
    undisturbed = b.cli("run", name, "--json")
    b_worker.terminate()  # drains: then the run below starts on A's worker alone
    b_worker.wait(60)
    assert undisturbed.returncode == 0, undisturbed.stdout + undisturbed.stderr
    baseline = json.loads(undisturbed.stdout[undisturbed.stdout.index("{") :])
    assert baseline["status"] == "passed" and baseline["score"] == 1.0

    worker = a.start_worker()
    run_id = a.start_detached(name)

    async def days_under_way() -> RunState | None:
        state = await state_of(client, run_id)
        fired = state.world.count("fired") if state.world else 0
        return state if state.steps["three_days"].status == "running" and fired >= 3 else None

    before = await until(days_under_way, what="the run's world under way", timeout=90, interval=0.05)
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)
    fired = [e for e in events(baseline) if e[0] == "fired"]
    assert len(fired) > before.world.count("fired") >= 3, "killed with some of the world's events fired, not all"
    b.start_worker()
    state = await finished(client, run_id)
    assert state.status == "passed" and state.score == 1.0, state.error
    after = a.show(run_id)
    assert events(after) == events(baseline), "the same world events, in the same order, at the same virtual times"
    assert all(s["attempts"] <= 2 for s in after["steps"].values() if s["type"] != "wait_clock")


def sleepy_task(root: Path, seconds: float) -> Path:
    """A task whose middle step sleeps `seconds`, heartbeating: a worker stopped then has a step running."""
    path = root / "sleepy.toml"
    steps = [("before", 0, []), ("slow", seconds, ["before"]), ("after", 0, ["slow"])]
    text = f'id = "sleepy-{uuid.uuid4().hex[:6]}"\nversion = "1"\n'
    for sid, secs, needs in steps:
        text += f'\n[[steps]]\nid = "{sid}"\ntype = "sleep"\ndepends_on = {json.dumps(needs)}\n'
        text += f"config = {{ seconds = {secs} }}\n"
    path.write_text(text)
    return path


async def stop_while_slow_runs(
    a: Machine, b: Machine, client, task: Path, again: bool = False
) -> tuple[RunState, subprocess.Popen]:
    """Start the task on A's worker, SIGTERM that worker while `slow` runs (`again`: twice), start B's; the
    run's end state."""
    worker = a.start_worker()
    run_id = a.start_detached(str(task))

    async def slow_running() -> bool | None:
        """A worker has started the step's activity (the run says `running` as soon as it is scheduled)."""
        from temporalio.api.enums.v1 import PendingActivityState

        described = await client.get_workflow_handle(run_id).describe()
        return (
            any(
                a.activity_id == "slow" and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                for a in described.raw_description.pending_activities
            )
            or None
        )

    await until(slow_running, what="the slow step running on A's worker", timeout=60, interval=0.05)
    worker.send_signal(signal.SIGTERM)
    if again:
        await asyncio.sleep(0.5)
        worker.send_signal(signal.SIGTERM)
        worker.wait(5)  # at once, not after the step's 10 s
    b.start_worker()
    return await finished(client, run_id), worker


async def test_a_worker_sent_sigterm_finishes_its_step_and_exits_0(machines, client, tmp_path):
    a, b = machines("a"), machines("b")
    state, worker = await stop_while_slow_runs(a, b, client, sleepy_task(tmp_path, 4))
    assert worker.wait(30) == 0, a.worker_log()
    assert state.status == "passed", state.error
    assert state.steps["slow"].attempts == 1, "the step ran once: A finished it"
    log = a.worker_log()
    assert "draining: 1 activity running, up to 30 s" in log and "drained: 1 finished" in log, log


async def test_a_step_running_past_the_drain_timeout_is_handed_back_and_retried_elsewhere(machines, client, tmp_path):
    a, b = machines("a", "[worker]\ndrain_timeout = 1\n"), machines("b")
    state, worker = await stop_while_slow_runs(a, b, client, sleepy_task(tmp_path, 8))
    assert worker.wait(15) == 0, a.worker_log()
    assert state.status == "passed", state.error
    assert state.steps["slow"].attempts == 2, "handed back once, then run again by B"
    assert "drained: 0 finished, 1 handed back to other workers" in a.worker_log()


async def test_a_second_sigterm_stops_the_worker_at_once_and_another_finishes_the_step(machines, client, tmp_path):
    a, b = machines("a"), machines("b")
    state, worker = await stop_while_slow_runs(a, b, client, sleepy_task(tmp_path, 10), again=True)
    assert worker.returncode == 128 + signal.SIGTERM, a.worker_log()
    assert "stopping at once" in a.worker_log()
    assert state.status == "passed", state.error
    assert state.steps["slow"].attempts == 2, "A's attempt was cut short; B ran the step again"
