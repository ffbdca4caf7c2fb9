"""Two installs ("machines": each its own state directory, gateway and worker) sharing one Temporal server and
AWS stores (moto's S3 and DynamoDB, over real HTTP), driven through the real CLI: a bundle pushed from one is
run from the registry by the other, the other sees the first one's run and reruns it from its pinned plan, and
every run ends with the same score and the same final data."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import moto_util
import pytest
from conftest import free_port

from agent_env.bundles import BUILTIN_ROOT

pytestmark = pytest.mark.processes
AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
endpoint = moto_util.endpoint


def desk_task(root: Path, name: str) -> Path:
    """The support-desk bundle with its task renamed (so no built-in shadows it), its world's time fixed (so
    its data is the same in every run) and its final data kept in the run's artifacts."""
    bundle = root / "bundle"
    shutil.copytree(BUILTIN_ROOT / "support-desk", bundle)
    task = bundle / "tasks" / "support-desk.toml"
    text = task.read_text().replace('\nid = "support-desk"', f'\nid = "{name}"')
    text = text.replace(
        'config = { env_id = "support-desk", agents',
        'config = { env_id = "support-desk", now = "2026-03-02T09:00:00Z", agents',
    )
    text += (
        '\n[[steps]]\nid = "keep"\ntype = "collect_artifacts"\ndepends_on = ["books"]\nconfig = { envs = ["desk"] }\n'
    )
    task.unlink()
    (bundle / "tasks" / f"{name}.toml").write_text(text)
    return bundle


def install(root: Path, name: str, stores: dict, temporal: str, queue: str, plan_key: str | None = None) -> dict:
    """A project folder whose config points at the shared stores (and names the team's plan key, which each
    machine's environment holds as a secret), and the environment of its own machine."""
    project = root / name
    (project / ".agentenv").mkdir(parents=True)
    lines = []
    for kind, options in stores.items():
        lines.append(f"[stores.{kind}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in options.items()]
    if plan_key:
        lines += ["[temporal]", 'plan_key_secret = "team-plan-key"']
    (project / ".agentenv" / "config.toml").write_text("\n".join(lines) + "\n")
    return {
        **os.environ,
        "AGENT_ENV_HOME": str(root / f"{name}-home"),
        **({"AGENT_ENV_SECRET_TEAM_PLAN_KEY": plan_key} if plan_key else {}),
        "AGENT_ENV_GATEWAY_PORT": str(free_port()),
        "TEMPORAL_ADDRESS": temporal,
        "AGENT_ENV_TASK_QUEUE": queue,
        "PWD": str(project),
    }


def cli(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run([AGENT_ENV, *args], capture_output=True, text=True, env=env, cwd=env["PWD"], timeout=timeout)
    return done


def record_of(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout[done.stdout.index("{") :])


def test_installs_sharing_temporal_and_aws_stores_run_and_rerun_each_others_runs(server, settings, tmp_path, request):
    pytest.importorskip("boto3", reason="the AWS stores need boto3 (pip install 'agentenv-framework[aws]')")
    pytest.importorskip("moto.server", reason="sharing AWS stores is tested against moto's server (the dev extra)")
    import boto3

    url = request.getfixturevalue("endpoint")
    bucket = moto_util.unique("bucket")
    s3 = boto3.client("s3", endpoint_url=url)
    s3.create_bucket(Bucket=bucket)
    stores = {
        "documents": {"backend": "aws", "endpoint_url": url, "table": moto_util.unique("table")},
        "objects": {"backend": "aws", "endpoint_url": url, "bucket": bucket},
    }
    name = f"desk-{uuid.uuid4().hex[:6]}"
    queue = f"shared-{uuid.uuid4().hex[:6]}"
    plan_key = secrets.token_hex(32)  # one team: what A plans B's worker may execute, and the other way round
    a = install(tmp_path, "a", stores, settings.address, queue, plan_key)
    b = install(tmp_path, "b", stores, settings.address, queue, plan_key)
    workers = [  # `run` starts and follows its run; with a cluster, workers are `agent-env worker` processes
        subprocess.Popen(
            [AGENT_ENV, "worker"], env=env, cwd=env["PWD"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for env in (a, b)
    ]
    try:
        bundle = desk_task(tmp_path, name)
        pushed = cli(a, "registry", "push", str(bundle))
        assert pushed.returncode == 0, pushed.stderr
        shutil.rmtree(bundle)

        first = record_of(cli(a, "run", name, "--json"))
        assert first["status"] == "passed" and first["pins"]["task"] == f"{name}@1"

        listed = cli(b, "runs", "list", "--json")
        assert first["run_id"] in [json.loads(line)["run_id"] for line in listed.stdout.splitlines()]
        rerun = record_of(cli(b, "runs", "rerun", first["run_id"], "--json"))
        again = record_of(cli(b, "run", name, "--json"))

        def final_data(record: dict) -> dict:
            key = f"runs/{record['run_id']}/artifacts/desk/data.json"
            return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())

        for other in (rerun, again):
            assert other["status"] == "passed" and other["score"] == first["score"] == 1.0
            assert final_data(other) == final_data(first), f"{other['run_id']}: other final data"
        assert rerun["pins"]["plan"] == first["pins"]["plan"] and rerun["pins"]["rerun_of"] == first["run_id"]
        assert again["pins"]["digests"] == first["pins"]["digests"], "the same versions from the registry"
        shown = cli(a, "registry", "show", "task", name)
        assert all(r["run_id"] in shown.stdout for r in (first, rerun, again)), "A sees B's runs of its task"
        for home in (Path(a["AGENT_ENV_HOME"]), Path(b["AGENT_ENV_HOME"])):
            assert not (home / "agentenv.sqlite").exists() and not (home / "objects").exists(), "no local stores"
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(60)
        for env in (a, b):
            cli(env, "gateway", "stop", timeout=30)


def test_secrets_commands_use_the_configured_secret_store(tmp_path, request):
    pytest.importorskip("boto3", reason="the AWS stores need boto3 (pip install 'agentenv-framework[aws]')")
    pytest.importorskip("moto.server", reason="sharing AWS stores is tested against moto's server (the dev extra)")
    url = request.getfixturevalue("endpoint")
    stores = {"secrets": {"backend": "aws", "endpoint_url": url, "prefix": f"{moto_util.unique('t')}/"}}
    a = install(tmp_path, "a", stores, "127.0.0.1:1", "unused")
    b = install(tmp_path, "b", stores, "127.0.0.1:1", "unused")
    value = "sk-shared-" + uuid.uuid4().hex
    done = cli(a, "secrets", "set", "team-key", "--value", value)
    assert done.returncode == 0, done.stderr
    assert "AWS Secrets Manager at " + url in done.stdout
    listed = cli(b, "secrets", "list", "--json")
    assert json.loads(listed.stdout)["names"] == ["team-key"], "B sees the secret A set"
    shown = cli({**b, "AGENT_ENV_MODEL_API_KEY": "secret:team-key"}, "models", "show")
    assert shown.returncode == 0, shown.stderr
    assert "not set" not in shown.stdout and "secret:team-key" in shown.stdout and value not in shown.stdout
    assert not (Path(a["AGENT_ENV_HOME"]) / "secrets.json").exists(), "nothing written to A's local secret file"
    assert cli(b, "secrets", "delete", "team-key").returncode == 0
    assert json.loads(cli(a, "secrets", "list", "--json").stdout)["names"] == []
