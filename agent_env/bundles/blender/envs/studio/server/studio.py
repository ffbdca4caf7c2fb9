"""The studio: an agent's workbench in a sandbox with Blender, written as an agent-env app.

Tools to work in one folder (`$WORK_DIR`, default /work): write a file there, run a command there, list what
is there. File paths are relative to the folder and cannot leave it (no absolute paths, no `..`, no symlinks
out). A command runs with a timeout, in its own process group (killed whole when time is up), and hands back
only the tail of what it printed: an agent's command can print gigabytes, the answer stays small. The
sandbox is the boundary for the rest: the container has no network and bounded CPU and memory.

Served over MCP (streamable HTTP) on $HOST:$PORT, with the token the gateway set in $AGENT_ENV_SERVER_TOKEN.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Annotated

from pydantic import Field

from agent_env.envs.app import App, ToolError, tool

WORK_DIR = Path(os.environ.get("WORK_DIR", "/work"))
MAX_FILE_CHARS = 1_000_000
MAX_OUTPUT_BYTES = 8 * 1024
MAX_LISTED = 500


def inside(path: str) -> Path:
    """`path` under the work folder, or a ToolError naming the fix."""
    if not path or path.startswith("/") or "\0" in path:
        raise ToolError(f"{path!r}: give a path relative to the work folder {WORK_DIR} (e.g. scene.py)")
    root = WORK_DIR.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise ToolError(f"{path!r} is outside the work folder {WORK_DIR}: stay inside it")
    return target


class Studio(App):
    name = "studio"
    description = "A workbench with Blender: write files, run commands, list files, in one folder."

    @tool
    def write_file(self, path: str, content: Annotated[str, Field(max_length=MAX_FILE_CHARS)]) -> dict:
        """Write a text file in the work folder (replacing it if it exists).

        Args:
            path: where, relative to the work folder, e.g. scene.py
            content: the file's text
        """
        target = inside(path)
        if target == WORK_DIR.resolve():
            raise ToolError("give a file name, not the work folder itself")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        return {"path": str(target), "bytes": target.stat().st_size}

    @tool
    def run(self, command: str, timeout: Annotated[float, Field(gt=0, le=600)] = 120) -> dict:
        """Run a shell command in the work folder, e.g. `blender -b -P scene.py`.

        Args:
            command: the command line (run by sh)
            timeout: seconds before it is stopped
        """
        with tempfile.TemporaryFile() as output:
            process = subprocess.Popen(
                ["sh", "-c", command],
                cwd=WORK_DIR,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a timeout stops all it started
            )
            try:
                exit_code, timed_out = process.wait(timeout=timeout), False
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                exit_code, timed_out = process.wait(), True
            size = output.seek(0, os.SEEK_END)
            output.seek(max(0, size - MAX_OUTPUT_BYTES))
            tail = output.read().decode(errors="replace")
        return {
            "exit_code": exit_code,
            "timed_out": timed_out,
            "output": ("…" if size > MAX_OUTPUT_BYTES else "") + tail,
            "output_bytes": size,
        }

    @tool(read_only=True)
    def list_files(self, path: str = ".") -> dict:
        """List the files under a folder of the work folder, with their sizes in bytes.

        Args:
            path: the folder, relative to the work folder (default: all of it)
        """
        root = inside(path) if path != "." else WORK_DIR.resolve()
        if not root.is_dir():
            raise ToolError(f"{path!r} is not a folder of the work folder")
        files: dict[str, int] = {}
        for found in sorted(root.rglob("*")):
            if len(files) == MAX_LISTED:
                break
            if found.is_file():
                files[str(found.relative_to(WORK_DIR.resolve()))] = found.stat().st_size
        return {"files": files, "truncated": len(files) == MAX_LISTED}


if __name__ == "__main__":
    import uvicorn

    from agent_env.envs.serve import create_app
    from agent_env.envs.server_token import SERVER_TOKEN_ENV

    token = os.environ.pop(SERVER_TOKEN_ENV, None)  # popped: the commands it runs do not inherit it
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    app = create_app(Studio, Path(os.environ.get("STATE_DIR", "/var/lib/studio")), token=token)
    uvicorn.run(
        app, host=os.environ.get("HOST", "0.0.0.0"), port=int(os.environ.get("PORT", "8000")), log_level="warning"
    )
