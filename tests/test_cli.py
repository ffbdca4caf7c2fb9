"""The `agent-env` command, through real subprocesses."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import free_port, processes_naming

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")


# Runs started here are executed by CLI processes, never by the session's in-process worker (its event
# loop is blocked while a synchronous test waits on a subprocess): they get a task queue of their own.
CLI_QUEUE = {"AGENT_ENV_TASK_QUEUE": "agentenv-cli-tests"}


def cli(*args, env=None, cwd=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [AGENT_ENV, *args],
        capture_output=True,
        text=True,
        env={**(env or os.environ), **CLI_QUEUE},
        cwd=cwd,
        timeout=timeout,
    )


@pytest.fixture
def fresh_env(tmp_path):
    """A state directory and ports of its own: nothing running yet."""
    env = {
        **os.environ,
        "AGENT_ENV_HOME": str(tmp_path / "home"),
        "AGENT_ENV_SERVER_PORT": str(free_port()),
        "AGENT_ENV_UI_PORT": str(free_port()),
        "AGENT_ENV_GATEWAY_PORT": str(free_port()),
    }
    yield env
    cli("server", "stop", env=env)
    cli("gateway", "stop", env=env)


def test_help_imports_nothing_heavy():
    probe = (
        "import atexit, sys\n"
        "heavy = ('temporalio', 'mcp', 'a2a', 'boto3', 'botocore', 'docker', 'modal', 'e2b', 'google', 'httpx', 'grpc',"
        " 'openai', 'anthropic', 'agentenv_protocol')\n"
        "atexit.register(lambda: print('LOADED', sorted({m.split('.')[0] for m in sys.modules} & set(heavy))))\n"
        "sys.argv = ['agent-env', '--help']\n"
        "from agent_env.cli import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert "Usage: agent-env" in out.stdout and "run" in out.stdout
    assert "LOADED []" in out.stdout


def test_version_and_subcommand_help():
    from agent_env import __version__

    assert cli("--version").stdout.strip() == f"agent-env {__version__}"
    for args in (["run", "--help"], ["runs", "--help"], ["server", "--help"], ["worker", "--help"]):
        done = cli(*args)
        assert done.returncode == 0 and "Usage:" in done.stdout, args


def test_run_without_argument_lists_what_can_run():
    done = cli("run")
    assert done.returncode == 0
    assert "hello" in done.stdout and "built-in" in done.stdout


def test_run_hello(server):
    done = cli("run", "hello")
    assert done.returncode == 0, done.stdout + done.stderr
    for step in ("notes", "greet_ada", "greet_alan", "verify"):
        assert step in done.stdout
    assert "score 1.00 (3/3)" in done.stdout
    assert "PASSED · score 1.00" in done.stdout
    assert "Temporal UI" not in done.stdout, "the embedded server's web UI is off unless asked for"

    run_id = done.stdout.split("run ")[1].split()[0]
    listed = cli("runs", "list")
    assert run_id in listed.stdout and "passed" in listed.stdout
    shown = cli("runs", "show", run_id[:-2])  # a unique prefix is enough
    assert shown.returncode == 0 and "score 1.00" in shown.stdout and '"both greetings are stored": 2' in shown.stdout
    record = json.loads(cli("runs", "show", run_id, "--json").stdout)
    assert record["status"] == "passed" and record["steps"]["verify"]["score"]["value"] == 1.0
    lines = [json.loads(x) for x in cli("runs", "list", "--json", "--task", "hello").stdout.splitlines()]
    assert lines and all(r["task_id"] == "hello" for r in lines)


def test_run_json_and_failing_exit_code(server, tmp_path):
    path = tmp_path / "fails.toml"
    path.write_text(
        'id = "fails"\n[[steps]]\nid = "v"\ntype = "check"\n'
        '[[steps.config.checks]]\nname = "one is two"\nvalue = 1\nequals = 2\n'
    )
    done = cli("run", str(path), "--json")
    assert done.returncode == 1
    state = json.loads(done.stdout)
    assert state["status"] == "failed" and state["score"] == 0.0


@pytest.mark.parametrize(
    "content,expected",
    [
        ('id = "x"\n[[steps]\n', "is not valid TOML"),
        ('id = "x"\n[[steps]]\nid = "a"\ntype = "nope"\n', "unknown step type 'nope'"),
        (
            'id = "x"\n[[steps]]\nid = "a"\ntype = "echo"\ndepends_on = ["b"]\n'
            '[[steps]]\nid = "b"\ntype = "echo"\ndepends_on = ["a"]\n',
            "dependency cycle a → b → a",
        ),
    ],
)
def test_bad_task_files_exit_2_with_the_problem(tmp_path, content, expected):
    path = tmp_path / "task.toml"
    path.write_text(content)
    done = cli("run", str(path))
    assert done.returncode == 2
    assert expected in done.stderr and "error:" in done.stderr
    assert "Traceback" not in done.stderr


def test_unknown_run_and_bundle(server):
    done = cli("runs", "show", "no-such-run")
    assert done.returncode == 2 and "there is no run 'no-such-run'" in done.stderr and "runs list" in done.stderr
    done = cli("run", "no-such-bundle")
    assert done.returncode == 2 and "hello" in done.stderr


def test_unreachable_temporal_address(tmp_path):
    (tmp_path / ".agentenv").mkdir()
    (tmp_path / ".agentenv" / "config.toml").write_text(
        f'[temporal]\naddress = "127.0.0.1:{free_port()}"\nconnect_timeout = 2\n'
    )
    started = time.monotonic()
    done = cli("run", "hello", cwd=tmp_path)
    assert done.returncode == 3
    assert "did not answer" in done.stderr and "[temporal] address in" in done.stderr
    assert time.monotonic() - started < 15
    done = cli("server", "start", cwd=tmp_path)
    assert done.returncode == 2 and "embedded server is not used" in done.stderr


def test_cold_start_then_reuse(fresh_env):
    assert cli("server", "status", env=fresh_env).returncode == 1
    done = cli("run", "hello", env=fresh_env)
    assert done.returncode == 0, done.stderr
    status = cli("server", "status", env=fresh_env)
    assert status.returncode == 0 and "running at" in status.stdout
    pid = status.stdout.split("pid ")[1].split(")")[0]
    assert cli("run", "hello", env=fresh_env).returncode == 0
    assert f"pid {pid})" in cli("server", "status", env=fresh_env).stdout, "the server is reused"
    stopped = cli("server", "stop", env=fresh_env)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout


def test_server_port_taken(fresh_env):
    with socket.socket() as other:
        other.bind(("127.0.0.1", int(fresh_env["AGENT_ENV_SERVER_PORT"])))
        other.listen()
        done = cli("run", "hello", env=fresh_env)
    assert done.returncode == 3
    assert "already in use" in done.stderr and "AGENT_ENV_SERVER_PORT" in done.stderr
    # What the run started beside the server (the gateway, in a daemon thread) is recorded, so it can be stopped:
    # a process exiting between a spawn and its pidfile left gateways nothing could find (3 runs in 6, here).
    cli("gateway", "stop", env=fresh_env)
    cli("server", "stop", env=fresh_env)
    home = fresh_env["AGENT_ENV_HOME"].encode()
    left = processes_naming(home)
    assert left == [], f"processes of this state dir nothing can stop: {left}"


def _printed(stream) -> str:
    """What a process that has exited wrote to its pipe, without waiting for EOF."""
    import select

    os.set_blocking(stream.fileno(), False)
    chunks = []
    while select.select([stream], [], [], 1.0)[0]:
        chunk = stream.read()
        if not chunk:
            break
        chunks.append(chunk)
    return "".join(chunks)


def test_interrupted_run_goes_on_in_the_background_worker(server, client, tmp_path):
    import asyncio

    gate = tmp_path / "gate"
    path = tmp_path / "paused.toml"
    path.write_text(
        f'id = "paused"\n[[steps]]\nid = "wait"\ntype = "wait_file"\nconfig = {{ path = "{gate}" }}\n'
        '[[steps]]\nid = "after"\ntype = "echo"\ndepends_on = ["wait"]\n'
    )
    proc = subprocess.Popen(
        [AGENT_ENV, "run", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **CLI_QUEUE},
    )
    header = proc.stdout.readline()
    while " · run " not in header:
        header = proc.stdout.readline()
    run_id = header.split(" · run ")[1].split()[0]
    time.sleep(1.0)  # let the background worker pick up the step
    proc.send_signal(signal.SIGINT)
    # The CLI's own exit, then what it printed. Not communicate(): it waits for every holder of the pipe to close
    # it, and a process the CLI started (a background worker, the gateway) is not what this test is about.
    assert proc.wait(timeout=120) == 130
    out = _printed(proc.stdout)
    assert f"run {run_id} goes on: the background worker" in out
    assert f"agent-env runs show {run_id}" in out and f"agent-env runs cancel {run_id}" in out

    desc = asyncio.get_event_loop().run_until_complete(client.get_workflow_handle(run_id).describe())
    assert desc.status.name == "RUNNING"
    gate.touch()  # no worker to start: the background one still runs it
    deadline = time.monotonic() + 60
    while json.loads(cli("runs", "show", run_id, "--json").stdout)["status"] == "running":
        assert time.monotonic() < deadline, "the run did not go on after its `run` was interrupted"
        time.sleep(0.3)
    assert json.loads(cli("runs", "show", run_id, "--json").stdout)["status"] == "passed"


def test_detach_then_cancel(server, tmp_path):
    path = tmp_path / "long.toml"
    path.write_text(
        f'id = "long"\n[[steps]]\nid = "wait"\ntype = "wait_file"\nconfig = {{ path = "{tmp_path / "never"}" }}\n'
    )
    done = cli("run", str(path), "--detach")
    assert done.returncode == 0 and "started run long-" in done.stdout
    run_id = done.stdout.split("started run ")[1].split()[0]
    cancelled = cli("runs", "cancel", run_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "CANCELLED" in cancelled.stdout
    again = cli("runs", "cancel", run_id)
    assert again.returncode == 2 and "already ended (cancelled)" in again.stderr


def test_schema_commands():
    task = json.loads(cli("schema", "task").stdout)
    assert task["title"] == "TaskSpec" and "StepSpec" in task["$defs"]
    config = json.loads(cli("schema", "config").stdout)
    assert "temporal" in config["properties"]
    done = cli("schema", "nope")
    assert done.returncode == 2 and "task, config, run" in done.stderr


def test_tools_and_trajectory_commands(server, tmp_path):
    """An instance's tools from the shell while its run holds it; once the run ended its agents' tokens no
    longer work (the CLI says so), and the run's trajectory is still read."""
    gate = tmp_path / "gate"
    path = tmp_path / "notes.toml"
    path.write_text(
        'id = "notes-held"\n[[steps]]\nid = "notes"\ntype = "deploy_env"\nconfig = { env_id = "notes" }\n'
        f'[[steps]]\nid = "hold"\ntype = "wait_file"\ndepends_on = ["notes"]\nconfig = {{ path = "{gate}" }}\n'
    )
    done = cli("run", str(path), "--detach")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split("started run ")[1].split()[0]
    instance = f"{run_id}.notes"

    def run_state() -> dict:
        return json.loads(cli("runs", "show", run_id, "--json").stdout)

    deadline = time.monotonic() + 60
    while run_state()["steps"].get("notes", {}).get("status") != "succeeded":
        assert time.monotonic() < deadline, "the notes were not deployed"
        time.sleep(0.2)

    listed = cli("tools", "list", instance)
    assert listed.returncode == 0 and "write_note --key --text" in listed.stdout and "get_time --zone?" in listed.stdout
    called = cli("tools", "call", instance, "write_note", "--key", "grace", "--text", "Hello, Grace")
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["key"] == "grace"
    read = cli("tools", "call", instance[:-2], "read_note", "--json", '{"key": "grace"}')  # a unique prefix is enough
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["text"] == "Hello, Grace"
    failed = cli("tools", "call", instance, "read_note", "--key", "nobody")
    assert failed.returncode == 1 and "no note named 'nobody'" in failed.stdout
    wrong = cli("tools", "call", instance, "read_note", "--kee", "x")
    assert wrong.returncode == 2 and "no argument '--kee'" in wrong.stderr and "--key" in wrong.stderr
    helped = cli("tools", "call", instance, "write_note", "--help")
    assert helped.returncode == 0 and "--text  string  the note's text" in helped.stdout
    token = cli("tools", "token", instance, "agent")
    assert token.returncode == 0 and token.stdout.startswith("aet_")

    gate.touch()
    while run_state()["status"] == "running":
        assert time.monotonic() < deadline + 60, "the run did not end"
        time.sleep(0.2)
    assert run_state()["status"] == "passed"
    for args in (("call", instance, "read_note", "--key", "grace"), ("list", instance), ("token", instance, "agent")):
        after = cli("tools", *args)
        assert after.returncode != 0 and "aet_" not in after.stdout, (args, after.stdout)
        assert f"run {run_id!r}, which ended at" in after.stderr and "role tokens no longer work" in after.stderr

    shown = cli("runs", "trajectory", run_id)
    assert shown.returncode == 0 and "write_note" in shown.stdout and "grace" in shown.stdout
    lines = [json.loads(x) for x in cli("runs", "trajectory", run_id, "--jsonl").stdout.splitlines()]
    assert [e["tool"] for e in lines] == ["write_note", "read_note", "read_note"]
    assert lines[-1]["tool"] == "read_note" and "error" in lines[-1]
    assert cli("gateway", "status").returncode == 0


def test_unknown_instance_names_the_fix(server):
    done = cli("tools", "list", "no-such-instance")
    assert done.returncode == 2 and "no environment instance 'no-such-instance'" in done.stderr


def test_run_workplace(server):
    done = cli("run", "workplace", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "score 1.00 (3/3)" in done.stdout and "world at 2026-03-05T13:00:00Z, 12 firings" in done.stdout
    run_id = done.stdout.split(" · run ")[1].split()[0]
    shown = cli("runs", "show", run_id)
    assert "dana_replies fired (sam called send_email)" in shown.stdout
    assert "cancelled refund_reminder" in shown.stdout
    trajectory = cli("runs", "trajectory", run_id, "--jsonl")
    causes = {json.loads(line).get("cause") for line in trajectory.stdout.splitlines()}
    assert {"trigger dana_replies", "trigger lee_refunds"} <= causes, "the world's calls say which trigger made them"


@pytest.mark.parametrize(
    "args",
    [
        ["hello"],
        ["hello", "--json"],
        ["hello", "-d", "--json"],
        ["--detach", "bundles/x"],
        ["b", "--task", "t2"],
        ["b", "-t", "t2", "--json"],
        ["b", "--task=t2"],
        ["b", "--task"],  # typer refuses: the full command says why
        ["a", "b"],
        ["hello", "--model", "m"],
        ["hello", "--model-url", "default=http://x"],
        [],
        ["--help"],
        ["hello", "--"],
    ],
)
def test_the_fast_path_reads_run_as_typer_does_or_leaves_it_to_typer(args):
    """`main` reads `run`'s options itself before typer loads (cli/run_args.py: typer here costs pydantic); what it
    reads is what typer's `run` would be called with, and what it cannot read exactly so goes to typer."""
    import typer

    from agent_env.cli.commands import app
    from agent_env.cli.run_args import parse_run

    run = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    try:
        params = run.make_context("run", list(args)).params
    except Exception:  # noqa: BLE001 - typer refused them (a usage error), or printed help and exited
        params = None
    fast = parse_run(list(args))
    if fast is None:
        return  # typer's, whatever it says
    assert params is not None, f"{args}: read by the fast path, refused by typer"
    assert not params["model"] and not params["model_url"]
    assert (fast.target, fast.task, fast.json_out, fast.detach) == (
        params["target"],
        params["task"],
        params["json_out"],
        params["detach"],
    )
