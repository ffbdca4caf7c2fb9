"""deploy/, checked as a team would use it: the compose file by docker-compose's own validation, the Kubernetes base
and overlays rendered by kustomize and validated against the Kubernetes schemas, and the worker and gateway
images built by deploy/build-images and run as containers against this session's Temporal server, with the
host's CLI starting `hello` and `workplace` on the containerised worker's task queue.

The tools and the Docker tier are skipped where missing, naming what is missing; in CI (CI=true or
AGENT_ENV_REQUIRE_DOCKER=1) they fail instead."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import moto_util
import pytest
from conftest import free_port
from test_docker import docker_client  # noqa: F401 - the Docker tier's fixture

from agent_env.spec.run import RunStatus

pytestmark = pytest.mark.processes
ROOT = Path(__file__).parent.parent
DEPLOY = ROOT / "deploy"
AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
KUBERNETES_VERSION = "1.31.0"  # the oldest Kubernetes the manifests promise to fit (deploy/k8s/README.md)
endpoint = moto_util.endpoint


def need_tool(name: str, how: str) -> str:
    """The path of a command-line tool; without it, skip naming it (fail in CI, which must run every check)."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed ({how})"
        if os.environ.get("CI") or os.environ.get("AGENT_ENV_REQUIRE_DOCKER"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def test_compose_file_passes_docker_compose_validation(tmp_path):
    compose = need_tool("docker-compose", "scripts/docker-setup installs Debian's docker-compose")
    folder = DEPLOY / "compose"
    # `.env` is the user's copy of `.env.example`: validate with the example's values, as a first `up` would run.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "AGENT_ENV_", "TEMPORAL_"))}
    unset = subprocess.run(
        [compose, "--env-file", str(folder / ".env.example"), "-f", str(folder / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert unset.returncode != 0 and "set AGENT_ENV_GATEWAY_KEY" in unset.stderr, "no gateway without its own key"
    env["AGENT_ENV_GATEWAY_KEY"] = secrets.token_hex(32)  # as the user adds it to .env
    env["AGENT_ENV_PLAN_KEY"] = secrets.token_hex(32)
    done = subprocess.run(
        [compose, "--env-file", str(folder / ".env.example"), "-f", str(folder / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr  # e.g. a variable .env.example does not set
    import yaml

    config = yaml.safe_load(done.stdout)
    services = config["services"]
    assert {"postgresql", "temporal", "temporal-ui", "worker", "gateway"} <= set(services)
    assert services["worker"]["deploy"]["replicas"] >= 2, "N workers"
    assert "gateway-state" in config["volumes"] and services["gateway"]["environment"]["AGENT_ENV_GATEWAY_URL"]
    for name in ("worker", "gateway"):  # both run the images deploy/build-images makes, from one config
        assert services[name]["image"].startswith(f"agentenv/{name}:")
        assert services[name]["environment"]["AGENT_ENV_CONFIG"] == "/etc/agentenv/config.toml"


def rendered(kubectl: str, folder: Path) -> list[dict]:
    import yaml

    done = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"kustomize {folder.relative_to(ROOT)}: {done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def loaded_config(text: str, tmp_path: Path, monkeypatch):
    """`text` as agent-env reads a config file (every section and key checked), with no AGENT_ENV_* overrides."""
    from agent_env.config import load_settings

    path = tmp_path / "config.toml"
    path.write_text(text)
    for var in [v for v in os.environ if v.startswith(("AGENT_ENV_", "TEMPORAL_"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("AGENT_ENV_CONFIG", str(path))
    monkeypatch.setenv("AGENT_ENV_HOME", str(tmp_path / "home"))
    return load_settings(tmp_path)


def test_compose_config_file_is_one_agentenv_reads(tmp_path, monkeypatch):
    settings = loaded_config((DEPLOY / "compose" / "config.toml").read_text(), tmp_path, monkeypatch)
    assert settings.stores.documents.backend == settings.stores.objects.backend == "aws"
    assert settings.gateway.urls() == ["http://gateway:8790"] and settings.gateway.key_secret
    assert settings.temporal.plan_key_secret, "workers on several hosts share one plan key"


@pytest.mark.parametrize("variant", ["base", "overlays/dev", "overlays/prod"])
def test_kubernetes_manifests_render_and_fit_the_kubernetes_schemas(variant, tmp_path, monkeypatch):
    """Rendered by kustomize (`kubectl kustomize`, so base and overlays are what `kubectl apply -k` applies), then
    each resource validated strictly (no unknown fields) against the Kubernetes schemas by kubernetes-validate."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (the dev extra)")
    kubectl = need_tool("kubectl", "kubectl kustomize renders the overlays")
    docs = rendered(kubectl, DEPLOY / "k8s" / variant)
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{variant}: {doc['kind']} {doc['metadata']['name']}: {e.message} at {list(e.path)}")
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for wanted in ("Namespace", "ConfigMap", "Secret", "Deployment", "HorizontalPodAutoscaler", "StatefulSet"):
        assert wanted in {kind for kind, _ in kinds}, f"{variant} has no {wanted}"
    by_kind = {d["kind"]: d for d in docs}
    assert all(d["metadata"].get("namespace") == "agentenv" for d in docs if d["kind"] != "Namespace")
    gateway = by_kind["StatefulSet"]["spec"]
    assert gateway["volumeClaimTemplates"], "gateways keep their instances on persistent volumes"
    headless = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == gateway["serviceName"]]
    assert headless and headless[0]["spec"]["clusterIP"] == "None", "each gateway has a stable DNS name"
    worker = by_kind["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["requests"] and "agentenv/worker:" in worker["image"]
    # The config file agent-env reads there, and a gateway pod of each replica named in it, as the pool routes.
    settings = loaded_config(by_kind["ConfigMap"]["data"]["config.toml"], tmp_path, monkeypatch)
    assert settings.gateway.key_secret and settings.temporal.address and settings.temporal.plan_key_secret
    names = [f"http://gateway-{i}.{gateway['serviceName']}:8790" for i in range(gateway["replicas"])]
    assert settings.gateway.urls() == names, "[gateway] url/pool lists each gateway the StatefulSet runs"
    own = {e["name"]: e.get("value") for e in gateway["template"]["spec"]["containers"][0]["env"]}
    assert own["AGENT_ENV_GATEWAY_URL"] == f"http://$(POD_NAME).{gateway['serviceName']}:8790"


def test_overlays_change_what_they_say():
    pytest.importorskip("yaml")
    kubectl = need_tool("kubectl", "kubectl kustomize renders the overlays")

    def summary(variant: str) -> dict:
        docs = {d["kind"]: d for d in rendered(kubectl, DEPLOY / "k8s" / variant)}
        worker = docs["Deployment"]["spec"]
        return {
            "replicas": worker["replicas"],
            "image": worker["template"]["spec"]["containers"][0]["image"],
            "max": docs["HorizontalPodAutoscaler"]["spec"]["maxReplicas"],
            "gateways": docs["StatefulSet"]["spec"]["replicas"],
        }

    base, dev, prod = summary("base"), summary("overlays/dev"), summary("overlays/prod")
    assert dev["replicas"] <= base["replicas"] <= prod["replicas"] and prod["max"] > base["max"]
    assert prod["image"] != base["image"] and prod["gateways"] >= 2


# -- the Docker tier: the images, for real --


def container_logs(container) -> str:
    try:
        return container.logs(tail=60).decode(errors="replace")
    except Exception as e:  # noqa: BLE001 - gone already: say so instead
        return f"(no logs: {e})"


@pytest.mark.slow  # builds two images (about a minute when their layers are cached)
def test_worker_and_gateway_images_run_hello_and_workplace(docker_client, server, settings, tmp_path, request):  # noqa: F811
    """The images as a cluster runs them: a gateway container and a worker container on the host's network,
    sharing Temporal (this session's server), the stores (moto's S3 and DynamoDB) and the gateway key (a secret
    in their environment); this host only starts runs and reads their records."""
    pytest.importorskip("moto.server", reason="the shared stores are moto's server (the dev extra)")
    import boto3

    done = subprocess.run([str(DEPLOY / "build-images"), "test"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "built agentenv/worker:test" in done.stderr and "built agentenv/gateway:test" in done.stderr

    url = request.getfixturevalue("endpoint")
    bucket = moto_util.unique("deploy")
    boto3.client("s3", endpoint_url=url).create_bucket(Bucket=bucket)
    config = tmp_path / "config.toml"
    config.write_text(
        f'[stores.documents]\nbackend = "aws"\nendpoint_url = "{url}"\ntable = "{moto_util.unique("runs")}"\n'
        f'[stores.objects]\nbackend = "aws"\nendpoint_url = "{url}"\nbucket = "{bucket}"\n'
        '[gateway]\nkey_secret = "gateway-key"\n[temporal]\nplan_key_secret = "plan-key"\n'
    )
    config.chmod(0o644)  # the images' user reads it
    port, queue = free_port(), f"deploy-{uuid.uuid4().hex[:6]}"
    shared = {
        "TEMPORAL_ADDRESS": settings.address,
        "AGENT_ENV_TASK_QUEUE": queue,
        "AGENT_ENV_GATEWAY_URL": f"http://127.0.0.1:{port}",
        "AGENT_ENV_GATEWAY_PORT": str(port),
        "AGENT_ENV_SECRET_GATEWAY_KEY": secrets.token_hex(32),
        "AGENT_ENV_SECRET_PLAN_KEY": secrets.token_hex(32),  # the host plans, the worker executes: one key
        **moto_util.CREDENTIALS,
        # the session's fake model server, for workplace's persona
        **{k: v for k, v in os.environ.items() if k.startswith(("AGENT_ENV_MODEL", "AGENT_ENV_SECRET_TEST"))},
    }
    containers = []
    try:
        for name in ("gateway", "worker"):
            containers.append(
                docker_client.containers.run(
                    f"agentenv/{name}:test",
                    name=f"agentenv-test-{name}-{queue}",
                    detach=True,
                    network_mode="host",
                    environment={
                        **shared,
                        "AGENT_ENV_CONFIG": "/etc/agentenv/config.toml",
                        "HEALTH_PORT": str(free_port()),
                    },
                    volumes={str(config): {"bind": "/etc/agentenv/config.toml", "mode": "ro"}},
                )
            )
        gateway, worker = containers
        deadline = time.monotonic() + 60
        for container in containers:  # each image's HEALTHCHECK: the gateway's /ready, the worker's /healthz
            while (health := _health(container)) != "healthy":
                assert health != "unhealthy" and time.monotonic() < deadline, f"{health}: {container_logs(container)}"
                time.sleep(0.5)

        host = {
            **os.environ,
            **shared,
            "AGENT_ENV_CONFIG": str(config),
            "AGENT_ENV_HOME": str(tmp_path / "host-home"),
        }
        runs = {}
        for task in ("hello", "workplace"):
            started = subprocess.run(
                [AGENT_ENV, "run", task, "--detach"], capture_output=True, text=True, env=host, timeout=120
            )
            assert started.returncode == 0, started.stdout + started.stderr
            runs[task] = started.stdout.split("started run ", 1)[1].split()[0]
        for task, run_id in runs.items():
            state = _wait_finished(host, run_id, timeout=120, logs=lambda: container_logs(worker))
            assert state["status"] == "passed", f"{task}: {state.get('error')}\n{container_logs(worker)}"
        assert f"worker on task queue '{queue}'" in container_logs(worker)
        assert not (tmp_path / "host-home" / "gateway" / "key").exists(), "no gateway ran on the host"
    finally:
        for container in containers:
            container.remove(force=True, v=True)


def _health(container) -> str:
    container.reload()
    return container.attrs["State"].get("Health", {}).get("Status", "none")


def _wait_finished(env: dict, run_id: str, *, timeout: float, logs) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        shown = subprocess.run(
            [AGENT_ENV, "runs", "show", run_id, "--json"], capture_output=True, text=True, env=env, timeout=60
        )
        if shown.returncode == 0:
            state = json.loads(shown.stdout[shown.stdout.index("{") :])
            if RunStatus(state["status"]).finished:
                return state
        assert time.monotonic() < deadline, f"run {run_id} did not finish: {shown.stdout}{shown.stderr}\n{logs()}"
        time.sleep(1)
