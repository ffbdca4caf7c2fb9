"""A task planned into a run: each step's type resolved into what the workflow needs (local or not,
timeouts, retries, its traits), configs prepared by their step types (records and models pinned, data
stored as artifacts), and the versions and digests of everything it uses recorded. The workflow executes
the plan.

A plan holds everything the run needs and nothing of the machine that made it (records inline, files as
content-addressed objects), so it is kept in the object store under its digest (`keys.plan`) and the run
pins that digest: `agent-env runs rerun` starts a new run from exactly that plan, on any install sharing the
stores, whatever happened to the bundle folder since.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

from agent_env import __version__
from agent_env.config import Settings
from agent_env.errors import BadInput, NotFound
from agent_env.spec.run import BEHAVIOUR, RunInput, StepPlan
from agent_env.spec.task import TaskSpec
from agent_env.spec.world_state import WorldSpec
from agent_env.step_types import PlanContext, catalog
from agent_env.stores import keys
from agent_env.stores.base import MissingObject

if TYPE_CHECKING:
    from agent_env.stores import Stores


def plan(task: TaskSpec, run_id: str, settings: Settings, *, search_attributes: bool = True) -> RunInput:
    """Resolve each step's type into what the workflow needs (local or not, timeouts, retries), and let
    step types prepare their config (inline environment records, store data as artifacts)."""
    context = PlanContext(run_id=run_id, settings=settings, bundle=task.bundle, task=task)
    try:
        inp = _plan(task, run_id, context, search_attributes)
        inp.pins["plan"] = keep_plan(context.stores, inp)
    finally:
        if "stores" in context.__dict__:  # opened (cached) by a step's prepare or by keep_plan
            context.stores.close()
    return inp


def _plan(task: TaskSpec, run_id: str, context: Any, search_attributes: bool) -> RunInput:
    steps = []
    for s in task.steps:
        st = catalog.get(s.type)
        context.step_id = s.id
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
        behaviour=BEHAVIOUR,
    )


def pin(task: TaskSpec, steps: list[StepPlan]) -> dict[str, Any]:
    """What this run used, recorded on it: the seed, the version of everything it was planned with, and the
    digest of each record, artifact and image build context (`digests`, `artifacts`, `images`)."""

    pins: dict[str, Any] = {"agentenv": __version__, "task": f"{task.id}@{task.version}", "seed": task.seed}
    digests = {"task": json_digest(task.model_dump(mode="json"))}
    for s in steps:
        record = s.config.get("record") if isinstance(s.config, dict) else None
        if s.deploys_env and record:
            pins.setdefault("envs", {})[s.id] = f"{record['name']}@{record.get('version', '1')}"
            digests[f"envs.{s.id}"] = json_digest(record)
        elif s.deploys_agent and record:
            pins.setdefault("agents", {})[s.id] = f"{record['name']}@{record.get('version', '1')} ({record['type']})"
            digests[f"agents.{s.id}"] = json_digest(record)
        for where, image in _images(s):
            pins.setdefault("images", {})[where] = image
        for purpose, endpoint in (s.config.get("models") or {}).items() if isinstance(s.config, dict) else ():
            pins.setdefault("models", {})[f"{s.id}.{purpose}"] = pinned_endpoint(endpoint)
        if s.type == "rubrics_verifier" and isinstance(s.config.get("model"), dict):
            pins.setdefault("models", {})[f"{s.id}.judge"] = pinned_endpoint(s.config["model"])
    artifacts = sorted({key for s in steps for key in _content_keys(s.config) if not key.endswith(".tar")})
    if artifacts:
        pins["artifacts"] = artifacts
    pins["digests"] = digests
    return pins


def _images(step: StepPlan) -> list[tuple[str, str]]:
    """(`STEP.APP` or `STEP`, what runs there): a build context by its content key, or an image reference."""
    config = step.config if isinstance(step.config, dict) else {}
    record = config.get("record") or {}
    found = []
    if step.deploys_env:
        for app in record.get("apps") or []:
            box = app.get("sandbox") or {}
            if build := (config.get("builds") or {}).get(app.get("name")):
                found.append((f"{step.id}.{app.get('name')}", f"build {build}"))
            elif box.get("image"):
                found.append((f"{step.id}.{app.get('name')}", str(box["image"])))
    elif step.deploys_agent:
        box = (record.get("config") or {}).get("sandbox") or {}
        if config.get("build"):
            found.append((step.id, f"build {config['build']}"))
        elif box.get("image"):
            found.append((step.id, str(box["image"])))
    return found


def _content_keys(value: Any) -> list[str]:
    """Every content-addressed object key a step's config names (data files, references, build contexts)."""
    if isinstance(value, str):
        return [value] if keys.is_content(value) else []
    if isinstance(value, dict):
        return [k for v in value.values() for k in _content_keys(v)]
    if isinstance(value, list):
        return [k for v in value for k in _content_keys(v)]
    return []


def json_digest(value: Any) -> str:
    """`sha256:HEX` of a JSON value's one canonical spelling."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


# The plan's content: the run's own id and the workflow's bookkeeping are left out.
_PLAN_FIELDS = {"task_id", "task_version", "description", "steps", "world", "pins", "timeout"}


def keep_plan(stores: Stores, inp: RunInput) -> str:
    """Store the plan under its digest (once: the same plan is the same object) and return the digest."""
    document = inp.model_dump(mode="json", include=_PLAN_FIELDS)
    document["pins"] = {k: v for k, v in document["pins"].items() if k not in _RUN_OWN_PINS}
    digest = json_digest(document)
    key = keys.plan(digest)
    if not stores.objects.exists(key):
        # In the plan's own key order (the digest is of the canonical form): a rerun's events then say
        # arguments in the very order the original's did.
        stores.objects.create(key, json.dumps(document, ensure_ascii=False).encode())
    return digest


_RUN_OWN_PINS = {"plan", "rerun_of"}  # said of one run, not of its plan


def replan(stores: Stores, record: dict[str, Any], run_id: str) -> RunInput:
    """A new run (`run_id`) of exactly the plan the run `record` pinned, checked against its digest."""

    original = record.get("run_id", "?")
    digest = (record.get("pins") or {}).get("plan")
    if not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise BadInput(
            f"run {original} pins no plan: it was started before runs kept their plans",
            f"run its task again instead: `agent-env run {record.get('task_id', 'TASK')}`",
        )
    try:
        raw = stores.objects.get(keys.plan(digest))
    except MissingObject:
        raise NotFound(
            f"run {original}'s plan {digest} is not in this install's object store",
            "point this install at the stores the run was started with (`agent-env config show` says which)",
        ) from None
    document = json.loads(raw)
    if json_digest(document) != digest:
        raise BadInput(
            f"the stored plan of run {original} does not match its digest {digest}: it was altered",
            "run the task again with `agent-env run`; the stored plan cannot be trusted",
        )
    inp = RunInput.model_validate({**document, "run_id": run_id, "behaviour": BEHAVIOUR})  # a new run: today's
    inp.pins.update(plan=digest, rerun_of=original)
    return inp


def pinned_endpoint(endpoint: dict[str, Any]) -> str:
    """`MODEL at URL`, and why no key goes there when an override left the configured one behind."""
    said = f"{endpoint['model']} at {endpoint['base_url']}"
    if endpoint.get("withheld_key"):
        said += f" (no API key: {endpoint['withheld_key']} stays with the configured endpoint's origin)"
    return said
