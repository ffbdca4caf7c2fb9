"""Packing a folder never follows a link out of it, and unpacking never writes outside its folder.

The red team's finding: a symlink in a sandbox build folder was followed by `agent-env registry push`, and
`agent-env registry pull` then handed back the file it pointed at (an operator's key). Everything that packs a
folder now reads it through `agent_env.packing`: a symbolic link anywhere in it is refused, naming it, even
one that stays inside (decided: refuse all links); FIFOs and devices are refused; a hard link is read as the
regular file it is. Archives are unpacked only as regular files and folders at relative paths that stay
inside. Each test's docstring names the attack it stands for; each checks that no byte of the outside file
reached the stores.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import uuid
from pathlib import Path

import pytest
from test_agent_sandboxes import write_agent_bundle
from test_bundle_file import members, rewrite
from test_env_steps import NOTES_ENV, TASK, write_bundle
from test_registry import desk_bundle
from test_sandbox_steps import AGENT_STEPS, PUT_EXEC_COLLECT, with_skill, write_box_bundle

from agent_env import packing
from agent_env.bundles import BUILTIN_ROOT
from agent_env.config import Settings, load_settings
from agent_env.errors import BadInput
from agent_env.planning.tasks import load_task
from agent_env.providers.apps import pin_build, unpack_build
from agent_env.providers.docker_images import context_tar
from agent_env.registry.bundle_file import export_bundle
from agent_env.registry.bundle_items import read_bundle
from agent_env.registry.store import open_registry
from agent_env.stores import keys, open_stores
from agent_env.temporal import launch

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
    env = {**os.environ, "AGENT_ENV_HOME": str(home), "AGENT_ENV_TASK_QUEUE": f"packing-{uuid.uuid4().hex[:8]}"}
    return subprocess.run([AGENT_ENV, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def echo_bundle(root: Path) -> Path:
    """A copy of the built-in echo-mcp bundle: env `echo`, whose app runs in a sandbox built from ./server."""
    shutil.copytree(ECHO_BUNDLE, root)
    return root


def settings_at(root: Path) -> Settings:
    return Settings.model_validate({"state_dir": str(root)})


def planner_at(root: Path) -> Settings:
    """The tests' settings (their model endpoints: the judge's is checked when planning) with a state dir of its own."""
    return load_settings(Path(tempfile.gettempdir())).model_copy(update={"state_dir": root})


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


def test_planning_a_run_refuses_a_link_in_its_build_context(tmp_path, operator_key):
    """Attack: the same link, and the operator runs the bundle: the build context is pinned as a tar in the
    object store when the run is planned, so a followed link would put the key there (and into the image)."""
    home, bundle = tmp_path / "home", echo_bundle(tmp_path / "b")
    link = bundle / "envs" / "echo" / "server" / "key.pem"
    link.symlink_to(operator_key)
    done = cli("run", str(bundle), home=home)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"build folder 'server': {link} is a symbolic link" in done.stderr
    assert leaked(home, operator_key) == []
    assert not list(home.rglob("*.tar")), "no build context was pinned"


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


def test_fifos_are_refused_not_read(tmp_path):
    """Attack: a FIFO in a build folder: reading it would block the push (or a planner) forever."""
    bundle = echo_bundle(tmp_path / "b")
    fifo = bundle / "envs" / "echo" / "server" / "pipe"
    os.mkfifo(fifo)
    pushed = cli("registry", "push", str(bundle), home=tmp_path / "home", timeout=60)
    assert pushed.returncode == 2 and f"{fifo} is a FIFO, not a regular file or folder" in pushed.stderr
    stores = open_stores(settings_at(tmp_path / "home"))
    try:
        with pytest.raises(BadInput, match=f"{fifo} is a FIFO"):
            pin_build(stores, bundle / "envs" / "echo", "server")
    finally:
        stores.close()


def test_hard_links_are_read_as_the_files_they_are(tmp_path):
    """Decision: a hard link is the file itself (no path to follow; making one to another's file takes the right
    to write it), so it is packed as a regular file, never as a link member an unpacker would refuse."""
    bundle = echo_bundle(tmp_path / "b")
    server = bundle / "envs" / "echo" / "server"
    os.link(server / "server.py", server / "copy.py")
    context = context_tar(bundle / "envs" / "echo", "server")
    with tarfile.open(fileobj=io.BytesIO(context)) as tar:
        found = {m.name: (m.type, tar.extractfile(m).read()) for m in tar if m.isfile() or m.islnk()}  # type: ignore[union-attr]
    assert found["copy.py"] == (tarfile.REGTYPE, (server / "server.py").read_bytes())
    stores = open_stores(settings_at(tmp_path / "home"))
    try:
        key = pin_build(stores, bundle / "envs" / "echo", "server")
        unpacked = unpack_build(settings_at(tmp_path / "home"), stores, key, "echo")
    finally:
        stores.close()
    assert (unpacked / "copy.py").read_bytes() == (server / "server.py").read_bytes()


def with_put_folder(bundle: Path) -> Path:
    """put_files of a bundle folder (put as its files) rather than one file."""
    task = bundle / "tasks" / "t.toml"
    task.write_text(task.read_text().replace('{ file = "files/notes.txt" }', '{ file = "files" }'))
    return bundle


def invoice_bundle(root: Path) -> Path:
    """The built-in invoice-queue bundle: its judge reads `reference_file`, moved aside for the link."""
    shutil.copytree(BUILTIN_ROOT / "invoice-queue", root)
    (root / "tasks" / "invoice-queue.toml").rename(root / "tasks" / "t.toml")
    (root / "reference" / "answer-key.txt").unlink()
    return root


PINNED = {  # what a run pins when it is planned -> (a bundle, where the link goes in it)
    "put_files file": (lambda root: with_put_folder(write_box_bundle(root, PUT_EXEC_COLLECT)), "files/key.pem"),
    "put_files artifact": (lambda root: write_box_bundle(root, PUT_EXEC_COLLECT), "artifacts/guide/data/key.pem"),
    "skill": (lambda root: with_skill(write_agent_bundle(root, AGENT_STEPS)), "artifacts/guide/key.pem"),
    "build folder of an agent": (lambda root: write_agent_bundle(root, AGENT_STEPS), "agents/shout/app/key.pem"),
    "env data file": (
        lambda root: write_bundle(root, TASK, NOTES_ENV.replace("data = []", 'data = ["seed.json"]')).parents[1],
        "envs/shop/seed.json",
    ),
    "load_data file": (lambda root: write_bundle(root, TASK, NOTES_ENV).parents[1], "seed.json"),
    "rubrics_verifier reference_file": (lambda root: invoice_bundle(root), "reference/answer-key.txt"),
}


@pytest.mark.parametrize("what", list(PINNED))
def test_planning_refuses_links_in_every_file_a_run_pins(tmp_path, operator_key, what):
    """Attack: the link sits where a run reads bundle files into the object store when it is planned: files put
    into a sandbox, an artifact or a skill for an agent, an agent's build folder, an env's `data` files,
    `load_data`'s file, a judge's reference file."""
    make, where = PINNED[what]
    bundle = make(tmp_path / "b")
    link = bundle / where
    link.symlink_to(operator_key)
    with pytest.raises(BadInput, match=f"{link} is a symbolic link"):
        launch.plan(
            load_task(bundle / "tasks" / "t.toml"), f"plan-{uuid.uuid4().hex[:6]}", planner_at(tmp_path / "home")
        )
    assert leaked(tmp_path / "home", operator_key) == []


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


@pytest.mark.parametrize(
    ("member", "refusal"),
    [
        ("symlink", r"member 'key' is a symbolic link \(to '/etc/passwd'\)"),
        ("hardlink", r"member 'key' is a hard link \(to 'Dockerfile'\)"),
        ("dotdot", r"member '\.\./key' leads out of the folder \('\.\.'\)"),
        ("absolute", r"member '/tmp/key' has an absolute path"),
        ("fifo", r"member 'key' is a device, FIFO or other special file"),
    ],
)
def test_a_crafted_build_context_in_the_object_store_is_refused(tmp_path, member, refusal):
    """Attack: whoever can write the (shared) object store puts a context tar with a link or an escaping
    member where a worker unpacks it before building."""
    settings = settings_at(tmp_path / "home")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dockerfile = tarfile.TarInfo("Dockerfile")
        dockerfile.size = 5
        tar.addfile(dockerfile, io.BytesIO(b"FROM\n"))
        info = tarfile.TarInfo({"dotdot": "../key", "absolute": "/tmp/key"}.get(member, "key"))
        if member in ("symlink", "hardlink"):
            info.type = tarfile.SYMTYPE if member == "symlink" else tarfile.LNKTYPE
            info.linkname = "/etc/passwd" if member == "symlink" else "Dockerfile"
        elif member == "fifo":
            info.type = tarfile.FIFOTYPE
        tar.addfile(info, io.BytesIO(b"") if info.isreg() else None)
    data = buf.getvalue()
    key = keys.content(data, "tar")
    stores = open_stores(settings)
    try:
        stores.objects.put(key, data)
        with pytest.raises(BadInput, match=refusal + "; nothing was unpacked"):
            unpack_build(settings, stores, key, "echo")
    finally:
        stores.close()
    contexts = tmp_path / "home" / "sandboxes" / "contexts"
    assert [p for p in contexts.rglob("*")] == [contexts / keys.content_digest(key)[:32]]
    assert not (tmp_path / "key").exists() and not (tmp_path / "home" / "sandboxes" / "key").exists()
