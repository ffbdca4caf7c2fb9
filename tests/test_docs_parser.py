"""The docs' example reader (tests/docs_examples.py): the convention's directives, and each way a page breaks it,
named with the page and the line."""

from __future__ import annotations

import pytest
from docs_examples import DocsError, parse_page


def blocks(text: str):
    return parse_page(text, "p.md")


def error(text: str) -> str:
    with pytest.raises(DocsError) as e:
        parse_page(text, "p.md")
    return str(e.value)


def test_blocks_in_order_with_their_lines_languages_and_actions():
    page = (
        "# Title\n\n```bash\nagent-env run hello\n```\n\n~~~python\nprint(1)\n~~~\n\n```text\nPASSED\n```\n"
        '```toml\nid = "t"\n[[steps]]\nid = "a"\ntype = "sleep"\n```\n'
        '```json\n[{"id": "a", "type": "sleep"}]\n```\n'
        "```layers\n0 errors\n```\n"
    )
    found = [(b.line, b.lang, b.action) for b in blocks(page)]
    assert found == [
        (3, "bash", "bash"),
        (7, "python", "python"),
        (11, "text", "text"),
        (14, "toml", "task"),
        (20, "json", "task"),
        (23, "layers", "text"),
    ]
    assert blocks(page)[0].text == "agent-env run hello\n"


def test_directive_values_quoted_and_repeated():
    (b,) = blocks("<!-- example: exit=1 expect=\"two words\" expect='x=y' needs=docker -->\n```bash\ntrue\n```\n")
    assert (b.directive.exit, b.directive.expect, b.directive.needs) == (1, ["two words", "x=y"], "docker")
    (b,) = blocks("<!-- example: background ready=http://127.0.0.1:8000/health -->\n```bash\nserve\n```\n")
    assert b.directive.background and b.directive.ready == "http://127.0.0.1:8000/health"
    (b,) = blocks('<!-- example: skip="needs a cloud account" -->\n```bash\nmodal deploy\n```\n')
    assert (b.action, b.directive.skip) == ("skip", "needs a cloud account")


def test_file_check_and_other_languages():
    page = (
        '<!-- example: file=envs/desk/env.toml check=env -->\n```toml\nname = "desk"\n```\n'
        "<!-- example: file=Dockerfile -->\n```dockerfile\nFROM python\n```\n"
        "```bash\nls envs/desk/env.toml Dockerfile\n```\n"
        '<!-- example: check=step -->\n```toml\nid = "a"\n```\n'
    )
    assert [b.action for b in blocks(page)] == ["check", "file", "bash", "check"]


def test_a_written_file_is_used_by_its_name_its_module_or_a_folder_it_is_in():
    def used(path: str, later: str) -> bool:
        page = f"<!-- example: file={path} -->\n```text\nx\n```\n```bash\n{later}\n```\n"
        try:
            blocks(page)
        except DocsError:
            return False
        return True

    assert used("tasks/task.toml", "agent-env run tasks/task.toml")
    assert used("shelf.py", "agent-env env serve shelf:Shelf")
    assert used("desk/envs/notes/env.toml", "agent-env run desk")
    assert not used("desk/envs/notes/env.toml", "agent-env run desktop")
    assert not used("shelf.py", "python bookshelf.py")


def test_indented_fences_in_lists_and_longer_fences():
    page = "1. Run it:\n\n    <!-- example: expect=PASSED -->\n    ```bash\n    agent-env run hello\n    ```\n\n````text\n```bash\nnot a block\n```\n````\n"
    first, second = blocks(page)
    assert (first.lang, first.text, first.directive.expect) == ("bash", "agent-env run hello\n", ["PASSED"])
    assert (second.lang, second.text) == ("text", "```bash\nnot a block\n```\n")


def test_a_directive_in_a_text_block_or_in_prose_is_not_one():
    page = 'Write `<!-- example: skip="WHY" -->` before it.\n\n```text\n<!-- example: bogus -->\n```\n'
    assert [b.action for b in blocks(page)] == ["text"]


@pytest.mark.parametrize(
    ("page", "message"),
    [
        ("<!-- example: frobnicate -->\n```bash\ntrue\n```\n", "p.md:1: unknown example directive key 'frobnicate'"),
        ('<!-- example: skip="" -->\n```bash\ntrue\n```\n', "p.md:1: skip needs a reason"),
        ("<!-- example: skip -->\n```bash\ntrue\n```\n", "p.md:1: `skip` needs a value"),
        ("<!-- example: background=1 -->\n```bash\ntrue\n```\n", "`background` takes no value"),
        ("<!-- example: exit=1 exit=2 -->\n```bash\ntrue\n```\n", "`exit` is given twice"),
        ("<!-- example: exit=x -->\n```bash\ntrue\n```\n", "exit='x'"),
        ("<!-- example: needs=gpu -->\n```bash\ntrue\n```\n", "needs='gpu'"),
        ("<!-- example: check=world -->\n```toml\na = 1\n```\n", "check='world'"),
        ("<!-- example: check=task -->\n```bash\ntrue\n```\n", "check= validates toml or json"),
        ('<!-- example: check=env -->\n```json\n{"name": "x"}\n```\n', "check=env validates TOML"),
        ("<!-- example: file=../x -->\n```toml\na = 1\n```\nx\n", "file='../x'"),
        ("<!-- example: file=/etc/x -->\n```toml\na = 1\n```\nx\n", "file='/etc/x'"),
        ("<!-- example: ready=http://x/ -->\n```bash\ntrue\n```\n", "add `background`"),
        ("<!-- example: background -->\n```python\npass\n```\n", "`background` starts a ```bash block"),
        ("<!-- example: background expect=up -->\n```bash\nserve\n```\n", "stopped, not awaited"),
        ('<!-- example: expect="x -->\n```bash\ntrue\n```\n', "cannot be read"),
        ("<!-- example: exit=1 -->\n\n```bash\ntrue\n```\n", "p.md:1: an example directive must be on the line right"),
        ("text\n<!-- example: exit=1 -->\n", "p.md:2: an example directive must be on the line right"),
        ("<!-- example: exit=1\n-->\n```bash\ntrue\n```\n", "p.md:1: write an example directive on one line"),
        ("# t\n```sh\nls\n```\n", "p.md:2: ```sh block: write ```bash"),
        ("```console\n$ ls\n```\n", "```console block"),
        ("```shell\nls\n```\n", "```shell block"),
        ("```\nls\n```\n", "p.md:1: a fence without a language"),
        ("```yaml\na: 1\n```\n", "p.md:1: ```yaml cannot be run: give it file=PATH"),
        ("```toml\n[server]\nport = 1\n```\n", "p.md:1: a ```toml block that is not a whole task"),
        ("```toml\nid = \n```\n", "p.md:1: the ```toml block is not valid TOML"),
        ('```json\n{"a": 1}\n```\n', "not a whole task"),
        ("<!-- example: file=task.toml -->\n```toml\na = 1\n```\n", "file=task.toml is written but never used"),
        (
            "<!-- example: file=desk/envs/notes/env.toml -->\n```toml\na = 1\n```\n```bash\nls desktop\n```\n",
            "file=desk/envs/notes/env.toml is written but never used",
        ),
        ("<!-- example: file=a.toml expect=x -->\n```toml\na = 1\n```\n```bash\ncat a.toml\n```\n", "file= writes"),
        ("<!-- example: check=agent exit=1 -->\n```toml\na = 1\n```\n", "check= validates, it runs nothing"),
        ("<!-- example: exit=1 -->\n```python\npass\n```\n", "apply to ```bash blocks"),
        ("<!-- example: expect=x -->\n```text\nx\n```\n", "```text is never run"),
        ("```bash\ntrue\n", "p.md:1: the fence ``` opened here is never closed"),
    ],
)
def test_each_broken_convention_names_the_page_and_line(page, message):
    assert message in error(page)


def test_the_ratchet_counts_stub_pages_and_skipped_examples(tmp_path, monkeypatch):
    import docs_examples

    (tmp_path / "a").mkdir()
    (tmp_path / "index.md").write_text("# Home\n\n<!-- stub: to be written -->\n")
    (tmp_path / "a" / "b.md").write_text(
        '<!-- example: skip="needs a cloud" -->\n```bash\nx\n```\n```text\n<!-- example: skip="shown" -->\n```\n'
    )
    (tmp_path / "a" / "broken.md").write_text('<!-- example: skip="why" -->\n```sh\nx\n```\n')  # counted all the same
    monkeypatch.setattr(docs_examples, "DOCS", tmp_path)
    assert docs_examples.pages() == ["a/b.md", "a/broken.md", "index.md"]
    assert (docs_examples.stub_pages(), docs_examples.skipped_examples()) == (1, 2)
