"""Step types: the SDK a step type is written with, under the names plugin authors import, and the built-ins.

    from agent_env.steps import StepConfig, StepContext, StepFailed, step_type

    class GreetConfig(StepConfig):
        name: str

    @step_type("greet", config=GreetConfig)
    async def greet(ctx: StepContext, config: GreetConfig) -> dict:
        "Say hello."
        return {"greeting": f"Hello, {config.name}"}      # the step's outputs

The SDK and the catalog of step types by name live in `agent_env.step_types` (below planning, which checks
tasks against it); what a running step sees, `StepContext`, in `agent_env.steps.context`; `StepFailed` in
`agent_env.errors`. The built-in step types are `agent_env.steps.builtin`.
"""

from agent_env.errors import StepFailed
from agent_env.step_types import (
    BUILTINS,
    ENTRY_POINT_GROUP,
    EmptyConfig,
    PlanContext,
    PrepareFunction,
    StepCatalog,
    StepConfig,
    StepFunction,
    StepResult,
    StepType,
    catalog,
    step_type,
)
from agent_env.steps.context import StepContext

__all__ = [
    "BUILTINS",
    "ENTRY_POINT_GROUP",
    "EmptyConfig",
    "PlanContext",
    "PrepareFunction",
    "StepCatalog",
    "StepConfig",
    "StepContext",
    "StepFailed",
    "StepFunction",
    "StepResult",
    "StepType",
    "catalog",
    "step_type",
]
