"""Evals: a versioned set of task references, as the framework writes one (`evals/NAME.toml`), and the table of
an eval's runs (each task's status and score, the mean and the pass rate).

An eval file holds `tasks`, a list whose entries are a task's name (`"greet"`: the bundle's task of that name,
else the registry's latest) or a pinned reference (`{ task = "greet", version = 2 }`: that version); `type`
(`"eval"`) and `id` (the file's name by default) are optional. `version` is ours: the eval's label in the
registry, `"1"` unless given, as a task's. Each task is listed once.

Errors name the file and the field (`evals/smoke.toml: tasks[3]: ...`).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from pydantic import BaseModel, Field

from agent_env.errors import BadInput

MAX_EVAL_BYTES = 1024 * 1024
MAX_EVAL_TASKS = 10_000
KEYS = ("tasks", "type", "id", "version")
EVAL_TYPE = "eval"
REF_FORM = '"NAME" or { task = "NAME", version = N }'


class TaskRef(BaseModel):
    """One task an eval names: by name (or id), at a version label or (None) the one found first."""

    task: str
    version: str | None = None

    def __str__(self) -> str:
        return self.task if self.version is None else f"{self.task}@{self.version}"


class EvalSpec(BaseModel):
    """An eval as read from its file or the registry."""

    name: str = Field(description="the file's name without .toml: how `--eval` names it")
    id: str
    version: str = "1"
    tasks: list[TaskRef] = Field(min_length=1)
    source: str = Field("", description="where it was read: a file's path, or `registry`", exclude=True)

    def record(self) -> dict[str, object]:
        """What the registry stores: the file's fields, each reference as a table."""
        return {
            "id": self.id,
            "type": EVAL_TYPE,
            "version": self.version,
            "tasks": [ref.model_dump(exclude_none=True) for ref in self.tasks],
        }


def eval_toml(spec: EvalSpec) -> str:
    """The eval as a file in the framework's form, each reference a table (what `registry pull` writes)."""

    def text(value: str) -> str:
        return json.dumps(value)  # a JSON string is a TOML basic string

    lines = [f"id = {text(spec.id)}", f'type = "{EVAL_TYPE}"', f"version = {text(spec.version)}", "tasks = ["]
    for ref in spec.tasks:
        pin = "" if ref.version is None else f", version = {text(ref.version)}"
        lines.append(f"  {{ task = {text(ref.task)}{pin} }},")
    return "\n".join([*lines, "]", ""])


def read_eval_file(path: Path) -> EvalSpec:
    """The eval in `path`; BadInput naming the file and the field otherwise."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise BadInput(f"{path}: cannot be read ({e.strerror})", "give the path of an evals/NAME.toml file") from None
    if len(raw) > MAX_EVAL_BYTES:
        raise BadInput(f"{path} is {len(raw) // 1024} KiB; eval files are limited to 1 MiB", "split the eval")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not UTF-8 text", "save it as UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path} is not valid TOML: {e}", "fix the syntax at that line") from None
    return eval_from(data, path.stem, str(path))


def eval_from(data: dict[str, object], name: str, where: str) -> EvalSpec:
    """An eval from its fields (a file's, or a registry record's); `where` names it in errors."""
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise BadInput(
            f"{where}: unknown key {', '.join(map(repr, unknown))}",
            f"an eval takes {', '.join(KEYS)}: remove it or check its spelling",
        )
    if data.get("type", EVAL_TYPE) != EVAL_TYPE:
        raise BadInput(
            f"{where}: type: {data['type']!r} is not an eval type", f'write type = "{EVAL_TYPE}" or leave it out'
        )
    eval_id = data.get("id", name)
    if not isinstance(eval_id, str) or not eval_id.strip():
        raise BadInput(
            f"{where}: id: must be a non-empty string, not {eval_id!r}", "leave it out to use the file's name"
        )
    version = _label(data.get("version", "1"), where, "version")
    tasks = data.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        shown = "missing" if tasks is None else f"{tasks!r} is not a list of tasks" if tasks else "empty"
        raise BadInput(f"{where}: tasks: {shown}; an eval needs at least one task", f"write tasks = [{REF_FORM}, ...]")
    if len(tasks) > MAX_EVAL_TASKS:
        raise BadInput(f"{where}: tasks: {len(tasks)} tasks; an eval holds at most {MAX_EVAL_TASKS}", "split it")
    refs: list[TaskRef] = []
    first: dict[str, int] = {}
    for i, entry in enumerate(tasks):
        ref = _ref(entry, f"{where}: tasks[{i}]")
        if ref.task in first:
            raise BadInput(
                f"{where}: tasks[{i}]: task {ref.task!r} is also tasks[{first[ref.task]}]; an eval lists each task once",
                "remove one of them",
            )
        first[ref.task] = i
        refs.append(ref)
    return EvalSpec(name=name, id=eval_id, version=version, tasks=refs, source=where)


def _ref(entry: object, where: str) -> TaskRef:
    if isinstance(entry, str) and entry.strip():
        return TaskRef(task=entry)
    if isinstance(entry, dict):
        extra = sorted(set(entry) - {"task", "version"})
        task = entry.get("task")
        if extra:
            raise BadInput(f"{where}: unknown key {', '.join(map(repr, extra))}", f"write {REF_FORM}")
        if not isinstance(task, str) or not task.strip():
            raise BadInput(f"{where}.task: must name a task, not {task!r}", f"write {REF_FORM}")
        version = entry.get("version")
        return TaskRef(task=task, version=None if version is None else _label(version, f"{where}.version", ""))
    raise BadInput(f"{where}: expected {REF_FORM}, not {entry!r}", "name the task, or pin its version in a table")


def _label(value: object, where: str, key: str) -> str:
    """A version as a label: a positive integer (the framework's) or a non-empty string (ours)."""
    at = f"{where}: {key}" if key else where
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BadInput(f"{at}: {value!r} is not a version", 'write a number (version = 2) or a label (version = "2")')
    if isinstance(value, int) and value < 1:
        raise BadInput(f"{at}: {value} is not a version; versions start at 1", "write version = 1 or higher")
    label = str(value).strip()
    if not label:
        raise BadInput(f"{at}: is empty", 'write version = "1", or leave it out')
    return label


# -- an eval's runs --


class EvalTaskRun(BaseModel):
    """One task of an eval run: the task as resolved and the run that runs it."""

    task: str = Field(description="the task's id")
    version: str
    ref: str = Field(description="the reference as the eval wrote it")
    run_id: str
    attempt: int = Field(1, description="which of the task's k runs (`eval run --k`)")


class EvalRun(BaseModel):
    """An eval run as recorded (`keys.EVAL_RUNS`): which eval, which version, and a run per task."""

    eval_run_id: str
    eval: str
    version: str
    source: str
    started_at: str
    tasks: list[EvalTaskRun]
    k: int = Field(1, description="runs of each task")


class EvalRow(BaseModel):
    task: str
    version: str
    run_id: str
    status: str  # a RunStatus, or "pending" before the run is recorded
    score: float | None = None


FINISHED = ("passed", "failed", "error", "cancelled")


class EvalTaskScore(BaseModel):
    """One task over its k runs: its mean score (a finished run without a score counts 0) and whether any
    of them passed (pass@k)."""

    task: str
    version: str
    runs: int
    passed: int
    mean: float | None = None
    pass_at_k: bool = False

    @classmethod
    def of(cls, rows: list[EvalRow]) -> EvalTaskScore:
        done = [r for r in rows if r.status in FINISHED]
        passed = sum(r.status == "passed" for r in rows)
        return cls(
            task=rows[0].task,
            version=rows[0].version,
            runs=len(rows),
            passed=passed,
            mean=round(sum(r.score or 0.0 for r in done) / len(done), 6) if done else None,
            pass_at_k=passed > 0,
        )


class EvalTable(BaseModel):
    """Each run's status and score, and the aggregate over the eval's runs: the mean score (a finished run
    without a score counts 0) and the pass rate (the share of all its runs that passed). With k runs of each
    task, `tasks` holds each task's mean and pass@k, and `pass_at_k` the share of tasks with a passing run."""

    eval_run_id: str
    eval: str
    version: str
    source: str
    started_at: str
    rows: list[EvalRow]
    k: int = 1
    finished: int = 0
    passed: int = 0
    mean: float | None = None
    pass_rate: float = 0.0
    tasks: list[EvalTaskScore] = Field(default_factory=list)
    pass_at_k: float = 0.0

    @classmethod
    def of(cls, run: EvalRun, states: dict[str, tuple[str, float | None]]) -> EvalTable:
        """The table of `run`, with `states` (run id -> status and score) of the runs recorded so far."""
        rows = [
            EvalRow(
                task=t.task,
                version=t.version,
                run_id=t.run_id,
                status=states.get(t.run_id, ("pending", None))[0],
                score=states.get(t.run_id, ("pending", None))[1],
            )
            for t in run.tasks
        ]
        done = [r for r in rows if r.status in FINISHED]
        passed = sum(r.status == "passed" for r in rows)
        by_task: dict[tuple[str, str], list[EvalRow]] = {}
        for row in rows:
            by_task.setdefault((row.task, row.version), []).append(row)
        scores = [EvalTaskScore.of(group) for group in by_task.values()]
        return cls(
            **run.model_dump(exclude={"tasks"}),
            tasks=scores,
            pass_at_k=round(sum(s.pass_at_k for s in scores) / len(scores), 6) if scores else 0.0,
            rows=rows,
            finished=len(done),
            passed=passed,
            mean=round(sum(r.score or 0.0 for r in done) / len(done), 6) if done else None,
            pass_rate=round(passed / len(rows), 6) if rows else 0.0,
        )

    @property
    def complete(self) -> bool:
        return self.finished == len(self.rows)
