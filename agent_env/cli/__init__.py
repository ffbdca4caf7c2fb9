"""The `agent-env` command. Only typer is imported up front; each command imports what it needs."""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    from agent_env.errors import AgentEnvError

    os.umask(0o077)  # what any command creates (state, logs, secrets, daemons' files) is this user's alone

    try:
        args = sys.argv[1:] if argv is None else argv
        fast = None
        if args[:1] == ["run"]:  # through the background worker when it is up: no typer, no temporalio here
            from agent_env.cli.run_args import parse_run
            from agent_env.temporal.control_client import run_via_worker

            if (options := parse_run(args[1:])) is not None:
                fast = run_via_worker(options)
        elif args[:2] in (["env", "validate"], ["a2a-agent", "validate"]):  # the same, for a validation's run
            from agent_env.cli.run_args import parse_validate
            from agent_env.temporal.control_client import validate_via_worker

            if (checking := parse_validate(args[0], args[2:])) is not None:
                fast = validate_via_worker(checking)
        if fast is not None:
            code = fast
        else:
            from agent_env.cli.commands import app

            app(args=argv, prog_name="agent-env")
            code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except AgentEnvError as e:
        from agent_env.cli.output import print_error

        print_error(e)
        code = e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    if "temporalio" in sys.modules:
        # temporalio can abort the interpreter at exit (exit 134) after a successful command;
        # skip interpreter teardown once our output (and any batched trace spans) is flushed.
        if telemetry := sys.modules.get("agent_env.telemetry"):
            telemetry.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
