"""Task specs: what is accepted, and that every rejection names the field and the fix."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from jsonschema.validators import validator_for  # type: ignore[import-untyped]

from agent_env.agents.conversation import PromptAgentConfig
from agent_env.errors import BadInput
from agent_env.planning.schema import task_schema
from agent_env.planning.tasks import load_task, parse_task
from agent_env.task_lookup import resolve_target


def task(*steps, **extra):
    return {"id": "t", "steps": list(steps), **extra}


def step(id, type="echo", **kw):
    return {"id": id, "type": type, **kw}


def problems(data) -> str:
    with pytest.raises(BadInput) as e:
        parse_task(data, "task.toml")
    return str(e.value)


def test_hello_loads_with_its_dag():
    spec = resolve_target("hello")
    assert spec.id == "hello"
    assert [s.id for s in spec.steps] == ["notes", "greet_ada", "greet_alan", "verify"]
    assert spec.step("verify").depends_on == ["greet_ada", "greet_alan"]
    assert spec.step("greet_ada").depends_on == ["notes"] and spec.step("greet_alan").depends_on == ["notes"]
    assert spec.step("verify").type == "check_state"


def test_defaults_and_durations():
    spec = parse_task(task(step("a", timeout="1m30s", retries=0), step("b", timeout=2.5)), "x")
    assert spec.version == "1"
    assert spec.steps[0].timeout == timedelta(seconds=90)
    assert spec.steps[0].retries == 0
    assert spec.steps[1].timeout == timedelta(seconds=2.5)
    assert spec.steps[0].on_failure == "fail"


def test_a_bad_shape_and_a_bad_step_type_are_reported_together():
    """The shape is checked by the spec, step types by planning: one look still shows both."""
    msg = problems({"id": "bad id", "steps": [step("a", type="chek")]})
    assert "2 problems" in msg and "id:" in msg and "unknown step type 'chek'" in msg
    msg = problems(task(step("a", type="chek"), step("b", depends_on=["zz"])))
    assert "2 problems" in msg and "'zz' is not a step" in msg and "unknown step type 'chek'" in msg


def test_unknown_step_type_suggests_the_close_one():
    msg = problems(task(step("a", type="chek")))
    assert "step 'a'.type" in msg
    assert "unknown step type 'chek'" in msg
    assert "did you mean 'check'" in msg
    assert "agent_env.task_steps" in msg


def test_cycle_is_reported_as_a_path():
    msg = problems(task(step("a", depends_on=["c"]), step("b", depends_on=["a"]), step("c", depends_on=["b"])))
    assert "dependency cycle" in msg
    assert "a → c → b → a" in msg
    assert "remove one of these depends_on entries" in msg


def test_self_dependency():
    assert "depends on itself" in problems(task(step("a", depends_on=["a"])))


def test_dangling_dependency_names_known_steps():
    msg = problems(task(step("fetch"), step("b", depends_on=["fetc"])))
    assert "step 'b'.depends_on" in msg
    assert "'fetc' is not a step of this task" in msg
    assert "did you mean 'fetch'" in msg


def test_duplicate_ids():
    msg = problems(task(step("a"), step("a")))
    assert "duplicate step id 'a' (also steps[0])" in msg


def test_wrong_types_and_unknown_fields_name_the_field():
    msg = problems(task(step("a", retries="many", colour="red")))
    assert "step 'a'.retries" in msg and "integer" in msg
    assert "step 'a'.colour: unknown field" in msg


def test_missing_fields_and_empty_steps():
    assert "steps: required field is missing" in problems({"id": "t"})
    assert "steps" in problems({"id": "t", "steps": []})
    assert "id" in problems({"steps": [step("a")]})


def test_bad_ids_and_durations():
    assert "step 'has space'" in problems(task(step("has space")))
    msg = problems(task(step("a", timeout="soon")))
    assert "'soon' is not a duration" in msg and "'30s'" in msg


def test_step_config_is_checked_against_its_type():
    msg = problems(task(step("v", type="check", config={"checks": [{"name": "x", "value": 1}]})))
    assert "step 'v'.config.checks[0]" in msg
    assert "exactly one operator" in msg
    msg = problems(
        task(step("e", type="deploy_env"), step("w", type="call_tool", depends_on=["e"], config={"env": "e"}))
    )
    assert "step 'w'.config.tool: required field is missing" in msg
    msg = problems(task(step("s", type="sleep", config={"seconds": 1, "sconds": 2})))
    assert "step 's'.config.sconds: unknown field" in msg


def test_templated_values_are_checked_when_they_resolve():
    spec = parse_task(
        task(
            step("a"),
            step("s", type="sleep", depends_on=["a"], config={"seconds": "${steps.a.outputs.value}"}),
        ),
        "x",
    )
    assert spec.step("s").config["seconds"] == "${steps.a.outputs.value}"


def test_references_must_point_upstream():
    msg = problems(task(step("a"), step("b", config={"value": "${steps.a.outputs.value}"})))
    assert "does not depend on it" in msg and "add 'a' to depends_on" in msg
    msg = problems(task(step("a"), step("b", depends_on=["a"], config={"value": "${steps.z.outputs.v}"})))
    assert "steps.z, which is not a step" in msg
    # transitive dependencies are fine
    parse_task(
        task(
            step("a"),
            step("b", depends_on=["a"]),
            step("c", depends_on=["b"], config={"value": "${steps.a.outputs.value}"}),
        ),
        "x",
    )


def test_all_problems_are_reported_at_once():
    msg = problems(task(step("a", depends_on=["x"]), step("b", depends_on=["y"])))
    assert "2 problems" in msg and "'x'" in msg and "'y'" in msg


def test_broken_plugin_is_named():
    msg = problems(task(step("a", type="broken")))
    assert "step type 'broken' could not be loaded" in msg and "agentenv_teststeps_missing" in msg


def test_malformed_toml_points_at_the_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('id = "t"\n[[steps]]\nid = "a\ntype = "echo"\n')
    with pytest.raises(BadInput) as e:
        load_task(path)
    assert "not valid TOML" in str(e.value) and "line 3" in str(e.value)


def test_task_file_errors(tmp_path):
    with pytest.raises(BadInput, match="no task file"):
        load_task(tmp_path / "missing.toml")
    (tmp_path / "t.yaml").write_text("id: t")
    with pytest.raises(BadInput, match="task files are TOML"):
        load_task(tmp_path / "t.yaml")
    with pytest.raises(BadInput, match="is not a built-in bundle"):
        resolve_target("no-such-bundle")


def test_bundle_with_several_tasks_needs_a_choice(tmp_path):
    (tmp_path / "tasks").mkdir()
    for name in ("one", "two"):
        (tmp_path / "tasks" / f"{name}.toml").write_text(f'id = "{name}"\n[[steps]]\nid = "a"\ntype = "echo"\n')
    with pytest.raises(BadInput, match="choose one with --task"):
        resolve_target(str(tmp_path))
    assert resolve_target(str(tmp_path), "two").id == "two"
    (tmp_path / "tasks" / f"{tmp_path.name}.toml").write_text('id = "main"\n[[steps]]\nid = "a"\ntype = "echo"\n')
    assert resolve_target(str(tmp_path)).id == "main", "the task named like its bundle is the default"


def test_json_schema_documents_every_step_type():
    schema = task_schema()
    json.dumps(schema)
    step_def = schema["$defs"]["StepSpec"]
    assert {"check", "sleep", "deploy_env", "call_tool", "echo"} <= set(step_def["properties"]["type"]["enum"])
    check_rule = next(r for r in step_def["allOf"] if r["if"]["properties"]["type"]["const"] == "check")
    ref = check_rule["then"]["properties"]["config"]["$ref"].split("/")[-1]
    assert "checks" in schema["$defs"][ref]["properties"]


@pytest.mark.parametrize(
    "config, valid",
    [
        ({"agent": "a", "prompt": "hi"}, True),
        ({"agent": "a", "parts": [{"kind": "text", "text": "hi"}]}, True),
        ({"agent": "a"}, False),
        ({"agent": "a", "prompt": "hi", "parts": [{"kind": "text", "text": "hi"}]}, False),
    ],
)
def test_the_schema_takes_a_prompt_agent_message_as_prompt_or_parts(config, valid):
    schema = task_schema()
    task = {"id": "t", "steps": [{"id": "ask", "type": "prompt_agent", "config": config}]}
    errors = list(validator_for(schema)(schema).iter_errors(task))
    assert (not errors) is valid, [e.message for e in errors]
    if valid:  # and the step's config model agrees
        assert PromptAgentConfig.model_validate(config).prompt == "hi"
    else:
        with pytest.raises(ValueError, match="`prompt`"):
            PromptAgentConfig.model_validate(config)
