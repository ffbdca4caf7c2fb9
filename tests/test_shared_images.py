"""Built images are shared through the image store, and a run records the exact image each sandbox ran.

A worker that builds an app's image pushes it to the configured image store (`build-NAME` at the context's
digest); a worker on another machine, sharing the stores, pulls it instead of building. The store is a cache:
when it cannot be reached, the worker builds locally and warns. The Docker tier: it needs a Docker daemon and
the base image (`scripts/docker-setup`), and skips (or, with AGENT_ENV_REQUIRE_DOCKER=1, fails) naming them.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from pathlib import Path

import pytest
from test_agent_sandboxes import echo_bundle  # noqa: F401 - the echo agent's bundle
from test_docker import ECHO_ENV, containers_of, docker_client, write_context  # noqa: F401 - a fixture

from agent_env.config import Settings
from agent_env.planning.tasks import load_task
from agent_env.providers import SandboxSpec
from agent_env.providers.docker import DockerProvider
from agent_env.providers.docker_images import build_tag, context_tar, shared_build_image
from agent_env.spec.run import RunStatus
from agent_env.stores.backends import open_store
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch

NONCE = """
FROM agentenv/base:bookworm
COPY unique.txt /unique.txt
RUN python3 -c "import secrets; print(secrets.token_hex(16))" > /built-nonce
"""


def unique_context(tmp_path: Path, name: str) -> Path:
    """A context no earlier test run has built (so its image is in no store yet), whose build writes a random
    value into the image: a rebuild would hold another one."""
    return write_context(tmp_path / name, NONCE, **{"unique.txt": uuid.uuid4().hex})


def count_builds(provider: DockerProvider) -> list[str]:
    """The tags `provider` builds from now on (the daemon's build API, wrapped)."""
    builds: list[str] = []
    build = provider.client.api.build

    def counted(*args, **kwargs):
        builds.append(kwargs["tag"])
        return build(*args, **kwargs)

    provider.client.api.build = counted
    return builds


@pytest.fixture
def forget_images(docker_client):  # noqa: F811 - the fixture imported above
    """Removes the images (by tag, then by id) a test made, whatever happens."""
    refs: list[str] = []
    yield refs
    for ref in refs:
        try:
            docker_client.images.remove(ref, force=True)
        except Exception:  # noqa: BLE001 - already gone (removed with an earlier tag)
            pass


async def test_a_build_on_one_machine_is_pulled_not_rebuilt_on_another(
    docker_client,  # noqa: F811
    tmp_path,
    forget_images,
):
    context = unique_context(tmp_path, "shared")
    machine_a = DockerProvider(Settings(state_dir=tmp_path / "a"))
    machine_b = DockerProvider(Settings(state_dir=tmp_path / "b"))
    builds_a, builds_b = count_builds(machine_a), count_builds(machine_b)
    spec = SandboxSpec(name="shared-1", run_id="run-shared", build=str(context), command=["sleep", "60"])
    try:
        tag = await machine_a.image_for(spec)
        built = docker_client.images.get(tag).id
        name, version = shared_build_image(tag)
        forget_images.extend([tag, f"agentenv/{name}:{version}", built])
        assert builds_a == [tag], "machine A built the context"
        store = open_store("images", machine_b.settings)  # the image store both machines share
        try:
            assert store.exists(name, version), "machine A pushed what it built"
        finally:
            store.close()
        nonce_a = docker_client.containers.run(built, ["cat", "/built-nonce"], remove=True)

        docker_client.images.remove(tag)  # the build tag only: machine B has never built this context
        assert not docker_client.images.list(name=tag)
        box = await machine_b.create(spec)
        try:
            assert builds_b == [], "machine B pulled the image instead of building it"
            assert docker_client.images.get(tag).id == built, "and tagged it as its build"
            assert (await box.exec(["cat", "/built-nonce"])).stdout.encode() == nonce_a, "the very image A built"
            assert box.info.image_id == built
        finally:
            await box.stop()
    finally:
        machine_a.close()
        machine_b.close()
    assert containers_of(docker_client, "run-shared") == []


async def test_an_unreachable_image_store_builds_locally_and_warns(
    docker_client,  # noqa: F811
    tmp_path,
    caplog,
    monkeypatch,
    forget_images,
):
    pytest.importorskip("boto3", reason="an unreachable AWS image store needs the aws extra (boto3)")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # AWS's own chain: the config holds no keys
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with socket.socket() as probe:  # a port nothing listens on: the registry's API is unreachable
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    settings = Settings(
        state_dir=tmp_path / "home",
        stores={
            "images": {
                "backend": "aws",
                "endpoint_url": f"http://127.0.0.1:{closed}",
                "region": "us-east-1",
            }
        },
    )
    provider = DockerProvider(settings)
    builds = count_builds(provider)
    context = unique_context(tmp_path, "app")
    caplog.set_level(logging.WARNING, logger="agent_env.providers.docker")
    try:
        box = await provider.create(
            SandboxSpec(name="unreachable-1", run_id="run-unreachable", build=str(context), command=["sleep", "60"])
        )
        forget_images.append(box.info.image_id or "")
        try:
            assert len(builds) == 1, "built here"
            assert (await box.exec(["test", "-s", "/built-nonce"])).exit_code == 0, "and it runs"
        finally:
            await box.stop()
    finally:
        provider.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings, "the unreachable store is named in a warning"
    assert all("[stores.images] backend = 'aws'" in w for w in warnings), warnings
    assert any("it is built here" in w for w in warnings) and any("other workers" in w for w in warnings), warnings


async def test_a_deployed_sandbox_records_the_exact_image_it_ran(
    client,
    settings,
    worker,
    docker_client,  # noqa: F811
):
    state = await asyncio.wait_for(
        launch.wait_result(await launch.start_run(client, settings, resolve_target("echo-mcp"))), 120
    )
    assert state.status is RunStatus.PASSED, state.error
    images = state.steps["echo"].outputs["images"]
    expected = docker_client.images.get(build_tag(Path("echo"), context_tar(ECHO_ENV / "server"))).id
    assert images == {"echo": expected} and expected.startswith("sha256:")


async def test_a_deployed_agent_records_the_exact_image_it_ran(
    client,
    settings,
    worker,
    echo_bundle,  # noqa: F811
    docker_client,  # noqa: F811
):
    spec = load_task(echo_bundle / "tasks" / "echo-agent.toml")
    state = await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, spec)), 120)
    assert state.status is RunStatus.PASSED, state.error
    deployed = state.steps["echo"].outputs
    [(agent, image_id)] = deployed["images"].items()
    assert agent == deployed["agent"] and image_id.startswith("sha256:")
    assert any(tag.startswith("agentenv-build/") for tag in docker_client.images.get(image_id).tags), "its build"
    assert "image_id" not in deployed["sandbox"], "recorded once, under images"
