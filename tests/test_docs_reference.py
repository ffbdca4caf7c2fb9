"""The generated reference pages (scripts/docs-reference): docs/reference/cli.md and docs/reference/steps.md are what
the code makes now, name every command and every built-in step type, and read the same on any machine; the
generator renders any typer app (a flag added to one shows up) and each step's example validates as one step."""

from __future__ import annotations

import difflib
import importlib.machinery
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from enum import Enum
from pathlib import Path
from typing import Annotated

import pytest
import typer

from agent_env.planning.tasks import step_type_problems
from agent_env.spec.task import StepSpec
from agent_env.step_types import BUILTINS, FAMILIES, PLUGINS, family_of

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "docs-reference"


def generator():
    loader = importlib.machinery.SourceFileLoader("docs_reference", str(SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["docs/reference/cli.md", "docs/reference/steps.md"])
def test_the_generated_page_is_what_the_code_makes(page):
    script = generator()
    checked_in, made = (ROOT / page).read_text(), script.PAGES[page]()
    diff = "".join(difflib.unified_diff(checked_in.splitlines(True), made.splitlines(True), "checked in", "made"))
    assert made == checked_in, f"{page} is out of date (generated from the code): run {script.FIX}\n{diff[:4000]}"


def _commands(group: typer.Typer, path: str) -> list[str]:
    """Every visible command path of a typer app, read from its registrations (not through the generator)."""
    out = [path]
    for command in group.registered_commands:
        if not command.hidden:
            out.append(f"{path} {command.name or command.callback.__name__.replace('_', '-')}")
    for sub in group.registered_groups:
        if not sub.hidden:
            out += _commands(sub.typer_instance, f"{path} {sub.name}")
    return out


def test_every_command_of_the_app_has_its_section_and_an_entry_in_the_contents():
    from agent_env.cli.commands import app

    page = (ROOT / "docs/reference/cli.md").read_text()
    headings = set(re.findall(r"^#{2,6} (agent-env.*)$", page, re.M))
    commands = _commands(app, "agent-env")
    assert len(commands) > 70 and {"agent-env run", "agent-env runs show", "agent-env steps list"} <= set(commands)
    assert sorted(set(commands) - headings) == []
    assert sorted(headings - set(commands)) == []
    for command in commands:
        assert f"- [{command}](#{command.replace(' ', '-')})" in page
    # the app's order, and what each shows
    assert page.index("## agent-env run\n") < page.index("## agent-env up\n") < page.index("## agent-env runs\n")
    run = page.split("## agent-env run\n")[1].split("\n## ")[0]
    assert "```text\nagent-env run [OPTIONS] [target]\n```" in run
    assert "| `--max-concurrency` | `int (1<=x<=64)` | `4` | An eval's runs at a time. |" in run
    serve = page.split("### agent-env env serve\n")[1].split("\n### ")[0]
    assert "| `--port` | `int` | `18765` | `MCP_PORT` | Port to bind. |" in serve


class Colour(Enum):
    RED = "red"
    BLUE = "blue"


def tiny_app() -> typer.Typer:
    """A throwaway app with one of each thing the generator renders."""
    app = typer.Typer(help="A tiny tool.", add_completion=False)
    things = typer.Typer(help="Things and *their* <parts>.")
    app.add_typer(things, name="things")
    home_cache = Path.home() / ".cache" / "tiny"

    @things.command("polish")
    def polish(
        name: Annotated[str, typer.Argument(help="Which thing.")],
        shiny: Annotated[bool, typer.Option("--shiny", "-s", help="Make it shine | sparkle.")] = False,
        colour: Annotated[Colour, typer.Option(help="Its colour.")] = Colour.BLUE,
        cache: Annotated[Path, typer.Option(help="Where it keeps things.", envvar="TINY_CACHE")] = home_cache,
        times: Annotated[int, typer.Option(min=1, max=9, help="How often.")] = 3,
        secret: Annotated[str, typer.Option(hidden=True)] = "",
    ) -> None:
        """Polish a thing.

        It shines after.
        """

    @things.command("forget", hidden=True)
    def forget() -> None:
        """Never shown."""

    return app


def test_a_flag_added_to_any_typer_app_shows_up_with_its_type_default_and_help(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "someone"))
    page = generator().cli_markdown(tiny_app(), "tiny", title="Tiny")
    assert page.startswith("# Tiny\n")
    assert (
        "- [tiny](#tiny)\n    - [tiny things](#tiny-things)\n        - [tiny things polish](#tiny-things-polish)"
        in page
    )
    assert "### tiny things polish\n\nPolish a thing.\n\nIt shines after.\n" in page
    assert "```text\ntiny things polish [OPTIONS] {name}\n```" in page
    assert "| `name` | `str` | required | Which thing. |" in page
    assert "| `--shiny`, `-s` | flag |  |  | Make it shine \\| sparkle. |" in page
    assert "| `--colour` | `red|blue` | `blue` |  | Its colour. |" in page
    assert "| `--times` | `int (1<=x<=9)` | `3` |  | How often. |" in page
    # a default made from this machine's home folder is written as ~, with the variable that sets it
    assert "| `--cache` | `path` | `~/.cache/tiny` | `TINY_CACHE` | Where it keeps things. |" in page
    assert str(tmp_path) not in page
    assert "forget" not in page and "--secret" not in page  # hidden
    assert "Things and \\*their\\* &lt;parts>." in page  # Markdown's markup escaped
    assert "| [polish](#tiny-things-polish) | Polish a thing. |" in page


def test_a_default_from_the_environment_is_written_as_the_variable(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("AGENT_ENV_TINY_STATE", str(state))
    app = typer.Typer(add_completion=False)

    @app.command()
    def keep(where: Annotated[Path, typer.Option(help="Where.")] = state / "kept") -> None:
        """Keep it."""

    page = generator().cli_markdown(app, "tiny")
    assert "| `--where` | `path` | `$AGENT_ENV_TINY_STATE/kept` | Where. |" in page
    assert str(tmp_path) not in page


@pytest.mark.processes
def test_the_pages_do_not_depend_on_the_machine(tmp_path):
    """Another home, working folder, terminal width and variables: the same pages (`--check` passes)."""
    env = {**os.environ, "HOME": str(tmp_path), "COLUMNS": "37", "LINES": "5", "TERM": "dumb", "NO_COLOR": "1"}
    env["AGENT_ENV_STATE_DIR"] = str(tmp_path / "state")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.processes
def test_check_names_the_stale_page_and_the_fix(tmp_path):
    """`--check` on a checkout whose page is stale: exit 1, naming the page and the command that fixes it."""
    script = tmp_path / "scripts" / "docs-reference"
    script.parent.mkdir()
    script.write_text(SCRIPT.read_text())
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    (tmp_path / "docs" / "reference" / "cli.md").write_text("# CLI\n\nold\n")
    (tmp_path / "docs" / "reference" / "steps.md").write_text(generator().steps_page())
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "docs/reference/cli.md" in done.stderr and "steps.md" not in done.stderr
    assert "run scripts/docs-reference" in done.stderr


def step_examples(page: str) -> dict[str, str]:
    """The page's `check=step` examples, by the step type each shows."""
    blocks = re.findall(r"^<!-- example: check=step -->\n```toml\n(.*?)\n```$", page, re.M | re.S)
    return {tomllib.loads(block)["type"]: block for block in blocks}


def test_every_built_in_step_type_has_its_section_under_its_family():
    page = (ROOT / "docs/reference/steps.md").read_text()
    assert sorted(n for names in FAMILIES.values() for n in names) == sorted(BUILTINS)  # each in one family
    assert len(BUILTINS) == 63  # the framework's 49 and our 14
    sections = re.findall(r"^(##|###) (.+)$", page, re.M)
    family = None
    for level, title in sections:
        if level == "##":
            family = title.lower()
        else:
            assert family_of(title) == family, title
    assert [t for level, t in sections if level == "###"] == [n for names in FAMILIES.values() for n in names]
    prompt = page.split("### prompt_agent\n")[1].split("\n### ")[0]
    assert "| `agent` | `str` | required | the deploy_agent step of the agent to prompt |" in prompt
    assert "| `turn_deadline` | `timedelta` | `5m` | how long one answer may take |" in prompt


def test_every_step_example_validates_as_one_step():
    """What the docs' example runner does with a check=step fragment: a step ({id, type, config}) whose config its
    type's model takes. The same examples `agent-env steps show` prints."""
    examples = step_examples((ROOT / "docs/reference/steps.md").read_text())
    assert sorted(examples) == sorted(BUILTINS)
    for name, block in examples.items():
        step = StepSpec.model_validate(tomllib.loads(block))
        assert step_type_problems(step, {"bundle": None}) == [], f"{name}'s example does not validate:\n{block}"


def test_steps_list_groups_by_the_same_families():
    from agent_env.cli.steps_cmd import by_family

    grouped = by_family(["zeta_plugin", "check", "deploy_env", "alpha_plugin", "sleep"])
    assert list(grouped.items()) == [
        ("environments", ["deploy_env"]),
        ("grading", ["check"]),
        ("flow", ["sleep"]),
        (PLUGINS, ["alpha_plugin", "zeta_plugin"]),
    ]
