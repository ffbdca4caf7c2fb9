"""Every field of the framework's 49 step types has an answer here: our step type takes it (under its name, or
rewritten into ours: `framework_names`), or refuses it by name with why (`refused_fields`). A framework task's
field is never an "unknown field".

tests/fixtures/framework_step_fields.json is the table of the framework's fields, made once from its source by
FIELDS_SCRIPT below (run in a virtualenv with the framework installed: `python -c "$FIELDS_SCRIPT" > the file`,
then add the `_note`); test_the_table_is_the_installed_frameworks checks it still is, in the side venv.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from reference_venv import framework_python, run_to_end  # noqa: F401 - fixtures

from agent_env.errors import BadInput
from agent_env.planning.runs import plan
from agent_env.planning.tasks import load_task
from agent_env.step_types import catalog

TABLE = json.loads((Path(__file__).parent / "fixtures" / "framework_step_fields.json").read_text())
BUNDLES = Path(__file__).parents[1] / "agent_env" / "bundles"

# Reads each step class's from_dict (and its _SERIALIZED_FIELDS, where it lists them) for the keys it reads from
# the stored step: the step's fields as a task file writes them. The base class's fields are listed once.
FIELDS_SCRIPT = r"""
import ast, inspect, json, textwrap
from importlib.metadata import version

from agent_env.task_step.registry import _builtin_registry
from agent_env.task_step.task_step import TaskStep

COMMON = ("depends_on", "fail_task_on_error", "id", "retry_config", "type", "version")


def read_keys(function):
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    data = tree.body[0].args.args[-1].arg
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == data:
            if isinstance(node.slice, ast.Constant):
                keys.add(node.slice.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            owner = node.func.value
            if node.func.attr in ("get", "pop") and isinstance(owner, ast.Name) and owner.id == data:
                if isinstance(node.args[0], ast.Constant):
                    keys.add(node.args[0].value)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant):
            if any(isinstance(c, ast.Name) and c.id == data for c in node.comparators):
                keys.add(node.left.value)
    return keys


steps = {}
for name, cls in sorted(_builtin_registry().items()):
    keys = set(getattr(cls, "_SERIALIZED_FIELDS", ()))
    for klass in cls.__mro__:
        if klass is not TaskStep and "from_dict" in vars(klass):
            keys |= read_keys(vars(klass)["from_dict"].__func__)
    steps[name] = sorted(keys - set(COMMON))
print(json.dumps({"framework": version("agentenv-framework"), "common": list(COMMON), "steps": steps}, indent=1))
"""


def pairs() -> list[tuple[str, str]]:
    return [(s, f) for s, fields in TABLE["steps"].items() for f in fields]


def test_the_table_holds_every_framework_step_type_and_they_are_all_ours():
    assert len(TABLE["steps"]) == 49
    assert set(TABLE["steps"]) <= set(catalog.names())
    assert len(pairs()) > 250, "the table lists each step type's fields"


def _line(message: str, field: str) -> str:
    """The line of a task's problems about `field` of steps[0] (empty if none)."""
    return next((ln for ln in message.splitlines() if f"steps[0] (id 's').{field}:" in ln), "")


@pytest.mark.parametrize(("step", "field"), pairs())
def test_a_framework_field_is_taken_or_refused_by_name(tmp_path, step, field):
    """The field alone in a JSON task of one step: whatever else is missing, the field is never unknown; when it is
    refused, the error names it and says why."""
    (tmp_path / "tasks").mkdir()
    path = tmp_path / "tasks" / "t.json"
    path.write_text(json.dumps([{"id": "s", "type": step, field: "x"}]))
    model = catalog.get(step).config
    try:
        load_task(path)
    except BadInput as e:
        line = _line(e.problem, field)
    else:
        line = ""
    assert "unknown field" not in line, line
    refused = getattr(model, "refused_fields", {})
    if field in refused:
        assert line.endswith(f"the framework's field {field!r} is not supported here: {refused[field]}"), line
    else:
        assert (
            field in model.model_fields
            or any(f.alias == field for f in model.model_fields.values())
            or field in getattr(model, "framework_names", {})
        ), f"{step}.{field}: neither a field, a name nor refused"


@pytest.mark.parametrize("step", sorted(TABLE["steps"]))
def test_a_refused_or_renamed_field_is_not_also_a_field_of_ours(step):
    model = catalog.get(step).config
    names = set(model.model_fields) | {f.alias for f in model.model_fields.values() if f.alias}
    refused, renamed = getattr(model, "refused_fields", {}), getattr(model, "framework_names", {})
    assert not names & set(refused), "a field is either taken or refused"
    assert not names & set(renamed), "a renamed field is not ours too"
    assert {ours for ours, _ in renamed.values()} <= names, "a framework field is renamed into a field of ours"


def test_a_config_read_without_planning_refuses_the_field_too():
    model = catalog.get("collect_artifacts").config
    with pytest.raises(ValueError, match="the framework's field 'artifacts_key' is not supported here: a run here"):
        model.model_validate({"artifacts_key": "expected"})


def test_the_frameworks_names_plan_as_ours(tmp_path, settings):
    """A task written with the framework's names for an env, an agent and a prompt plans as the task written with
    ours: each becomes the step that deployed or prompted it."""
    bundle = tmp_path / "echo-agent"
    shutil.copytree(BUNDLES / "echo-agent", bundle)
    steps = [
        {"id": "notes", "type": "deploy_env", "env_id": "notes"},
        {"id": "echo", "type": "deploy_agent", "a2a_agent_id": "echo", "agent_name": "echoer", "env_ids": ["notes"]},
        {"id": "ask", "type": "prompt_agent", "agent_name": "echoer", "prompt": "hi", "prompt_id": "greet",
         "timeout_seconds": 60},
        {"id": "save", "type": "snapshot_agent_state", "agent_name": "echoer", "prompt_id": "greet",
         "artifact_id": "after-hi"},
        {"id": "clear", "type": "reset_env", "env_id": "notes"},
        {"id": "snap", "type": "snapshot_env", "env_id": "notes", "snapshot_id": "s1"},
        {"id": "card", "type": "verify_env_card", "env_id": "notes"},
        {"id": "protocol", "type": "verify_a2a_core_protocol", "a2a_agent_id": "echo", "prompt_id": "greet"},
    ]  # fmt: skip
    path = bundle / "tasks" / "named.json"
    path.write_text(json.dumps(steps))
    task = load_task(path)
    config = {s.id: s.config for s in task.steps}
    assert config["echo"] == {"agent": "echo", "as": "echoer", "env": "notes"}
    assert config["ask"] == {"agent": "echo", "prompt": "hi", "prompt_id": "greet", "turn_deadline": 60}
    assert config["save"] == {"agent": "echo", "prompt": "ask", "artifact_id": "after-hi"}
    assert config["clear"] == {"env": "notes"}
    assert config["snap"] == {"env": "notes", "snapshot_id": "s1"}
    assert config["card"] == {"env": "notes"}
    assert config["protocol"] == {"a2a_agent": "echo", "prompt_step": "ask"}
    planned = {s.id: s for s in plan(task, "r-1", settings).steps}
    assert planned["ask"].config["deployed"] == "${steps.echo.outputs}"
    assert planned["card"].config["deployed"] == "${steps.notes.outputs}"
    assert planned["protocol"].config["agent_deployed"] == "${steps.echo.outputs}"
    assert planned["protocol"].config["prompt_outputs"] == "${steps.ask.outputs}"


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        (
            [{"id": "s", "type": "reset_env", "env_id": "mail"}],
            "steps[0] (id 's').env_id: step 's': env_id 'mail' names no deploy_env step of task 't'",
        ),
        (
            [{"id": "n", "type": "deploy_env", "env_id": "notes"}, {"id": "s", "type": "reset_env", "env_id": "notes",
              "env": "n"}],
            "steps[1] (id 's').env_id: give 'env_id' or 'env', not both",
        ),
        (
            [{"id": "s", "type": "deploy_agent", "a2a_agent_id": "echo", "env_ids": ["a", "b"]}],
            "steps[0] (id 's').env_ids: env_ids names ['a', 'b']; an agent here works in one env",
        ),
        (
            [{"id": "s", "type": "prompt_agent", "agent": "a", "prompt": "hi", "harness": "claude_code"}],
            "steps[0] (id 's').harness: the framework's field 'harness' is not supported here: an agent's harness is",
        ),
    ],
)  # fmt: skip
def test_a_framework_name_that_names_nothing_is_reported_at_its_field(tmp_path, steps, expected):
    (tmp_path / "tasks").mkdir()
    path = tmp_path / "tasks" / "t.json"
    path.write_text(json.dumps(steps))
    with pytest.raises(BadInput) as e:
        load_task(path)
    assert expected in e.value.problem


async def test_the_table_is_the_installed_frameworks(framework_python, tmp_path):  # noqa: F811 - the fixture
    """The framework our side venv pins still has the fields the table says (regenerate it with FIELDS_SCRIPT)."""
    output = await run_to_end(framework_python, tmp_path, "fields", FIELDS_SCRIPT)
    assert json.loads(output) == {k: v for k, v in TABLE.items() if k != "_note"}
