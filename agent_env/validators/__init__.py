"""Validators of the open protocol: checks that an environment or an A2A agent speaks protocol v1, each
reporting what failed and the fix. The checks are plain async functions over HTTP (this room); the step types
that run them in a task are in `agent_env.steps.builtin`, and the commands `agent-env env validate` and
`agent-env a2a-agent validate` run those steps as a task."""
