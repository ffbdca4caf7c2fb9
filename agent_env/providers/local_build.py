"""What the local provider makes of a build context's Dockerfile. It runs no container, so it reads the few
instructions a Python server's Dockerfile is made of (the framework's env folders: `envs/NAME/Dockerfile`):

- `RUN pip install ...` (also `python -m pip`): into a virtualenv for the sandbox, made once per content (the
  lines and the requirement files they name) under the state dir, and used by every sandbox of that content;
  its Python is the one `python`/`python3` in the command (and in commands exec'd in the sandbox) runs.
- `ENV`: the sandbox's environment (what the spec declares wins).
- `CMD` (after `ENTRYPOINT`, if any): the command, when the spec gives none.

`FROM`, `WORKDIR`, `COPY`/`ADD` (the whole context is the work folder), `USER`, `EXPOSE` and any other `RUN`
(system packages, users: the host's are what it has) are passed over; the sandbox's log lists them. Use the docker
provider for a Dockerfile that needs more.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from agent_env.providers.base import SandboxFailed

PIP = re.compile(r"^(?:(?:python3?(?:\.\d+)?)\s+-m\s+)?pip3?\s+install\s+(?P<args>.+)$", re.DOTALL)
PIP_FILES = ("-r", "--requirement", "-c", "--constraint")
PIP_TIMEOUT = 900.0


@dataclass
class LocalBuild:
    """What the local provider takes from a Dockerfile."""

    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    installs: list[list[str]] = field(default_factory=list)  # each RUN pip install's arguments
    passed_over: list[str] = field(default_factory=list)  # instructions it does not carry out


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, rest) of each instruction: comments dropped, continuation lines joined."""
    found, current = [], ""
    for line in text.splitlines():
        if not current and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip():
            keyword, _, rest = current.strip().partition(" ")
            found.append((keyword.upper(), rest.strip()))
        current = ""
    return found


def _argv(rest: str) -> list[str]:
    """An exec-form (`["python", "server.py"]`) or shell-form instruction as a command."""
    if rest.startswith("["):
        with contextlib.suppress(ValueError):
            value = json.loads(rest)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return value
    return ["sh", "-c", rest]


def _env(rest: str) -> dict[str, str]:
    """`ENV A=1 B="two"`, or the old `ENV A 1`."""
    parts = shlex.split(rest)
    if parts and "=" not in parts[0]:
        return {parts[0]: " ".join(parts[1:])}
    return dict(p.split("=", 1) for p in parts if "=" in p)


def read_dockerfile(folder: Path) -> LocalBuild:
    """What the local provider takes from `folder`'s Dockerfile (nothing, if it has none: the folder is copied)."""
    build, entrypoint, cmd = LocalBuild(), None, None
    dockerfile = folder / "Dockerfile"
    for keyword, rest in _instructions(dockerfile.read_text(errors="replace") if dockerfile.is_file() else ""):
        if keyword == "RUN" and (pip := PIP.match(rest)) and not re.search(r"&&|;|\|", rest):
            build.installs.append(shlex.split(pip["args"]))
        elif keyword == "ENV":
            build.env.update(_env(rest))
        elif keyword == "CMD":
            cmd = _argv(rest)
        elif keyword == "ENTRYPOINT":
            entrypoint = _argv(rest)
        elif keyword not in ("FROM", "WORKDIR", "COPY", "ADD", "EXPOSE", "LABEL", "ARG"):
            build.passed_over.append(f"{keyword} {rest}"[:200])
    if entrypoint or cmd:
        build.command = (entrypoint or []) + (cmd or [])
    return build


def _fingerprint(folder: Path, installs: list[list[str]]) -> str:
    """The installs and the bytes of each requirement file they name, with the Python they are for."""
    digest = hashlib.sha256(f"{sys.version_info[:2]}\0{json.dumps(installs)}".encode())
    for args in installs:
        for flag, value in zip(args, args[1:], strict=False):
            if flag in PIP_FILES and (folder / value).is_file():
                digest.update(b"\0" + (folder / value).read_bytes())
    return digest.hexdigest()[:32]


def _pip_env() -> dict[str, str]:
    """pip's environment: where it finds packages (PIP_*, proxies, its config in HOME), none of the worker's
    credentials."""
    keep = ("PATH", "HOME", "LANG", "TMPDIR", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
    return {
        k: v
        for k, v in os.environ.items()
        if k in keep or k.startswith("PIP_") or k.lower() in ("http_proxy", "https_proxy", "no_proxy")
    }


def virtualenv(root: Path, folder: Path, installs: list[list[str]]) -> Path:
    """bin/python of the virtualenv with what `installs` install (run in the context `folder`), made on first use
    under `root` (in a temporary folder, renamed into place: a racing maker's copy is dropped)."""
    home = root / _fingerprint(folder, installs)
    python = home / "bin" / "python"
    if python.exists():
        return python
    root.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(building)], check=True, capture_output=True, timeout=300)
        for args in installs:
            subprocess.run(
                [str(building / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
                check=True,
                capture_output=True,
                timeout=PIP_TIMEOUT,
                cwd=folder,
                env=_pip_env(),
                stdin=subprocess.DEVNULL,
            )
    except subprocess.CalledProcessError as e:
        shutil.rmtree(building, ignore_errors=True)
        said = (e.stderr or b"").decode(errors="replace").strip().splitlines()[-5:]
        line = shlex.join(["pip", "install", *e.cmd[6:]]) if len(e.cmd) > 6 else shlex.join(map(str, e.cmd))
        raise SandboxFailed(
            f"the Dockerfile's `{line}` failed for the local provider: " + " / ".join(said),
            "fix the requirements, or run the env on the docker provider (sandbox_type docker)",
        ) from None
    except subprocess.TimeoutExpired:
        shutil.rmtree(building, ignore_errors=True)
        raise SandboxFailed(
            f"installing the Dockerfile's requirements took over {PIP_TIMEOUT:.0f}s", "check pip's index and proxy"
        ) from None
    # a virtualenv's scripts name its folder: moved, bin/python still works (it is what is run here)
    with contextlib.suppress(OSError):
        building.rename(home)
    shutil.rmtree(building, ignore_errors=True)
    return python
