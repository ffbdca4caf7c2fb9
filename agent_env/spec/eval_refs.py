"""The framework's JSON file of task references, as `agent-env eval create|add-tasks` read it:
`[{"task_id": "greet", "task_version": 2}, {"task_id": "other"}]` (no `task_version`: the latest).

Errors name the file, the entry and the field (`refs.json: [2].task_version: ...`)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_env.errors import BadInput
from agent_env.spec.evals import MAX_EVAL_BYTES, MAX_EVAL_TASKS, TaskRef

FORM = '[{"task_id": "NAME", "task_version": N}, {"task_id": "OTHER"}]'


class TaskRefEntry(BaseModel):
    """One entry of the file: a task by id, at a version (None: the latest when the eval runs)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(min_length=1, max_length=200, pattern=r"\S")
    task_version: int | None = Field(None, ge=1, strict=True)

    def ref(self) -> TaskRef:
        return TaskRef(task=self.task_id, version=None if self.task_version is None else str(self.task_version))


def read_task_refs(path: Path) -> list[TaskRef]:
    """The references in `path`, each once; BadInput naming the entry and the field otherwise."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise BadInput(
            f"{path}: cannot be read ({e.strerror})", f"give a JSON file of task references: {FORM}"
        ) from None
    if len(raw) > MAX_EVAL_BYTES:
        raise BadInput(f"{path} is {len(raw) // 1024} KiB; a file of task references is limited to 1 MiB", "split it")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadInput(f"{path} is not valid JSON: {e}", f"write a list of task references: {FORM}") from None
    if not isinstance(data, list) or not data:
        raise BadInput(f"{path}: expected a non-empty list of task references", f"write {FORM}")
    if len(data) > MAX_EVAL_TASKS:
        raise BadInput(f"{path}: {len(data)} entries; an eval holds at most {MAX_EVAL_TASKS}", "split it")
    refs: list[TaskRef] = []
    first: dict[str, int] = {}
    for i, entry in enumerate(data):
        try:
            ref = TaskRefEntry.model_validate(entry).ref()
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            at = f"[{i}].{field}" if field else f"[{i}]"
            raise BadInput(f"{path}: {at}: {err['msg']} (got {entry!r:.200})", f"write each entry as {FORM}") from None
        if ref.task in first:
            raise BadInput(
                f"{path}: [{i}]: task {ref.task!r} is also [{first[ref.task]}]; an eval lists each task once",
                "remove one of them",
            )
        first[ref.task] = i
        refs.append(ref)
    return refs
