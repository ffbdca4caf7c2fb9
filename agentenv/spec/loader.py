"""Read task files (TOML). Every problem is reported with the file, the step and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from agentenv.errors import BadInput, format_loc, from_validation_error
from agentenv.spec.task import TaskSpec

MAX_TASK_BYTES = 1024 * 1024


def parse_task(data: dict[str, Any], where: str, bundle: Path | None = None) -> TaskSpec:
    if not isinstance(data, dict):
        raise BadInput(f"{where}: a task is an object (a TOML table), not {type(data).__name__}",
                       "write the task as `id = ...` and `[[steps]]` tables (see `agent-env schema task`)")
    try:
        task = TaskSpec.model_validate(data, context={"bundle": bundle})
        task._bundle = bundle
        return task
    except ValidationError as e:
        steps = cast(list[Any], data.get("steps") if isinstance(data.get("steps"), list) else [])

        def label(loc: tuple[Any, ...]) -> str:
            if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int) and loc[1] < len(steps):
                step = steps[loc[1]]
                sid = step.get("id") if isinstance(step, dict) else None
                head = f"step '{sid}'" if isinstance(sid, str) else f"steps[{loc[1]}]"
                return head + ("." + format_loc(loc[2:]) if loc[2:] else "")
            return format_loc(loc)

        raise from_validation_error(e, where, label) from None


def load_task(path: Path) -> TaskSpec:
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
        raise BadInput(f"{path} is {len(raw) // 1024} KiB; task files are limited to 1 MiB",
                       "move data into artifacts and refer to them")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not UTF-8 text", "save it as UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path} is not valid TOML: {e}", "fix the syntax at that line and column") from None
    bundle = path.parent.parent if path.parent.name == "tasks" else None
    return parse_task(data, str(path), bundle)
