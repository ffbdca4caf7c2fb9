"""A task planned into a run: each step's type resolved into what the workflow needs (local or not,
timeouts, retries, its traits), configs prepared by their step types (records and models pinned, data
stored as artifacts), and the versions of everything it uses recorded. The workflow executes the plan.
"""

from __future__ import annotations

from typing import Any

from agentenv.config import Settings
from agentenv.spec.run import RunInput, StepPlan
from agentenv.spec.task import TaskSpec
from agentenv.spec.world_state import WorldSpec
from agentenv.steps import registry


def plan(task: TaskSpec, run_id: str, settings: Settings, *, search_attributes: bool = True) -> RunInput:
    """Resolve each step's type into what the workflow needs (local or not, timeouts, retries), and let
    step types prepare their config (inline environment records, store data as artifacts)."""
    from agentenv.steps import PlanContext

    context = PlanContext(run_id=run_id, settings=settings, bundle=task.bundle)
    steps = []
    for s in task.steps:
        st = registry.get(s.type)
        config = st.prepare(dict(s.config), context) if st.prepare else s.config
        steps.append(
            StepPlan(
                id=s.id,
                type=s.type,
                depends_on=s.depends_on,
                config=config,
                on_failure=s.on_failure,
                timeout=s.timeout or st.timeout,
                retries=st.retries if s.retries is None else s.retries,
                local=st.runs_local(config),
                heartbeat_timeout=None if st.runs_local(config) else st.heartbeat_timeout,
                **st.traits(config).model_dump(),
            )
        )
    pins = pin(task, steps)
    world = None
    if task.clock or task.triggers:
        world = WorldSpec(
            seed=task.seed,
            clock=task.clock.model_dump(mode="json") if task.clock else None,
            triggers=task.triggers,
            personas=task.personas,
        )
    return RunInput(
        run_id=run_id,
        task_id=task.id,
        task_version=task.version,
        description=task.description,
        steps=steps,
        search_attributes=search_attributes,
        world=world,
        pins=pins,
        timeout=task.timeout,
    )


def pin(task: TaskSpec, steps: list[StepPlan]) -> dict[str, Any]:
    """What this run used, recorded on it: the seed and the version of everything it was planned with."""
    from agentenv import __version__

    pins: dict[str, Any] = {"agentenv": __version__, "task": f"{task.id}@{task.version}", "seed": task.seed}
    for s in steps:
        record = s.config.get("record") if isinstance(s.config, dict) else None
        if s.deploys_env and record:
            pins.setdefault("envs", {})[s.id] = f"{record['name']}@{record.get('version', '1')}"
        elif s.deploys_agent and record:
            pins.setdefault("agents", {})[s.id] = f"{record['name']}@{record.get('version', '1')} ({record['type']})"
        for purpose, endpoint in (s.config.get("models") or {}).items() if isinstance(s.config, dict) else ():
            pins.setdefault("models", {})[f"{s.id}.{purpose}"] = pinned_endpoint(endpoint)
        if s.type == "rubric_judge" and isinstance(s.config.get("model"), dict):
            pins.setdefault("models", {})[f"{s.id}.judge"] = pinned_endpoint(s.config["model"])
    return pins


def pinned_endpoint(endpoint: dict[str, Any]) -> str:
    """`MODEL at URL`, and why no key goes there when an override left the configured one behind."""
    said = f"{endpoint['model']} at {endpoint['base_url']}"
    if endpoint.get("withheld_key"):
        said += f" (no API key: {endpoint['withheld_key']} stays with the configured endpoint's origin)"
    return said
