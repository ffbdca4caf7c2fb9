"""`verify_sandbox`, the framework's: check a deploy_sandbox sandbox with file probes and shell commands, and
score it.

Criteria are the framework's rubric rows: `probe_file_exists` and `probe_dir_exists` (every one of `paths`),
`probe_file_contains` (the first of `paths` matches `expected` as a regular expression) and `bash_cmd_succeeds`
(`bash -c bash_cmd` in `base_dir` exits 0). Relative paths are under `base_dir`. Rows of other types are kept,
marked skipped, and left out of the score, so one rubric can be split between this step and another verifier.
A criterion that cannot be evaluated (a timeout, an unreadable file) fails; the step itself fails only when the
sandbox cannot be reached. The score is aggregated as `score_aggregator` says (all_pass, any_pass,
weighted_average) and recorded with a row per criterion; the outputs hold every row, under `verifier_id`.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import Literal

from pydantic import Field, field_validator, model_validator

from agent_env.errors import AgentEnvError
from agent_env.gateway_client.wire import JsonObject
from agent_env.providers.base import Sandbox
from agent_env.spec.run import Criterion, Score
from agent_env.steps import StepContext, StepResult, step_type
from agent_env.steps.builtin.bare_sandboxes import InSandbox, prepare_in_sandbox, sandbox_of
from agent_env.steps.builtin.sandbox_steps import sandbox_path

HANDLED = ("probe_file_exists", "probe_dir_exists", "probe_file_contains", "bash_cmd_succeeds")
MAX_PROBED_BYTES = 10 * 1024 * 1024  # a file probed for a pattern is read whole
DETAIL_CHARS = 300


class VerifySandboxConfig(InSandbox):
    criteria: list[JsonObject] = Field(default_factory=list, description="rubric rows, each with a `type`")
    agent_name: str | None = Field(None, description="not supported yet: verify a deploy_sandbox sandbox")
    base_dir: str = Field("/app", description="where relative paths and commands are")
    shell_timeout_seconds: int = Field(120, gt=0, le=3600, description="per probe or command")
    score_aggregator: Literal["all_pass", "any_pass", "weighted_average"] = "all_pass"
    verifier_id: str | None = Field(None, description="the name its results are kept under (default: the step id)")

    @field_validator("base_dir")
    @classmethod
    def _base(cls, value: str) -> str:
        return sandbox_path(value)

    @model_validator(mode="after")
    def _where(self) -> VerifySandboxConfig:
        if self.agent_name is not None:
            raise ValueError("`agent_name`: verifying an agent's sandbox is not supported yet; give `sandbox_name`")
        if self.sandbox_name is None:
            raise ValueError("give `sandbox_name`: the deploy_sandbox sandbox to verify")
        return self

    @field_validator("criteria")
    @classmethod
    def _rows(cls, value: list[JsonObject]) -> list[JsonObject]:
        for i, row in enumerate(value):
            kind = row.get("type")
            if not isinstance(kind, str):
                raise ValueError(f"criteria[{i}] has no `type` (one of: {', '.join(HANDLED)}, or another verifier's)")
            weight = row.get("weight", 1.0)
            if isinstance(weight, bool) or not isinstance(weight, int | float):
                raise ValueError(f"criteria[{i}].weight must be a number, not {weight!r}")
        return value


class SandboxProbe:
    """One sandbox, probed: paths resolve under `base_dir`, and each command is bounded in time."""

    def __init__(self, sandbox: Sandbox, config: VerifySandboxConfig) -> None:
        self.sandbox = sandbox
        self.base_dir = config.base_dir
        self.timeout = float(config.shell_timeout_seconds)

    def path(self, path: str) -> str:
        return sandbox_path(posixpath.normpath(posixpath.join(self.base_dir, path)))

    async def run(self, argv: list[str]) -> tuple[int, str, str]:
        result = await self.sandbox.exec(argv, timeout=self.timeout)
        return result.exit_code, self.sandbox.redact(result.stdout), self.sandbox.redact(result.stderr)

    async def exist(self, paths: list[str], flag: str) -> tuple[bool, str]:
        if not paths:
            return False, "no paths given"
        missing = [p for p in paths if (await self.run(["test", flag, self.sandbox.inside(self.path(p))]))[0] != 0]
        return (False, f"missing: {missing}") if missing else (True, "all paths exist")

    async def contains(self, paths: list[str], pattern: str) -> tuple[bool, str]:
        if not paths:
            return False, "no path given"
        try:
            regex = re.compile(pattern)
        except re.error as e:
            return False, f"invalid regular expression {pattern!r}: {e}"
        code, out, err = await self.run(["head", "-c", str(MAX_PROBED_BYTES), self.sandbox.inside(self.path(paths[0]))])
        if code != 0:
            return False, f"could not read {paths[0]}: {err.strip()[:100]}"
        found = regex.search(out) is not None
        return found, f"{paths[0]} {'contains' if found else 'does not contain'} {pattern!r}"

    async def shell(self, command: str) -> tuple[bool, str]:
        if not command:
            return False, "no bash_cmd given"
        folder = shlex.quote(self.sandbox.inside(self.base_dir))
        code, _, err = await self.run(["bash", "-c", f"cd {folder} && ({command}\n)"])
        return code == 0, f"exit={code}; stderr={err.strip()[:200]}"

    async def criterion(self, row: JsonObject) -> tuple[bool, str]:
        kind, paths = row["type"], list(row.get("paths") or [])
        if kind == "probe_file_exists":
            return await self.exist(paths, "-e")
        if kind == "probe_dir_exists":
            return await self.exist(paths, "-d")
        if kind == "probe_file_contains":
            return await self.contains(paths, str(row.get("expected") or row.get("value") or ""))
        return await self.shell(str(row.get("bash_cmd") or ""))


def aggregate(rows: list[JsonObject], how: str) -> float:
    """The framework's aggregators over the evaluated rows (none evaluated: 0)."""
    if not rows:
        return 0.0
    if how == "all_pass":
        return 1.0 if all(r.get("result") is True for r in rows) else 0.0
    if how == "any_pass":
        return 1.0 if any(r.get("result") is True for r in rows) else 0.0
    gained = total = penalty = 0.0
    for r in rows:
        weight = float(r.get("weight", 1.0))
        score = float(r.get("score", 1.0 if r.get("result") is True else 0.0))  # (a row may carry only `result`)
        if weight > 0:
            gained, total = gained + score * weight, total + weight
        elif weight < 0:
            penalty += (1.0 - score) * -weight
    return max(0.0, min(1.0, (gained - penalty) / total)) if total else 0.0


def row_score(row: JsonObject) -> float | None:
    """A result row's own score, when it carries one (a judge's partial score, a pooled step's): its Criterion's."""
    score = row.get("score")
    return float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None


@step_type(
    "verify_sandbox",
    config=VerifySandboxConfig,
    timeout="1h",
    prepare=prepare_in_sandbox("verify_sandbox"),
)
async def verify_sandbox(ctx: StepContext, config: VerifySandboxConfig) -> StepResult:
    """Check a deploy_sandbox sandbox with file probes and shell commands (the framework's rubric rows); score it."""
    probe = SandboxProbe(await sandbox_of(ctx, config), config)
    rows: list[JsonObject] = []
    for index, row in enumerate(config.criteria):
        if row["type"] not in HANDLED:
            rows.append({**row, "criterion_index": index, "skipped": True, "justification": "not verify_sandbox's"})
            continue
        try:
            passed, why = await probe.criterion(row)
        except TimeoutError:
            passed, why = False, f"timed out after {config.shell_timeout_seconds}s"
        except (AgentEnvError, ValueError) as e:  # (ValueError: a path that leaves the sandbox's root)
            passed, why = False, f"could not be evaluated: {e}"[:DETAIL_CHARS]
        rows.append(
            {
                **row,
                "criterion_index": index,
                "score": 1.0 if passed else 0.0,
                "result": passed,
                "justification": why,
                "skipped": False,
            }
        )
        ctx.heartbeat()
    evaluated = [r for r in rows if not r["skipped"]]
    value = aggregate(evaluated, config.score_aggregator)
    criteria = [
        Criterion(
            name=str(r.get("criterion") or f"{r['type']} #{r['criterion_index']}"),
            passed=r["result"],
            weight=float(r.get("weight", 1.0)),
            detail=str(r["justification"])[:DETAIL_CHARS],
            score=row_score(r),
        )
        for r in evaluated
    ]
    verifier = config.verifier_id or ctx.step_id
    return StepResult(
        outputs={"verifier_id": verifier, "results": rows, "score": value},
        score=Score(value=round(value, 6), criteria=criteria),
    )
