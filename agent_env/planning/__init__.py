"""Between what is declared and what runs: the checks that need what is installed.

`spec/` holds the models of everything declared and checks what it can alone (shape, the step graph, the role
rules); it imports nothing above it. What needs the installed step types (`agent_env.step_types`), the apps
(`agent_env.envs.records`) or the bundles is checked here, where specs are loaded for use: `tasks` (load a
task), `schema` (the task file's JSON Schema with every step type's config). `runs` plans a loaded task into
what the workflow executes. Finding a task by name, which may look in the registry above, is
`agent_env.task_lookup`.
"""
