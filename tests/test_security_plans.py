"""Only this install's planners make its workers act: every workflow start, update and activity is sealed with the
install's plan key, and workers check the seal before anything runs (agent_env/temporal_client/seals.py).

The attacker here is any local process that reaches the Temporal server (the embedded one listens on
127.0.0.1, without authentication): it may read histories, so it holds every seal a run recorded, and it drives
Temporal with the `temporal` CLI from an empty environment (no agent-env state, no plan key). Each test checks
the attack fails, and that what it tried would have acted, had it been ours.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import textwrap
import tomllib
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from test_security_state import HITS_TASK, until_holding

from agent_env.planning.tasks import load_task, parse_task
from agent_env.spec.run import RunStatus, StepCall, StepStatus
from agent_env.spec.world_state import TriggerHit
from agent_env.temporal import launch
from agent_env.temporal_client import seals
from agent_env.temporal_client.server import binary_path

ECHO_SERVER = Path(__file__).parent.parent / "agent_env" / "bundles" / "echo-mcp" / "envs" / "echo" / "server"


def marked_bundle(root: Path, marker: Path) -> Path:
    """A bundle whose one app is a local process that first writes `id` into `marker`: a run of it acts."""
    import shutil

    server = root / "envs" / "box" / "server"
    shutil.copytree(ECHO_SERVER, server)
    (root / "envs" / "box" / "env.toml").write_text(
        textwrap.dedent(f"""
        name = "box"
        [[apps]]
        name = "echo"
        [apps.sandbox]
        build = "server"
        command = ["sh", "-c", "id > {marker}; exec {sys.executable} server.py"]
        port = 8000
        provider = "local"
        [roles.agent]
        tools = ["*"]
        """)
    )
    (root / "tasks").mkdir()
    (root / "tasks" / "t.toml").write_text(
        'id = "marked"\n[[steps]]\nid = "env"\ntype = "deploy_env"\nconfig = { env_id = "box" }\n'
    )
    return root


async def temporal(settings, *args: str) -> subprocess.CompletedProcess:
    """The Temporal CLI as an outsider runs it: no agent-env variables, no home, only the server's address. (In a
    thread: this test's loop also runs the worker.)"""
    return await asyncio.to_thread(
        subprocess.run,
        [str(binary_path()), *args, "--address", settings.address, "--namespace", settings.temporal.namespace],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
        timeout=60,
    )


async def start_from_cli(settings, workflow_id: str, plan_file: Path, *extra: str) -> subprocess.CompletedProcess:
    """`temporal workflow start` of the task run in `plan_file` on the install's task queue, as an outsider."""
    return await temporal(
        settings, "workflow", "start", "--type", launch.WORKFLOW, "--task-queue", settings.temporal.task_queue,
        "--workflow-id", workflow_id, "--input-file", str(plan_file), *extra,
    )  # fmt: skip


async def refusal(client, workflow_id: str) -> ApplicationError:
    """How the run `workflow_id` ended: refused, with the reason as the workflow's failure."""
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(client.get_workflow_handle(workflow_id).result(), 60)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "UnsealedPlan", cause
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    kinds = {e.WhichOneof("attributes") for e in history.events}
    assert not any("activity" in k or "marker" in k for k in kinds if k), f"something ran: {sorted(kinds)}"
    return cause


def started_event(history):
    return history.events[0].workflow_execution_started_event_attributes


@pytest.fixture
def marked(tmp_path):
    marker = tmp_path / "acted"
    return marker, load_task(marked_bundle(tmp_path / "bundle", marker) / "tasks" / "t.toml")


async def test_a_run_started_from_the_temporal_cli_is_refused_before_any_step(client, settings, worker, marked):
    """Attack: with an empty environment, `temporal workflow start` a run whose one app is a local command (here
    it writes `id` to a file; it could be anything), on the install's task queue. The worker must not run it.
    The same plan started by this install's planner runs (the command writes the file)."""
    marker, task = marked
    inp = launch.plan(task, launch.new_run_id("forged"), settings)
    plan_file = marker.parent / "plan.json"
    plan_file.write_text(inp.model_dump_json())
    started = await start_from_cli(settings, inp.run_id, plan_file)
    assert started.returncode == 0, started.stderr
    cause = await refusal(client, inp.run_id)
    assert "refused before any step ran: it carries no seal" in cause.message
    assert not marker.exists()

    genuine = inp.model_copy(update={"run_id": launch.new_run_id("genuine")})
    final = await asyncio.wait_for(launch.wait_result(await launch.start(client, settings, genuine)), 90)
    assert final.status is RunStatus.PASSED, final.error
    assert marker.read_text().startswith("uid="), "the planner's own run of the plan acts"


async def test_a_copied_seal_is_worthless_on_another_id_or_an_altered_plan(client, settings, worker, marked):
    """Attack: copy a real run's input and seal from its history (any local process can read histories), then
    start it again under another workflow id, or with one byte of the plan changed, under its own id."""
    marker, task = marked
    handle = await launch.start_run(client, settings, task)
    assert (await asyncio.wait_for(launch.wait_result(handle), 90)).status is RunStatus.PASSED
    marker.unlink()
    start = started_event(await handle.fetch_history())
    seal = start.header.fields[seals.HEADER].data.decode()
    original = start.input.payloads[0].data.decode()
    altered = original.replace(str(marker), str(marker)[:-1] + "X")
    assert altered != original and len(altered) == len(original)
    for workflow_id, body, why in (
        (f"copied-{uuid.uuid4().hex[:8]}", original, "another workflow id"),
        (handle.id, altered, "one byte changed"),
    ):
        plan_file = marker.parent / f"{uuid.uuid4().hex}.json"
        plan_file.write_text(body)
        started = await start_from_cli(settings, workflow_id, plan_file, "--headers", f"{seals.HEADER}={seal}")
        assert started.returncode == 0, (why, started.stderr)
        cause = await refusal(client, workflow_id)
        assert "its seal does not match" in cause.message, why
    assert not marker.exists() and not marker.with_name(marker.name[:-1] + "X").exists()


async def test_a_forged_or_copied_trigger_hit_is_refused(client, settings, worker, tmp_path):
    """Attack: send a run a trigger hit with `temporal workflow update execute` (the world then acts: calls a
    tool, instructs an agent), bare or with the seal of a real hit copied from the run's history under a new
    update id. Both are refused before they reach history; the run still takes the gateway's sealed hits."""
    gate = tmp_path / "gate"
    handle = await launch.start_run(client, settings, parse_task(tomllib.loads(HITS_TASK.format(gate=gate)), "t"))
    state = await until_holding(handle)
    hit = TriggerHit(
        trigger="later", instance=state.steps["pad"].outputs["instance"], virtual_time=datetime.now(UTC), match={}
    )
    forged = await temporal(
        settings, "workflow", "update", "execute", "--workflow-id", handle.id, "--name", "trigger_hit",
        "--input", hit.model_dump_json(),
    )  # fmt: skip
    assert forged.returncode != 0 and "carries no seal" in forged.stderr + forged.stdout, forged

    ack = await handle.execute_update("trigger_hit", hit, result_type=dict)  # this install's: sealed
    assert ack["accepted"], ack
    history = await handle.fetch_history()
    accepted = next(
        e.workflow_execution_update_accepted_event_attributes.accepted_request
        for e in history.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    )
    copied = await temporal(
        settings, "workflow", "update", "execute", "--workflow-id", handle.id, "--name", "trigger_hit",
        "--input", accepted.input.args.payloads[0].data.decode(), "--update-id", f"again-{uuid.uuid4().hex}",
        "--headers", f"{seals.HEADER}={accepted.input.header.fields[seals.HEADER].data.decode()}",
    )  # fmt: skip
    assert copied.returncode != 0 and "its seal does not match" in copied.stderr + copied.stdout, copied
    gate.touch()
    final = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert final.status is RunStatus.PASSED, final.error
    assert [e.trigger for e in final.world.events if e.kind == "fired"] == ["later"], "one hit, the sealed one"


async def test_an_activity_no_run_scheduled_does_nothing(client, settings, worker, marked):
    """Attack: skip the workflow and start a standalone step activity (`agentenv.step.deploy_env`) on the install's task queue
    (Temporal 1.32 runs activities without a workflow), with a deploy step's planned config, bare or with a
    seal copied from a real run's activity. The worker refuses it; the command never runs."""
    marker, task = marked
    handle = await launch.start_run(client, settings, task)
    assert (await asyncio.wait_for(launch.wait_result(handle), 90)).status is RunStatus.PASSED
    marker.unlink()
    history = await handle.fetch_history()
    scheduled = next(
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    )
    seal = scheduled.header.fields[seals.HEADER].data.decode()
    inp = launch.plan(task, handle.id, settings)
    call = StepCall(run_id=handle.id, task_id=inp.task_id, step_id="env", type="deploy_env", config=inp.steps[0].config)
    # (the old single type, and the named one a dynamic activity serves)
    for kind, headers in itertools.product(
        ("agentenv.run_step", "agentenv.step.deploy_env"), ([], ["--headers", f"{seals.HEADER}={seal}"])
    ):
        ran = await temporal(
            settings, "activity", "execute", "--type", kind, "--task-queue",
            settings.temporal.task_queue, "--activity-id", f"forged-{uuid.uuid4().hex[:8]}",
            "--start-to-close-timeout", "60s", "--retry-maximum-attempts", "1", "--input", call.model_dump_json(),
            *headers,
        )  # fmt: skip
        assert ran.returncode != 0 and "no run scheduled it" in ran.stderr + ran.stdout, ran
    assert not marker.exists()


async def test_a_step_completed_from_outside_fails_instead_of_taking_the_result(client, settings, worker, tmp_path):
    """Attack: Temporal lets any client complete a running activity by its id. Complete a run's waiting step
    with a made-up result (outputs, a score of 1.0), bare, or with the sealed result of another step of the
    same run copied from its history. The step fails naming why; nothing it was told is taken."""
    for copy in (False, True):
        gate = tmp_path / f"gate-{copy}"
        steps = [
            {"id": "nap", "type": "sleep", "config": {"seconds": 0.01}},  # a regular activity: its result is sealed
            {"id": "hold", "type": "wait_file", "depends_on": ["nap"], "config": {"path": str(gate)}},
        ]
        handle = await launch.start_run(client, settings, parse_task({"id": "held", "steps": steps}, "t"))
        await until_holding(handle)
        forged = json.dumps({"outputs": {"forged": True}, "score": {"value": 1.0}})
        if copy:
            history = await handle.fetch_history()
            done = next(
                e.activity_task_completed_event_attributes
                for e in history.events
                if e.HasField("activity_task_completed_event_attributes")
            )
            forged = done.result.payloads[0].data.decode()  # the nap step's result, with its seal
            assert '"seal"' in forged
        completed = await temporal(
            settings, "activity", "complete", "--workflow-id", handle.id, "--activity-id", "hold", "--result", forged
        )
        assert completed.returncode == 0, completed.stderr
        final = await asyncio.wait_for(launch.wait_result(handle), 60)
        hold = final.steps["hold"]
        assert final.status is RunStatus.ERROR and hold.status is StepStatus.FAILED, (copy, final.status, hold)
        expected = "its seal does not match" if copy else "it carries no seal"
        refused = "result of activity agentenv.step.wait_file was refused"
        assert refused in hold.error and expected in hold.error, hold.error
        assert "forged" not in json.dumps(hold.outputs) and hold.score is None


# -- the seal itself (no server) --

KEY = seals.PlanKey(b"k" * 32, datetime(2026, 1, 1, tzinfo=UTC))
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
RUN = seals.Subject(seals.START, "default", "run-1", "agentenv.TaskRun")


def test_a_seal_holds_only_for_what_it_was_made_for():
    from dataclasses import replace

    header = {seals.HEADER: seals.make(KEY, RUN, [{"a": 1}], NOW)}
    assert seals.problem(KEY, header, RUN, [{"a": 1}], NOW) is None
    for subject, args in (
        (replace(RUN, workflow_id="run-2"), [{"a": 1}]),
        (replace(RUN, namespace="other"), [{"a": 1}]),
        (replace(RUN, name="agentenv.Other"), [{"a": 1}]),
        (replace(RUN, what=seals.UPDATE), [{"a": 1}]),
        (replace(RUN, extra="update-2"), [{"a": 1}]),
        (RUN, [{"a": 2}]),
        (RUN, [{"a": 1}, None]),
    ):
        assert "does not match" in seals.problem(KEY, header, subject, args, NOW), (subject, args)
    other_key = seals.PlanKey(b"j" * 32, None)
    assert "does not match" in seals.problem(other_key, header, RUN, [{"a": 1}], NOW)


def test_a_seal_is_judged_by_the_servers_time_and_its_shape():
    from temporalio.api.common.v1 import Payload

    header = {seals.HEADER: seals.make(KEY, RUN, [], NOW)}
    assert seals.problem(KEY, header, RUN, [], NOW + seals.FRESH - timedelta(seconds=1)) is None
    assert "too far from the server's time" in seals.problem(
        KEY, header, RUN, [], NOW + seals.FRESH + timedelta(seconds=1)
    )
    assert "too far from the server's time" in seals.problem(
        KEY, header, RUN, [], NOW - seals.SKEW - timedelta(seconds=1)
    )
    assert seals.problem(KEY, header, RUN, [], None) is None  # activities: bound to their run, valid across retries
    assert seals.problem(KEY, {}, RUN, [], NOW) == "it carries no seal"
    for data in (b"not json", b'{"at": "x", "mac": "y"}', b"[]", json.dumps({"at": 1}).encode()):
        assert seals.problem(KEY, {seals.HEADER: Payload(data=data)}, RUN, [], NOW) == "its seal is malformed", data


def test_defaults_do_not_change_a_digest_but_values_do():
    """A sender's model and the worker's copy decoded from it spell the same digest, also when the worker's
    version added a field with a default (a rolling upgrade)."""
    from pydantic import BaseModel

    class Old(BaseModel):
        a: int
        b: str = "x"

    class New(Old):
        c: list[int] = []

    assert seals.digest([Old(a=1)]) == seals.digest([New(a=1)]) == seals.digest([New(a=1, b="x", c=[])])
    assert seals.digest([Old(a=1)]) != seals.digest([New(a=1, c=[2])])


def test_the_plan_key_is_private_and_a_broken_one_names_the_fix(tmp_path):
    from agent_env.config import load_settings

    settings = load_settings(tmp_path)
    settings.state_dir = tmp_path / "state"
    key = seals.load(settings)
    path = settings.state_dir / "plan.key"
    assert path.stat().st_mode & 0o777 == 0o600
    assert seals.load(settings) == key, "made once, then read"
    assert key.since is not None and abs(key.since - datetime.now(UTC)) < timedelta(minutes=1)
    path.write_text("abcd\n")
    with pytest.raises(seals.BrokenSeal, match="is damaged") as err:
        seals.load(settings)
    assert "delete" in str(err.value.fix)
    path.chmod(0o644)
    with pytest.raises(seals.BrokenSeal, match="readable by other users"):
        seals.load(settings)
    settings.temporal.plan_key_secret = "plan-key"
    with pytest.raises(seals.BrokenSeal, match="plan_key_secret") as err:
        seals.load(settings)
    assert "agent-env secrets set plan-key" in str(err.value.fix)


# -- the embedded server's other doors --


def test_the_embedded_servers_http_api_answers_only_this_machines_names(server):
    """Attack: a web page rebinds its own domain to 127.0.0.1 and, from the browser, reads runs or starts one
    through the dev server's HTTP API (it always opens one). Requests naming another host get 403 and no data."""
    import httpx

    assert server.http_port, "the embedded server records its HTTP API's port"
    base = f"http://127.0.0.1:{server.http_port}"
    own = httpx.get(f"{base}/api/v1/namespaces", timeout=10)
    assert own.status_code == 200 and "default" in own.text, own.text[:200]
    hosts = ("evil.example", f"evil.example:{server.http_port}", f"127.0.0.1.evil.example:{server.http_port}")
    for host in (*hosts, f"evil127.0.0.1:{server.http_port}", "localhost.evil.example"):
        rebound = httpx.get(f"{base}/api/v1/namespaces", headers={"Host": host}, timeout=10)
        assert rebound.status_code == 403 and "default" not in rebound.text, (host, rebound.text[:200])
        started = httpx.post(
            f"{base}/api/v1/namespaces/default/workflows/rebound-{uuid.uuid4().hex[:6]}",
            headers={"Host": host, "Content-Type": "application/json"},
            json={"workflowType": {"name": launch.WORKFLOW}, "taskQueue": {"name": "agentenv"}},
            timeout=10,
        )
        assert started.status_code == 403, (host, started.text[:200])


def test_the_embedded_servers_web_ui_is_off_unless_asked_for(server, settings):
    """Attack: a rebound page reads every run's history through the Temporal UI and, echoing its CSRF cookie,
    acts through the UI's API (the UI has no Host check or sign-in of its own). By default there is no UI."""
    import socket

    assert not settings.server.ui and server.ui_port is None and server.ui_url is None
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", settings.server.ui_port))
