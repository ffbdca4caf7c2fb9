"""`agent-env schema` and `agent-env server start|stop|status`."""

from __future__ import annotations

import json

from agent_env.cli.output import console, not_running_line, notice
from agent_env.config import load_settings
from agent_env.errors import BadInput


def schema_command(what: str) -> int:
    if what == "task":
        from agent_env.planning.schema import task_schema

        schema = task_schema()
    elif what == "config":
        from agent_env.config import Settings

        schema = Settings.model_json_schema()
    elif what == "run":
        from agent_env.spec.run import RunState

        schema = RunState.model_json_schema()
    else:
        raise BadInput(f"no schema named '{what}'", "use one of: task, config, run")
    print(json.dumps(schema, indent=2))
    return 0


def _require_embedded(settings) -> None:
    if not settings.embedded:
        raise BadInput(
            f"a Temporal address is configured ({settings.temporal.address}, from "
            f"{settings.describe_address_source()}), so the embedded server is not used",
            "unset that address to use the embedded server",
        )


def server_start_command() -> int:
    from agent_env.temporal_client import server

    settings = load_settings()
    _require_embedded(settings)
    before = server.status(settings).running
    info = server.start(settings, on_notice=notice)
    verb = "already running" if before else "started"
    console().print(f"Temporal dev server {verb} at {info.address} (pid {info.pid})")
    if info.ui_url:
        console().print(f"  web UI: {info.ui_url}")
    console().print(f"  data: {info.db}\n  log:  {info.log}")
    return 0


def server_stop_command() -> int:
    from agent_env.temporal_client import server

    settings = load_settings()
    _require_embedded(settings)
    from agent_env.temporal import background

    for worker in background.stop_all(settings):  # a worker without its server is useless
        console().print(f"stopped the background worker (pid {worker.pid})")
    stopped = server.stop(settings)
    if stopped:
        console().print(f"stopped the Temporal dev server (pid {stopped.pid}); runs resume when it starts again")
    else:
        console().print("the Temporal dev server was not running")
    return 0


def server_status_command() -> int:
    from agent_env.temporal_client import server

    settings = load_settings()
    if not settings.embedded:
        console().print(
            f"using the Temporal server at {settings.temporal.address} "
            f"(from {settings.describe_address_source()}); the embedded server is not used"
        )
        return 0
    st = server.status(settings)
    if st.running and st.info:
        console().print(f"running at {st.info.address} (pid {st.info.pid})")
        if st.info.ui_url:
            console().print(f"  web UI: {st.info.ui_url}")
    else:
        console().print(
            not_running_line(st.stale_pidfile, "start it with `agent-env server start`, or just `agent-env run`")
        )
    console().print(f"  data: {st.paths.db}\n  log:  {st.paths.log}")
    return 0 if st.running else 1


def gateway_command(action: str) -> int:
    from agent_env.gateway import embedded

    settings = load_settings()
    if urls := settings.gateway.urls():
        console().print(f"using the gateway(s) at {', '.join(urls)}; the embedded gateway is not used")
        return 0 if action == "status" else 2
    if action == "start":
        info, started = embedded.start(settings, on_notice=notice)
        console().print(
            f"gateway {'started' if started else 'already running'} at http://{info.address} "
            f"(pid {info.pid})\n  log: {info.log}"
        )
        return 0
    if action == "stop":
        stopped = embedded.stop(settings)
        console().print(
            f"stopped the gateway (pid {stopped.pid}); instances are kept" if stopped else "the gateway was not running"
        )
        return 0
    st = embedded.status(settings)
    if st.running and st.info:
        console().print(f"running at http://{st.info.address} (pid {st.info.pid})\n  log: {st.info.log}")
        return 0
    console().print(not_running_line(st.stale_pidfile, "`agent-env gateway start`, or just `agent-env run`"))
    return 1
