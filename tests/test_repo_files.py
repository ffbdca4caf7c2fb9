"""The repository files the README names: THIRD_PARTY_NOTICES.md matches what its script makes from the installed
metadata, and .env.example lists exactly the environment variables agent-env reads, with their real defaults."""

from __future__ import annotations

import difflib
import importlib.machinery
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent_env.config import ENV_VARIABLES, load_settings

ROOT = Path(__file__).resolve().parents[1]
NOTICES = ROOT / "THIRD_PARTY_NOTICES.md"
NOTICES_SCRIPT = ROOT / "scripts" / "third-party-notices"
ENV_EXAMPLE = ROOT / ".env.example"


def test_the_files_the_readme_names_exist():
    names = ["LICENSE", "NOTICE", "SECURITY.md", "CONTRIBUTING.md", "AGENTS.md", "CODE_OF_CONDUCT.md"]
    names += ["CODEOWNERS", "THIRD_PARTY_NOTICES.md", ".env.example", ".agentenv/config.example.toml"]
    assert [n for n in names if not (ROOT / n).is_file()] == []
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    assert "AGENTS.md" in contributing and "CODE_OF_CONDUCT.md" in contributing


def test_every_codeowners_pattern_names_something_that_exists():
    """A rename leaves no area without its owners unnoticed."""
    rules = [line.split() for line in (ROOT / "CODEOWNERS").read_text().splitlines() if line[:1] not in "#"]
    assert rules[0][0] == "*" and all(len(rule) > 1 and rule[1].startswith("@") for rule in rules)
    stale = [rule[0] for rule in rules[1:] if not any(ROOT.glob(rule[0].strip("/")))]
    assert not stale, f"CODEOWNERS names paths that do not exist: {stale}"


# --- THIRD_PARTY_NOTICES.md -----------------------------------------------------------------------------------


def notices_script():
    loader = importlib.machinery.SourceFileLoader("third_party_notices", str(NOTICES_SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def test_third_party_notices_are_what_the_script_makes():
    script = notices_script()
    checked_in = NOTICES.read_text()
    if f"evaluated for {script.environment()}." not in checked_in:
        pytest.skip(f"THIRD_PARTY_NOTICES.md was made for another Python or platform than {script.environment()}")
    made = script.render()
    diff = "".join(difflib.unified_diff(checked_in.splitlines(True), made.splitlines(True), "checked in", "made"))
    assert made == checked_in, (
        f"THIRD_PARTY_NOTICES.md differs from what the installed metadata gives: run `{script.FIX}`\n{diff[:4000]}"
    )


def sections(text: str) -> dict[str, set[str]]:
    """The packages each section's table lists, by its heading."""
    out: dict[str, set[str]] = {}
    for part in text.split("\n## ")[1:]:
        heading, _, body = part.partition("\n")
        out[heading] = set(re.findall(r"^\| ([a-z0-9][a-z0-9.-]*) \|", body, re.M)) - {"package"}
    return out


def test_third_party_notices_list_the_base_closure_and_each_extra():
    listed = sections(NOTICES.read_text())
    base = listed["The base install: `pip install agentenv-framework`"]
    # agent-env's own requirements, and what they bring in turn (pydantic's annotated-types, the protocol)
    assert {"temporalio", "pydantic", "mcp", "a2a-sdk", "agentenv-framework-protocol", "annotated-types"} <= base
    assert not {"pytest", "ruff", "mypy", "hypothesis", "moto", "selenium"} & base  # the dev extra's own
    assert "colorama" not in base  # typer's, on Windows only: markers are evaluated
    assert "boto3" not in base and "boto3" in listed["`agentenv-framework[aws]`"]
    assert {"botocore", "s3transfer", "jmespath"} <= listed["`agentenv-framework[aws]`"]
    assert {"opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"} <= listed["`agentenv-framework[otel]`"]
    assert (
        "docker" in base and "`agentenv-framework[docker]`" not in listed
    )  # (in the base install, as the framework has it)
    for extra in ("modal", "e2b", "tensorlake", "tenki"):  # not in the dev install: named, not walked
        assert listed[f"`agentenv-framework[{extra}]`"] == set()
    assert "| temporalio | MIT | agentenv-framework (`>=1.31,<1.32`) |" in NOTICES.read_text()


@pytest.mark.processes
def test_the_notices_command_works_as_the_fix_names_it(tmp_path):
    """`scripts/third-party-notices > THIRD_PARTY_NOTICES.md` from a shell whose venv is not activated: the
    script finds the checkout's .venv itself."""
    venv_bin = str(Path(sys.prefix) / "bin")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")} | {"PATH": path}
    done = subprocess.run([str(NOTICES_SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    if f"evaluated for {notices_script().environment()}." in NOTICES.read_text():
        assert done.stdout == NOTICES.read_text()


# --- .env.example ---------------------------------------------------------------------------------------------

ENTRY = re.compile(r"^# ([A-Z][A-Z0-9_]*(?:<NAME>)?)=(.*)$", re.M)


def env_example() -> dict[str, str]:
    return dict(ENTRY.findall(ENV_EXAMPLE.read_text()))


def test_env_example_lists_every_variable_agent_env_reads_and_no_other():
    listed, read = set(env_example()), {v.name for v in ENV_VARIABLES}
    assert not read - listed, f"add them to .env.example, commented, with what they do: {sorted(read - listed)}"
    assert not listed - read, f"agent-env reads none of these (config.ENV_VARIABLES): {sorted(listed - read)}"
    assert all(line.startswith("#") or not line.strip() for line in ENV_EXAMPLE.read_text().splitlines())
    assert "never loads this file" in ENV_EXAMPLE.read_text()


@pytest.fixture
def no_settings_env(monkeypatch, tmp_path):
    """No variable of ENV_VARIABLES set, a state dir of its own, and no config file above the working dir."""
    for var in ENV_VARIABLES:
        monkeypatch.delenv(var.name, raising=False)
    monkeypatch.setenv("AGENT_ENV_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def value_at(settings, path: tuple[str, ...]):
    value = settings.model_dump()
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return value


@pytest.mark.parametrize("var", [v for v in ENV_VARIABLES if len(v.setting) > 1], ids=lambda v: v.name)
def test_each_setting_variable_sets_its_setting_and_env_example_gives_its_default(no_settings_env, tmp_path, var):
    written = env_example()[var.name]
    defaults = load_settings(tmp_path)
    if var.setting[0] == "models":  # no endpoint is configured by default: the defaults of one
        default = defaults.model(var.setting[1]).model_dump()[var.setting[2]]
    else:
        default = value_at(defaults, var.setting)
    no_settings_env.setenv(var.name, written or "x")  # an empty value is unset: set one to see it is read
    settings = load_settings(tmp_path)
    origin = settings.origin(*var.setting)
    assert (origin.source, origin.name) == ("env", var.name)
    if written:
        assert value_at(settings, var.setting) == default, f".env.example's {var.name}={written} is not its default"
    else:
        assert default is None, f".env.example leaves {var.name} empty, but its default is {default!r}"


def test_the_state_dir_variables_set_the_state_dir(no_settings_env, tmp_path):
    no_settings_env.delenv("AGENT_ENV_HOME")
    no_settings_env.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    settings = load_settings(tmp_path)
    assert (settings.state_dir, settings.origin("state_dir").name) == (tmp_path / "xdg" / "agentenv", "XDG_STATE_HOME")
    no_settings_env.setenv("AGENT_ENV_HOME", str(tmp_path / "home"))
    settings = load_settings(tmp_path)
    assert (settings.state_dir, settings.origin("state_dir").name) == (tmp_path / "home", "AGENT_ENV_HOME")
    assert {v.name for v in ENV_VARIABLES if v.setting == ("state_dir",)} == {"AGENT_ENV_HOME", "XDG_STATE_HOME"}


# Variables agent-env sets for the command-line agents it runs (spec/agent.py documents them), and never reads.
SET_FOR_AGENTS = {"AGENT_ENV_PROMPT", "AGENT_ENV_MCP_URL", "AGENT_ENV_MCP_TOKEN", "AGENT_ENV_SETTINGS"}
SET_FOR_AGENTS |= {"AGENT_ENV_PASS_ENV"}  # deploy_agent's env_vars' names, for a cli agent's bridge


def test_every_agent_env_variable_the_code_names_is_in_the_list():
    """A backstop for ENV_VARIABLES itself: a variable read anywhere in agent_env/ is in it, and each one in it
    that is no setting is read somewhere."""
    sources = {p: p.read_text() for p in (ROOT / "agent_env").rglob("*.py")}
    named = {n for text in sources.values() for n in re.findall(r"AGENT_ENV_[A-Z0-9_]+", text)}
    listed = {v.name.removesuffix("<NAME>") for v in ENV_VARIABLES}
    unlisted = {
        n
        for n in named - listed - SET_FOR_AGENTS
        if not (n.endswith("_") and any(name.startswith(n) for name in listed))  # a prefix in a message
    }
    assert not unlisted, f"add them to config.ENV_VARIABLES and .env.example: {sorted(unlisted)}"
    code = "".join(line for text in sources.values() for line in text.splitlines(True) if 'EnvVar("' not in line)
    unread = [v.name for v in ENV_VARIABLES if not v.setting and v.name.removesuffix("<NAME>") not in code]
    assert not unread, f"nothing in agent_env/ reads these: {unread}"
