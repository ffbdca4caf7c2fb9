"""The framework's names, as its users type them: the package `agent_env`, the distribution `agentenv-framework`
(which requires `agentenv-framework-protocol`), the command `agent-env`, variables `AGENT_ENV_*`, and the
framework's plugin groups. Renamed things are removed outright: no `agentenv` package, no old variable."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import distribution, entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
pytestmark = pytest.mark.processes


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)


def test_import_agentenv_fails_and_agent_env_imports():
    old = python("import agentenv")
    assert old.returncode == 1 and "No module named 'agentenv'" in old.stderr
    new = python("import agent_env, agentenv_protocol; print(agent_env.__name__)")
    assert new.returncode == 0 and new.stdout.strip() == "agent_env", new.stderr
    assert not (ROOT / "agentenv").exists()


def test_the_distribution_is_agentenv_framework_and_requires_the_protocol():
    shown = subprocess.run([sys.executable, "-m", "pip", "show", "agentenv-framework"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    fields = dict(line.split(": ", 1) for line in shown.stdout.splitlines() if ": " in line)
    assert fields["Name"] == "agentenv-framework"
    assert "agentenv-framework-protocol" in [r.strip() for r in fields["Requires"].split(",")]
    scripts = {
        ep.name: ep.value for ep in distribution("agentenv-framework").entry_points if ep.group == "console_scripts"
    }
    assert scripts == {"agent-env": "agent_env.cli:main"}


def test_plugin_groups_are_the_frameworks():
    from agent_env import plugins

    assert {plugins.STEPS, plugins.PROVIDERS, plugins.STORES} == {
        "agent_env.task_steps",
        "agent_env.sandbox_providers",
        "agent_env.stores",
    }
    # the test plugin package declares its step types in the framework's group, and they load from there
    assert "echo" in {ep.name for ep in entry_points(group="agent_env.task_steps")}
    assert not [group for group in entry_points().groups if group.startswith("agentenv.")]


def test_no_old_variable_is_read_anywhere():
    """Every variable the code, scripts and deploy files read is AGENT_ENV_*: nothing reads AGENTENV_*."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    old = re.compile(r"\bAGENTENV_[A-Z_]*")
    found = {
        name: sorted(set(old.findall(text)))
        for name in tracked
        if name != "tests/test_names.py"  # (this test names the old prefix)
        if (ROOT / name).is_file() and (text := (ROOT / name).read_text(errors="replace")) and old.search(text)
    }
    assert not found, f"old variable names: {found}"
