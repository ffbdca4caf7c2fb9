"""docs/reference/troubleshooting.md lists the errors the code raises (scripts/docs-troubleshooting writes it), and
every family of them has a cause written in scripts/troubleshooting_causes.toml."""

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SCRIPT = ROOT / "scripts" / "docs-troubleshooting"


@pytest.fixture(scope="module")
def gen():
    loader = importlib.machinery.SourceFileLoader("docs_troubleshooting", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # (its dataclasses look their module up)
    loader.exec_module(module)
    yield module
    del sys.modules[loader.name]


@pytest.fixture(scope="module")
def raised(gen):
    return gen.collect()


def test_every_family_has_a_cause(gen, raised):
    wrong = gen.problems(raised, gen.Causes.read())
    assert not wrong, "\n".join(wrong)


def test_the_page_is_current(gen, raised):
    current = gen.PAGE.read_text()
    assert gen.MARKER in current
    assert current == gen.page(current, raised, gen.Causes.read()), (
        "docs/reference/troubleshooting.md is stale (the errors the code raises changed): run scripts/docs-troubleshooting"
    )


def test_check_fails_on_a_stale_page_and_says_what_to_run(gen, tmp_path, monkeypatch, capsys):
    stale = tmp_path / "troubleshooting.md"
    stale.write_text(gen.PAGE.read_text().replace("(NotFound; exit 2;", "(NotFound; exit 1;", 1))
    monkeypatch.setattr(gen, "PAGE", stale)
    assert gen.main(["--check"]) == 1
    assert "run scripts/docs-troubleshooting" in capsys.readouterr().err
    assert gen.main([]) == 0  # rewriting it makes it current
    assert gen.main(["--check"]) == 0
    assert stale.read_text() == gen.PAGE.read_text() == (ROOT / "docs" / "reference" / "troubleshooting.md").read_text()


def test_a_family_without_a_cause_is_named(gen, raised):
    causes = gen.Causes.read()
    del causes.families["tasks-lookup"]
    wrong = gen.problems(raised, causes)
    # task_lookup.py's errors fall into a family of their own, which has no cause
    assert any(
        w.startswith("family 'tasks-task-lookup' (agent_env/task_lookup.py) has no written cause") for w in wrong
    )
    causes = gen.Causes.read()
    causes.families["tasks-gone"] = {"title": "Gone", "modules": ["nowhere.py"], "cause": "none"}
    assert "family 'tasks-gone' in scripts/troubleshooting_causes.toml has no errors" in gen.problems(raised, causes)[0]


def test_the_page_is_deterministic_and_names_no_absolute_path(gen, raised):
    causes = gen.Causes.read()
    text = gen.generated(raised, causes)
    assert text == gen.generated(list(reversed(raised)), causes)
    assert str(ROOT) not in text and "/home/" not in text


ERRORS = """
class AgentEnvError(Exception):
    exit_code = 1

    def __init__(self, problem: str, fix: str | None = None) -> None:
        super().__init__(problem)
        self.problem, self.fix = problem, fix


class BadInput(AgentEnvError):
    exit_code = 2


class ServerError(AgentEnvError):
    exit_code = 3


class StepFailed(Exception):
    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
"""

BASE = '''
from agent_env import errors


class Unreachable(errors.ServerError):
    """A subclass in another module, of a class named through its module."""


class Refused(errors.AgentEnvError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Unrelated(ValueError):
    pass
'''

USE = """
from agent_env.errors import BadInput as Bad
from agent_env.steps import StepFailed
from agent_env.things.base import Refused, Unrelated

from . import base


def load(path, plan: PlanContext):
    raise Bad(f"{path!r} is over {len(data) // 1024} KiB; the limit is {LIMIT:,}", fix="make it smaller")


def reach(self):
    problem = f"no answer at {self.url}"
    raise base.Unreachable(problem, "start it with `agent-env " + "server start`")


async def run(ctx: StepContext, config):
    def inner():
        raise StepFailed(f"{config.tool} failed: {e}", retryable=True)

    raise Bad("the step's data is broken", "load it again")


def refuse(name):
    return Refused(404, "no such thing " + name)


def passes_on(e):
    raise Bad(str(e), e.fix)


def not_ours():
    raise Unrelated("not listed")
"""


def test_the_collector_on_a_small_package(gen):
    package = gen.Package(
        {
            "errors.py": ERRORS,
            "steps/__init__.py": "from agent_env.errors import StepFailed\n",
            "things/__init__.py": "",
            "things/base.py": BASE,
            "things/use.py": USE,
        }
    )
    assert sorted(name.rpartition(".")[2] for name in package.family) == [
        "AgentEnvError",
        "BadInput",
        "Refused",
        "ServerError",
        "StepFailed",
        "Unreachable",
    ]
    found = {(r.error, r.problem): r for r in package.raised()}
    assert sorted(found) == [
        ("BadInput", "'{path}' is over … KiB; the limit is {LIMIT}"),
        ("BadInput", "the step's data is broken"),
        ("Refused", "no such thing {name}"),
        ("StepFailed", "{config.tool} failed: {e}"),
        ("Unreachable", "no answer at {url}"),
    ]  # not `Bad(str(e), e.fix)`, which only passes another error on, nor a ValueError
    big = found[("BadInput", "'{path}' is over … KiB; the limit is {LIMIT}")]
    assert (big.module, big.fix, big.exit_code, big.when) == ("things/use.py", "make it smaller", 2, "plan")
    assert gen.outcome(big) == "exit 2, when the run is planned"
    broken = found[("BadInput", "the step's data is broken")]
    assert broken.when == "step" and gen.outcome(broken) == "fails the step after its retries"
    step = found[("StepFailed", "{config.tool} failed: {e}")]
    assert (step.exit_code, step.retryable, step.fix) == (None, True, "")
    assert gen.outcome(step) == "fails the step; retried"
    reach = found[("Unreachable", "no answer at {url}")]
    assert (reach.fix, reach.exit_code, gen.outcome(reach)) == ("start it with `agent-env server start`", 3, "exit 3")
    assert found[("Refused", "no such thing {name}")].exit_code == 1


def test_messages_are_escaped_for_markdown_but_keep_their_code(gen):
    assert gen.inline("run `agent-env x --y`, or set *_FOO in <state_dir>") == (
        "run `agent-env x --y`, or set \\*\\_FOO in &lt;state_dir>"
    )
    assert gen.inline("[gateway] url:\n  is unset") == "\\[gateway] url: is unset"
    assert gen.inline("AGENT_ENV_HOME is a `tick") == "AGENT_ENV_HOME is a \\`tick"
