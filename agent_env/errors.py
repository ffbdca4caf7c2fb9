"""Errors a user can act on: each names the problem and the fix."""

from __future__ import annotations


class AgentEnvError(Exception):
    """A problem the user can fix. `fix` says how; the CLI prints both and exits non-zero."""

    exit_code = 1

    def __init__(self, problem: str, fix: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix

    def __str__(self) -> str:
        return self.problem if not self.fix else f"{self.problem}\n  fix: {self.fix}"


class BadInput(AgentEnvError):
    """Invalid input from the user: a task file, a config file, an argument."""

    exit_code = 2


class NotFound(BadInput):
    """Something the user named does not exist (a run id, a bundle, a task)."""


class ServerError(AgentEnvError):
    """The Temporal server could not be started or reached."""

    exit_code = 3


def format_loc(loc: tuple[int | str, ...]) -> str:
    """('steps', 2, 'config', 'x') -> 'steps[2].config.x'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def from_validation_error(err, where: str, label=format_loc) -> BadInput:
    """Turn a pydantic ValidationError into one BadInput listing every problem by field."""
    lines = []
    for e in err.errors(include_url=False):
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field — remove it or check its spelling"
        elif e["type"] == "missing":
            msg = "required field is missing — add it"
        lines.append(f"  {label(tuple(e['loc']))}: {msg}")
    n = len(lines)
    return BadInput(f"{where}: {n} problem{'s' if n > 1 else ''}\n" + "\n".join(lines))


class StepFailed(Exception):
    """Raise to fail a step with a clear message. Not retried unless `retryable=True`.

    Step types import it from `agent_env.steps`; it lives here so what runs below the steps (sandboxed apps'
    start, for one) can fail the step that asked for it."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
