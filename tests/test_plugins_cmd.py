"""`agent-env plugin` and `agent-env steps`, through real subprocesses, against the test plugins.

tests/plugins_broken holds plugins that are wrong in each way `plugin check` reports; it is put on the path of
these subprocesses only (every other test loads all step types). `plugin add`/`remove` install a wheel built
here into a throwaway venv that sees this checkout's packages through a .pth file.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
TESTS = Path(__file__).parent
WITH_BROKEN = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(TESTS / "plugins"), str(TESTS / "plugins_broken")]),
}


def cli(*args: str, env: dict[str, str] = WITH_BROKEN, python: str | None = None) -> subprocess.CompletedProcess:
    command = [python, "-m", "agent_env", *args] if python else [AGENT_ENV, *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def by_name(plugins: list[dict]) -> dict[tuple[str, str, str], dict]:
    return {(p["group"].removeprefix("agent_env."), p["name"], p["distribution"]): p for p in plugins}


def test_plugin_list_shows_every_group_and_reports_broken_plugins_without_failing():
    done = cli("plugin", "list", "--json")
    assert done.returncode == 0, done.stderr
    found = by_name(json.loads(done.stdout))

    builtin = found["task_steps", "prompt_agent", "agentenv-framework"]
    assert builtin["builtin"] and builtin["status"] == "ok" and builtin["version"]
    echo = found["task_steps", "echo", "agentenv-teststeps"]
    assert (echo["builtin"], echo["status"], echo["version"]) == (False, "ok", "0.1")
    assert found["sandbox_providers", "offline", "agentenv-teststeps"]["status"] == "ok"
    assert found["stores", "memory", "agentenv-teststeps"]["status"] == "ok"
    assert found["stores", "local", "agentenv-framework"]["builtin"]
    assert found["envs", "notes", "agentenv-framework"]["builtin"]
    assert found["envs", "tally", "agentenv-teststeps"]["status"] == "ok"
    assert "not an App subclass" in found["envs", "not_an_app", "agentenv-brokenplugins"]["error"]
    assert found["env_providers", "server", "agentenv-framework"]["builtin"]
    assert found["env_providers", "spare_host", "agentenv-testtopology"]["status"] == "ok"
    assert "not an EnvironmentProvider" in found["env_providers", "not_a_topology", "agentenv-brokenplugins"]["error"]

    missing = found["task_steps", "broken", "agentenv-teststeps"]
    assert missing["status"] == "error" and "agentenv_teststeps_missing" in missing["error"]
    raising = found["task_steps", "explodes", "agentenv-brokenplugins"]
    assert raising["error"] == "RuntimeError: explodes on import: AGENT_ENV_BROKEN_SETTING is not set"
    assert "not a step type" in found["task_steps", "not_a_step", "agentenv-brokenplugins"]["error"]
    assert "'shout_loud'" in found["task_steps", "misnamed", "agentenv-brokenplugins"]["error"]
    assert (
        "not a SandboxProvider subclass"
        in found["sandbox_providers", "not_a_provider", "agentenv-brokenplugins"]["error"]
    )
    shadowed = found["task_steps", "check", "agentenv-brokenplugins"]
    assert shadowed["status"] == "ignored" and "agentenv-framework already provides 'check'" in shadowed["error"]

    text = cli("plugin", "list")
    assert text.returncode == 0, text.stderr
    for expected in (
        "agent_env.task_steps",
        "agent_env.sandbox_providers",
        "agent_env.stores",
        "built-in",
        "agentenv-teststeps 0.1",
    ):
        assert expected in text.stdout
    assert "RuntimeError: explodes on import" in text.stdout


def test_plugin_check_exits_1_naming_each_broken_plugin_and_its_fix():
    done = cli("plugin", "check")
    assert done.returncode == 1
    out = done.stdout
    assert "✓ agent_env.task_steps prompt_agent" in out and "✓ agent_env.task_steps echo" in out
    marks = {tuple(line.split()[2:4]): line[0] for line in out.splitlines() if line[:1] in ("✓", "✗")}
    broken = ("explodes", "not_a_step", "misnamed", "check", "not_a_provider")
    assert {name: marks[name, "(agentenv-brokenplugins)"] for name in broken} == dict.fromkeys(broken, "✗")
    assert marks["broken", "(agentenv-teststeps)"] == marks["broken-store", "(agentenv-teststeps)"] == "✗"
    assert marks["check", "(agentenv-framework)"] == "✓"
    assert "fix: point the entry point at a function decorated with @agent_env.steps.step_type" in out
    assert (
        "fix: fix or upgrade agentenv-brokenplugins, or remove it: agent-env plugin remove agentenv-brokenplugins"
        in out
    )
    assert "broken" in out.splitlines()[-1]

    one_good = cli("plugin", "check", "echo", "offline", "memory")
    assert one_good.returncode == 0, one_good.stdout
    assert "✗" not in one_good.stdout

    one_dist = cli("plugin", "check", "agentenv-brokenplugins")
    assert one_dist.returncode == 1 and "echo" not in one_dist.stdout and "explodes" in one_dist.stdout

    unknown = cli("plugin", "check", "ecoh")
    assert unknown.returncode == 2
    assert "no plugin or distribution named ecoh (did you mean echo?)" in unknown.stderr


def test_without_broken_plugins_check_passes():
    env = {**os.environ, "PYTHONPATH": ""}
    done = cli("plugin", "check", env=env)
    assert done.returncode == 0, done.stdout
    assert "agentenv-teststeps" not in done.stdout and "prompt_agent" in done.stdout


def test_steps_list_prints_every_type_with_its_origin_and_traits():
    done = cli("steps", "list")
    assert done.returncode == 0, done.stderr
    rows: dict[str, str] = {}
    for line in done.stdout.splitlines():  # a type's row comes before any wrapped line that starts with its name
        if line.strip():
            rows.setdefault(line.split()[0], line)
    assert "built-in" in rows["prompt_agent"] and "timeout 2h" in rows["prompt_agent"]
    assert "conversation" in rows["prompt_agent"] and "Give an agent a task" in rows["prompt_agent"]
    assert "plugin" in rows["echo"] and "local" in rows["echo"] and "Output the configured value." in rows["echo"]
    assert "in workflow (sync_env_clock)" in rows["sync_env_clock"]
    assert "✗ does not load" in rows["explodes"] and "explodes on import" in " ".join(done.stdout.split())


def test_steps_show_prints_fields_from_the_model_and_an_example_that_validates():
    from agent_env.steps import catalog

    done = cli("steps", "show", "prompt_agent")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    fields = {line.split()[0]: line for line in out.split("example:")[0].splitlines()[3:] if line.strip()}
    assert "(required)" in fields["agent"] and "the deploy_agent step of the agent to prompt" in fields["agent"]
    assert "5m" in fields["turn_deadline"] and "how long one answer may take" in fields["turn_deadline"]
    assert "Literal['fail', 'score_zero']" in fields["on_timeout"] and '"fail"' in fields["on_timeout"]
    example = tomllib.loads(out.split("example:")[1])
    step = example["steps"][0]
    assert (step["id"], step["type"], sorted(step["config"])) == ("prompt_agent", "prompt_agent", ["agent", "prompt"])
    catalog.get("prompt_agent").config.model_validate(step["config"])

    plugin = cli("steps", "show", "flaky")
    assert plugin.returncode == 0 and "flaky (plugin)" in plugin.stdout
    assert tomllib.loads(plugin.stdout.split("example:")[1])["steps"][0]["config"] == {"fail_times": 0}


def test_steps_show_names_the_closest_types_or_the_load_error():
    unknown = cli("steps", "show", "prompt_agnt")
    assert unknown.returncode == 2
    assert "no step type named 'prompt_agnt' (did you mean prompt_agent" in unknown.stderr
    broken = cli("steps", "show", "explodes")
    assert broken.returncode == 1
    assert "explodes on import" in broken.stderr and "agent-env plugin check explodes" in broken.stderr


def wheel(folder: Path, dist: str, module: str, source: str, entry_points: str) -> Path:
    """A pure-Python wheel, written by hand: no build backend, no network."""
    info = f"{dist}-0.1.dist-info"
    files = {
        f"{module}.py": source,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: 0.1\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: agentenv-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": entry_points,
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    path = folder / f"{dist}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


@pytest.fixture
def throwaway_python(tmp_path) -> str:
    """A venv that sees this checkout's packages (agent-env, pip) but installs into its own site-packages."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    ours = next(
        p for p in sys.path if p.endswith("site-packages") and Path(p, "agentenv_framework-0.1.0.dist-info").exists()
    )
    (venv / "lib" / version / "site-packages" / "checkout.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return str(venv / "bin" / "python")


def test_plugin_add_installs_into_the_environment_agent_env_runs_from_and_remove_uninstalls(tmp_path, throwaway_python):
    env = {**os.environ, "PYTHONPATH": "", "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    source = (
        "from agent_env.steps import step_type\n\n\n"
        '@step_type("wave", local=True)\ndef wave(ctx, config):\n    """Wave back."""\n    return {"waved": True}\n'
    )
    good = wheel(
        tmp_path, "agentenv_wave", "agentenv_wave", source, "[agent_env.task_steps]\nwave = agentenv_wave:wave\n"
    )

    added = cli("plugin", "add", str(good), env=env, python=throwaway_python)
    assert added.returncode == 0, added.stdout + added.stderr
    assert "Successfully installed agentenv-wave-0.1" in added.stdout  # pip's own progress is shown
    assert "agentenv-wave 0.1 adds: wave (task_steps)" in added.stdout
    assert "✓ agent_env.task_steps wave  (agentenv-wave)" in added.stdout
    listed = cli("steps", "list", env=env, python=throwaway_python)
    assert "Wave back." in listed.stdout
    assert "wave" not in cli("steps", "list", env=env).stdout  # the checkout's own venv is untouched

    broken = wheel(
        tmp_path, "agentenv_oops", "agentenv_oops", "x = 1\n", "[agent_env.stores]\noops = agentenv_oops:nope\n"
    )
    added = cli("plugin", "add", str(broken), env=env, python=throwaway_python)
    assert added.returncode == 1
    assert "✗ agent_env.stores oops" in added.stdout and "AttributeError" in added.stdout

    itself = cli("plugin", "remove", "agentenv-framework", env=env, python=throwaway_python)
    assert itself.returncode == 2 and "refusing to remove agentenv-framework" in itself.stderr
    unrelated = cli("plugin", "remove", "pip", env=env, python=throwaway_python)
    assert unrelated.returncode == 2 and "refusing to remove pip: it provides no agent-env plugins" in unrelated.stderr
    absent = cli("plugin", "remove", "agentenv-nothing", env=env, python=throwaway_python)
    assert absent.returncode == 2 and "no distribution 'agentenv-nothing' is installed" in absent.stderr

    for dist in ("agentenv-wave", "agentenv_oops"):
        removed = cli("plugin", "remove", dist, env=env, python=throwaway_python)
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert "Successfully uninstalled" in removed.stdout
    left = by_name(json.loads(cli("plugin", "list", "--json", env=env, python=throwaway_python).stdout))
    assert not [key for key in left if key[2] in ("agentenv-wave", "agentenv-oops")]
