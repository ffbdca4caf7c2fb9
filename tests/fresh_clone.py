"""A fresh clone of this checkout with its own venv, made as the README's first command makes it, and called as the
README calls it: `.venv/bin/agent-env ...` with the venv not activated (PATH holds no venv: `python3` is the
machine's).

The clone holds the working tree as it would be committed (tracked and new files, less what git ignores), so a
change is tested before its commit too. Its venv installs offline where pip is configured so (this machine's
wheel cache); nothing of this test session's environment reaches it (AGENT_ENV_*, TEMPORAL_*, PYTHONPATH).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).parent.parent
INSTALL = "python3 -m venv .venv && .venv/bin/pip install -e ."  # the README's first command, less its run
SESSION_ONLY = ("AGENT_ENV_", "TEMPORAL_", "PYTEST_")  # set by the test session, not by a user's shell
NOT_THE_USERS = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")


def machine_path() -> str:
    """PATH without any venv's bin folder (this test run's, an activated one): what a new shell has."""
    return os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p).parent / "pyvenv.cfg").is_file()
    )


def shell_env(**extra: str) -> dict[str, str]:
    """A user's shell environment: this one less what the test session set, PATH without venvs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(SESSION_ONLY) and k not in NOT_THE_USERS}
    return env | {"PATH": machine_path()} | extra


@dataclass(frozen=True)
class FreshClone:
    root: Path

    @property
    def agent_env(self) -> str:
        return str(self.root / ".venv" / "bin" / "agent-env")

    def run(self, *args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
        """`.venv/bin/agent-env ARGS` from the clone's folder, as the README runs it."""
        return subprocess.run(
            [self.agent_env, *args], cwd=self.root, env=env, capture_output=True, text=True, timeout=timeout
        )


def make(root: Path) -> FreshClone:
    """Clone this checkout into `root` (absent), bring in its uncommitted changes, and install it as README says."""
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(root)], check=True, capture_output=True, timeout=120)
    _sync_working_tree(root)
    done = subprocess.run(["sh", "-c", INSTALL], cwd=root, env=shell_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{INSTALL} failed in a fresh clone:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return FreshClone(root)


def _files(repo: Path) -> set[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout.decode()
    return {name for name in listed.split("\0") if name}


def _sync_working_tree(clone: Path) -> None:
    """Make the clone's files this checkout's working tree (less ignored files): edits, new and deleted files."""
    ours = {name for name in _files(REPO) if os.path.lexists(REPO / name)}
    for name in _files(clone) - ours:
        (clone / name).unlink()
    for name in ours:
        target = clone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        shutil.copy2(REPO / name, target, follow_symlinks=False)
