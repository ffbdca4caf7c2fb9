"""Read the framework's task files (`tasks/NAME.json`) into the same task data as our TOML ones.

A JSON task is a list of steps, each an object with `id`, `type`, optional `depends_on`, and the step's own
fields at its top level (`{"id": "box", "type": "deploy_sandbox", "sandbox_name": "box"}`). This reader only
moves those fields into the step's `config` and maps the framework's step-level fields onto ours; the task
then goes through the same checks and planning as a TOML one (`agent_env.planning.tasks.parse_task`).

The framework's rules kept here: a step without `depends_on` runs after every earlier step of the list (it is
a sequence unless said otherwise); a `depends_on` entry is a step id or `{"task_step_id": ID}`;
`fail_task_on_error: false` lets the task go on past the step's failure. The task's id is the file's name.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from agent_env.errors import BadInput
from agent_env.spec.loader import MAX_TASK_BYTES

# Step-level fields of the framework's steps that are not the step's config.
STEP_FIELDS = ("id", "type", "depends_on", "fail_task_on_error", "version")
UNSUPPORTED = {
    "retry_config": "retries here are the step type's own: remove it, or write the task in TOML with `retries`",
}


def read_json_task(path: Path) -> dict[str, object]:
    """The task data (`id`, `steps` with `config`) of a JSON task file; BadInput naming the file, the step's
    index and the field otherwise."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"no task file at {path}", "check the path") from None
    except IsADirectoryError:
        raise BadInput(
            f"{path} is a folder, not a task file", "pass a .json or .toml file or a bundle folder"
        ) from None
    if len(raw) > MAX_TASK_BYTES:
        raise BadInput(
            f"{path} is {len(raw) // 1024} KiB; task files are limited to 1 MiB",
            "move data into artifacts and refer to them",
        )
    try:
        steps = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not UTF-8 text", "save it as UTF-8") from None
    except RecursionError:
        raise BadInput(f"{path} is not valid JSON: nested too deeply", "flatten it") from None
    except ValueError as e:
        raise BadInput(f"{path} is not valid JSON: {e}", "fix the syntax at that line and column") from None
    return json_task(steps, path)


def json_task(steps: Any, path: Path) -> dict[str, object]:
    """The framework's list of flat steps as our task data (`where`: the file, for errors)."""
    if not isinstance(steps, list) or not steps:
        raise BadInput(
            f"{path}: a JSON task is a non-empty list of steps, not {_kind(steps) if steps != [] else 'an empty one'}",
            'write it as [{"id": "...", "type": "...", ...}, ...]',
        )
    mapped: list[dict[str, object]] = []
    ids: list[str] = []
    for index, step in enumerate(steps):
        mapped.append(_step(step, index, ids, path))
        ids.append(step["id"])
    return {"id": path.stem, "steps": mapped}


def _step(step: Any, index: int, earlier: list[str], path: Path) -> dict[str, object]:
    if not isinstance(step, dict):
        raise BadInput(
            f"{path}: steps[{index}] is {_kind(step)}, not an object", 'write it as {"id": ..., "type": ...}'
        )
    for field in ("id", "type"):
        if not isinstance(step.get(field), str) or not step[field]:
            raise BadInput(
                f"{path}: steps[{index}]: field {field!r} "
                + ("is missing" if field not in step else f"must be a non-empty string, not {step[field]!r}"),
                f'give the step its {field}, e.g. "{field}": "...".',
            )
    where = f"{path}: steps[{index}] (id {step['id']!r})"
    for field, fix in UNSUPPORTED.items():
        if field in step:
            raise BadInput(f"{where}: field {field!r} is not supported", fix)
    out: dict[str, object] = {
        "id": step["id"],
        "type": step["type"],
        "depends_on": _depends_on(step.get("depends_on"), earlier, where),
        "config": {k: v for k, v in step.items() if k not in STEP_FIELDS},
    }
    failing = step.get("fail_task_on_error", True)
    if not isinstance(failing, bool):
        raise BadInput(
            f"{where}: field 'fail_task_on_error' must be true or false, not {failing!r}", "write true or false"
        )
    if not failing:
        out["on_failure"] = "continue"
    version = step.get("version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise BadInput(f"{where}: field 'version' must be an integer or null, not {version!r}", "remove it")
    return out


def _depends_on(raw: Any, earlier: list[str], where: str) -> list[str]:
    if raw is None:
        return list(earlier)  # the framework's default: after every earlier step
    if not isinstance(raw, list):
        raise BadInput(
            f"{where}: field 'depends_on' is a list of step ids, not {raw!r}", 'write it as ["step-id", ...]'
        )
    ids = []
    for entry in raw:
        if isinstance(entry, dict) and set(entry) == {"task_step_id"}:
            entry = entry["task_step_id"]
        if not isinstance(entry, str):
            raise BadInput(
                f"{where}: field 'depends_on': an entry is a step id or {{\"task_step_id\": ID}}, not {entry!r}",
                "name the step by its id",
            )
        ids.append(entry)
    return ids


def _kind(value: Any) -> str:
    return {list: "a list", dict: "an object", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, object]:
    """A JSON object whose key is repeated is refused: which of the two a reader keeps is not defined."""
    counts = Counter(key for key, _ in pairs)
    repeated = sorted(key for key, n in counts.items() if n > 1)
    if repeated:
        raise ValueError(f"key {repeated[0]!r} is given twice in one object")
    return dict(pairs)
