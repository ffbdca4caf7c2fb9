"""A plugin module that fails on import, as a plugin with a bug or a missing setting would."""

raise RuntimeError("explodes on import: AGENT_ENV_BROKEN_SETTING is not set")
