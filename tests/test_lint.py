"""The code base stays lint-clean (ruff) and type-clean (mypy), both configured in pyproject.toml."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_ruff():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "agentenv", "tests", "bench"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy():
    # The files to check, the pydantic plugin and the strict modules (the contracts) come from
    # [tool.mypy] in pyproject.toml. No cache: a stale one must not hide an error.
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--no-incremental",
                           "--cache-dir", "/dev/null"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
