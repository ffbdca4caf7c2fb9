"""Between what is declared and what runs: the checks that need what is installed.

`spec/` holds the models of everything declared and checks what it can alone (shape, the step graph);
it imports nothing above it. What needs the registered step types, the apps, the bundles or the gateway's
rules is checked here, where specs are loaded for use: `tasks` (load a task, find one by name), `envs`
(environment records against the apps), `schema` (the task file's JSON Schema with every step type's
config). `runs` plans a loaded task into what the workflow executes.
"""
