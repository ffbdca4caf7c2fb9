"""Every example in the docs runs: one test per page of docs/ (`-k environments/clock` picks a page).

A page's fenced blocks run in order in a fresh folder of their own (tests/docs_examples.py reads them and says the
convention): ```bash with `bash -eo pipefail -c`, ```python as a script with this venv's python, a ```toml or
```json task with `agent-env run FILE`; `check=KIND` fragments are validated by the package's own loaders, `file=`
blocks written for later ones. Commands see this venv's `agent-env` and `python` first on PATH and the session's
Temporal dev server, as tests/test_cli.py's `cli()` does (with its task queue: runs CLI processes start are
executed by the background worker, never the session's in-process one). Each block has BLOCK_TIMEOUT seconds; a
`background` block runs in a process group of its own, stopped when the page ends, whatever happened.

A page without a block that runs is still read (its blocks' languages and directives checked) and is a unit test.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docs_examples import Block, DocsError, pages, read_page, runs_something
from test_cli import CLI_QUEUE

BIN = Path(sys.executable).parent
BLOCK_TIMEOUT = 120
READY_TIMEOUT = 60
OUTPUT_TAIL = 60  # lines of a failing block's output shown


def example_env() -> dict[str, str]:
    return {**os.environ, **CLI_QUEUE, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def _tail(output: str) -> str:
    lines = output.rstrip().splitlines()
    cut = len(lines) - OUTPUT_TAIL
    return (f"[... {cut} lines above]\n" if cut > 0 else "") + "\n".join(lines[-OUTPUT_TAIL:])


def _report(block: Block, problem: str, output: str | None = None) -> str:
    text = f"{block.where}: {problem}\n--- the ```{block.lang} block (line {block.line}) ---\n{block.text.rstrip()}"
    if output is not None:
        text += f"\n--- its output (stdout and stderr, the last {OUTPUT_TAIL} lines) ---\n{_tail(output) or '(none)'}"
    return text


def group_members(pgid: int) -> list[int]:
    """The live processes of a process group (zombies waiting for their reaper aside)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(stat.parent.name))
    return members


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the whole group; what is left of it after a grace period gets SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (proc.poll() is None or group_members(proc.pid)):
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def run_command(block: Block, argv: list[str], cwd: Path) -> None:
    """Run one example to its end, in a process group of its own (killed whole on a timeout), and check its exit
    code and output."""
    __tracebackhide__ = True  # the failure says it all: page, line, block and output
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=example_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        output, _ = proc.communicate()
        pytest.fail(_report(block, f"timed out after {BLOCK_TIMEOUT} s (each block has {BLOCK_TIMEOUT} s)", output))
    expected = block.directive.exit or 0
    if proc.returncode != expected:
        pytest.fail(_report(block, f"exited {proc.returncode}, expected {expected}", output))
    for text in block.directive.expect:
        if text not in output:
            pytest.fail(_report(block, f"its output does not contain the expected text {text!r}", output))


def start_background(block: Block, cwd: Path, started: list[tuple[Block, subprocess.Popen, Path]]) -> None:
    __tracebackhide__ = True  # the failure says it all: page, line, block and output
    log = cwd / f".example-{block.line}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["bash", "-eo", "pipefail", "-c", block.text],
            cwd=cwd,
            env=example_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    started.append((block, proc, log))
    url = block.directive.ready
    if not url:
        return
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        if proc.poll() is not None:
            pytest.fail(_report(block, f"ended (exit {proc.returncode}) before {url} answered", log.read_text()))
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answers (a status is an answer)
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(_report(block, f"{url} did not answer within {READY_TIMEOUT} s", log.read_text()))
        time.sleep(0.2)


@contextlib.contextmanager
def background_blocks() -> Iterator[list[tuple[Block, subprocess.Popen, Path]]]:
    started: list[tuple[Block, subprocess.Popen, Path]] = []
    try:
        yield started
    finally:
        for _, proc, _ in reversed(started):
            _kill_group(proc)


# -- check=KIND: the package's own loaders --


def _problems(kind: str, block: Block, folder: Path) -> str | None:
    """What the package's loader for `kind` says of the block (None: it is sound)."""
    from pydantic import ValidationError

    from agent_env.errors import AgentEnvError, from_validation_error

    where = f"{block.where} (check={kind})"
    try:
        _validate(kind, block, folder, where)
    except ValidationError as e:
        return str(from_validation_error(e, where))
    except AgentEnvError as e:
        return str(e)
    return None


def _validate(kind: str, block: Block, folder: Path, where: str) -> None:
    data: Any = block.data
    if kind == "task":
        from agent_env.planning.tasks import load_task

        # where file= writes it, its names resolve in the bundle it is written into (a bundle's tasks/)
        path = folder / (block.directive.file or f".check-{block.line}.{block.lang}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.text)
        load_task(path)
    elif kind == "step":
        _validate_steps(block, where)
    elif kind == "env":
        from agent_env.envs.records import env_record

        env_record(data)
    elif kind == "agent":
        from agent_env.spec.agent import AgentRecord

        # in a bundle, agents/NAME/agent.toml is named by its folder unless it says otherwise
        name = Path(block.directive.file).parent.name if block.directive.file else "example"
        AgentRecord.model_validate({"name": name or "example", **data} if isinstance(data, dict) else data)
    elif kind == "config":
        _validate_config(block, folder)


def _validate_steps(block: Block, where: str) -> None:
    """One step (its table: id, type, config, ...), or `[[steps]]` tables, each checked alone: its type is
    installed and its config fits that type (what other steps it names is the task's business)."""
    from pydantic import ValidationError

    from agent_env.errors import from_validation_error
    from agent_env.planning.tasks import step_type_problems
    from agent_env.spec.json_tasks import json_task
    from agent_env.spec.task import StepSpec

    data = block.data
    raw = data["steps"] if isinstance(data, dict) and "steps" in data else data
    raw = raw if isinstance(raw, list) else [raw]
    if block.lang == "json":  # the framework's flat steps: their config's fields at the top
        raw = json_task(raw, Path(f"{block.page}:{block.line}"))["steps"]
    for n, one in enumerate(raw):
        label = where + (f" step {n + 1}" if len(raw) > 1 else "")
        step = StepSpec.model_validate(one)
        if problems := step_type_problems(step, {"bundle": None}):
            raise from_validation_error(ValidationError.from_exception_data("StepSpec", problems), label)


def _validate_config(block: Block, folder: Path) -> None:
    """As `agent-env` reads .agentenv/config.toml (a project's, found from the folder it runs in), the file alone:
    none of the environment variables that override settings (the session sets some) hides a value of the file."""
    from agent_env.config import ENV_VARIABLES, load_settings

    config = folder / f".check-{block.line}" / ".agentenv" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(block.text)
    with pytest.MonkeyPatch.context() as env:
        for var in ENV_VARIABLES:
            if var.setting and var.name != "AGENT_ENV_HOME":
                env.delenv(var.name, raising=False)
        load_settings(config.parent.parent)


def check_fragment(block: Block, folder: Path) -> None:
    __tracebackhide__ = True  # the failure says it all: page, line, block and output
    assert block.directive.check
    if problems := _problems(block.directive.check, block, folder):
        pytest.fail(_report(block, f"check={block.directive.check} fails:\n{problems}"))


# -- a page --


def write_file(block: Block, folder: Path) -> None:
    assert block.directive.file
    path = folder / block.directive.file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(block.text)


@functools.cache
def docker_problem() -> str | None:
    """Why the Docker tier cannot run here (None: it can), as tests/test_docker.py decides it; imported only by a
    page that needs Docker (the tier's module is slow to import)."""
    from test_docker import BASE_IMAGE, _docker_problem

    problem = _docker_problem()
    return problem and f"a Docker daemon and {BASE_IMAGE} are needed (run scripts/docker-setup): {problem}"


def run_block(block: Block, folder: Path, request: pytest.FixtureRequest, started: list) -> None:
    __tracebackhide__ = True  # the failure says it all: page, line, block and output
    d = block.directive
    if d.needs == "docker" and (problem := docker_problem()):
        message = f"{block.where} needs=docker: {problem}"
        if os.environ.get("AGENT_ENV_REQUIRE_DOCKER"):
            pytest.fail(message + " (AGENT_ENV_REQUIRE_DOCKER is set: the Docker tier must run)")
        pytest.skip(message + "; the page is not run from there on")
    if block.action == "check":
        check_fragment(block, folder)
        if d.file:
            write_file(block, folder)
    elif block.action == "file":
        write_file(block, folder)
    elif block.action == "bash" and d.background:
        start_background(block, folder, started)
    elif block.action == "bash":
        run_command(block, ["bash", "-eo", "pipefail", "-c", block.text], folder)
    elif block.action == "python":
        script = folder / f"example_{block.line}.py"
        script.write_text(block.text)
        run_command(block, [str(BIN / "python"), script.name], folder)
    elif block.action == "task":
        task = folder / f"example_{block.line}.{block.lang}"
        task.write_text(block.text)
        run_command(block, [str(BIN / "agent-env"), "run", task.name], folder)


def _page_params() -> list[Any]:
    return [
        pytest.param(page, id=page, marks=[pytest.mark.processes] if runs_something(page) else []) for page in pages()
    ]


@pytest.mark.parametrize("page", _page_params())
def test_page_examples(page: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    try:
        blocks = read_page(page)
    except DocsError as e:
        pytest.fail(str(e))
    run_page(blocks, tmp_path, request)


def run_page(blocks: list[Block], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    __tracebackhide__ = True
    if any(b.action in {"bash", "python", "task"} for b in blocks):
        request.getfixturevalue("server")  # the session's Temporal dev server, before the first command
    with background_blocks() as started:
        for block in blocks:
            if block.action in {"text", "skip"}:
                continue
            run_block(block, tmp_path, request, started)


# -- the runner on pages of its own (a page here is a string; tmp_path is its folder) --


def _page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, name: str = "t.md") -> list[Block]:
    import docs_examples

    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "docs" / name).write_text(text)
    monkeypatch.setattr(docs_examples, "DOCS", tmp_path / "docs")
    return read_page(name)


def test_a_bad_fragment_fails_naming_the_page_line_and_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    blocks = _page(
        tmp_path,
        monkeypatch,
        '# t\n\n<!-- example: check=step -->\n```toml\nid = "s"\ntype = "sleep"\n[config]\nsecondz = 1\n```\n'
        '<!-- example: check=agent -->\n```toml\nkind = "scripted"\nbogus = 1\n```\n'
        '<!-- example: check=task -->\n```json\n[{"id": "a", "type": "nope"}]\n```\n'
        "<!-- example: check=env -->\n```toml\napps = 3\n```\n"
        '<!-- example: check=config -->\n```toml\n[server]\nport = "many"\n```\n',
    )
    found = [_problems(b.directive.check or "", b, tmp_path) for b in blocks]
    assert all(found), found
    step, agent, task, env, config = (str(f) for f in found)
    assert "docs/t.md:4 (check=step)" in step and "config.secondz: unknown field" in step
    assert "docs/t.md:11" in agent and "bogus" in agent
    assert "unknown step type 'nope'" in task
    assert "docs/t.md:20" in env and "apps" in env
    assert "server.port" in config


def test_sound_fragments_pass_their_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    blocks = _page(
        tmp_path,
        monkeypatch,
        '<!-- example: check=step -->\n```toml\n[[steps]]\nid = "s"\ntype = "sleep"\n[steps.config]\n'
        "seconds = 1\n```\n"
        '<!-- example: check=task -->\n```toml\nid = "t"\n[[steps]]\nid = "s"\ntype = "sleep"\n'
        "[steps.config]\nseconds = 1\n```\n"
        "<!-- example: check=config -->\n```toml\n[server]\nport = 7233\n```\n",
    )
    assert [_problems(b.directive.check or "", b, tmp_path) for b in blocks] == [None, None, None]


@pytest.mark.processes
def test_a_failing_command_shows_page_line_text_exit_code_and_output(tmp_path: Path, monkeypatch):
    (block,) = _page(tmp_path, monkeypatch, "# t\n\n```bash\necho one\necho two >&2\nexit 3\n```\n")
    with pytest.raises(pytest.fail.Exception) as e:
        run_command(block, ["bash", "-eo", "pipefail", "-c", block.text], tmp_path)
    message = str(e.value)
    assert "docs/t.md:3: exited 3, expected 0" in message
    assert "echo two >&2" in message and "one\ntwo" in message


@pytest.mark.processes
def test_expect_and_exit_are_checked(tmp_path: Path, monkeypatch):
    ok, missing = _page(
        tmp_path,
        monkeypatch,
        '<!-- example: exit=2 expect="hello" expect=world -->\n```bash\necho hello world; exit 2\n```\n'
        '<!-- example: expect="absent" -->\n```bash\necho present\n```\n',
    )
    run_command(ok, ["bash", "-c", ok.text], tmp_path)
    with pytest.raises(pytest.fail.Exception, match="does not contain the expected text 'absent'"):
        run_command(missing, ["bash", "-c", missing.text], tmp_path)


@pytest.mark.processes
def test_a_background_block_is_stopped_with_its_group_when_the_page_ends(tmp_path: Path, monkeypatch):
    from conftest import free_port

    port = free_port()
    (block,) = _page(
        tmp_path,
        monkeypatch,
        f"<!-- example: background ready=http://127.0.0.1:{port}/ -->\n```bash\n"
        f"sleep 300 & {sys.executable} -m http.server {port} --bind 127.0.0.1\n```\n",
    )
    with pytest.raises(RuntimeError), background_blocks() as started:
        start_background(block, tmp_path, started)
        ((_, proc, _),) = started
        raise RuntimeError("the page failed")  # the group goes all the same
    assert proc.poll() is not None
    assert group_members(proc.pid) == []  # no process of the group is left (the `sleep 300` neither)


@pytest.mark.processes
def test_a_block_that_runs_too_long_is_named_with_the_timeout(tmp_path: Path, monkeypatch):
    import test_docs_examples

    monkeypatch.setattr(test_docs_examples, "BLOCK_TIMEOUT", 1)
    (block,) = _page(tmp_path, monkeypatch, "```bash\nsleep 30\n```\n")
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="docs/t.md:1: timed out after 1 s"):
        run_command(block, ["bash", "-c", block.text], tmp_path)
    assert time.monotonic() - started < 20


def test_the_fragment_kinds_read_json_too(tmp_path: Path, monkeypatch):
    sound, wrong = _page(
        tmp_path,
        monkeypatch,
        '<!-- example: check=step -->\n```json\n{"id": "s", "type": "sleep", "seconds": 1}\n```\n'
        '<!-- example: check=step -->\n```json\n{"id": "s", "type": "sleep", "secondz": 1}\n```\n',
    )
    assert _problems("step", sound, tmp_path) is None
    assert "secondz: unknown field" in str(_problems("step", wrong, tmp_path))


SLEEP_TASK = 'id = "docs-nap"\n[[steps]]\nid = "nap"\ntype = "sleep"\n[steps.config]\nseconds = 0\n'


def test_a_page_runs_its_blocks_in_order_in_a_folder_of_its_own(tmp_path: Path, monkeypatch, request, server):
    """Every kind of block, end to end against the session's server: written files, commands, a script, tasks."""
    page = (
        f"<!-- example: file=tasks/nap.toml check=task -->\n```toml\n{SLEEP_TASK}```\n"
        '<!-- example: expect="PASSED" expect="docs-nap" -->\n```bash\nagent-env run tasks/nap.toml\necho ran > ran.txt\n```\n'
        "```python\nfrom pathlib import Path\n\nassert Path('ran.txt').read_text() == 'ran\\n'\nprint('python saw it')\n```\n"
        f'<!-- example: expect="nap" -->\n```toml\n{SLEEP_TASK}```\n'
        '```json\n[{"id": "nap", "type": "sleep", "seconds": 0}]\n```\n'
        "```text\nnever run\n```\n"
        '<!-- example: skip="shows what a missing file does" -->\n```bash\ncat absent\n```\n'
    )
    blocks = _page(tmp_path, monkeypatch, page)
    folder = tmp_path / "work"
    folder.mkdir()
    run_page(blocks, folder, request)
    assert (folder / "tasks" / "nap.toml").read_text() == SLEEP_TASK
    assert (folder / "ran.txt").is_file()


def test_a_failing_task_block_fails_its_page(tmp_path: Path, monkeypatch, request, server):
    (block,) = _page(tmp_path, monkeypatch, '```json\n[{"id": "nap", "type": "sleep", "seconds": -1}]\n```\n')
    with pytest.raises(pytest.fail.Exception, match=r"docs/t.md:1: exited 2, expected 0"):
        run_page([block], tmp_path, request)


def test_a_docker_example_runs_only_where_docker_is(tmp_path: Path, monkeypatch, request, server):
    """Without a Docker daemon the page stops at its needs=docker block, skipped naming why (failed, when the Docker
    tier is required); with one, it runs."""
    page = "```bash\ntouch before\n```\n<!-- example: needs=docker -->\n```bash\ntouch during\n```\n"
    blocks = _page(tmp_path, monkeypatch, page)
    folder = tmp_path / "work"
    folder.mkdir()
    if docker_problem() is None:
        run_page(blocks, folder, request)
        assert (folder / "during").is_file()
        return
    required = bool(os.environ.get("AGENT_ENV_REQUIRE_DOCKER"))
    outcome = pytest.fail.Exception if required else pytest.skip.Exception
    with pytest.raises(outcome, match=r"docs/t.md:5 needs=docker: a Docker daemon"):
        run_page(blocks, folder, request)
    assert (folder / "before").is_file() and not (folder / "during").exists()


def test_a_checked_task_written_into_a_bundle_sees_the_bundle(tmp_path: Path, monkeypatch, request):
    """check=task with file=desk/tasks/t.toml is checked where it is written: the env it names is desk's own."""
    env = 'name = "shelf"\n[[apps]]\napp = "notes"\n'
    task = 'id = "t"\n[[steps]]\nid = "shelf"\ntype = "deploy_env"\nconfig = { env_id = "shelf" }\n'
    page = (
        f"<!-- example: file=desk/envs/shelf/env.toml check=env -->\n```toml\n{env}```\n"
        f"<!-- example: file=desk/tasks/t.toml check=task -->\n```toml\n{task}```\n"
        "```text\nagent-env run desk\n```\n"
    )
    blocks = _page(tmp_path, monkeypatch, page)
    folder = tmp_path / "work"
    folder.mkdir()
    run_page(blocks, folder, request)
    alone = _page(tmp_path, monkeypatch, f"<!-- example: check=task -->\n```toml\n{task}```\n", "alone.md")
    assert "no environment 'shelf'" in str(_problems("task", alone[0], folder))
