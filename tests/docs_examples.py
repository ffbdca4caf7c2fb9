"""The docs' examples, read from docs/**/*.md: every fenced code block, with the directive before it.

The convention (tests/test_docs_examples.py runs it):

- ```bash runs with `bash -eo pipefail -c`, ```python as a script; both must exit 0 (a bash block: its `exit=N`).
- ```toml / ```json holding a whole task (a top-level `steps`; for JSON also the framework's list of steps) is run
  with `agent-env run FILE` and must pass.
- ```text (and ```layers, the layer map of docs/architecture.md that tests/test_architecture.py reads) never run.
- Any other language needs `file=` or `skip=`; `sh`, `shell` and `console` are refused (write bash or text).
- A `file=PATH` block must be used by a later one: named by its file name, its module name (`shelf:Shelf`) or
  a folder it is in (`agent-env run desk`, for a file of the bundle folder desk/).
- A directive is an HTML comment on the line right before the opening fence:
  `<!-- example: KEY[=VALUE] KEY... -->` with the keys below; values may be quoted; `expect` may be repeated.

Everything a page gets wrong is a `DocsError` naming the page and the line.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
STUB = "<!-- stub: to be written -->"

VALUE_KEYS = {"file", "needs", "exit", "expect", "ready", "check", "skip"}
FLAG_KEYS = {"background"}
CHECK_KINDS = ("task", "step", "env", "agent", "config")
NEEDS = ("docker",)
NEVER_RUN = {"text", "layers"}  # `layers`: docs/architecture.md's layer map, read by tests/test_architecture.py
REFUSED = {"sh", "shell", "console", "shell-session", "zsh"}
DATA_LANGUAGES = {"toml", "json"}
SHELL_KEYS = {"exit", "expect", "background", "ready"}

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
DIRECTIVE = re.compile(r"^\s*<!--\s*example:(?P<body>.*?)-->\s*$")
DIRECTIVE_START = re.compile(r"^\s*<!--\s*example\b")


class DocsError(Exception):
    """A page breaks the convention: `page:line: problem`."""

    def __init__(self, page: str, line: int, problem: str) -> None:
        super().__init__(f"docs/{page}:{line}: {problem}")
        self.page, self.line, self.problem = page, line, problem


@dataclass
class Directive:
    file: str | None = None
    needs: str | None = None
    exit: int | None = None
    expect: list[str] = field(default_factory=list)
    background: bool = False
    ready: str | None = None
    check: str | None = None
    skip: str | None = None
    keys: set[str] = field(default_factory=set)  # the keys given


@dataclass
class Block:
    page: str  # relative to docs/, with `/`
    line: int  # the opening fence's line (1-based)
    lang: str
    text: str
    directive: Directive
    action: str = ""  # text | bash | python | task | check | file | skip
    data: Any = None  # a toml/json block's parsed content (task, check)

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def parse_directive(body: str, page: str, line: int) -> Directive:
    """The keys of `<!-- example: ... -->` (`body`: what is between `example:` and `-->`)."""
    try:
        words = shlex.split(body)
    except ValueError as e:
        raise DocsError(page, line, f'the example directive cannot be read ({e}): quote values as KEY="..."') from None
    d = Directive()
    for word in words:
        key, eq, value = word.partition("=")
        if key not in VALUE_KEYS | FLAG_KEYS:
            known = ", ".join(sorted(VALUE_KEYS | FLAG_KEYS))
            raise DocsError(page, line, f"unknown example directive key {key!r} (known: {known})")
        if key in FLAG_KEYS and eq:
            raise DocsError(page, line, f"`{key}` takes no value")
        if key in VALUE_KEYS and not eq:
            raise DocsError(page, line, f"`{key}` needs a value: {key}=...")
        if key in d.keys and key != "expect":
            raise DocsError(page, line, f"`{key}` is given twice (only `expect` may repeat)")
        d.keys.add(key)
        if key == "background":
            d.background = True
        elif key == "expect":
            if not value:
                raise DocsError(page, line, 'expect="" checks nothing: give the text the output must contain')
            d.expect.append(value)
        elif key == "exit":
            if not re.fullmatch(r"\d{1,3}", value):
                raise DocsError(page, line, f"exit={value!r}: give the expected exit code as a number")
            d.exit = int(value)
        elif key == "skip":
            if not value.strip():
                raise DocsError(page, line, 'skip needs a reason: skip="WHY"')
            d.skip = value
        elif key == "needs":
            if value not in NEEDS:
                raise DocsError(page, line, f"needs={value!r}: known capabilities: {', '.join(NEEDS)}")
            d.needs = value
        elif key == "check":
            if value not in CHECK_KINDS:
                raise DocsError(page, line, f"check={value!r}: give one of {', '.join(CHECK_KINDS)}")
            d.check = value
        elif key == "file":
            path = PurePosixPath(value)
            if not value.strip() or path.is_absolute() or ".." in path.parts or value.startswith("~"):
                raise DocsError(page, line, f"file={value!r}: give a relative path inside the page's folder, no '..'")
            d.file = value
        elif key == "ready":
            if not re.match(r"https?://", value):
                raise DocsError(page, line, f"ready={value!r}: give the http(s) URL that answers once it is up")
            d.ready = value
    if d.ready and not d.background:
        raise DocsError(page, line, "ready= waits for a background block: add `background`")
    return d


def _language(info: str) -> str:
    """The language of a fence's info string: `python title="x"` and `{ .python }` both give python."""
    info = info.strip()
    if info.startswith("{"):
        m = re.search(r"\.([\w+-]+)", info)
        return m.group(1).lower() if m else ""
    return info.split()[0].lower() if info else ""


def _load_data(lang: str, text: str) -> Any:
    return tomllib.loads(text) if lang == "toml" else json.loads(text)


def _is_task(lang: str, data: Any) -> bool:
    if isinstance(data, dict):
        return "steps" in data
    # the framework's JSON task: a list of steps
    return lang == "json" and isinstance(data, list) and bool(data) and all(isinstance(s, dict) for s in data)


def _classify(block: Block) -> None:
    d, lang, page, line = block.directive, block.lang, block.page, block.line
    if lang in REFUSED:
        raise DocsError(page, line, f"```{lang} block: write ```bash for a command to run, ```text for output")
    if not lang:
        raise DocsError(page, line, "a fence without a language: ```bash or ```python to run, ```text for output")
    if d.check and lang not in DATA_LANGUAGES:
        raise DocsError(page, line, f"check= validates toml or json, not ```{lang}")
    if d.check in {"env", "agent", "config"} and lang != "toml":
        raise DocsError(page, line, f"check={d.check} validates TOML (the file it stands for is TOML), not ```{lang}")
    if d.background and lang != "bash":
        raise DocsError(page, line, "`background` starts a ```bash block")
    if d.background and (d.expect or d.exit is not None):
        raise DocsError(page, line, "a background block is stopped, not awaited: exit= and expect= do not apply")
    if d.needs and not (lang in {"bash", "python"} or (lang in DATA_LANGUAGES and not d.check and not d.file)):
        raise DocsError(page, line, "needs= applies to a block that runs")
    shell_keys = d.keys & SHELL_KEYS
    if d.skip:
        block.action = "skip"
        return
    if lang in NEVER_RUN:
        if d.keys - {"file"}:
            raise DocsError(page, line, f"```{lang} is never run: {', '.join(sorted(d.keys))} does not apply")
        block.action = "file" if d.file else "text"
        return
    if d.check or (lang in DATA_LANGUAGES and not d.file):
        try:
            block.data = _load_data(lang, block.text)
        except (tomllib.TOMLDecodeError, ValueError) as e:
            raise DocsError(page, line, f"the ```{lang} block is not valid {lang.upper()}: {e}") from None
    if d.check:
        if shell_keys:
            raise DocsError(
                page, line, f"check= validates, it runs nothing: {', '.join(sorted(shell_keys))} does not apply"
            )
        block.action = "check"  # and written too, with file=
        return
    if d.file:
        if shell_keys:
            raise DocsError(
                page, line, f"file= writes, it runs nothing: {', '.join(sorted(shell_keys))} does not apply"
            )
        block.action = "file"
        return
    if lang == "bash":
        block.action = "bash"
    elif lang == "python":
        block.action = "python"
    elif lang in DATA_LANGUAGES and _is_task(lang, block.data):
        block.action = "task"
    elif lang in DATA_LANGUAGES:
        raise DocsError(
            page,
            line,
            f'a ```{lang} block that is not a whole task (no top-level `steps`) needs check=KIND, file=PATH or skip="WHY"',
        )
    else:
        raise DocsError(
            page, line, f'```{lang} cannot be run: give it file=PATH (and use it in a later block) or skip="WHY"'
        )
    if lang != "bash" and d.keys & {"exit", "background", "ready"}:
        raise DocsError(page, line, f"exit, background and ready apply to ```bash blocks, not ```{lang}")


def parse_page(text: str, page: str) -> list[Block]:
    """The page's fenced blocks in order, each classified (`page`: its path under docs/, for errors)."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: tuple[int, Directive] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        number = i + 1
        m = FENCE.match(line)
        if m:
            directive = Directive()
            if pending is not None:
                if pending[0] == number - 1:
                    directive = pending[1]
                pending = None
            indent, fence = m.group("indent"), m.group("fence")
            if fence[0] == "`" and "`" in m.group("info"):
                i += 1  # inline code that starts a line, not a fence (CommonMark)
                continue
            body: list[str] = []
            i += 1
            while i < len(lines):
                close = re.match(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", lines[i])
                if close:
                    break
                body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip())
                i += 1
            else:
                raise DocsError(page, number, f"the fence {fence} opened here is never closed")
            block = Block(page, number, _language(m.group("info")), "\n".join(body) + "\n", directive)
            _classify(block)
            blocks.append(block)
            i += 1
            continue
        if pending is not None:
            raise DocsError(page, pending[0], "an example directive must be on the line right before a fence")
        d = DIRECTIVE.match(line)
        if d:
            pending = (number, parse_directive(d.group("body"), page, number))
        elif DIRECTIVE_START.search(line):
            raise DocsError(page, number, "write an example directive on one line: <!-- example: KEY=VALUE ... -->")
        i += 1
    if pending is not None:
        raise DocsError(page, pending[0], "an example directive must be on the line right before a fence")
    _check_files_used(blocks)
    return blocks


def _used_by(path: str, text: str) -> bool:
    """Does a later block's text use the written file: name it (`task.toml`), name its module (`shelf:Shelf` for
    shelf.py), or name a folder it is in (`agent-env run desk` for desk/envs/notes/env.toml: a bundle uses its
    files)?"""
    p = PurePosixPath(path)
    words = {p.name, p.stem, *p.parent.parts} - {"", "."}
    return any(re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) for word in words)


def _check_files_used(blocks: list[Block]) -> None:
    for n, block in enumerate(blocks):
        path = block.directive.file
        if path and block.action != "skip" and not any(_used_by(path, later.text) for later in blocks[n + 1 :]):
            raise DocsError(
                block.page,
                block.line,
                f"file={path} is written but never used: no later block names it, its module or a folder it is in",
            )


def pages() -> list[str]:
    """Every page under docs/, as its path there."""
    return sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


def read_page(page: str) -> list[Block]:
    return parse_page((DOCS / page).read_text(), page)


def runs_something(page: str) -> bool:
    """Does the page have a block that runs a process (it needs the session's Temporal server then)? A page that
    does not parse counts as one: its test fails with the reason."""
    try:
        return any(b.action in {"bash", "python", "task"} for b in read_page(page))
    except DocsError:
        return True


def stub_pages() -> int:
    """Pages still waiting to be written (the ratchet's `docs_stub_pages`)."""
    return sum(STUB in (DOCS / page).read_text() for page in pages())


def skipped_examples() -> int:
    """`skip=` directives over all pages (the ratchet's `docs_examples_skipped`); in a page that does not parse,
    the directive lines that say skip= (its own test fails meanwhile)."""
    count = 0
    for page in pages():
        try:
            count += sum(1 for b in read_page(page) if b.directive.skip)
        except DocsError:
            lines = (DOCS / page).read_text().splitlines()
            count += sum(1 for line in lines if (m := DIRECTIVE.match(line)) and re.search(r"(^|\s)skip=", m["body"]))
    return count
