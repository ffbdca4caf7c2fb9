from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import get_args

import pytest
from pydantic import BaseModel

from agent_env.config import Origin, Settings, load_settings
from agent_env.errors import BadInput


@pytest.fixture
def clean_env(monkeypatch):
    for var in (
        "AGENT_ENV_HOME",
        "AGENT_ENV_SERVER_PORT",
        "AGENT_ENV_UI_PORT",
        "AGENT_ENV_UI",
        "TEMPORAL_ADDRESS",
        "AGENT_ENV_CONFIG",
    ):
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
    assert s.run_url("r1") is None, "the embedded server's web UI is off unless asked for (SECURITY.md)"
    clean_env.setenv("AGENT_ENV_UI", "1")
    assert load_settings(tmp_path).run_url("r1") == "http://127.0.0.1:8233/namespaces/default/workflows/r1"


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
    clean_env.setenv("AGENT_ENV_SERVER_PORT", "7400")
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
    clean_env.setenv("AGENT_ENV_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(BadInput, match="not a file"):
        load_settings(tmp_path)


# --- where each value came from ---------------------------------------------------------------------------


def test_each_value_records_its_source(clean_env, tmp_path):
    path = write_config(tmp_path, '[temporal]\nnamespace = "prod"\n[server]\nport = 7300\n')
    clean_env.setenv("AGENT_ENV_HOME", str(tmp_path / "home"))
    clean_env.setenv("AGENT_ENV_SERVER_PORT", "7400")
    clean_env.setenv("AGENT_ENV_MODEL", "fake")
    s = load_settings(tmp_path)
    assert s.origin("temporal", "namespace") == Origin(source="file", name=str(path))
    assert s.origin("server", "port") == Origin(source="env", name="AGENT_ENV_SERVER_PORT")
    assert s.origin("state_dir") == Origin(source="env", name="AGENT_ENV_HOME")
    assert s.origin("models", "default", "model") == Origin(source="env", name="AGENT_ENV_MODEL")
    assert s.origin("temporal", "task_queue") == Origin(source="default")
    assert s.describe_address_source() == "the configuration"
    clean_env.setenv("TEMPORAL_ADDRESS", "t.example:7233")
    assert load_settings(tmp_path).describe_address_source() == "the TEMPORAL_ADDRESS environment variable"


def test_a_state_dir_from_the_file_or_xdg_says_so(clean_env, tmp_path):
    clean_env.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert load_settings(tmp_path).origin("state_dir") == Origin(source="env", name="XDG_STATE_HOME")
    path = write_config(tmp_path, 'state_dir = "state"\n')
    assert load_settings(tmp_path).origin("state_dir") == Origin(source="file", name=str(path))


# --- the reference system's [sandbox] shape -----------------------------------------------------------------

SEED_SHAPE = """
[sandbox]
default = "docker,local"
agent_default = "local"
[sandbox.providers.acme.config]
api_key = "secret:acme"
region = "eu"
[sandbox.providers.empty.config]
"""


def test_the_seed_sandbox_shape_reads_as_ours(clean_env, tmp_path):
    path = write_config(tmp_path, SEED_SHAPE)
    clean_env.setenv("AGENT_ENV_HOME", str(tmp_path / "home"))
    s = load_settings(tmp_path)
    assert (s.sandboxes.envs, s.sandboxes.agents) == ("docker,local", "local")
    assert s.sandboxes.providers == {"acme": {"api_key": "secret:acme", "region": "eu"}, "empty": {}}
    assert s.origin("sandboxes", "envs") == Origin(source="file", name=str(path), written_as="[sandbox] default")
    assert s.origin("sandboxes", "providers", "acme", "region").written_as == "[sandbox.providers.acme.config] region"
    ours = write_config(
        tmp_path,
        '[sandboxes]\nenvs = "docker,local"\nagents = "local"\n'
        '[sandboxes.providers.acme]\napi_key = "secret:acme"\nregion = "eu"\n[sandboxes.providers.empty]\n',
    )
    assert load_settings(tmp_path).sandboxes == s.sandboxes
    assert load_settings(tmp_path).origin("sandboxes", "envs") == Origin(source="file", name=str(ours))


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[sandbox]\ndefault = "docker"\n[sandboxes]\nenvs = "local"\n', ("[sandbox] default", "[sandboxes] envs")),
        (
            '[sandbox.providers.acme.config]\nregion = "eu"\n[sandboxes.providers.acme]\nregion = "us"\n',
            ("[sandbox.providers.acme.config] region", "[sandboxes.providers.acme] region"),
        ),
    ],
)
def test_one_value_in_both_shapes_is_an_error_naming_both(clean_env, tmp_path, text, named):
    write_config(tmp_path, text)
    with pytest.raises(BadInput, match="the same setting in two shapes") as e:
        load_settings(tmp_path)
    assert all(name in str(e.value) for name in named)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[sandbox]\nattribution = { product = "p" }\n', "[sandbox] attribution is not read"),
        ('[sandbox.providers.acme]\nimpl = "pkg:Acme"\n', "[sandbox.providers.acme] takes only a config table"),
        ('sandbox = "docker"\n', "must be tables"),
    ],
)
def test_seed_keys_we_do_not_read_are_refused(clean_env, tmp_path, text, problem):
    write_config(tmp_path, text)
    with pytest.raises(BadInput) as e:
        load_settings(tmp_path)
    assert problem in str(e.value) and e.value.fix


def test_providers_get_their_own_config_and_resolve_references_only_when_used(clean_env, tmp_path):
    from agent_env.providers import by_name
    from agent_env.stores.secrets import MissingSecret

    write_config(tmp_path, SEED_SHAPE + '[sandbox.providers.offline.config]\ntoken = "secret:offline-token"\n')
    clean_env.setenv("AGENT_ENV_HOME", str(tmp_path / "home"))
    s = load_settings(tmp_path)
    offline = by_name.load("offline", s)  # the test plugin: its own __init__(settings), unchanged
    assert offline.settings is s and offline.config == {"token": "secret:offline-token"}
    with pytest.raises(MissingSecret, match="offline-token"):
        offline.config.resolved("token")
    clean_env.setenv("AGENT_ENV_SECRET_OFFLINE_TOKEN", "t0k")
    assert offline.config.resolved("token") == "t0k" and offline.config["token"] == "secret:offline-token"
    assert offline.config.resolved("absent", 3) == 3
    assert by_name.load("local", s).config == {}  # a provider without a table gets an empty one


# --- agent-env config show ----------------------------------------------------------------------------------


def test_show_lists_every_value_with_its_source_and_masks_secrets(clean_env, tmp_path, capsys, monkeypatch):
    from agent_env.cli.config_cmd import show_command

    path = write_config(
        tmp_path,
        SEED_SHAPE
        + '[gateway]\nadmin_token = "aea_literal"\n[models.judge]\napi_key = "sk-literal"\nmodel = "m"\n'
        + '[models.agent]\napi_key = "secret:openai"\n'
        + '[stores.objects]\nbackend = "aws"\nbucket = "b"\naws_secret_access_key = "AKIA-literal"\n',
    )
    clean_env.setenv("AGENT_ENV_HOME", str(tmp_path / "home"))
    clean_env.setenv("TEMPORAL_API_KEY", "tk-literal")
    monkeypatch.chdir(tmp_path)
    assert show_command(json_out=True) == 0
    out = capsys.readouterr().out
    for literal in ("aea_literal", "sk-literal", "AKIA-literal", "tk-literal"):
        assert literal not in out
    shown = json.loads(out)
    assert shown["config_file"] == str(path)
    rows = shown["settings"]
    assert rows["temporal.api_key"] == {"value": "****", "source": "env", "name": "TEMPORAL_API_KEY"}
    assert rows["gateway.admin_token"]["value"] == "****"
    assert rows["models.judge.api_key"]["value"] == "****" and rows["models.judge.model"]["value"] == "m"
    assert rows["models.agent.api_key"] == {"value": "secret:openai", "source": "file", "name": str(path)}
    assert rows["models.agent.timeout"] == {"value": 120.0, "source": "default"}
    assert rows["stores.objects.aws_secret_access_key"]["value"] == "****"
    assert rows["stores.objects.bucket"]["value"] == "b" and rows["stores.documents.backend"]["source"] == "default"
    assert rows["sandboxes.providers.acme.api_key"] == {
        "value": "secret:acme",
        "source": "file",
        "name": str(path),
        "written_as": "[sandbox.providers.acme.config] api_key",
    }
    assert rows["sandboxes.providers.acme.region"]["value"] == "eu"
    assert rows["state_dir"] == {"value": str(tmp_path / "home"), "source": "env", "name": "AGENT_ENV_HOME"}
    assert rows["temporal.address"] == {"value": None, "source": "default"}
    # every field of every section is listed
    for section in ("temporal", "server", "gateway", "sandboxes"):
        model = type(getattr(Settings.model_construct(), section))
        assert {f"{section}.{name}" for name in model.model_fields if name != "providers"} <= set(rows)

    assert show_command(json_out=False) == 0
    table = capsys.readouterr().out
    assert "aea_literal" not in table and "sk-literal" not in table
    squeezed = re.sub(r"\s+", "", table)  # long paths fold within their column
    assert re.sub(r"\s+", "", f"sandboxes.envs docker,local file {path} (as [sandbox] default)") in squeezed
    assert "env TEMPORAL_API_KEY" in table and "default" in table


@pytest.mark.processes
def test_config_show_through_the_cli(clean_env, tmp_path):
    import subprocess
    import sys

    agent_env = str(Path(sys.executable).parent / "agent-env")
    write_config(tmp_path, '[temporal]\nnamespace = "prod"\n')
    env = {**os.environ, "AGENT_ENV_HOME": str(tmp_path / "home"), "AGENT_ENV_GATEWAY_TOKEN": "aea_xyz"}
    out = subprocess.run([agent_env, "config", "show", "--json"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["settings"]
    assert rows["temporal.namespace"]["source"] == "file" and rows["gateway.admin_token"]["value"] == "****"
    helped = subprocess.run([agent_env, "config", "show", "--help"], env=env, capture_output=True, text=True)
    assert helped.returncode == 0 and "where it came from" in helped.stdout and "--json" in helped.stdout
    top = subprocess.run([agent_env, "--help"], env=env, capture_output=True, text=True)
    assert "config" in top.stdout


@pytest.mark.processes
def test_help_does_not_import_config_show():
    import subprocess
    import sys

    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('LOADED', sorted(m for m in sys.modules if m.startswith('agent_env'))))\n"
        "sys.argv = ['agent-env', '--help']\n"
        "from agent_env.cli import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30)
    loaded = out.stdout.rsplit("LOADED", 1)[1]
    assert "agent_env.cli.commands" in loaded and "config" not in loaded


# --- the example file ---------------------------------------------------------------------------------------

EXAMPLE = Path(__file__).parents[1] / ".agentenv" / "config.example.toml"


def test_the_example_config_is_all_defaults(clean_env, tmp_path):
    clean_env.setenv("AGENT_ENV_HOME", str(tmp_path / "home"))
    write_config(tmp_path, EXAMPLE.read_text())
    from_example = load_settings(tmp_path)
    (tmp_path / ".agentenv" / "config.toml").unlink()
    assert from_example.model_dump() == load_settings(tmp_path).model_dump()


def _field_names(model: type[BaseModel], prefix: str = "") -> set[str]:
    names = set()
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        names.add(name)
        inner = field.annotation
        for candidate in (inner, *get_args(inner)):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                names |= _field_names(candidate)
    return names


def test_the_example_config_mentions_every_setting():
    text = EXAMPLE.read_text()
    names = _field_names(Settings)
    assert {"namespace", "backend", "base_url", "envs", "documents", "providers"} <= names  # the walk reaches down
    missing = sorted(name for name in names if not re.search(rf"\b{re.escape(name)}\b", text))
    assert missing == [], f"add these settings to {EXAMPLE}: {missing}"
    assert "copy it to .agentenv/config.toml" in text


def test_the_example_config_is_not_ignored_by_git():
    import shutil
    import subprocess

    if not shutil.which("git") or not (EXAMPLE.parents[1] / ".git").exists():
        pytest.skip("needs git and the repository's checkout")
    ignored = subprocess.run(["git", "check-ignore", "-q", str(EXAMPLE)], cwd=EXAMPLE.parents[1])
    assert ignored.returncode == 1


def test_the_guides_cluster_example_loads(clean_env, tmp_path):
    page = (EXAMPLE.parents[1] / "docs" / "temporal.md").read_text()
    section = page.split("## Pointing at a Temporal cluster", 1)[1]
    write_config(tmp_path, re.search(r"```toml\n(.*?)```", section, re.S)[1])
    clean_env.setenv("AGENT_ENV_HOME", str(tmp_path / "home"))
    s = load_settings(tmp_path)
    assert s.temporal.address == "temporal.internal:7233" and s.temporal.namespace == "agents" and s.temporal.tls
