"""Choosing store backends from the config: local by default, cloud modules behind their extras, plugins from the
`agent_env.stores` entry-point group (the "memory" test plugin in tests/plugins), and errors that name the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import store_conformance

from agent_env.config import load_settings
from agent_env.errors import BadInput
from agent_env.stores import open_secrets, open_stores
from agent_env.stores.backends import open_store
from agent_env.stores.local import FileObjectStore, SqliteDocumentStore
from agent_env.stores.local_images import DockerImageStore
from agent_env.stores.secrets import FileSecretStore

# The document half of the conformance suite, against the memory plugin opened through the config.
globals().update({n: f for n, f in vars(store_conformance).items() if n.startswith("test_documents_")})


@pytest.fixture
def configured(monkeypatch, tmp_path):
    """Settings from a real config file with these `[stores.*]` lines."""
    monkeypatch.delenv("AGENT_ENV_CONFIG", raising=False)
    monkeypatch.delenv("AGENT_ENV_HOME", raising=False)

    def load(text: str = ""):
        (tmp_path / ".agentenv").mkdir(exist_ok=True)
        (tmp_path / ".agentenv" / "config.toml").write_text(f'state_dir = "state"\n{text}')
        return load_settings(tmp_path)

    return load


@pytest.fixture
def documents(configured):
    store = open_store("documents", configured('[stores.documents]\nbackend = "memory"\n'))
    yield store
    store.close()


def test_local_is_the_default(configured):
    settings = configured()
    stores = open_stores(settings)
    assert isinstance(stores.documents, SqliteDocumentStore)
    assert isinstance(stores.objects, FileObjectStore) and stores.objects.root == settings.state_dir / "objects"
    assert isinstance(stores.images, DockerImageStore) and isinstance(stores.secrets, FileSecretStore)
    stores.documents.put("runs", "r1", {"ok": True})
    stores.close()
    assert isinstance(open_secrets(settings), FileSecretStore)


def test_a_plugin_backend_opens_from_the_config(configured):
    settings = configured('[stores.documents]\nbackend = "memory"\nname = "shared"\n')
    stores = open_stores(settings)
    assert type(stores.documents).__name__ == "MemoryDocumentStore" and stores.documents.name == "shared"
    assert isinstance(stores.objects, FileObjectStore)  # the other kinds stay local
    stores.close()
    with pytest.raises(BadInput, match="only documents"):
        open_stores(configured('[stores.objects]\nbackend = "memory"\n'))


def test_unknown_backends_list_the_known_ones(configured):
    with pytest.raises(BadInput) as refused:
        open_stores(configured('[stores.objects]\nbackend = "memroy"\n'))
    assert "'memroy'" in refused.value.problem and "did you mean 'memory'" in refused.value.problem
    assert all(name in (refused.value.fix or "") for name in ("local", "aws", "gcp", "memory"))
    with pytest.raises(BadInput, match="failed to load"):
        open_stores(configured('[stores.documents]\nbackend = "broken-store"\n'))


def test_local_refuses_unknown_options(configured):
    with pytest.raises(BadInput) as refused:
        open_stores(configured('[stores.objects]\nbucket = "mine"\n'))
    assert "bucket" in refused.value.problem and "[stores.objects]" in refused.value.problem


def test_a_backend_without_its_extra_names_it(configured, monkeypatch):
    # gcp, as if the Google SDKs were not installed
    monkeypatch.setitem(sys.modules, "google.auth", None)
    for name in [m for m in sys.modules if m.startswith("agent_env.stores.gcp")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(BadInput) as refused:
        open_stores(configured('[stores.images]\nbackend = "gcp"\n'))
    assert "pip install 'agentenv-framework[gcp]'" in (refused.value.fix or "")
    # aws, as if boto3 were not installed
    monkeypatch.setitem(sys.modules, "boto3", None)
    for name in [m for m in sys.modules if m.startswith("agent_env.stores.aws")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(BadInput) as refused:
        open_stores(configured('[stores.documents]\nbackend = "aws"\ntable = "t"\n'))
    assert "pip install 'agentenv-framework[aws]'" in (refused.value.fix or "")


def test_local_stores_import_no_cloud_or_docker_sdk(tmp_path):
    code = (
        "import sys; from pathlib import Path; from agent_env.config import load_settings;"
        "from agent_env.stores import open_stores;"
        f"s = open_stores(load_settings(Path({str(tmp_path)!r}))); s.documents.put('c', 'k', {{}}); s.close();"
        "loaded = {'docker', 'boto3', 'botocore', 'google'} & set(sys.modules); assert not loaded, loaded"
    )
    env = {"PATH": "/usr/bin:/bin", "AGENT_ENV_HOME": str(tmp_path / "home")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=Path(__file__).parent.parent)
