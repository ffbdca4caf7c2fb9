"""This install's state against hostile neighbours and hostile callers: a private state dir, a secret file
that concurrent writers never corrupt, a gateway key that cannot be emptied into a guessable one, a reaper
that leaves other installs' sandboxes alone, and run updates that refuse what is not the run's before it
reaches history. Each test's docstring names the attack it stands for."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import free_port
from test_docker import docker_client  # noqa: F401 - the Docker tier's fixture (fails, not skips, in CI)

from agent_env.config import Settings, TemporalSettings
from agent_env.errors import AgentEnvError
from agent_env.gateway import tokens
from agent_env.planning.tasks import parse_task
from agent_env.providers import SandboxSpec, by_name
from agent_env.providers.base import install_id
from agent_env.providers.reaper import reap
from agent_env.spec.run import RunStatus, StepStatus
from agent_env.spec.world_state import TriggerHit
from agent_env.stores.secrets import SecretStore
from agent_env.temporal import launch

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")


def cli(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([AGENT_ENV, *args], capture_output=True, text=True, env=env, timeout=timeout)


def open_to_others(root: Path) -> list[str]:
    """Every path under `root` (itself included) that its group or other users may use."""
    paths = [root, *root.rglob("*")]
    return [f"{p} {p.lstat().st_mode & 0o777:o}" for p in paths if not p.is_symlink() and p.lstat().st_mode & 0o077]


# -- 1. the state dir is this user's alone --


def test_state_dir_and_everything_a_run_writes_are_private(tmp_path):
    """Attack: another local user reads the secret file, the gateway key (and so forges admin and agent
    tokens), run records or daemon logs from a group/world-readable state dir."""
    home = tmp_path / "home"
    home.mkdir(mode=0o755)  # an existing state dir, made too open (by hand, or by an older version)
    os.chmod(home, 0o755)
    env = {
        **os.environ,
        "AGENT_ENV_HOME": str(home),
        "AGENT_ENV_SERVER_PORT": str(free_port()),
        "AGENT_ENV_UI_PORT": str(free_port()),
        "AGENT_ENV_GATEWAY_PORT": str(free_port()),
        "AGENT_ENV_TASK_QUEUE": "agentenv-security-tests",
    }
    old_umask = os.umask(0o022)  # the usual shell umask: our processes must not depend on it
    try:
        assert cli("secrets", "set", "api", "--value", "s3cret", env=env).returncode == 0
        done = cli("run", "hello", env=env)
        assert done.returncode == 0, done.stderr
        assert cli("gateway", "start", env=env).returncode == 0  # the gateway's key, store and log too
    finally:
        os.umask(old_umask)
        cli("gateway", "stop", env=env)
        cli("server", "stop", env=env)
    written = {p.name for p in home.rglob("*")}
    assert {"secrets.json", "key", "agentenv.sqlite", "server.log", "gateway.log"} <= written, written
    assert open_to_others(home) == []


def test_a_shared_state_dir_is_refused(tmp_path):
    """Attack: the state dir is a shared, world-writable folder (say /tmp), where others can plant or swap
    files (a key, a pidfile) before we use them."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    done = cli("secrets", "list", env={**os.environ, "AGENT_ENV_HOME": str(shared)})
    assert done.returncode == 2
    assert "not a private folder" in done.stderr and "AGENT_ENV_HOME" in done.stderr


# -- 2. concurrent secret writers --

WRITER = """
import sys, time
from pathlib import Path
from agent_env.stores.secrets import SecretStore
home, name, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
while not go.exists():
    time.sleep(0.001)
SecretStore(home).set(name, "value-of-" + name)
"""


def test_fifty_concurrent_secret_writers_lose_nothing(tmp_path):
    """Attack (or plain bad luck): many `secrets set` at once, each reading, changing and rewriting the one
    file; without a lock the last writer silently drops the others' secrets (and clashing temp files fail)."""
    home, go = tmp_path / "home", tmp_path / "go"
    names = [f"key-{i}" for i in range(50)]
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(home), name, str(go)]) for name in names]
    time.sleep(0.5)  # let them all start, then release them together
    go.touch()
    assert [w.wait(60) for w in writers] == [0] * 50
    store = SecretStore(home)
    assert store.names() == sorted(names)
    assert all(store.get(name) == f"value-of-{name}" for name in names)
    assert (home / "secrets.json").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in home.iterdir()) == ["secrets.json", "secrets.json.lock"], "no temp file is left"


def test_concurrent_cli_secret_writers_lose_nothing(tmp_path):
    """The same race through the real `agent-env secrets set` command, a dozen at once."""
    env = {**os.environ, "AGENT_ENV_HOME": str(tmp_path / "home")}
    names = [f"cli-{i}" for i in range(12)]
    procs = [
        subprocess.Popen(
            [AGENT_ENV, "secrets", "set", n, "--value", f"v-{n}"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for n in names
    ]
    assert [p.wait(60) for p in procs] == [0] * len(names)
    store = SecretStore(tmp_path / "home")
    assert store.names() == sorted(names) and all(store.get(n) == f"v-{n}" for n in names)


# -- 3. the gateway key --


def test_a_broken_gateway_key_is_an_error_naming_the_fix(tmp_path):
    """Attack: the key file is emptied or truncated (a full disk, a careless edit, a hostile process), and
    the admin token becomes HMAC under b"" -- the same, guessable token on every such install."""
    key = tmp_path / "gateway" / "key"
    good = tokens.load_or_create_key(key)
    assert len(good) == 32 and key.stat().st_mode & 0o777 == 0o600
    assert tokens.load_or_create_key(key) == good
    for content in (b"", b"short"):
        key.write_bytes(content)
        with pytest.raises(AgentEnvError, match="empty or damaged") as err:
            tokens.load_or_create_key(key)
        assert "delete it to make a new one" in err.value.fix
    key.write_bytes(good)
    key.chmod(0o644)
    with pytest.raises(AgentEnvError, match="readable by other users"):
        tokens.load_or_create_key(key)
    key.unlink()
    key.mkdir()  # unreadable as a key (a folder; running as root, modes cannot make a file unreadable)
    with pytest.raises(AgentEnvError, match="cannot be read"):
        tokens.load_or_create_key(key)


def test_the_cli_refuses_an_empty_gateway_key(tmp_path):
    """The same attack seen from the command line: the gateway does not start on an empty key, and says why."""
    home = tmp_path / "home"
    env = {**os.environ, "AGENT_ENV_HOME": str(home), "AGENT_ENV_GATEWAY_PORT": str(free_port())}
    (home / "gateway").mkdir(parents=True)
    (home / "gateway" / "key").write_bytes(b"")
    (home / "gateway" / "key").chmod(0o600)
    try:
        done = cli("gateway", "start", env=env)
    finally:
        cli("gateway", "stop", env=env)
    assert done.returncode != 0
    assert "empty or damaged" in done.stderr + done.stdout


# -- 4. the reaper and other installs --


def other_install(settings: Settings) -> Settings:
    """An install sharing this one's machine (state dir, Docker daemon) but not its Temporal."""
    return settings.model_copy(update={"temporal": TemporalSettings(address="127.0.0.1:1", namespace="theirs")})


async def test_the_reaper_leaves_other_installs_sandboxes_alone(tmp_path, client):
    """Attack: another install shares the machine; its runs are unknown to our Temporal, so our reaper took
    its sandboxes for leftovers and removed them (and `reap --all` removed everything)."""
    ours = Settings(state_dir=tmp_path / "home")
    theirs = other_install(ours)
    assert install_id(ours) != install_id(theirs) and install_id(ours) == install_id(ours)
    sleep = ["sleep", "60"]
    await by_name.create("local", SandboxSpec(name="ours-expired", run_id="r1", command=sleep, ttl=0.01), ours)
    await by_name.create("local", SandboxSpec(name="ours-orphan", run_id="no-such-run", command=sleep), ours)
    for name, ttl in (("theirs-expired", 0.01), ("theirs-live", 3600)):
        await by_name.create("local", SandboxSpec(name=name, run_id="their-run", command=sleep, ttl=ttl), theirs)
    time.sleep(0.05)
    try:
        verdicts = await reap(ours, client)  # our Temporal has never heard of their run
        assert {v.sandbox.id: v.reason for v in verdicts} == {
            "ours-expired": "past its TTL",
            "ours-orphan": "its run is unknown to Temporal",
        }
        assert await reap(ours, None, everything=True) == [], "--all is ours only"
        left = {b.id: b.status for b in await by_name.load("local", theirs).list()}
        assert left == {"theirs-expired": "running", "theirs-live": "running"}
    finally:
        await reap(theirs, None, everything=True)


async def test_the_reaper_leaves_other_installs_containers_alone(docker_client, tmp_path, client):  # noqa: F811
    """The same attack on a shared Docker daemon, where every install sees every container; also, a
    container of another install that happens to have our sandbox's name is never adopted."""
    from agent_env.providers.docker_images import BASE_IMAGE

    ours, theirs = Settings(state_dir=tmp_path / "ours"), Settings(state_dir=tmp_path / "theirs")
    tag = os.urandom(3).hex()
    sleep = ["sleep", "60"]
    await by_name.create(
        "docker", SandboxSpec(name=f"sec-{tag}-ours", run_id="gone", image=BASE_IMAGE, command=sleep), ours
    )
    await by_name.create(
        "docker",
        SandboxSpec(name=f"sec-{tag}-theirs", run_id="gone", image=BASE_IMAGE, command=sleep, ttl=0.01),
        theirs,
    )
    try:
        with pytest.raises(AgentEnvError, match="this agent-env install did not start"):
            await by_name.create(
                "docker", SandboxSpec(name=f"sec-{tag}-theirs", run_id="gone", image=BASE_IMAGE, command=sleep), ours
            )
        verdicts = await reap(ours, client)
        assert [v.sandbox.name for v in verdicts if v.doomed] == [f"sec-{tag}-ours"]  # its run is unknown
        assert [b.name for b in await by_name.load("docker", theirs).list()] == [f"sec-{tag}-theirs"]
    finally:
        await reap(ours, None, everything=True)
        await reap(theirs, None, everything=True)


# -- 5. run updates refuse what is not the run's --

HITS_TASK = """
id = "hostile_hits"
[clock]
start = "2026-05-01T09:00:00Z"
mode = "frozen"

[[triggers]]
id = "later"
when = {{ type = "tool_call", env = "pad", tool = "write_note", where = [{{ path = "arguments.key", equals = "later" }}] }}
actions = [{{ type = "call_tool", env = "pad", tool = "write_note", arguments = {{ key = "later_done", text = "${{clock.now}}" }} }}]

[[steps]]
id = "pad"
type = "deploy_env"
config = {{ env_id = "notes" }}

[[steps]]
id = "rules"
type = "register_env_triggers"
depends_on = ["pad"]

[[steps]]
id = "hold"
type = "wait_file"
depends_on = ["rules"]
config = {{ path = "{gate}" }}
"""


async def until_holding(handle):
    """The run's state once its `hold` step (waiting for a file) runs."""
    for _ in range(400):
        state = await launch.query_state(handle)
        if state.steps["hold"].status is StepStatus.RUNNING:
            return state
        await asyncio.sleep(0.05)
    raise AssertionError(f"step hold never ran: {state.steps['hold']}")


async def refused(handle, update: str, *args) -> str:
    from temporalio.client import WorkflowUpdateFailedError

    with pytest.raises(WorkflowUpdateFailedError) as err:
        await handle.execute_update(update, args=list(args), result_type=dict)
    return str(err.value.cause)


async def test_run_updates_refuse_what_is_not_the_runs(client, settings, worker, tmp_path):
    """Attack: anyone who reaches Temporal (a hostile agent's process on the host, a leaked client) sends
    trigger hits for triggers the run never declared, for instances of other runs, or megabytes of `match`
    to bloat the run's history; or oversized trainer updates. Each is refused by a validator -- so it never
    enters history -- and the run goes on."""
    gate = tmp_path / "gate"
    handle = await launch.start_run(client, settings, parse_task(tomllib.loads(HITS_TASK.format(gate=gate)), "t"))
    state = await until_holding(handle)
    instance = state.steps["pad"].outputs["instance"]
    marker = "hostile-" + os.urandom(4).hex()
    now = datetime.now(UTC)

    def hit(trigger: str, inst: str, match: dict | None = None) -> TriggerHit:
        return TriggerHit(trigger=trigger, instance=inst, virtual_time=now, match=match or {})

    assert "has no trigger" in await refused(handle, "trigger_hit", hit(f"{marker}-trigger", instance))
    assert "is not one of run" in await refused(handle, "trigger_hit", hit("later", f"{marker}-instance"))
    assert "over the limit" in await refused(handle, "trigger_hit", hit("later", instance, {"blob": marker * 9000}))
    assert "at most" in await refused(handle, "next_turn", marker * 100)
    assert "at most" in await refused(handle, "end_turn", marker * 100, "x")
    assert "at most" in await refused(handle, "abandon", marker * 1000)

    ack = await handle.execute_update("trigger_hit", hit("later", instance, {"agent": "agent"}), result_type=dict)
    assert ack["accepted"], ack  # the run still takes what is its own
    gate.touch()
    final = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert final.status is RunStatus.PASSED, final.error
    assert [e.trigger for e in final.world.events if e.kind == "fired"] == ["later"]
    history = await handle.fetch_history()
    raw = b"".join(event.SerializeToString() for event in history.events)
    assert marker.encode() not in raw, "a refused update left its payload in the run's history"
