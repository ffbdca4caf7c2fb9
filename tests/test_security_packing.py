"""Packing a folder never follows a link out of it, and unpacking never writes outside its folder.

The red team's finding: a symlink in a sandbox build folder was followed by `agent-env registry push`, and
`agent-env registry pull` then handed back the file it pointed at (an operator's key). Everything that packs a
folder now reads it through `agentenv.packing`: a symbolic link anywhere in it is refused, naming it, even
one that stays inside (decided: refuse all links); FIFOs and devices are refused; a hard link is read as the
regular file it is. Archives are unpacked only as regular files and folders at relative paths that stay
inside. Each test's docstring names the attack it stands for; each checks that no byte of the outside file
reached the stores.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest
from test_bundle_file import members, rewrite
from test_registry import desk_bundle

from agentenv import packing
from agentenv.bundles import BUILTIN_ROOT
from agentenv.config import Settings
from agentenv.errors import BadInput
from agentenv.registry.bundle_file import export_bundle
from agentenv.registry.bundle_items import read_bundle
from agentenv.registry.store import open_registry

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
ECHO_BUNDLE = BUILTIN_ROOT / "echo-mcp"


@pytest.fixture
def operator_key(tmp_path) -> Path:
    """A file outside every bundle that a bundle must never carry off: the operator's private key."""
    key = tmp_path / "operator" / ".ssh" / "id_ed25519"
    key.parent.mkdir(parents=True)
    key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\noperator-{uuid.uuid4().hex}\n")
    return key


def leaked(home: Path, secret: Path) -> list[str]:
    """Every file under `home` (stores, registry, caches) holding the secret file's content."""
    content = secret.read_bytes().strip()
    return [str(p) for p in home.rglob("*") if p.is_file() and not p.is_symlink() and content in p.read_bytes()]


def cli(*args: str, home: Path, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENTENV_HOME": str(home), "AGENTENV_TASK_QUEUE": f"packing-{uuid.uuid4().hex[:8]}"}
    return subprocess.run([AGENT_ENV, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def echo_bundle(root: Path) -> Path:
    """A copy of the built-in echo-mcp bundle: env `echo`, whose app runs in a sandbox built from ./server."""
    shutil.copytree(ECHO_BUNDLE, root)
    return root


def settings_at(root: Path) -> Settings:
    return Settings.model_validate({"state_dir": str(root)})


# -- the finding, end to end through the CLI --


@pytest.mark.parametrize("points_at", ["file", "folder"])
def test_registry_push_refuses_a_link_out_of_a_sandbox_build_folder(tmp_path, operator_key, points_at):
    """Attack: a bundle's sandbox build folder holds `key.pem -> ~/.ssh/id_ed25519` (or `keys -> ~/.ssh`); the
    operator pushes it, and whoever pulls the task from the shared registry gets the operator's key."""
    home, bundle = tmp_path / "home", echo_bundle(tmp_path / "b")
    link = bundle / "envs" / "echo" / "server" / ("key.pem" if points_at == "file" else "keys")
    link.symlink_to(operator_key if points_at == "file" else operator_key.parent)
    pushed = cli("registry", "push", str(bundle), home=home)
    assert pushed.returncode == 2, pushed.stdout + pushed.stderr
    assert f"{link} is a symbolic link (to '{os.readlink(link)}'); nothing was pushed" in pushed.stderr
    assert "fix: replace the link with a copy of what it points to" in pushed.stderr
    pulled = cli("registry", "pull", "task", "echo-mcp", "--out", str(tmp_path / "out"), home=home)
    assert pulled.returncode == 2 and "no task 'echo-mcp' in the registry" in pulled.stderr
    exported = cli("bundle", "export", "echo-mcp", "--out", str(tmp_path / "echo.tar.gz"), home=home)
    assert exported.returncode == 2 and not (tmp_path / "echo.tar.gz").exists()
    assert leaked(home, operator_key) == []
    assert not (tmp_path / "out").exists()


def test_a_crafted_bundle_file_is_refused_naming_the_member(tmp_path):
    """Attack: someone hands the operator a bundle file whose members are a symlink, `../x` or an absolute path,
    hoping `agent-env bundle import` writes or reads outside its spool folder."""
    source = open_registry(settings_at(tmp_path / "source"))
    try:
        source.push_bundle(desk_bundle(tmp_path))
        good = tmp_path / "desk.tar.gz"
        export_bundle(source, ["support-desk"], good)
    finally:
        source.close()
    link = tarfile.TarInfo(members(good)[1][0].name)  # a blob the manifest lists, as a link to a host file
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    crafted = {
        "symlink": ([members(good)[0], (link, b"")], rf"member '{link.name}' is a symbolic link \(to '/etc/passwd'\)"),
        "dotdot": ([*members(good), (tarfile.TarInfo("../x"), b"pwned")], r"member '../x' leads out of the folder"),
        "absolute": ([*members(good), (tarfile.TarInfo("/tmp/x"), b"pwned")], r"member '/tmp/x' has an absolute path"),
    }
    home = tmp_path / "home"
    for name, (entries, refusal) in crafted.items():
        path = tmp_path / f"{name}.tar.gz"
        shutil.copy(good, path)
        rewrite(path, entries)
        imported = cli("bundle", "import", str(path), home=home)
        assert imported.returncode == 2, name
        assert "was altered or damaged: " in imported.stderr and "nothing was imported" in imported.stderr
        assert re.search(refusal, imported.stderr), (name, imported.stderr)
    assert not (tmp_path / "x").exists() and not (home.parent / "x").exists()
    listed = cli("registry", "list", "tasks", home=home)
    assert "support-desk" not in listed.stdout


def test_registry_pull_never_writes_through_a_link_in_the_destination(tmp_path, operator_key):
    """Attack: the folder pulled into already holds `envs -> ~/.ssh` (left by a bundle unpacked there before):
    pulling would write the registry's files, chosen by whoever pushed them, into the operator's folder."""
    home = tmp_path / "home"
    assert cli("registry", "push", str(desk_bundle(tmp_path)), home=home).returncode == 0
    out = tmp_path / "out"
    out.mkdir()
    (out / "envs").symlink_to(operator_key.parent)
    before = sorted(p.name for p in operator_key.parent.iterdir())
    pulled = cli("registry", "pull", "task", "support-desk", "--out", str(out), home=home)
    assert pulled.returncode == 2, pulled.stdout + pulled.stderr
    assert f"{out / 'envs'} is a symbolic link" in pulled.stderr
    assert sorted(p.name for p in operator_key.parent.iterdir()) == before


# -- every other place that packs a folder --


@pytest.mark.parametrize(
    "where",
    [
        "envs/support-desk/key.pem",  # an env's folder
        "artifacts/faq/key.pem",  # an artifact folder
        "artifacts/key",  # an artifact that is a file
        "data/key.pem",  # the bundle's loose files (carried by its tasks)
        "envs/linked",  # an env folder that is itself a link (to the operator's folder)
    ],
)
def test_a_link_anywhere_in_a_bundle_refuses_the_push(tmp_path, operator_key, where):
    """Attack: the link hides in another corner of the bundle than the build folder."""
    bundle = desk_bundle(tmp_path)
    link = bundle / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(operator_key.parent if where == "envs/linked" else operator_key)
    registry = open_registry(settings_at(tmp_path / "home"))
    try:
        with pytest.raises(BadInput, match=f"{link} is a symbolic link .*; nothing was pushed"):
            registry.push_bundle(bundle)
    finally:
        registry.close()
    assert leaked(tmp_path / "home", operator_key) == []


def test_a_link_that_stays_inside_is_refused_too(tmp_path):
    """Decision: a link is refused even when it points inside the bundle. The registry carries bytes, not links;
    a link means something else wherever it is unpacked; and a link checked, then followed, can be swapped in
    between. The fix, a copy, is one command. Hidden folders are not pushed, so a `.venv`'s links are no bother."""
    bundle = echo_bundle(tmp_path / "b")
    server = bundle / "envs" / "echo" / "server"
    (server / "main.py").symlink_to("server.py")
    (bundle / ".venv" / "bin").mkdir(parents=True)
    (bundle / ".venv" / "bin" / "python").symlink_to(sys.executable)
    registry = open_registry(settings_at(tmp_path / "home"))
    try:
        with pytest.raises(BadInput, match=rf"{server / 'main.py'} is a symbolic link \(to 'server.py'\)") as refused:
            registry.push_bundle(bundle)
        assert f"remove {server / 'main.py'}, then copy its target there" in str(refused.value)
        (server / "main.py").unlink()
        shutil.copy(server / "server.py", server / "main.py")
        assert [r.outcome for r in registry.push_bundle(bundle)] == ["pushed", "pushed"]
        assert [f.path for f in registry.version("envs", "echo").files if f.path.endswith(".py")] == [
            "envs/echo/server/main.py",
            "envs/echo/server/server.py",
        ]
    finally:
        registry.close()


# -- the helper itself: what it reads is what it checked --


def test_a_file_swapped_for_a_link_after_it_was_checked_is_refused(tmp_path, operator_key):
    """Attack: a process racing the push (a local sandbox writing into the folder, say) swaps a file, or a
    folder, for a link after the bundle was read and before its bytes are stored."""
    bundle = echo_bundle(tmp_path / "b")
    server = bundle / "envs" / "echo" / "server"
    registry = open_registry(settings_at(tmp_path / "home"))
    try:
        items = read_bundle(bundle)
        (server / "server.py").unlink()
        (server / "server.py").symlink_to(operator_key)
        with pytest.raises(BadInput, match=f"{server / 'server.py'} is a symbolic link"):
            registry.push(items[0])
        shutil.rmtree(server)
        server.symlink_to(operator_key.parent)
        (operator_key.parent / "server.py").write_bytes(operator_key.read_bytes())
        with pytest.raises(BadInput, match=f"{server} is a symbolic link"):
            registry.push(items[0])
    finally:
        registry.close()
    assert leaked(tmp_path / "home", operator_key) == []


def test_paths_that_climb_out_are_refused(tmp_path, operator_key):
    root = tmp_path / "root"
    root.mkdir()
    for path in ("../operator/.ssh/id_ed25519", str(operator_key), "a/../../x"):
        with pytest.raises(packing.NotInside, match="is not a path inside"):
            packing.read(root, path)
        with pytest.raises(packing.NotInside):
            packing.walk(root, path)
        with pytest.raises(packing.NotInside):
            packing.write(root, path, b"x")
