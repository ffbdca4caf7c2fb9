"""Plugin targets that import fine but are not what their entry-point group requires."""

from agent_env.steps import StepConfig, step_type


def plain_function() -> None:
    """Neither a step type nor a SandboxProvider subclass."""


class ShoutConfig(StepConfig):
    text: str


@step_type("shout_loud", config=ShoutConfig)
def shout(ctx, config: ShoutConfig) -> dict:
    """A step type registered under a name other than its own."""
    return {"text": config.text.upper()}
