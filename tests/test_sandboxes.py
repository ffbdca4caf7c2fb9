"""Sandbox providers that need nothing but this machine: providers by name (names, plugins, fallback chains),
the `local` provider, the reaper's judgement, sandboxed apps in env records, and the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agent_env.config import SandboxSettings, Settings
from agent_env.errors import BadInput
from agent_env.providers import ProviderUnavailable, SandboxFailed, SandboxInfo, SandboxSpec, by_name
from agent_env.providers.reaper import judge
from agent_env.spec.env import EnvRecord

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
SERVE = [
    sys.executable,
    "-c",
    "import http.server, os; http.server.ThreadingHTTPServer(('127.0.0.1', "
    "int(os.environ['PORT'])), http.server.SimpleHTTPRequestHandler).serve_forever()",
]


@pytest.fixture
def home(tmp_path) -> Settings:
    return Settings(state_dir=tmp_path / "home")


def spec(name: str, run_id: str = "run-1", **kw) -> SandboxSpec:
    return SandboxSpec(name=name, run_id=run_id, **kw)


async def wait_http(url: str, timeout: float = 10) -> httpx.Response:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as http:
        while True:
            try:
                return await http.get(url)
            except httpx.TransportError:
                assert time.monotonic() < deadline, f"{url} never answered"
                await asyncio.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


# -- providers by name --


def test_providers_by_name_plugins_and_typos(home):
    assert {"local", "docker", "modal", "e2b", "offline"} <= set(by_name.names())
    assert by_name.load("local", home).name == "local"
    assert by_name.load("offline", home).name == "offline"  # from the agent_env.providers entry-point group
    with pytest.raises(BadInput, match="did you mean 'docker'"):
        by_name.load("dokcer", home)
    with pytest.raises(BadInput, match="plugin 'broken-provider' failed to load"):
        by_name.load("broken-provider", home)
    with pytest.raises(BadInput, match="empty sandbox provider"):
        by_name.parse_chain(" , ")


async def test_a_fallback_chain_uses_the_first_usable_provider(home):
    provider, box = await by_name.create("offline,local", spec("chain", command=["sleep", "30"]), home)
    try:
        assert provider.name == "local" and box.info.provider == "local"
    finally:
        await box.stop()
    with pytest.raises(ProviderUnavailable, match="the offline provider never answers") as e:
        await by_name.create("offline", spec("nowhere", command=["true"]), home)
    assert e.value.fix == "use another provider"


async def test_a_provider_refuses_what_it_cannot_enforce(home):
    with pytest.raises(BadInput, match="cannot enforce network 'none'"):
        await by_name.create("local", spec("closed", command=["true"], network={"mode": "none"}), home)
    with pytest.raises(BadInput, match="cannot limit cpus or memory"):
        await by_name.create("local", spec("limited", command=["true"], memory_mb=64), home)


# -- local --


async def test_local_sandbox_runs_serves_and_stops(home, tmp_path):
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "hello.txt").write_text("from the build folder")
    provider, box = await by_name.create("local", spec("web", port=8000, command=SERVE, build=str(context)), home)
    meta = json.loads((provider.root / "web" / "sandbox.json").read_text())
    try:
        page = await wait_http(f"{box.url}/hello.txt")
        assert page.text == "from the build folder", "the build folder is the sandbox's work folder"
        done = await box.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (done.exit_code, done.stdout, done.stderr) == (3, "out\n", "err\n")
        await box.put_file("/data/in.bin", b"\x00\x01payload")
        assert await box.get_file("data/in.bin") == b"\x00\x01payload"
        with pytest.raises(BadInput, match="escapes the sandbox's folder"):
            await box.get_file("../../sandbox.json")

        with pytest.raises(BadInput, match="the local provider cannot snapshot"):
            await box.snapshot()
        again = await provider.create(spec("web", port=8000, command=SERVE))
        assert again.url == box.url, "creating the same name again finds the running sandbox (retries are safe)"
        listed = await provider.list("run-1")
        assert [(b.id, b.run_id, b.status) for b in listed] == [("web", "run-1", "running")]
        assert listed[0].expires_at > time.time() + 5 * 3600
        assert await provider.list("another-run") == []
    finally:
        assert await provider.remove("web") is True
    assert not alive(meta["pid"]), "the process group is gone"
    assert await provider.list() == [] and not (provider.root / "web").exists()
    assert await provider.remove("web") is False


async def test_local_port_clash_and_bad_command(home):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SandboxFailed, match=f"port 127.0.0.1:{port} is already in use") as e:
            await by_name.create("local", spec("clash", port=8000, host_port=port, command=SERVE), home)
        assert "leave `host_port` unset" in e.value.fix
    with pytest.raises(SandboxFailed, match="could not start '/no/such/program'"):
        await by_name.create("local", spec("bad", command=["/no/such/program"]), home)
    with pytest.raises(BadInput, match="has no `command`"):
        await by_name.create("local", spec("image-only", image="agentenv/base:bookworm"), home)


async def test_a_reused_pid_is_not_mistaken_for_a_sandbox(home):
    provider, box = await by_name.create("local", spec("short", command=["sleep", "30"]), home)
    meta_path = provider.root / "short" / "sandbox.json"
    meta = json.loads(meta_path.read_text())
    meta["started"] = "1"  # as if the pid now belonged to a process started at another time
    meta_path.write_text(json.dumps(meta))
    assert [b.status for b in await provider.list()] == ["exited"]
    os.killpg(meta["pid"], 9)
    await provider.remove("short")


async def test_exec_in_a_local_sandbox_sees_its_declared_env_however_busy_the_machine(home):
    """A command exec'd in a local sandbox right after it started (a test command, a grader's check) gets the
    sandbox's declared environment every time, while busy processes keep every core loaded (a sandbox's
    process may still be starting then); and the declared values are in no file of the provider's in the
    clear."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 2))]
    provider = by_name.load("local", home)
    seen: list[bool] = []
    try:
        for i in range(200):
            secret = f"declared-{i}-{os.urandom(6).hex()}"
            box = await provider.create(spec(f"env-{i}", command=["sleep", "30"], port=8000, env={"TOKEN": secret}))
            try:
                done = await box.exec(["env"])
                if i % 50 == 0:
                    files = [p for p in provider.root.parent.rglob("*") if p.is_file()]
                    assert files and not [p for p in files if secret.encode() in p.read_bytes()], "written in clear"
            finally:
                await provider.remove(box.info.id)
            env = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
            seen.append(env.get("TOKEN") == secret and env.get("HOST") == "127.0.0.1" and env.get("PORT", "").isdigit())
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert sum(seen) == 200, f"{seen.count(False)} of 200 execs did not see the declared environment"


async def test_exec_sees_the_declared_env_whatever_the_sandbox_did_with_its_own(home):
    """A sandbox's program that changes its own environment (here a wrapper that drops a variable, then runs
    the server) changes nothing for a command exec'd in the sandbox: it gets the declared environment, also
    when another worker attaches. The record's key is private; a damaged one is an error naming the fix."""
    wrapped = spec("wrapped", command=["env", "-u", "TOKEN", "sleep", "30"], env={"TOKEN": "declared"})
    provider, box = await by_name.create("local", wrapped, home)
    try:
        pid = json.loads((provider.root / "wrapped" / "sandbox.json").read_text())["pid"]
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep"):
            assert time.monotonic() < deadline, "the wrapper never ran its server"
            await asyncio.sleep(0.01)
        assert b"TOKEN=" not in Path(f"/proc/{pid}/environ").read_bytes(), "the process dropped it"
        for sandbox in (box, await by_name.load("local", home).attach("wrapped")):
            assert "TOKEN=declared\n" in (await sandbox.exec(["env"])).stdout
    finally:
        await provider.remove("wrapped")
    key = provider.root.parent / "local.key"
    assert key.stat().st_mode & 0o777 == 0o600
    key.write_bytes(b"")
    with pytest.raises(SandboxFailed, match="local.key, is damaged") as failed:
        await provider.create(spec("after", command=["sleep", "30"]))
    assert "delete the file" in failed.value.fix and not (provider.root / "after").exists()


# -- the reaper's judgement --


def test_the_reaper_removes_what_belongs_to_no_running_run():
    now = time.time()
    boxes = [
        SandboxInfo(provider="local", id=f"b{i}", name=f"b{i}", run_id=run, expires_at=expires)
        for i, (run, expires) in enumerate(
            [("live", now + 60), ("done", now + 60), ("gone", now + 60), ("live", now - 1), ("unasked", now + 60)]
        )
    ]
    statuses = {"live": "running", "done": "completed", "gone": "unknown"}
    reasons = {v.sandbox.id: v.reason for v in judge(boxes, statuses, now=now)}
    assert reasons == {
        "b0": None,
        "b1": "its run is completed",
        "b2": "its run is unknown to Temporal",
        "b3": "past its TTL",
        "b4": None,
    }
    assert all(v.doomed for v in judge(boxes, statuses, now=now, everything=True))


# -- specs --


def test_sandboxed_apps_in_env_records():
    record = EnvRecord.model_validate(
        {
            "name": "e",
            "apps": [
                {"name": "echo", "sandbox": {"build": "server", "network": ["10.0.0.0/8"], "cpus": 1}},
                {"app": "notes"},
            ],
            "roles": {"agent": {"tools": ["echo", "write_note"]}},
        }
    )
    assert record.apps[0].remote and not record.apps[1].remote
    bad = [
        ({"name": "x", "sandbox": {}}, "needs `build`"),
        ({"name": "x", "sandbox": {"build": "a", "image": "b"}}, "either `build` or `image`"),
        ({"sandbox": {"image": "b"}}, "needs a `name`"),
        ({"app": "notes", "url": "http://127.0.0.1:1"}, "exactly one of"),
        ({"name": "x", "sandbox": {"image": "b", "network": ["nowhere"]}}, "not an IP address or CIDR"),
    ]
    for app, message in bad:
        with pytest.raises(ValueError, match=message):
            EnvRecord.model_validate({"name": "e", "apps": [app]})


# -- the CLI, on a state dir of its own with no Temporal server --


def test_cli_lists_and_reaps_expired_sandboxes(tmp_path):
    settings = Settings(state_dir=tmp_path / "home", sandboxes=SandboxSettings())
    env = {
        **os.environ,
        "AGENT_ENV_HOME": str(settings.state_dir),
        "AGENT_ENV_SERVER_PORT": "1",
        "DOCKER_HOST": "unix:///nonexistent/docker.sock",
    }

    async def make():
        await by_name.create("local", spec("old", command=["sleep", "60"], ttl=0.01), settings)
        await by_name.create("local", spec("young", command=["sleep", "60"]), settings)

    asyncio.run(make())
    time.sleep(0.05)
    listed = subprocess.run([AGENT_ENV, "sandboxes", "list", "--json"], env=env, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    assert "only sandboxes past their TTL count" in listed.stderr
    rows = {r["id"]: r for r in json.loads(listed.stdout)}
    assert rows["old"]["reap"] == "past its TTL" and rows["young"]["reap"] is None
    reaped = subprocess.run([AGENT_ENV, "sandboxes", "reap"], env=env, capture_output=True, text=True)
    assert reaped.returncode == 0, reaped.stderr
    assert "removed 1 sandbox(es); 1 kept" in reaped.stdout
    left = json.loads(
        subprocess.run([AGENT_ENV, "sandboxes", "list", "--json"], env=env, capture_output=True, text=True).stdout
    )
    assert [r["id"] for r in left] == ["young"]
    everything = subprocess.run([AGENT_ENV, "sandboxes", "reap", "--all"], env=env, capture_output=True, text=True)
    assert "removed 1 sandbox(es)" in everything.stdout
