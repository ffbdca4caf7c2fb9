"""How to run each command-line coding agent for one turn: its config files, argv and environment, and how to read
its final answer from what it prints. Pure configuration: nothing here starts a process (the bridge in
`agent_env.agents.cli_agent` does), so every preset can be checked without its binary.

Each preset points the CLI at exactly two endpoints, the model and the environment's MCP server (streamable HTTP,
`Authorization: Bearer <role token>`), and turns off everything that would reach elsewhere (update checks,
telemetry, error reports) or wait for a human (permission prompts, folder trust). Secrets go in the environment,
not in files, where the CLI allows it. Recipes checked against the real binaries (see tests/test_cli_presets.py):
Codex 0.171 and Claude Code 2.1.332 against agent-env's fake model; Gemini CLI 0.61 from its documentation only
(it speaks Google's generateContent API, which the fake does not).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from agent_env.agents.wire import Wire

SERVER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")  # no `_`: Gemini splits `mcp_SERVER_TOOL` at the first one
MODEL_KEY_VAR = "AGENT_ENV_MODEL_API_KEY"
MCP_TOKEN_VAR = "AGENT_ENV_MCP_TOKEN"


@dataclass(frozen=True)
class ModelEndpoint:
    """`base_url`: OpenAI style, ending in `/v1` (a preset whose CLI adds `/v1` itself drops it); empty: the CLI
    vendor's own endpoint. `small_model`: what the CLI uses for side chores (titles, summaries); the main model when
    not given (agent-env's fake model answers such chores as `fake-small`)."""

    base_url: str
    model: str
    api_key: str | None
    small_model: str | None = None


@dataclass(frozen=True)
class McpEndpoint:
    url: str
    token: str | None
    name: str = "agentenv"

    def __post_init__(self) -> None:
        if not SERVER_NAME.match(self.name):
            raise ValueError(f"MCP server name {self.name!r}: use letters, digits and '-' only (at most 64)")


@dataclass
class Invocation:
    argv: list[str]
    env: dict[str, str]  # to add to the bridge's minimal environment (which sets HOME to the conversation's home)


class Preset:
    name: ClassVar[str]
    executable: ClassVar[str]  # the binary's name on PATH
    npm_package: ClassVar[str]
    wire: ClassVar[Literal["responses", "messages", "gemini"]]

    def prepare(
        self,
        *,
        home: Path,
        workdir: Path,
        prompt: str,
        model: ModelEndpoint,
        mcp: McpEndpoint | None,
        resume: bool,
        executable: str | None = None,
        options: Sequence[str] = (),
    ) -> Invocation:
        """Write the CLI's config under `home` (its HOME for this conversation) and say how to run this turn;
        `resume`: continue the session the previous turn left in `home`; `options`: further options of the CLI's
        (agent_env.agents.cli_settings), before the prompt."""
        raise NotImplementedError

    def final_answer(self, stdout: str) -> str:
        """The CLI's last message, out of what it printed."""
        raise NotImplementedError


class Codex(Preset):
    """`codex exec --json`: its model is a custom Responses provider; MCP tools run without approval (the env's
    sandbox is the boundary, so Codex's own bubblewrap sandbox, which containers rarely allow, is off). Codex
    declares a server's tools as a `namespace` named `mcp__SERVER` and calls them by their own name in it."""

    name = "codex"
    executable = "codex"
    npm_package = "@openai/codex"
    wire = "responses"

    def prepare(
        self,
        *,
        home: Path,
        workdir: Path,
        prompt: str,
        model: ModelEndpoint,
        mcp: McpEndpoint | None,
        resume: bool,
        executable: str | None = None,
        options: Sequence[str] = (),
    ) -> Invocation:
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        provider: Wire = {
            "name": "agentenv",
            "base_url": model.base_url or "https://api.openai.com/v1",
            "wire_api": "responses",
            "request_max_retries": 2,
            "stream_max_retries": 2,
        }
        env = {"CODEX_HOME": str(codex_home)}
        if model.api_key:
            provider["env_key"] = MODEL_KEY_VAR
            env[MODEL_KEY_VAR] = model.api_key
        config: Wire = {
            "model": model.model,
            "model_provider": "agentenv",
            "approval_policy": "never",
            "sandbox_mode": "danger-full-access",
            "check_for_update_on_startup": False,
            "analytics": {"enabled": False},
            "feedback": {"enabled": False},
            "model_providers": {"agentenv": provider},
        }
        if mcp is not None:
            server: Wire = {
                "url": mcp.url,
                "default_tools_approval_mode": "approve",
                "startup_timeout_sec": 30,
                "tool_timeout_sec": 600,
            }
            if mcp.token:
                server["bearer_token_env_var"] = MCP_TOKEN_VAR
                env[MCP_TOKEN_VAR] = mcp.token
            config["mcp_servers"] = {mcp.name: server}
        (codex_home / "config.toml").write_text(_toml(config))
        argv = [executable or self.executable, "exec", "--json", "--skip-git-repo-check", "-C", str(workdir)]
        argv += [*options, "resume", "--last"] if resume else list(options)
        return Invocation(argv=[*argv, "--", prompt], env=env)

    def final_answer(self, stdout: str) -> str:
        """The text of the last `agent_message` item among the JSON lines; else the turn's error."""
        answer, error = None, None
        for event in _json_lines(stdout):
            item = event.get("item") or {}
            if event.get("type") == "item.completed" and item.get("type") == "agent_message":
                answer = str(item.get("text", ""))
            elif event.get("type") == "turn.failed":
                error = str((event.get("error") or {}).get("message", "the turn failed"))
            elif event.get("type") == "error":
                error = str(event.get("message", "error"))
        return answer if answer is not None else error or stdout.strip()


class ClaudeCode(Preset):
    """`claude -p --output-format json`: Anthropic Messages at the model's base URL; the MCP server from a config
    file whose bearer header is expanded from the environment; permissions bypassed (`IS_SANDBOX=1` allows that as
    root); tool search off, so MCP tools are declared up front (as `mcp__SERVER__TOOL`) rather than deferred."""

    name = "claude_code"
    executable = "claude"
    npm_package = "@anthropic-ai/claude-code"
    wire = "messages"

    def prepare(
        self,
        *,
        home: Path,
        workdir: Path,
        prompt: str,
        model: ModelEndpoint,
        mcp: McpEndpoint | None,
        resume: bool,
        executable: str | None = None,
        options: Sequence[str] = (),
    ) -> Invocation:
        small = model.small_model or model.model
        env = {
            "ANTHROPIC_BASE_URL": model.base_url.rstrip("/").removesuffix("/v1") or "https://api.anthropic.com",
            "ANTHROPIC_MODEL": model.model,
            "ANTHROPIC_SMALL_FAST_MODEL": small,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": small,
            "CLAUDE_CODE_SUBAGENT_MODEL": model.model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "ENABLE_TOOL_SEARCH": "false",
            "IS_SANDBOX": "1",
        }
        if model.api_key:
            env["ANTHROPIC_API_KEY"] = model.api_key
        argv = [executable or self.executable, "-p", "--output-format", "json", "--model", model.model]
        argv += ["--dangerously-skip-permissions"]
        servers: Wire = {}
        if mcp is not None:
            server: Wire = {"type": "http", "url": mcp.url}
            if mcp.token:
                server["headers"] = {"Authorization": f"Bearer ${{{MCP_TOKEN_VAR}}}"}
                env[MCP_TOKEN_VAR] = mcp.token
            servers[mcp.name] = server
        config = home / ".agentenv-mcp.json"
        config.write_text(json.dumps({"mcpServers": servers}, indent=1))
        argv += ["--mcp-config", str(config), "--strict-mcp-config"]
        argv += ["--continue", *options] if resume else list(options)
        return Invocation(argv=[*argv, "--", prompt], env=env)

    def final_answer(self, stdout: str) -> str:
        """The `result` of the last JSON object it printed (else its errors, as a turn limit reports)."""
        results = [e for e in _json_lines(stdout) if e.get("type") == "result"]
        if not results:
            return stdout.strip()
        last = results[-1]
        errors = last.get("errors")
        return str(last.get("result") or last.get("error") or ("; ".join(map(str, errors)) if errors else ""))


class Gemini(Preset):
    """`gemini -p --output-format json`, from its documentation (0.61), not run here: the model through
    `GOOGLE_GEMINI_BASE_URL` with an API key (Google's generateContent API, not OpenAI's), the MCP server trusted
    (no confirmations), `--approval-mode yolo` without its default Docker sandbox (`GEMINI_SANDBOX=false`), the
    workspace trusted. Gemini names MCP tools `mcp_SERVER_TOOL`."""

    name = "gemini"
    executable = "gemini"
    npm_package = "@google/gemini-cli"
    wire = "gemini"

    def prepare(
        self,
        *,
        home: Path,
        workdir: Path,
        prompt: str,
        model: ModelEndpoint,
        mcp: McpEndpoint | None,
        resume: bool,
        executable: str | None = None,
        options: Sequence[str] = (),
    ) -> Invocation:
        settings: Wire = {
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "security": {"auth": {"selectedType": "gemini-api-key"}},
        }
        env = {
            "GEMINI_MODEL": model.model,
            "GEMINI_SANDBOX": "false",
            "GEMINI_TELEMETRY_ENABLED": "false",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }
        if model.base_url:
            env["GOOGLE_GEMINI_BASE_URL"] = model.base_url.rstrip("/").removesuffix("/v1")  # it adds /v1beta/...
        if model.api_key:
            env["GEMINI_API_KEY"] = model.api_key
        if mcp is not None:
            server: Wire = {"httpUrl": mcp.url, "trust": True}
            if mcp.token:
                server["headers"] = {"Authorization": f"Bearer ${MCP_TOKEN_VAR}"}
                env[MCP_TOKEN_VAR] = mcp.token
            settings["mcpServers"] = {mcp.name: server}
        (home / ".gemini").mkdir(parents=True, exist_ok=True)
        (home / ".gemini" / "settings.json").write_text(json.dumps(settings, indent=1))
        argv = [executable or self.executable, "--output-format", "json", "--model", model.model]
        argv += ["--approval-mode", "yolo"]
        argv += ["--resume", "latest", *options] if resume else list(options)
        return Invocation(argv=[*argv, "--prompt", prompt], env=env)

    def final_answer(self, stdout: str) -> str:
        """The `response` of the JSON object it printed (else its error's message)."""
        found = _json_lines(stdout) or [_json_object(stdout)]
        last = found[-1] if found else {}
        error = last.get("error") or {}
        return str(last.get("response") or (error.get("message") if isinstance(error, dict) else error) or "")


PRESETS: dict[str, Preset] = {p.name: p for p in (Codex(), ClaudeCode(), Gemini())}


def _json_lines(text: str) -> list[Wire]:
    """The JSON objects among the lines of `text` (CLIs print warnings and progress between them)."""
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                found.append(value)
    return found


def _json_object(text: str) -> Wire:
    """The one (pretty-printed) JSON object in `text`, from its first `{` to its last `}`; {} when there is none."""
    try:
        value = json.loads(text[text.index("{") : text.rindex("}") + 1])
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _toml(table: Wire, prefix: str = "") -> str:
    """TOML for the nested tables of string, number and boolean values Codex's config needs: plain keys first, then
    each sub-table under its dotted `[header]` (keys are quoted, strings JSON-escaped, which TOML accepts)."""
    lines = [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    out = "\n".join(lines) + "\n" if lines else ""
    for key, value in table.items():
        if isinstance(value, dict):
            header = f"{prefix}.{json.dumps(key)}" if prefix else json.dumps(key)
            out += f"\n[{header}]\n" + _toml(value, header)
    return out


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    raise TypeError(f"no TOML for {type(value).__name__} in a CLI config")
