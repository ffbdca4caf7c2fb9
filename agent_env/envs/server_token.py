"""How the gateway hands a managed env server its token: an environment variable, never the command line (`ps`
shows that to every local user). A module of its own so that starters (the gateway, sandbox topologies in the
worker) name it without importing the server (`serve`: Starlette and the protocol's models, ~0.1 s)."""

SERVER_TOKEN_ENV = "AGENT_ENV_SERVER_TOKEN"
