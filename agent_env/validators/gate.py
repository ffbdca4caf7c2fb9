"""`validation_gate_aggregator` and `combine_universe_verdicts`: one verdict from the verdicts of upstream steps.

A gate is an upstream validator step. A required gate must have run and passed: one that never reported (it
failed to run, or was skipped) fails the aggregate, so a broken validator can never let an env through. A gate
that reported it had nothing to check (`skipped`, e.g. no OpenAPI document) is advisory and does not block.
"""

from __future__ import annotations

from pydantic import BaseModel

from agent_env.validators.report import Finding, ValidationReport


class GateVerdict(BaseModel):
    """What an upstream step left: its status, whether its score passed, whether it skipped its checks."""

    step: str
    status: str | None = None
    passed: bool | None = None
    skipped: bool = False
    failures: list[str] = []  # the names of its failed required checks, when it reported them


def aggregate(validator: str, target: str, verdicts: list[GateVerdict], required: list[str]) -> ValidationReport:
    report = ValidationReport(validator=validator, target=target)
    for v in verdicts:
        must = v.step in required
        name = f"gate.{v.step}"
        if v.passed is None:
            report.checks.append(
                Finding.failed(
                    name,
                    f"step {v.step!r} left no verdict (it {v.status or 'did not run'})",
                    "make the validator run: its own error says why it did not",
                    required=must,
                )
            )
        elif v.skipped or v.passed:
            report.checks.append(Finding.ok(name, required=must))
        else:
            failed = f": {', '.join(v.failures[:6])}" if v.failures else ""
            report.checks.append(
                Finding.failed(
                    name,
                    f"step {v.step!r} failed{failed}",
                    "see that step's report for each check's fix",
                    required=must,
                )
            )
    return report
