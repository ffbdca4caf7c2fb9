"""A prompt's settings (`turn.settings`: agent_env.agents.conversation.PromptSettings) as each CLI's own options.

Only options the pinned CLIs have (checked against their `--help` and binaries, versions as in
agent_env.agents.cli_presets): Claude Code 2.1.332 takes `--effort`, `--max-turns` and the MAX_THINKING_TOKENS
variable; Codex 0.171 takes the reasoning effort as `-c model_reasoning_effort=...` and has no turn or thinking
budget. `model` is applied by the bridge for every CLI (it replaces the endpoint's model); `output_format` is asked
in the prompt (the step checks the answer). A setting a CLI has no option for is reported, never dropped silently:
the turn's answer carries it in its data (`settings_not_applied`), and prompt_agent's outputs show it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from agent_env.agents.wire import Wire

CLAUDE_EFFORTS = ("low", "medium", "high", "xhigh", "max")  # `claude --help`: --effort <level>
CODEX_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")  # Codex's model_reasoning_effort values
HANDLED_BY_BRIDGE = ("model", "output_format")


@dataclass
class CliOptions:
    argv: list[str] = field(default_factory=list)  # options, placed before the prompt (and Codex's `resume`)
    env: dict[str, str] = field(default_factory=dict)
    not_applied: dict[str, str] = field(default_factory=dict)  # setting -> why


def options_for(preset: str | None, settings: Wire) -> CliOptions:
    """The options that carry `settings` to `preset`'s CLI (None: a command of the user's, which gets them all
    as JSON in $AGENT_ENV_SETTINGS and reads what it can)."""
    options = CliOptions()
    if preset is None:
        if settings:
            options.env["AGENT_ENV_SETTINGS"] = json.dumps(settings, sort_keys=True)
        return options
    for name, value in settings.items():
        if name in HANDLED_BY_BRIDGE or value is None:
            continue
        if preset == "claude_code":
            _claude(options, name, value)
        elif preset == "codex":
            _codex(options, name, value)
        else:
            options.not_applied[name] = f"the {preset} preset maps no option for {name}"
    return options


def _claude(options: CliOptions, name: str, value: object) -> None:
    if name == "effort" and value in CLAUDE_EFFORTS:
        options.argv += ["--effort", str(value)]
    elif name == "effort":
        options.not_applied[name] = f"Claude Code's --effort takes {', '.join(CLAUDE_EFFORTS)}, not {value!r}"
    elif name == "max_turns":
        options.argv += ["--max-turns", str(value)]
    elif name == "max_thinking_tokens":
        options.env["MAX_THINKING_TOKENS"] = str(value)
    else:
        options.not_applied[name] = f"Claude Code has no option for {name}"


def _codex(options: CliOptions, name: str, value: object) -> None:
    if name == "effort" and value in CODEX_EFFORTS:
        options.argv += ["-c", f"model_reasoning_effort={json.dumps(value)}"]
    elif name == "effort":
        options.not_applied[name] = f"Codex's model_reasoning_effort takes {', '.join(CODEX_EFFORTS)}, not {value!r}"
    else:
        options.not_applied[name] = f"Codex has no option for {name}"
