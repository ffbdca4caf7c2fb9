"""What every validator reports: its checks, each passed or failed with the problem and the fix, and a score.

A check is one fact about the target (`card.protocolVersion`, `mcp.tools_match_card`, ...). A required check
that fails fails the validator; an optional one only lowers its score. The score's criteria are the checks,
so a run's scores read as the report does.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_env.spec.run import Criterion, Score


class Finding(BaseModel):
    """One fact checked about the target."""

    name: str  # dotted, stable: what a test or a reader greps for
    passed: bool
    required: bool = True
    problem: str = ""  # what is wrong, naming the field or the call (empty when it passed)
    fix: str = ""  # what to change so that it passes

    @classmethod
    def ok(cls, name: str, *, required: bool = True) -> Finding:
        return cls(name=name, passed=True, required=required)

    @classmethod
    def failed(cls, name: str, problem: str, fix: str, *, required: bool = True) -> Finding:
        return cls(name=name, passed=False, required=required, problem=problem, fix=fix)

    def line(self) -> str:
        """One line of a report: `✓ name` or `✗ name: problem (fix: ...)`."""
        if self.passed:
            return f"✓ {self.name}"
        mark = "✗" if self.required else "!"
        return f"{mark} {self.name}: {self.problem}" + (f" (fix: {self.fix})" if self.fix else "")


class ValidationReport(BaseModel):
    """A validator's report on one target."""

    validator: str  # the step type that checked, e.g. `verify_env_card`
    target: str  # the URL (or env/agent id) checked
    checks: list[Finding] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Every required check passed."""
        return all(c.passed for c in self.checks if c.required)

    @property
    def failures(self) -> list[Finding]:
        return [c for c in self.checks if not c.passed]

    def score(self) -> Score:
        """Required checks weigh 1, optional ones 0.25; the threshold is the required checks' share, so an
        optional failure lowers the value and a required one fails the score."""
        rows = [
            Criterion(
                name=c.name,
                passed=c.passed,
                weight=1.0 if c.required else 0.25,
                detail=c.problem + (f" (fix: {c.fix})" if c.fix else ""),
            )
            for c in self.checks
        ]
        total = sum(r.weight for r in rows)
        threshold = (
            round(sum(r.weight for r, c in zip(rows, self.checks, strict=True) if c.required) / total, 6)
            if total
            else 1.0
        )
        score = Score.from_criteria(rows, threshold=threshold)
        if not self.passed:
            score = Score(value=min(score.value, max(0.0, threshold - 1e-6)), threshold=threshold, criteria=rows)
        return score

    def report(self) -> str:
        head = f"{self.validator} {self.target}: {'passed' if self.passed else 'FAILED'}"
        return "\n".join([head, *("  " + c.line() for c in self.checks)])
