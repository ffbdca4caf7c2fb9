"""The peers the benchmarks compare against, measured in the same run as our figures.

Each peer lives in its own venv under ~/.cache/agentenv-bench/peers/<name>: their pins (the reference
system wants `a2a-sdk<0.4` and `mcp<2`) conflict with ours, and a side venv keeps them from touching
.venv. The venv is made once and re-made when its requirement list changes (a stamp file holds it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common import temp_dir, timed

CACHE = Path.home() / ".cache" / "agentenv-bench" / "peers"


class PeerSetupError(RuntimeError):
    """A peer's venv could not be made: the message names the packages and ends with pip's output."""


def peer_python(name: str, requirements: list[str]) -> Path:
    """The python of a venv holding `requirements`, made on first use (pip can take a minute)."""
    root = CACHE / name
    python = root / "bin" / "python"
    stamp = root / "requirements.stamp"
    wanted = "\n".join([f"python {sys.version_info.major}.{sys.version_info.minor}", *requirements]) + "\n"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"peers: making {root} with {' '.join(requirements)} (once; about a minute)", flush=True)
    started = time.perf_counter()
    stamp.unlink(missing_ok=True)  # a half-made venv is never taken for a finished one
    _run([sys.executable, "-m", "venv", "--clear", str(root)], f"python -m venv {root}")
    log = root / "pip.log"
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off"]
    _run([*pip, *requirements], f"pip install {' '.join(requirements)} into {root}", log)
    stamp.write_text(wanted)
    print(f"peers: {name} ready in {time.perf_counter() - started:.0f} s", flush=True)
    return python


def _run(argv: list[str], what: str, log: Path | None = None) -> None:
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if log is not None:
        log.write_text(done.stdout)
    if done.returncode != 0:
        tail = "\n".join(done.stdout.splitlines()[-25:])
        raise PeerSetupError(f"{what} failed (exit {done.returncode}); its output ends:\n{tail}")


# One project under two PyPI names: `openenv-core`, Meta/PyTorch's (meta-pytorch/OpenEnv, up to 0.3.0; its
# MCPToolClient calls tools over the env's WebSocket), and `openenv`, the name it goes on under at Hugging Face
# (0.10.0's MCPToolClient calls tools over HTTP /mcp, about twice as slow per episode here). The peer is
# Meta's: the faster of the two, and the one whose figures match the (episode ~17 ms, call ~1.6 ms).
OPENENV = "openenv==0.10.0"
OPENENV_CORE = "openenv-core==0.3.0"
OPENENV_NOTES = Path(__file__).with_name("peers") / "openenv_notes.py"


class OpenEnvPeer:
    """OpenEnv serving our `notes` env, measured a round at a time so callers can interleave their own rounds.

    with OpenEnvPeer() as peer:
        samples = peer.round()  # {"episode_ms": [...], "call_ms": [...], "ws_call_ms": [...], "cpu_ms_per_episode": x}
    """

    def __init__(
        self, episodes: int = 20, calls: int = 20, release: str = OPENENV_CORE, in_process: bool = False
    ) -> None:
        self.release = release
        self.argv = [str(OPENENV_NOTES), "--episodes", str(episodes), "--calls", str(calls)]
        if in_process:
            self.argv.append("--in-process")
        self.rounds = 0
        self.process: subprocess.Popen[str] | None = None

    def __enter__(self) -> OpenEnvPeer:
        python = peer_python(self.release.split("==")[0], [self.release])
        self.process = subprocess.Popen(
            [str(python), *self.argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self._read()  # {"ready": true}: the server is up and warmed
        return self

    def round(self) -> dict:
        assert self.process is not None and self.process.stdin is not None, "use OpenEnvPeer as a context manager"
        self.process.stdin.write(f"round {self.rounds}\n")
        self.process.stdin.flush()
        self.rounds += 1
        return self._read()

    def _read(self) -> dict:
        assert self.process is not None and self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait(timeout=10)
            raise RuntimeError(f"{OPENENV_NOTES.name} exited {code} (its stderr is above)")
        return json.loads(line)

    def __exit__(self, *exc: object) -> None:
        if self.process is None:
            return
        assert self.process.stdin is not None
        self.process.stdin.close()  # EOF: the script closes its client and stops its server
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


REFERENCE = ["agentenv-framework==0.9.1364"]


@dataclass(frozen=True)
class Reference:
    """The reference system's CLI and the environment it runs in: a home of its own, nothing of the user's."""

    cli: Path
    env: dict[str, str]


def reference_setup() -> Reference:
    """The reference system installed, given a fresh home and warmed by one `agent-env run hello`.

    Warm means what it means for ours: the state is there. Its first run publishes the hello bundle's
    artifact and task into its local store (it prints "v1 (new)", later runs "unchanged") and pulls its
    import tree (every cloud SDK, eagerly) into the page cache.
    """
    python = peer_python("reference", REFERENCE)
    home = str(temp_dir("agentenv-bench-reference-"))
    env = {name: value for name, value in os.environ.items() if not name.startswith(("AGENT_ENV", "AGENT_ENV_"))}
    env.pop("XDG_STATE_HOME", None)  # its state goes to $HOME/.local/state/agent-env, sandboxes to $HOME too
    env["HOME"] = home
    reference = Reference(cli=python.parent / "agent-env", env=env)
    reference_hello(reference)
    return reference


def reference_hello(reference: Reference) -> float:
    """Wall seconds of one `agent-env run hello` of the reference system (its zero-config hello bundle)."""
    return timed([str(reference.cli), "run", "hello"], reference.env)[0]
