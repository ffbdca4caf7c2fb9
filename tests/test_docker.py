"""The Docker tier, for real: images built from Dockerfiles, containers as sandboxes, a containerized MCP
server reached through the gateway, teardown on every way a run ends, and the reaper after a SIGKILL.

Needs a Docker daemon and the base image (`scripts/docker-setup`). CI sets AGENT_ENV_REQUIRE_DOCKER=1,
so there this tier fails instead of skipping when Docker is missing.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import textwrap
from pathlib import Path

import pytest
from gateway_util import mcp_client
from test_durability import AGENT_ENV, Cluster, wait_until
from test_sandboxes import wait_http

from agent_env.config import Settings
from agent_env.gateway import embedded as embedded_gateway
from agent_env.planning.tasks import load_task
from agent_env.providers import ProviderUnavailable, SandboxFailed, SandboxSpec, by_name
from agent_env.providers.base import LABEL_RUN
from agent_env.providers.docker import DockerProvider
from agent_env.providers.docker_images import BASE_IMAGE
from agent_env.spec.run import RunStatus
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch
from agent_env.temporal_client.client import connect

ECHO_ENV = Path(__file__).parent.parent / "agent_env" / "bundles" / "echo-mcp" / "envs" / "echo"
SERVE = [
    "python3",
    "-c",
    "import http.server, os; http.server.ThreadingHTTPServer(('0.0.0.0', "
    "int(os.environ['PORT'])), http.server.SimpleHTTPRequestHandler).serve_forever()",
]


DEPLOY_AND_HOLD = """
[[steps]]
id = "echo"
type = "deploy_env"
config = { env_id = "echo" }
[[steps]]
id = "hold"
type = "sleep"
depends_on = ["echo"]
config = { seconds = 120 }
"""


def _docker_problem() -> str | None:
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        client.images.get(BASE_IMAGE)
    except Exception as e:  # noqa: BLE001 - any reason means the tier cannot run
        return f"{type(e).__name__}: {e}"
    return None


@pytest.fixture(scope="module")
def docker_client():
    problem = _docker_problem()
    if problem:
        message = f"the Docker tier needs a Docker daemon and {BASE_IMAGE} (run scripts/docker-setup): {problem}"
        if os.environ.get("AGENT_ENV_REQUIRE_DOCKER"):
            pytest.fail(message)
        pytest.skip(message)
    import docker

    return docker.from_env()


@pytest.fixture
def provider(docker_client, tmp_path) -> DockerProvider:
    return DockerProvider(Settings(state_dir=tmp_path / "home"))


def containers_of(docker_client, run_id: str) -> list[str]:
    """Names from the list itself (sparse): a container the reaper removes meanwhile is not inspected after."""
    found = docker_client.containers.list(all=True, sparse=True, filters={"label": f"{LABEL_RUN}={run_id}"})
    return [c.attrs["Names"][0].lstrip("/") for c in found]


def write_context(folder: Path, dockerfile: str, **files: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Dockerfile").write_text(textwrap.dedent(dockerfile))
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def write_bundle(root: Path, steps: str, env: str = "echo", app_extra: str = "") -> Path:
    """A bundle with the echo server's build folder and one env whose app runs in Docker."""
    folder = root / "envs" / env
    write_context(
        folder / "server",
        (ECHO_ENV / "server" / "Dockerfile").read_text(),
        **{"server.py": (ECHO_ENV / "server" / "server.py").read_text()},
    )
    (folder / "env.toml").write_text(
        textwrap.dedent(f"""
        name = "{env}"
        [[apps]]
        name = "echo"
        [apps.sandbox]
        build = "server"
        provider = "docker"
        {app_extra}
        """)
    )
    (root / "tasks").mkdir(parents=True, exist_ok=True)
    (root / "tasks" / "t.toml").write_text(textwrap.dedent(steps))
    return root


# -- images --


async def test_an_unchanged_build_context_is_not_rebuilt(provider, docker_client, tmp_path):
    context = write_context(
        tmp_path / "app",
        """
        FROM agentenv/base:bookworm
        COPY hello.txt /hello.txt
        """,
        **{"hello.txt": "one"},
    )
    first = await provider.image_for(SandboxSpec(name="b", run_id="r", build=str(context)))
    built = docker_client.images.get(first).id
    os.utime(context / "hello.txt", (1, 1))  # times are not content
    again = await provider.image_for(SandboxSpec(name="b", run_id="r", build=str(context)))
    assert again == first and docker_client.images.get(again).id == built
    (context / "hello.txt").write_text("two")
    changed = await provider.image_for(SandboxSpec(name="b", run_id="r", build=str(context)))
    assert changed != first and changed.startswith("agentenv-build/app:")


async def test_a_broken_dockerfile_says_what_failed_with_the_build_log(provider, tmp_path):
    context = write_context(
        tmp_path / "broken",
        """
        FROM agentenv/base:bookworm
        RUN echo preparing-the-thing && exit 7
        """,
    )
    with pytest.raises(SandboxFailed) as e:
        await provider.image_for(SandboxSpec(name="b", run_id="r", build=str(context)))
    message = str(e.value)
    assert "building the image from" in message and "returned a non-zero code: 7" in message
    assert "build log (last lines)" in message and "preparing-the-thing" in message
    assert "fix the Dockerfile" in e.value.fix

    missing = write_context(tmp_path / "missing", "FROM agentenv/not-here:1\n")
    with pytest.raises(SandboxFailed) as e:
        await provider.image_for(SandboxSpec(name="b", run_id="r", build=str(missing)))
    assert "not on this daemon" in e.value.fix


# -- containers --


async def test_a_container_sandbox_serves_runs_commands_and_holds_limits(provider, docker_client):
    spec = SandboxSpec(
        name="web-1",
        run_id="run-docker-1",
        owner="inst",
        image=BASE_IMAGE,
        command=SERVE,
        port=8000,
        cpus=0.5,
        memory_mb=96,
    )
    box = await provider.create(spec)
    try:
        assert box.url.startswith("http://127.0.0.1:")
        assert (await wait_http(box.url + "/etc/hostname")).status_code == 200
        done = await box.exec(["sh", "-c", "echo out; echo err >&2; exit 4"])
        assert (done.exit_code, done.stdout, done.stderr) == (4, "out\n", "err\n")
        await box.put_file("/work/data.bin", b"\x00payload")
        assert await box.get_file("/work/data.bin") == b"\x00payload"
        attrs = docker_client.containers.get("ae-web-1").attrs
        assert attrs["HostConfig"]["NanoCpus"] == 500_000_000 and attrs["HostConfig"]["Memory"] == 96 * 2**20
        assert attrs["Config"]["Labels"][LABEL_RUN] == "run-docker-1"
        assert attrs["HostConfig"]["PortBindings"]["8000/tcp"][0]["HostIp"] == "127.0.0.1", "never on all interfaces"
        again = await provider.create(spec)
        assert again.url == box.url, "the same name finds the running container"
        listed = await provider.list("run-docker-1")
        assert [(b.id, b.owner, b.status) for b in listed] == [("ae-web-1", "inst", "running")]
    finally:
        assert await provider.remove("ae-web-1") is True
    assert containers_of(docker_client, "run-docker-1") == []
    assert await provider.remove("ae-web-1") is False


async def test_a_snapshot_is_an_image_a_new_sandbox_starts_from(provider, docker_client):
    first = await provider.create(
        SandboxSpec(name="snap-1", run_id="run-snap", image=BASE_IMAGE, command=["sleep", "60"])
    )
    try:
        await first.put_file("/data/state.txt", b"kept")
        image = await first.snapshot()
        assert image.startswith("agentenv-snapshot/snap-1:")
        second = await provider.create(
            SandboxSpec(name="snap-2", run_id="run-snap", image=image, command=["sleep", "60"])
        )
        assert await second.get_file("/data/state.txt") == b"kept"
        await second.stop()
    finally:
        await first.stop()
        for tag in docker_client.images.list(name="agentenv-snapshot/snap-1"):
            docker_client.images.remove(tag.id, force=True)


async def test_a_taken_host_port_is_a_clear_error(provider, docker_client):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SandboxFailed, match=f"port 127.0.0.1:{port} is already in use") as e:
            await provider.create(
                SandboxSpec(
                    name="clash", run_id="run-clash", image=BASE_IMAGE, command=SERVE, port=8000, host_port=port
                )
            )
    assert "leave `host_port` unset" in e.value.fix
    assert containers_of(docker_client, "run-clash") == [], "nothing is left behind"


async def test_network_none_and_allowlists(provider, docker_client):
    fetch = ["python3", "-c", "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=3)"]
    made = []

    async def make(name: str, network) -> object:
        box = await provider.create(
            SandboxSpec(
                name=name,
                run_id="run-net",
                image=BASE_IMAGE,
                command=SERVE,
                port=8000,
                network={"mode": "open"} if network == "open" else network,
            )
        )
        made.append(box)
        await wait_http(box.url + "/")
        return box

    def address(box) -> str:
        return next(iter(box.container.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]

    try:
        target, other = await make("target", "open"), await make("other", "open")
        open_box = await make("open", "open")
        closed = await make("closed", {"mode": "none"})
        allowed = await make("allowed", {"mode": "allowlist", "allow": [f"{address(target)}/32"]})
        target_url, other_url = f"http://{address(target)}:8000/", f"http://{address(other)}:8000/"
        assert (await open_box.exec([*fetch, target_url])).exit_code == 0, "an open sandbox reaches others"
        assert (await closed.exec([*fetch, target_url])).exit_code != 0, "network none reaches nothing"
        assert closed.url.startswith("http://172."), "the host still reaches a closed sandbox (by its address)"
        assert (await allowed.exec([*fetch, target_url])).exit_code == 0, "an allowlisted address is reachable"
        assert (await allowed.exec([*fetch, other_url])).exit_code != 0, "anything else is not"
    finally:
        for box in made:
            await box.stop()
    rules = subprocess.run(["iptables", "-S", "DOCKER-USER"], capture_output=True, text=True).stdout
    assert "agentenv:ae-allowed" not in rules, "a sandbox's allowlist rules go with it"


async def test_no_daemon_names_what_to_start(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    settings = Settings(state_dir=tmp_path)
    with pytest.raises(ProviderUnavailable) as e:
        await DockerProvider(settings).check()
    assert "no Docker daemon answers at unix:///nonexistent/docker.sock" in e.value.problem
    assert "dockerd" in e.value.fix and "scripts/docker-setup" in e.value.fix
    with pytest.raises(ProviderUnavailable, match="no Docker daemon answers"):
        await by_name.create("docker", SandboxSpec(name="x", run_id="r", image=BASE_IMAGE), settings)
    provider, box = await by_name.create(
        "docker,local", SandboxSpec(name="x", run_id="r", command=["sleep", "9"]), settings
    )
    assert provider.name == "local", "a chain falls back when Docker is not there"
    await box.stop()


# -- runs --


async def test_echo_mcp_runs_in_docker_and_leaves_nothing(client, settings, worker, docker_client):
    spec = resolve_target("echo-mcp")
    state = await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, spec)), 120)
    assert state.status is RunStatus.PASSED, state.error
    deployed = state.steps["echo"].outputs
    assert [(s["app"], s["provider"]) for s in deployed["sandboxes"]] == [("echo", "docker")]
    assert state.steps["say"].outputs["result"] == {"text": "hello from a sandbox"}
    assert state.steps["teardown"].outputs["sandboxes_removed"] == 1
    assert containers_of(docker_client, state.run_id) == []


async def test_tools_through_the_gateway_then_cancel_or_failure_removes_the_container(
    client, settings, worker, docker_client, tmp_path
):
    bundle = write_bundle(tmp_path / "b", 'id = "hold"\n' + DEPLOY_AND_HOLD)
    handle = await launch.start_run(client, settings, load_task(bundle / "tasks" / "t.toml"))

    async def deployed():
        return (await launch.query_state(handle)).steps["echo"].status == "succeeded"

    await wait_until(deployed, timeout=90, what="the container env to deploy")
    instance = f"{handle.id}.echo"
    assert containers_of(docker_client, handle.id) == [f"ae-{instance}.echo".lower()]
    async with embedded_gateway.connect(settings) as admin:
        token = await admin.token(instance, "agent")
    async with mcp_client(embedded_gateway.base_url(settings), instance, token) as mcp:
        assert {t.name for t in (await mcp.list_tools()).tools} == {"echo", "whoami", "get_time"}
        answer = await mcp.call_tool("whoami", {})
        assert not answer.is_error and answer.structured_content["python"].startswith("3.11")
    await handle.cancel()
    state = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert state.status is RunStatus.CANCELLED
    assert containers_of(docker_client, handle.id) == [], "a cancelled run removes its containers"
    async with embedded_gateway.connect(settings) as admin:
        assert instance not in {i["id"] for i in (await admin._json("GET", "/admin/instances"))["instances"]}

    failing = write_bundle(
        tmp_path / "f",
        """
        id = "fails"
        [[steps]]
        id = "echo"
        type = "deploy_env"
        config = { env_id = "echo" }
        [[steps]]
        id = "boom"
        type = "fail"
        depends_on = ["echo"]
        config = { message = "on purpose" }
        """,
    )
    state = await asyncio.wait_for(
        launch.wait_result(await launch.start_run(client, settings, load_task(failing / "tasks" / "t.toml"))), 90
    )
    assert state.status is RunStatus.ERROR and "on purpose" in state.error
    assert state.steps["echo"].outputs["sandboxes"], "the container was started"
    assert containers_of(docker_client, state.run_id) == [], "a failed run removes its containers"


async def test_a_broken_dockerfile_fails_the_deploy_step_clearly(docker_client, client, settings, worker, tmp_path):
    bundle = write_bundle(
        tmp_path / "b",
        """
        id = "broken"
        [[steps]]
        id = "echo"
        type = "deploy_env"
        config = { env_id = "echo" }
        """,
    )
    dockerfile = bundle / "envs" / "echo" / "server" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("COPY server.py", "COPY no-such-file.py"))
    state = await asyncio.wait_for(
        launch.wait_result(await launch.start_run(client, settings, load_task(bundle / "tasks" / "t.toml"))), 90
    )
    assert state.status is RunStatus.ERROR
    error = state.steps["echo"].error
    assert "app 'echo' of env echo: building the image from server/Dockerfile failed" in error, error
    assert "no-such-file.py" in error and "fix the Dockerfile" in error, error


@pytest.mark.durability
async def test_the_reaper_removes_containers_of_a_run_that_died_with_its_worker(docker_client, tmp_path):
    cluster = Cluster(tmp_path)
    cluster.start_server()
    worker = cluster.start_worker()
    try:
        bundle = write_bundle(tmp_path / "b", 'id = "orphan"\n' + DEPLOY_AND_HOLD)
        client = await connect(cluster.settings)
        handle = await launch.start_run(client, cluster.settings, load_task(bundle / "tasks" / "t.toml"))
        await wait_until(lambda: _has_containers(docker_client, handle.id), timeout=90, what="the container")
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        await handle.terminate("the run dies without a worker to clean up")  # nothing runs its teardown
        assert containers_of(docker_client, handle.id), "the container outlived its run"

        listed = subprocess.run(
            [AGENT_ENV, "sandboxes", "list", "--run", handle.id],
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "would remove: its run is terminated" in listed.stdout, listed.stdout + listed.stderr
        # A new worker's reaper (every [sandboxes] reap_every seconds) removes what the dead one left.
        config = tmp_path / "config.toml"
        config.write_text("[sandboxes]\nreap_every = 0.5\n")
        cluster.env["AGENT_ENV_CONFIG"] = str(config)
        cluster.start_worker()
        await wait_until(lambda: _no_containers(docker_client, handle.id), timeout=30, what="the reaper")

        async def instance_retired():
            async with embedded_gateway.connect(cluster.settings, start_daemon=False) as admin:
                listed = (await admin._json("GET", "/admin/instances"))["instances"]
            return f"{handle.id}.echo" not in {i["id"] for i in listed}

        await wait_until(instance_retired, timeout=30, what="the reaper to retire the gateway's instance")
        reaped = subprocess.run(
            [AGENT_ENV, "sandboxes", "reap"], env=cluster.env, capture_output=True, text=True, timeout=60
        )
        assert reaped.returncode == 0 and "removed 0 sandbox(es)" in reaped.stdout, reaped.stdout + reaped.stderr
        assert "reaped sandbox docker:ae-" in cluster.log.read_text(), "the worker says what it reaped"
    finally:
        cluster.close()


async def _has_containers(docker_client, run_id: str) -> bool:
    return bool(containers_of(docker_client, run_id))


async def _no_containers(docker_client, run_id: str) -> bool:
    return not containers_of(docker_client, run_id)


async def test_a_run_that_times_out_removes_its_containers(client, settings, worker, docker_client, tmp_path):
    bundle = write_bundle(tmp_path / "b", 'id = "slow"\ntimeout = "8s"\n' + DEPLOY_AND_HOLD)
    state = await asyncio.wait_for(
        launch.wait_result(await launch.start_run(client, settings, load_task(bundle / "tasks" / "t.toml"))), 60
    )
    assert state.status is RunStatus.ERROR and "the run timed out (its limit is 8s)" in state.error, state.error
    assert state.steps["echo"].status == "succeeded" and state.steps["hold"].status == "cancelled"
    assert containers_of(docker_client, state.run_id) == [], "a timed-out run removes its containers"
