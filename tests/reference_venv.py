"""The protocol's reference code, run as its users run it: in a virtualenv of its own (it pins a2a-sdk<0.4 and
mcp<2; ours are 1.x and 2.x), built once per version and cached.

- `reference_python`: a Python with the reference package's agent extra (`agentenv_protocol.a2a_agent`, its env
  SDK), at the version our dev extra pins.
- `framework_python`: the same, plus the reference framework itself (its `agent_env`: the deploy, prompt and
  validator steps' own client code), at the version that pins that protocol version.
- `side_script`: start a script under one of them as a real server on 127.0.0.1 (a free port as its argument),
  once it answers; stopped at the test's end.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
from conftest import free_port

A2A_CARD = "/.well-known/agent-card.json"  # where an A2A agent serves its card: a started agent answers there
PROTOCOL = "agentenv-framework-protocol"
FRAMEWORK = "agentenv-framework"
# The reference framework release whose own code runs against our agents; it pins the protocol's version exactly,
# so it moves with ours (`agentenv-framework-protocol` in pyproject.toml's dev extra).
FRAMEWORK_VERSIONS = {"0.1.379": "0.9.1364"}


def _side_venv(name: str, requirements: list[str]) -> Path:
    """bin/python of a cached virtualenv holding `requirements`, built on first use."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentenv-tests"
    home = cache / name
    python = home / "bin" / "python"
    if python.exists():
        return python
    cache.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix="building-", dir=cache))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(building)], check=True, capture_output=True, timeout=120)
        subprocess.run(
            [str(building / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            + requirements,
            check=True,
            capture_output=True,
            timeout=900,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        shutil.rmtree(building, ignore_errors=True)
        why = f"needs {' '.join(requirements)} in a side virtualenv (pip install failed: {e})"
        if os.environ.get("CI") or os.environ.get("AGENT_ENV_REQUIRE_DOCKER"):
            pytest.fail(why)  # CI runs every tier: it never skips
        pytest.skip(why)
    # run as bin/python, a virtualenv works where it is moved to; a racing build that got there first wins
    with contextlib.suppress(OSError):
        building.rename(home)
    shutil.rmtree(building, ignore_errors=True)
    return python


@pytest.fixture(scope="session")
def reference_python() -> Path:
    """A Python with the reference framework's agent extra, at the version our dev extra pins."""
    version = importlib.metadata.version(PROTOCOL)
    return _side_venv(f"reference-agent-{version}", [f"{PROTOCOL}[agent]=={version}"])


@pytest.fixture(scope="session")
def framework_python() -> Path:
    """A Python with the reference framework (its `agent_env`) beside the protocol's agent extra."""
    version = importlib.metadata.version(PROTOCOL)
    framework = FRAMEWORK_VERSIONS.get(version)
    if framework is None:
        pytest.fail(f"FRAMEWORK_VERSIONS in {__file__} names no {FRAMEWORK} release for {PROTOCOL} {version}: add one")
    return _side_venv(
        f"reference-framework-{framework}", [f"{PROTOCOL}[agent]=={version}", f"{FRAMEWORK}=={framework}"]
    )


@contextlib.contextmanager
def started(
    python: Path, folder: Path, name: str, source: str, ready: str, env: dict[str, str] | None = None
) -> Iterator[str]:
    """`source` written to FOLDER/NAME.py and run by `python` with a free port as its argument; yields its base URL
    (no trailing slash) once GET `ready` there answers 200. Its output goes to FOLDER/NAME.log, shown if it dies."""
    script = folder / f"{name}.py"
    script.write_text(source)
    port = free_port()
    logged = folder / f"{name}.log"
    log = logged.open("w")
    process = subprocess.Popen(
        [str(python), str(script), str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        cwd=folder,  # never our checkout: its agent_env would shadow the reference framework's
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, logged.read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + ready).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"{name} did not answer {ready} in 60s: {logged.read_text()}"
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)
        log.close()


SideScript = Callable[..., AbstractContextManager[str]]


@pytest.fixture
def side_script(reference_python: Path, tmp_path: Path) -> SideScript:
    """Start a script in the reference side venv: `with side_script("name", SOURCE, ready="/path") as url:`
    (`python=` another side venv's, `env=` more environment variables)."""

    def start(
        name: str, source: str, *, ready: str, python: Path | None = None, env: dict[str, str] | None = None
    ) -> AbstractContextManager[str]:
        return started(python or reference_python, tmp_path, name, source, ready, env)

    return start


async def run_to_end(python: Path, folder: Path, name: str, source: str, *args: str) -> str:
    """`source` run to its end by `python` (in FOLDER, as a user whose home is FOLDER/home: the reference framework
    keeps its state there, never in ours), with `args`; its output. Fails the test, showing the output, if it fails."""
    import asyncio

    script = folder / f"{name}.py"
    script.write_text(source)
    home = folder / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home)}  # none of our AGENT_ENV_*: the framework reads them
    process = await asyncio.create_subprocess_exec(
        str(python), str(script), *args, cwd=folder, env=env, stdout=asyncio.subprocess.PIPE, stderr=subprocess.STDOUT
    )
    output, _ = await asyncio.wait_for(process.communicate(), 300)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    return text
