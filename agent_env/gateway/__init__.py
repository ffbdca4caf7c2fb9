"""The gateway: many environment instances behind one service.

Each instance is one or more apps behind one MCP endpoint (plus REST and a generated CLI for the
same tools). The gateway enforces roles with per-agent tokens, stamps every call with the virtual
time, role and run, and records the trajectory. This is the server; what talks to it is in
`agent_env.gateway_client`.
"""
