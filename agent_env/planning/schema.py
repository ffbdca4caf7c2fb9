"""JSON Schema of task files, with each registered step type's config spelled out (`agent-env schema task`)."""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from agent_env.spec.task import TaskSpec
from agent_env.step_types import catalog


def task_schema() -> dict[str, Any]:
    schema = TaskSpec.model_json_schema()
    types, broken = {}, []
    for name in catalog.names():
        try:
            types[name] = catalog.get(name)
        except ImportError as e:  # one broken plugin must not hide every other step type
            broken.append(str(e))
    refs, extra = models_json_schema(
        [(st.config, "validation") for st in types.values()], ref_template="#/$defs/{model}"
    )
    schema["$defs"].update(extra.get("$defs", {}))
    step = schema["$defs"]["StepSpec"]
    step["properties"]["type"]["enum"] = list(types)
    step["allOf"] = [
        {
            "if": {"properties": {"type": {"const": name}}, "required": ["type"]},
            "then": {"properties": {"config": {**refs[(st.config, "validation")], "description": st.description}}},
        }
        for name, st in types.items()
    ]
    schema["description"] = (
        "An agent-env task file (TOML). Config strings may hold ${steps.ID.outputs.PATH} references "
        "to the results of steps the step depends on."
    )
    if broken:
        schema["$comment"] = "step types left out because they failed to load: " + "; ".join(broken)
    return schema
