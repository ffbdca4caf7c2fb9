"""`agent-env env validate TARGET`: run protocol v1's environment validators as a run, and print their reports.

TARGET is an env server's base URL (checked where it is, sent no credential), or an environment by name: one of
the bundle's (`--bundle`, else the working directory's), a built-in one or app, else the registry's (`NAME[@VERSION]`,
pulled once into the state directory). A named environment is deployed by the run first, then checked through
the gateway. The exit code is 0 only if every required check passed. The task and the report are
`temporal/validation.py`'s; warm, the background worker runs it all (`cli.main`, before this module loads).
"""

from __future__ import annotations

import time

from agent_env.cli import aio
from agent_env.cli.output import console, notice
from agent_env.config import Settings, load_settings
from agent_env.temporal.control_client import ValidateOptions


def validate_command(target: str, *, json_out: bool, read_only: bool, bundle: str | None) -> int:
    options = ValidateOptions("env", target, json_out=json_out, read_only=read_only, bundle=bundle)
    return aio.run(run_validation(load_settings(), options))


async def run_validation(settings: Settings, options: ValidateOptions) -> int:
    """Plan the validation's run, bring up what it needs, run it here and print its report (either command's)."""
    from agent_env.temporal import follow, launch, validation

    started = time.monotonic()
    inp, notes = validation.plan(settings, options)
    for line in [] if options.json_out else notes:
        notice(line)
    client = await follow.prepare(settings, inp, install=settings, note=notice)
    state = await launch.wait_result(await launch.start(client, settings, inp))
    return validation.report(options, state, notes, console(), print, time.monotonic() - started)
