"""The background worker of the embedded services, through the real CLI: a Temporal dev server, the gateway and
the worker daemon in a state dir of this module's own.

`agent-env run` starts its run and follows it; the background worker executes every run. So one `run` never
prints another run's errors, an interrupted or killed worker leaves runs paused (not lost) until one runs
again, a worker running other code or settings is replaced, and `server stop` takes the worker with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import free_port, processes_naming

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A state dir and ports of this module's own; everything it started is stopped at the end."""
    home = tmp_path_factory.mktemp("bg") / "home"
    env = {
        **os.environ,
        "AGENT_ENV_HOME": str(home),
        "AGENT_ENV_SERVER_PORT": str(free_port()),
        "AGENT_ENV_UI_PORT": str(free_port()),
        "AGENT_ENV_GATEWAY_PORT": str(free_port()),
        "AGENT_ENV_TASK_QUEUE": "background-tests",
    }
    yield env
    cli("server", "stop", env=env)
    cli("gateway", "stop", env=env)
    assert _worker_processes(home) == [], "a background worker outlived `server stop`"


def cli(*args, env, cwd=None, timeout=90) -> subprocess.CompletedProcess:
    return subprocess.run([AGENT_ENV, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def _worker_processes(home: Path) -> list[int]:
    """Pids of live background workers of this state dir."""
    return processes_naming(b"agent_env.temporal.background", str(home).encode())


def _worker_pid(env) -> int | None:
    done = cli("worker", "status", env=env)
    if done.returncode != 0:
        return None
    return int(done.stdout.split("(pid ")[1].split(")")[0])


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def _status(env, run_id: str) -> str:
    return json.loads(cli("runs", "show", run_id, "--json", env=env).stdout)["status"]


def _wait_status(env, run_id: str, until: set[str], within: float = 60) -> str:
    deadline = time.monotonic() + within
    while (status := _status(env, run_id)) not in until:
        assert time.monotonic() < deadline, f"run {run_id} is still {status}"
        time.sleep(0.3)
    return status


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_a_mistyped_target_starts_nothing(tmp_path):
    """Cold, `run` starts the server and the worker while it plans (bring_up): for a target that names a task
    here only, so a typo leaves nothing running."""
    env = {**os.environ, "AGENT_ENV_HOME": str(tmp_path / "home"), "AGENT_ENV_SERVER_PORT": str(free_port())}
    try:
        typo = cli("run", "hellp", env=env)
        assert typo.returncode == 2 and "'hellp' is not a built-in bundle" in typo.stderr, typo.stderr
        assert "started" not in typo.stderr
        assert cli("server", "status", env=env).returncode == 1, "no server was started"
        assert _worker_processes(tmp_path / "home") == []
    finally:
        cli("server", "stop", env=env)


def test_run_leaves_a_background_worker_that_the_next_run_reuses(env):
    first = cli("run", "hello", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "started a background worker" in first.stderr and "PASSED" in first.stdout
    pid = _worker_pid(env)
    assert pid is not None and _worker_processes(Path(env["AGENT_ENV_HOME"])) == [pid]

    second = cli("run", "hello", env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "background worker" not in second.stderr
    assert _worker_pid(env) == pid, "the second run reused the worker"
    status = cli("worker", "status", env=env)
    assert "task queue 'background-tests'" in status.stdout and "out of date" not in status.stdout


def test_a_warm_run_goes_through_the_worker_and_says_what_the_command_says(env, tmp_path):
    """Warm, `run` hands the run to the worker: it loads neither Temporal's SDK, nor typer, nor even pydantic
    (its launch record names the worker), and prints what the full command would."""
    assert cli("run", "hello", env=env).returncode == 0
    probe = (
        "import atexit, sys\n"
        "heavy = ('temporalio', 'typer', 'pydantic', 'rich', 'agent_env.temporal.launch', 'agent_env.planning')\n"
        "atexit.register(lambda: print('LOADED', sorted(h for h in heavy if any(m == h or m.startswith(h + '.') "
        "for m in sys.modules))))\n"
        "sys.argv = ['agent-env', 'run', 'hello']\n"
        "from agent_env.cli import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASSED · score 1.00" in done.stdout and "✓ verify" in done.stdout
    assert done.stdout.rsplit("LOADED ", 1)[1].strip() == "[]"

    record = json.loads(cli("run", "hello", "--json", env=env).stdout)
    assert record["status"] == "passed" and record["score"] == 1.0
    unknown = cli("run", "no-such-bundle", env=env)
    assert unknown.returncode == 2 and "error: 'no-such-bundle' is not a built-in bundle" in unknown.stderr
    assert "fix: run one of:" in unknown.stderr and "hello" in unknown.stderr and "Traceback" not in unknown.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('id = "x"\n[[steps]]\nid = "a"\ntype = "nope"\n')
    refused = cli("run", str(bad), env=env)
    assert refused.returncode == 2 and "unknown step type 'nope'" in refused.stderr
    detached = cli("run", "hello", "-d", env=env)
    assert detached.returncode == 0 and "started run hello-" in detached.stdout
    assert "the background worker (`agent-env worker status`) executes it" in detached.stdout


def test_the_fast_path_finds_the_settings_where_load_settings_does(tmp_path, monkeypatch):
    from agent_env.config import default_state_dir, find_config_file
    from agent_env.temporal import control_client

    monkeypatch.delenv("AGENT_ENV_CONFIG", raising=False)
    nested = tmp_path / "project" / "sub"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)
    assert control_client.config_file() is None is find_config_file()
    (tmp_path / "project" / ".agentenv").mkdir()
    (tmp_path / "project" / ".agentenv" / "config.toml").write_text("")
    assert control_client.config_file() == find_config_file() == tmp_path / "project" / ".agentenv" / "config.toml"
    for home in (str(tmp_path / "h"), None):
        if home:
            monkeypatch.setenv("AGENT_ENV_HOME", home)
        else:
            monkeypatch.delenv("AGENT_ENV_HOME")
            monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
        assert control_client.default_state_dir() == default_state_dir()


def test_run_prints_only_its_own_run(env, tmp_path):
    boom = f"other-run-boom-{uuid.uuid4().hex[:8]}"
    other = _write(
        tmp_path,
        "other",
        f'id = "other"\n[[steps]]\nid = "nap"\ntype = "sleep"\nconfig = {{ seconds = 0.3 }}\n'
        f'[[steps]]\nid = "breaks"\ntype = "fail"\nretries = 2\ndepends_on = ["nap"]\n'
        f'config = {{ message = "{boom}", retryable = true }}\n',
    )
    started = cli("run", str(other), "--detach", env=env)
    assert started.returncode == 0, started.stderr
    other_id = started.stdout.split("started run ")[1].split()[0]
    assert "the background worker" in started.stdout

    ours = cli("run", "hello", env=env)
    assert ours.returncode == 0, ours.stdout + ours.stderr
    assert _wait_status(env, other_id, {"error", "failed"}) in ("error", "failed")
    assert boom not in ours.stdout + ours.stderr and other_id not in ours.stdout + ours.stderr
    log = Path(env["AGENT_ENV_HOME"]) / "worker" / "worker-default.background-tests.log"
    assert boom in log.read_text(), "the other run's failure is the background worker's to log"


@pytest.mark.durability
def test_a_killed_worker_pauses_the_run_and_the_next_worker_resumes_it(env, tmp_path):
    task = _write(tmp_path, "nap", 'id = "nap"\n[[steps]]\nid = "nap"\ntype = "sleep"\nconfig = { seconds = 12 }\n')
    # The step outlasts everything below by far: on a loaded machine `run --detach` and finding the worker can
    # take seconds, and a step that ended before the kill would make "paused" untestable.
    started = cli("run", str(task), "--detach", env=env)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split("started run ")[1].split()[0]
    pid = _worker_pid(env)
    assert pid is not None
    time.sleep(1.0)  # the step is running in the worker
    os.kill(pid, signal.SIGKILL)
    assert _gone(pid, 5)
    time.sleep(2.0)  # with no worker, nothing moves the run on
    assert _status(env, run_id) == "running", "paused, not lost"
    assert cli("worker", "status", env=env).returncode == 1

    restarted = cli("worker", "start", env=env)
    assert restarted.returncode == 0, restarted.stderr
    assert "background worker started" in restarted.stdout and _worker_pid(env) not in (None, pid)
    assert _wait_status(env, run_id, {"passed", "failed", "error"}, within=120) == "passed"


def test_a_worker_with_other_settings_or_code_is_replaced(env, tmp_path):
    assert cli("run", "hello", env=env).returncode == 0  # up, and reached through its launch record
    pid = _worker_pid(env)
    project = tmp_path / "project"  # the same install, with a setting changed by a config file
    (project / ".agentenv").mkdir(parents=True)
    (project / ".agentenv" / "config.toml").write_text("[worker]\ndrain_timeout = 7\n")
    assert "out of date" in cli("worker", "status", env=env, cwd=project).stdout

    done = cli("run", "hello", env=env, cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"background worker (pid {pid}) is out of date" in done.stderr
    new = _worker_pid(env)
    assert new not in (None, pid)
    assert _gone(pid, 40), "the replaced worker drains (within [worker] drain_timeout) and exits"
    assert "out of date" not in cli("worker", "status", env=env, cwd=project).stdout
    again = cli("run", "hello", env=env, cwd=project)
    assert again.returncode == 0 and "background worker" not in again.stderr and _worker_pid(env) == new

    # Another version (as after an upgrade): the pidfile's fingerprint is not this code's.
    pidfile = Path(env["AGENT_ENV_HOME"]) / "worker" / "worker-default.background-tests.json"
    record = json.loads(pidfile.read_text())
    record["extra"]["fingerprint"] = "started-by-another-version"
    pidfile.write_text(json.dumps(record))
    assert "out of date" in cli("worker", "status", env=env, cwd=project).stdout
    started = cli("worker", "start", env=env, cwd=project)
    assert started.returncode == 0 and f"background worker (pid {new}) is out of date" in started.stderr
    assert _gone(new, 40) and _worker_pid(env) not in (None, new)


def test_the_fingerprint_covers_what_the_worker_reads_from_its_environment(monkeypatch):
    from agent_env.providers.local import INHERITED
    from agent_env.temporal.background import WORKER_ENV, WORKER_ENV_PREFIXES, code_fingerprint

    assert set(INHERITED) <= set(WORKER_ENV) and "LC_" in WORKER_ENV_PREFIXES, "what a local sandbox inherits"
    base = code_fingerprint()
    for var, value in [("DOCKER_HOST", "tcp://elsewhere:2375"), ("DOCKER_CERT_PATH", "/certs"), ("AWS_PROFILE", "x")]:
        with monkeypatch.context() as changed:
            changed.setenv(var, value)
            assert code_fingerprint() != base, var
        assert code_fingerprint() == base
    monkeypatch.setenv("TERM", "something-else")  # how the terminal draws: nothing the worker does
    assert code_fingerprint() == base


SANDBOXED_ON_DOCKER = """
name = "box"
[[apps]]
name = "box"
[apps.sandbox]
image = "agentenv/base:bookworm"
provider = "docker"
[roles.agent]
tools = ["*"]
"""


def test_a_worker_started_under_another_docker_host_is_replaced(env, tmp_path):
    """The user points DOCKER_HOST elsewhere after the worker started: the next command replaces the worker, as
    a changed setting does, and the run's sandbox goes to the daemon the user names now, not the one before."""
    bundle = tmp_path / "b"
    (bundle / "envs" / "box").mkdir(parents=True)
    (bundle / "envs" / "box" / "env.toml").write_text(SANDBOXED_ON_DOCKER)
    (bundle / "tasks").mkdir()
    task = _write(
        bundle / "tasks", "t", 'id = "box"\n[[steps]]\nid = "box"\ntype = "deploy_env"\nconfig = { env_id = "box" }\n'
    )
    before = {**env, "DOCKER_HOST": "unix:///nonexistent/before.sock"}
    now = {**env, "DOCKER_HOST": "unix:///nonexistent/now.sock"}

    first = cli("run", str(task), env=before)  # also leaves the launch record `run`'s fast path follows
    assert first.returncode != 0 and "no Docker daemon answers at unix:///nonexistent/before.sock" in first.stdout
    pid = _worker_pid(before)
    assert "out of date" in cli("worker", "status", env=now).stdout

    done = cli("run", str(task), env=now)
    assert f"background worker (pid {pid}) is out of date" in done.stderr, done.stderr
    assert "no Docker daemon answers at unix:///nonexistent/now.sock" in done.stdout, done.stdout
    assert "before.sock" not in done.stdout
    assert _worker_pid(now) not in (None, pid)
    again = cli("run", "hello", env=now)
    assert again.returncode == 0 and "background worker" not in again.stderr, "the new one is current"


def test_server_stop_stops_the_worker(env):
    assert cli("worker", "start", env=env).returncode == 0
    pid = _worker_pid(env)
    stopped = cli("server", "stop", env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped the background worker (pid {pid})" in stopped.stdout
    assert _gone(pid, 5) and _worker_processes(Path(env["AGENT_ENV_HOME"])) == []
    status = cli("worker", "status", env=env)
    assert status.returncode == 1 and "not running" in status.stdout


def test_worker_commands_with_a_cluster_point_to_the_foreground_worker(tmp_path):
    (tmp_path / ".agentenv").mkdir()
    (tmp_path / ".agentenv" / "config.toml").write_text(f'[temporal]\naddress = "127.0.0.1:{free_port()}"\n')
    done = subprocess.run([AGENT_ENV, "worker", "start"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "run `agent-env worker`" in done.stderr
    helped = subprocess.run([AGENT_ENV, "worker", "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and all(word in helped.stdout for word in ("start", "stop", "status", "--identity"))
