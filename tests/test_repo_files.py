"""The repository files the README names: .env.example lists exactly the environment variables agent-env reads,
with their real defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent_env.config import ENV_VARIABLES, load_settings

ROOT = Path(__file__).resolve().parents[1]
ENV_EXAMPLE = ROOT / ".env.example"


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
SET_FOR_AGENTS = {"AGENT_ENV_PROMPT", "AGENT_ENV_MCP_URL", "AGENT_ENV_MCP_TOKEN"}


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
