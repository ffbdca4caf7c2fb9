"""Read task files (TOML) into a `TaskSpec` of the right shape. Every problem is reported with the file,
the step and the field. `agent_env.planning.tasks` loads tasks for use: it adds the checks against what
is installed (step types, apps, bundles) and reports them the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from agent_env.errors import BadInput, format_loc, from_validation_error
from agent_env.spec.task import TaskSpec

MAX_TASK_BYTES = 1024 * 1024


def task_shape(data: dict[str, Any], where: str, *, flat: bool = False) -> TaskSpec:
    """`data` as a TaskSpec: fields, types and the step graph (BadInput naming each problem)."""
    if not isinstance(data, dict):
        raise BadInput(
            f"{where}: a task is an object (a TOML table), not {type(data).__name__}",
            "write the task as `id = ...` and `[[steps]]` tables (see `agent-env schema task`)",
        )
    try:
        return TaskSpec.model_validate(data)
    except ValidationError as e:
        raise task_problems_error(e, data, where, flat=flat) from None


def task_problems_error(e: ValidationError, data: dict[str, Any], where: str, *, flat: bool = False) -> BadInput:
    """The problems as BadInput, a step named by its id (`step 'fetch'.config.url`) where it has one. `flat`: the
    task was written as the framework's JSON list, whose steps hold their config's fields at the top: a step is
    named by its index and id, its fields without `config` (`steps[1] (id 'load').artifact_id`)."""
    steps = cast(list[Any], data.get("steps") if isinstance(data.get("steps"), list) else [])

    def label(loc: tuple[Any, ...]) -> str:
        if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int) and loc[1] < len(steps):
            step = steps[loc[1]]
            sid = step.get("id") if isinstance(step, dict) else None
            rest = loc[2:]
            if flat:
                head = f"steps[{loc[1]}]" + (f" (id '{sid}')" if isinstance(sid, str) else "")
                rest = rest[1:] if rest[:1] == ("config",) else rest
            else:
                head = f"step '{sid}'" if isinstance(sid, str) else f"steps[{loc[1]}]"
            return head + ("." + format_loc(rest) if rest else "")
        return format_loc(loc)

    return from_validation_error(e, where, label)


def read_task_file(path: Path) -> dict[str, Any]:
    """A task file's TOML, within the size limit (BadInput naming the file otherwise)."""
    import tomllib

    if path.suffix != ".toml":
        raise BadInput(f"{path}: task files are TOML", "rename it to .toml (see `agent-env schema task`)")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"no task file at {path}", "check the path") from None
    except IsADirectoryError:
        raise BadInput(f"{path} is a folder, not a task file", "pass a .toml file or a bundle folder") from None
    if len(raw) > MAX_TASK_BYTES:
        raise BadInput(
            f"{path} is {len(raw) // 1024} KiB; task files are limited to 1 MiB",
            "move data into artifacts and refer to them",
        )
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not UTF-8 text", "save it as UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path} is not valid TOML: {e}", "fix the syntax at that line and column") from None


def bundle_of(path: Path) -> Path | None:
    """The bundle a task file belongs to: the folder holding its `tasks/`."""
    return path.parent.parent if path.parent.name == "tasks" else None
