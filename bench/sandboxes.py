"""Sandboxed envs: a container env from start to its first tool call through the gateway, and its
teardown, with a cold image (built from the Dockerfile) and a warm one (an unchanged build context is
reused). Baselines measured in the same run: the same MCP server as a local process (the `local`
provider), and an in-process app.

Needs a Docker daemon and agentenv/base:bookworm (`scripts/docker-setup`); without them only the
baselines are printed.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from common import row

from agent_env.config import Settings

ECHO = Path(__file__).parent.parent / "agent_env" / "bundles" / "echo-mcp" / "envs" / "echo" / "server"
WARM_RUNS = 7
COLD_RUNS = 3


async def _gateway(root: Path):
    import uvicorn
    from common import free_port

    from agent_env.gateway.http import create_app
    from agent_env.gateway.service import Gateway
    from agent_env.gateway_client.single import SingleGateway

    gateway = Gateway(root / "gateway")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(gateway), host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    return server, task, SingleGateway(f"http://127.0.0.1:{port}", gateway.admin_token)


def _forget_image(provider, build: Path) -> None:
    """Remove the image built from this context, so the next create builds it again."""
    import docker.errors

    from agent_env.providers.docker_images import build_tag, context_tar

    try:  # by id, so other tags of the same image (and its cached layers) go too
        image = provider.client.images.get(build_tag(build, context_tar(build)))
        provider.client.images.remove(image.id, force=True)
    except docker.errors.ImageNotFound:
        pass


async def _raw_docker(provider, build: Path, n: int) -> tuple[float, float]:
    """Docker alone, no agent-env: run the built image, wait until it serves, then remove it."""
    import httpx2

    from agent_env.providers.docker_images import build_tag, context_tar

    image = build_tag(build, context_tar(build))
    started = time.perf_counter()
    container = await asyncio.to_thread(
        provider.client.containers.run,
        image,
        detach=True,
        name=f"bench-raw-{n}",
        environment={"PORT": "8000"},
        ports={"8000/tcp": ("127.0.0.1", None)},
        labels={"agentenv.bench": "1"},
    )
    await asyncio.to_thread(container.reload)
    url = f"http://127.0.0.1:{container.attrs['NetworkSettings']['Ports']['8000/tcp'][0]['HostPort']}/mcp"
    async with httpx2.AsyncClient() as http:
        while True:
            try:
                await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
                break
            except httpx2.TransportError:
                await asyncio.sleep(0.005)
    first = time.perf_counter() - started
    started = time.perf_counter()
    await asyncio.to_thread(container.remove, force=True)
    return first, time.perf_counter() - started


async def _one(admin, provider, settings, n: int, *, cold: bool, build: Path | None) -> tuple[float, float]:
    """(start → first tool call answered, teardown) in seconds."""
    from agent_env.providers import SandboxSpec

    instance = f"bench-{provider.name if provider else 'inproc'}-{n}"
    started = time.perf_counter()
    if provider is None:
        await admin.put_instance({"id": instance, "apps": [{"app": "notes"}]})
        await admin.call_as(instance, "write_note", {"key": "k", "text": "hello"})
    else:
        if cold:
            _forget_image(provider, build)
        spec = SandboxSpec(
            name=instance,
            run_id="bench-run",
            command=["python3", "server.py"],
            port=8000,
            build=str(build),
            network={"mode": "none"} if provider.name == "docker" else {},
        )
        box = await provider.create(spec)
        await admin.put_instance({"id": instance, "apps": [{"name": "echo", "url": box.url}]})
        answer = await admin.call_as(instance, "echo", {"text": "hello"})
        assert answer["result"]["text"] == "hello", answer
    first_call = time.perf_counter() - started
    started = time.perf_counter()
    await admin.delete_instance(instance)
    if provider is not None:
        await provider.remove(box.info.id)
    return first_call, time.perf_counter() - started


async def _measure() -> dict:
    from agent_env.providers import ProviderUnavailable
    from agent_env.providers.docker import DockerProvider
    from agent_env.providers.local import LocalProvider

    root = Path(tempfile.mkdtemp(prefix="agentenv-bench-sandboxes-"))
    settings = Settings(state_dir=root / "home")
    build = root / "server"
    shutil.copytree(ECHO, build)
    server, task, admin = await _gateway(root)
    results: dict = {}
    try:
        docker = DockerProvider(settings)
        try:
            await docker.check()
        except ProviderUnavailable as e:
            print(f"  (docker: {e.problem} — container figures skipped)")
            docker = None
        cases = [
            ("in-process app (baseline)", None, False, WARM_RUNS),
            ("local process (baseline)", LocalProvider(settings), False, WARM_RUNS),
        ]
        if docker is not None:
            cases += [("docker, warm image", docker, False, WARM_RUNS), ("docker, cold image", docker, True, COLD_RUNS)]
        await _one(admin, LocalProvider(settings), settings, -1, cold=False, build=build)  # imports, first connect
        for label, provider, cold, runs in cases:
            samples = [await _one(admin, provider, settings, i, cold=cold, build=build) for i in range(runs)]
            if label == "docker, warm image":  # the image is built: Docker's own floor, in the same run
                raw = [await _raw_docker(docker, build, i) for i in range(runs)]
                results["docker alone (baseline)"] = {
                    "first_call_ms": statistics.median(r[0] for r in raw) * 1000,
                    "teardown_ms": statistics.median(r[1] for r in raw) * 1000,
                    "runs": runs,
                }
            first = statistics.median(s[0] for s in samples)
            down = statistics.median(s[1] for s in samples)
            results[label] = {"first_call_ms": first * 1000, "teardown_ms": down * 1000, "runs": runs}
    finally:
        await admin.aclose()
        server.should_exit = True
        await task
        shutil.rmtree(root, ignore_errors=True)
    return results


def measure() -> dict:
    print("sandboxes: env start → first tool call through the gateway, and teardown (median)")
    results = asyncio.run(_measure())
    base = results["local process (baseline)"]
    raw = results.get("docker alone (baseline)")
    for label, r in results.items():
        note = f"{r['first_call_ms'] / base['first_call_ms']:.1f}x the local process"
        if raw and label.startswith("docker,"):
            note += f", {r['first_call_ms'] / raw['first_call_ms']:.2f}x Docker alone"
        row(f"{label}: start → first call", f"{r['first_call_ms']:.0f} ms", note)
        note = f"n={r['runs']}" + (
            f", {r['teardown_ms'] / raw['teardown_ms']:.2f}x Docker alone"
            if raw and label.startswith("docker,")
            else ""
        )
        row(f"{label}: teardown", f"{r['teardown_ms']:.0f} ms", note)
    return results


if __name__ == "__main__":
    measure()
