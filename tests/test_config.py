from __future__ import annotations

from pathlib import Path

import pytest

from agentenv.config import load_settings
from agentenv.errors import BadInput


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("AGENTENV_HOME", "AGENTENV_SERVER_PORT", "AGENTENV_UI_PORT", "TEMPORAL_ADDRESS", "AGENTENV_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def write_config(root: Path, text: str) -> Path:
    (root / ".agentenv").mkdir(parents=True, exist_ok=True)
    path = root / ".agentenv" / "config.toml"
    path.write_text(text)
    return path


def test_defaults_are_embedded_and_xdg(clean_env, tmp_path):
    clean_env.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    s = load_settings(tmp_path)
    assert s.embedded and s.address == "127.0.0.1:7233"
    assert s.state_dir == tmp_path / "xdg" / "agentenv"
    assert s.run_url("r1") == "http://127.0.0.1:8233/namespaces/default/workflows/r1"


def test_config_file_is_found_upward(clean_env, tmp_path):
    path = write_config(
        tmp_path,
        """
state_dir = "state"
[temporal]
address = "temporal.example:7233"
namespace = "prod"
""",
    )
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    s = load_settings(deep)
    assert s.config_file == path
    assert not s.embedded and s.address == "temporal.example:7233" and s.temporal.namespace == "prod"
    assert s.state_dir == (tmp_path / "state").resolve()
    assert s.ui_base is None


def test_environment_overrides_the_file(clean_env, tmp_path):
    write_config(tmp_path, "[server]\nport = 7300\n")
    clean_env.setenv("AGENTENV_SERVER_PORT", "7400")
    clean_env.setenv("TEMPORAL_NAMESPACE", "ns2")
    s = load_settings(tmp_path)
    assert s.server.port == 7400 and s.temporal.namespace == "ns2"


def test_bad_config_files_name_the_problem(clean_env, tmp_path):
    write_config(tmp_path, "[temporal\naddress = 1\n")
    with pytest.raises(BadInput, match="is not valid TOML"):
        load_settings(tmp_path)
    write_config(tmp_path, "[temporal]\nadress = 'x'\n[server]\nport = 'high'\n")
    with pytest.raises(BadInput) as e:
        load_settings(tmp_path)
    assert "temporal.adress: unknown field" in str(e.value)
    assert "server.port" in str(e.value)


def test_agentenv_config_must_exist(clean_env, tmp_path):
    clean_env.setenv("AGENTENV_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(BadInput, match="not a file"):
        load_settings(tmp_path)
