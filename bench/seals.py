"""Seals: what sealing and checking costs per run (agent_env/temporal_client/seals.py), on the plans of the built-in bundles.

A run costs one start seal (made by the planner, checked by the worker) and, for each step run as a regular
activity, one activity seal (made by the worker's workflow code, checked by the activity worker) and one seal of
its result (made by the activity worker, checked by the run; here a deploy step's outputs stand in for every
result). A step's activity runs under its step type's name (`agentenv.step.deploy_env`), served by a dynamic
activity that gets its arguments raw: the activity worker decodes them once more to check the seal, and that is
counted here. Each update a trainer or the gateway sends costs one more pair. Measured in-process on the real plans, with the baseline the
work Temporal's data converter does anyway for the same payloads (serialising them once).

Goal: at most 1 ms of sealing per run.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from common import row, temp_dir

GOAL_MS = 1.0
ROUNDS = 200
BUNDLES = ("hello", "support-desk", "workplace")  # (the others need a model endpoint to plan)


def _operations(inp):
    """(what, name, args, raw args of a dynamic activity or None) of every seal a run of `inp` makes: its start, each regular activity step's call and result."""
    from agent_env.spec.run import StepCall, StepOutcome
    from agent_env.workflows.contract import step_activity

    outcome = StepOutcome(
        outputs={
            "instance": f"{inp.run_id}.desk",
            "gateway": "http://127.0.0.1:8790",
            "urls": {"mcp": f"http://127.0.0.1:8790/envs/{inp.run_id}.desk/mcp"},
            "agents": {"support": {"role": "support", "token": "secret:gateway-token"}},
        },
        duration_ms=117.0,
    )
    yield "start", "agentenv.TaskRun", [inp], None
    for step in inp.steps:
        if not step.local and not step.in_workflow:
            call = StepCall(run_id=inp.run_id, task_id=inp.task_id, step_id=step.id, type=step.type, config=step.config)
            yield "activity", step_activity(step.type), [call], _raw([call])
            yield "result", step_activity(step.type), [outcome], None


def measure() -> dict:
    from temporalio.contrib.pydantic import pydantic_data_converter

    from agent_env.bundles import BUILTIN_ROOT
    from agent_env.config import Settings
    from agent_env.planning.tasks import load_task
    from agent_env.temporal import launch
    from agent_env.temporal_client import seals

    print(f"seals (in-process, {ROUNDS} rounds per bundle; what sealing adds to each run)")
    settings = Settings.model_validate({"state_dir": str(temp_dir("agentenv-bench-seals-"))})
    key = seals.load(settings)
    converter = pydantic_data_converter.payload_converter
    results = {}
    for bundle in BUNDLES:
        task = load_task(next((BUILTIN_ROOT / bundle / "tasks").glob("*.toml")))
        inp = launch.plan(task, launch.new_run_id(task.id), settings)
        ops = list(_operations(inp))
        sealing = _timed(lambda ops=ops, run_id=inp.run_id: _seal_and_check(key, run_id, ops))
        baseline = _timed(lambda ops=ops: [converter.to_payloads(args) for _, _, args, _ in ops])
        size = len(converter.to_payloads([inp])[0].data)
        verdict = "met" if sealing <= GOAL_MS else "NOT met"
        row(
            f"{bundle}: {len(ops)} seals made and checked",
            f"{sealing:.3f} ms",
            f"{sealing / baseline:.2f}x serialising them once ({baseline:.3f} ms); plan {size / 1024:.1f} KiB; "
            f"goal <= {GOAL_MS:g} ms: {verdict}",
        )
        results[bundle] = {"seals": len(ops), "ms": sealing, "baseline_ms": baseline, "ratio": sealing / baseline}
    update = [("update", "answer", ["turn-1", "Done.", None], None)]
    per_update = _timed(lambda: _seal_and_check(key, "run-1", update))
    row("one trainer update (answer), made and checked", f"{per_update:.3f} ms", "each turn of an episode")
    results["update_ms"] = per_update
    return results


def _raw(args):
    """Arguments as a dynamic activity gets them: raw payloads (made once, outside the timing)."""
    from temporalio.common import RawValue
    from temporalio.contrib.pydantic import pydantic_data_converter

    return [RawValue(p) for p in pydantic_data_converter.payload_converter.to_payloads(args)]


def _seal_and_check(key, run_id: str, ops) -> None:
    from temporalio.contrib.pydantic import pydantic_data_converter

    from agent_env.temporal_client import seals
    from agent_env.workflows import contract

    from_payload = pydantic_data_converter.payload_converter.from_payload
    now = datetime.now(UTC)
    for what, name, args, raw in ops:
        subject = seals.Subject(what, "default", run_id, name)
        sealed = {seals.HEADER: seals.make(key, subject, args, now)}
        received = args if raw is None else contract.decode_named(name, raw, from_payload)  # decoded to check
        why = seals.problem(key, sealed, subject, received, now)
        assert why is None, why


def _timed(work) -> float:
    """Milliseconds per call: the best of 5 batches (this is CPU work; the best is the least disturbed)."""
    work()  # warm
    batches = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(ROUNDS // 5):
            work()
        batches.append((time.perf_counter() - start) / (ROUNDS // 5) * 1000)
    return min(batches)


if __name__ == "__main__":
    measure()
