"""The bridge that makes a command-line coding agent (Claude Code, Codex, Gemini CLI, or any command) an A2A
agent. It runs in the agent's sandbox, serves A2A with agent-env's SDK (so the run configures it through the
urn:agentenv:* extensions: the env's MCP endpoint with the role token, the CLI and its model endpoint with the
key), and answers each turn by running the CLI once with the prompt.

    python3 -m agent_env.agents.cli_agent        # on $HOST:$PORT, as sandbox providers set them

A conversation keeps one home folder per A2A context, so the CLI's next turn resumes its own session. What the CLI
prints is read bounded; a CLI that outlives its turn is killed with its whole process group.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import re
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_env.agents.builtin import shaped
from agent_env.agents.cli_presets import PRESETS, McpEndpoint, ModelEndpoint
from agent_env.agents.cli_settings import CliOptions, options_for
from agent_env.agents.sdk import Agent, Answer, Turn, serve

MAX_OUTPUT = 4 * 1024 * 1024  # of each stream: a CLI printing without end does not fill the sandbox's memory
TAIL = 2000  # characters of its stderr in a failed turn's answer
KEPT_CONVERSATIONS = 64  # homes of finished conversations beyond this are removed, oldest first
PASS_ENV = "AGENT_ENV_PASS_ENV"  # set by deploy_agent (steps.builtin.agent_deploy_fields): its env_vars' names
CONTEXT_NAME = re.compile(r"[^A-Za-z0-9_.-]")


class CliModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None
    model: str | None = None
    provider: Literal["openai", "anthropic"] = "openai"
    api: Literal["chat", "responses"] = "chat"
    api_key: str | None = None


class CliSettings(BaseModel):
    """What deploy_agent sends through agent-config/v1 (see agent_env.spec.agent.CliConfig)."""

    model_config = ConfigDict(extra="forbid")

    preset: Literal["claude_code", "codex", "gemini"] | None = None
    command: list[str] | None = None
    executable: str | None = None
    turn_timeout_s: float = Field(600.0, gt=0)
    model: CliModel = Field(default_factory=CliModel)


class CliAgent(Agent):
    name = "cli"
    description = "A command-line coding agent, run once per turn in its sandbox."

    def __init__(self, root: Path | None = None) -> None:
        if root is None:  # the process's own, gone when it exits (a run's homes are pruned as they age, below)
            root = Path(tempfile.mkdtemp(prefix="agentenv-cli-"))
            atexit.register(shutil.rmtree, root, ignore_errors=True)
        self.root = root
        self.workdir = Path(os.environ.get("AGENT_ENV_WORKDIR") or Path.cwd())

    async def answer(self, turn: Turn) -> Answer:
        settings = CliSettings.model_validate(turn.config)
        home = self._home(turn.context_id)
        resume = (home / ".agentenv-turns").exists()
        prompt = _with_skills(turn, home) + shaped(turn.settings.get("output_format"))
        options = options_for(settings.preset, turn.settings)
        argv, env = self._invocation(settings, turn, home, prompt, resume, options)
        timeout = min(settings.turn_timeout_s, turn.deadline_s or settings.turn_timeout_s)
        stdin = prompt if settings.preset is None else None  # presets take it as an argument
        code, out, err = await run_bounded(argv, env=env, cwd=self.workdir, stdin=stdin, timeout=timeout)
        (home / ".agentenv-turns").touch()
        if code is None:
            return Answer(text=f"{argv[0]} did not finish within {timeout:g}s (stopped)", failed=True)
        if code != 0:  # what the CLI said went wrong (e.g. Claude Code's turn limit), else the end of its stderr
            said = PRESETS[settings.preset].final_answer(out).strip() if settings.preset and out.strip() else ""
            why = said[-TAIL:] or err[-TAIL:].strip() or out[-TAIL:].strip()
            return Answer(text=f"{argv[0]} exited with {code}: {why}", failed=True)
        data = {"settings_not_applied": options.not_applied} if options.not_applied else {}
        if settings.preset is None:
            return Answer(text=out.strip(), data=data)
        return Answer(text=PRESETS[settings.preset].final_answer(out), data=data)

    def _invocation(
        self, settings: CliSettings, turn: Turn, home: Path, prompt: str, resume: bool, options: CliOptions
    ) -> tuple[list[str], dict[str, str]]:
        base = {**_base_env(home), **options.env}
        model = settings.model
        if isinstance(asked := turn.settings.get("model"), str) and asked:  # the prompt's model, on the same endpoint
            model = model.model_copy(update={"model": asked})
        if settings.preset is None:
            assert settings.command is not None  # CliConfig: a preset or a command
            given = {
                "AGENT_ENV_PROMPT": prompt,
                "AGENT_ENV_MCP_URL": turn.mcp_url or "",
                "AGENT_ENV_MCP_TOKEN": turn.token or "",
                "AGENT_ENV_MODEL_BASE_URL": model.base_url or "",
                "AGENT_ENV_MODEL": model.model or "",
                "AGENT_ENV_MODEL_API_KEY": model.api_key or "",
            }
            return list(settings.command), {**base, **given}

        invocation = PRESETS[settings.preset].prepare(
            home=home,
            workdir=self.workdir,
            prompt=prompt,
            model=ModelEndpoint(base_url=model.base_url or "", model=model.model or "", api_key=model.api_key),
            mcp=McpEndpoint(url=turn.mcp_url, token=turn.token) if turn.mcp_url else None,
            resume=resume,
            executable=settings.executable,
            options=options.argv,
        )
        return invocation.argv, {**base, **invocation.env}

    def _home(self, context_id: str) -> Path:
        """The conversation's own home (the CLI keeps its session there); the oldest beyond the kept few go."""
        home = self.root / (CONTEXT_NAME.sub("_", context_id)[:128] or "default")
        if not home.exists():
            homes = sorted(self.root.iterdir(), key=lambda p: p.stat().st_mtime)
            for old in homes[: max(0, len(homes) - KEPT_CONVERSATIONS + 1)]:
                _remove_tree(old)
            home.mkdir(parents=True)
        return home


def _with_skills(turn: Turn, home: Path) -> str:
    """The prompt, naming the skills the run gave the agent; each SKILL.md is written under its home to read."""
    if not turn.skills:
        return turn.prompt
    lines = []
    for skill in turn.skills:
        name = CONTEXT_NAME.sub("_", str(skill.get("name", "skill")))[:128]
        folder = home / "skills" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "SKILL.md").write_text(str(skill.get("skill_md", "")))
        lines.append(f"- {name}: {skill.get('description', '')} (read {folder / 'SKILL.md'}; files in /skills/{name}/)")
    return turn.prompt + "\n\nSkills you have (read one before using it):\n" + "\n".join(lines)


def _base_env(home: Path) -> dict[str, str]:
    """The CLI's environment: the sandbox's locations and locale, its own home, and the deploy step's `env_vars`
    (named in $AGENT_ENV_PASS_ENV); never the bridge's other variables (whatever else the sandbox was given stays
    the bridge's, and agent-env's own AGENT_ENV_* and the provider's HOST, PORT, MCP_* are never passed)."""
    passed = {n for n in os.environ.get(PASS_ENV, "").split(",") if n and not n.startswith("AGENT_ENV_")}
    passed -= {"HOST", "PORT", "MCP_HOST", "MCP_PORT", "HOME"}  # the provider's (set over the step's), the CLI's
    kept = {
        k: v
        for k, v in os.environ.items()
        if k in ("PATH", "LANG", "TZ", "TMPDIR") or k.startswith("LC_") or k in passed
    }
    return {**kept, "HOME": str(home), "NO_COLOR": "1", "CI": "1"}


async def run_bounded(
    argv: list[str], *, env: dict[str, str], cwd: Path, stdin: str | None, timeout: float
) -> tuple[int | None, str, str]:
    """Run `argv` to its end or `timeout` (then its process group is killed: exit None), `stdin` written to it (or
    none at all). Each stream is kept to MAX_OUTPUT bytes; the rest is read and dropped, so the process never
    blocks on a full pipe."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as e:
        return 127, "", f"cannot start {argv[0]!r}: {e}"

    async def read(stream: asyncio.StreamReader) -> bytes:
        kept = bytearray()
        while chunk := await stream.read(65536):
            kept += chunk[: max(0, MAX_OUTPUT - len(kept))]
        return bytes(kept)

    async def feed() -> None:
        if proc.stdin is None or stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(stdin.encode())
            await proc.stdin.drain()
        proc.stdin.close()

    assert proc.stdout is not None and proc.stderr is not None
    work = asyncio.gather(read(proc.stdout), read(proc.stderr), feed(), proc.wait())
    try:
        out, err, _, code = await asyncio.wait_for(work, timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        return None, "", ""
    finally:
        with contextlib.suppress(ProcessLookupError):  # what it left running in the background goes with it
            os.killpg(proc.pid, signal.SIGKILL)
    return code, out.decode(errors="replace"), err.decode(errors="replace")


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    serve(CliAgent(), host=os.environ.get("HOST", "127.0.0.1"), port=int(os.environ.get("PORT", "9000")))


if __name__ == "__main__":
    main()
