"""`agent-env docs serve`: the user guide as an MCP server.

Ranking, sections and anchors are tested on a small guide made here (so they do not hang on the guide's prose);
the served guide is the real one, reached as a client would: the MCP SDK's client over streamable HTTP and over
stdio (spawning `agent-env docs serve --stdio`), and the official MCP Inspector's CLI (from npm, pinned, installed
once into a cache folder: skipped without npm, naming why, and failing instead in CI).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent_env.docs_server.pages import load_pages, page_path, read_nav, split_sections
from agent_env.docs_server.search import DocsIndex
from agent_env.docs_server.server import find_page, load_index
from agent_env.errors import BadInput, NotFound

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
ROOT = Path(__file__).parent.parent
# The Inspector's newest releases need node >= 22; 0.15.0 runs on the node 20 that Debian and CI have, and its
# CLI mode speaks streamable HTTP (--transport http).
INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"
INSPECTOR_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentenv-tests" / "mcp-inspector"

NAV = """\
site_name: test
nav:
  - "Welcome": index.md
  - Environments:
      - "The virtual clock": environments/clock.md
      - "Roles: who sees what": environments/rbac.md
  - "Configuration": configuration.md
theme:
  name: mkdocs
"""
PAGES = {
    "index.md": "# Home\n\nA guide. Runs keep their own time, a virtual clock of sorts, but this is the index.\n",
    "environments/clock.md": (
        "# The virtual clock\n\n<!-- stub: to be written -->\nThe world's time.\n\n"
        "## Modes: frozen, paced & event-driven\n\nHow time moves.\n\n"
        "### Paced\n\nUp to a day per second.\n\n"
        "```bash\n# not a heading\nagent-env run hello\n```\n\n"
        "## Modes: frozen, paced & event-driven\n\nThe same heading again.\n\n"
        "## The `horizon` {#horizon-id}\n\nThe next event.\n"
    ),
    "environments/rbac.md": "# Roles\n\n## Who sees which tool\n\nEach role sees some tools.\n",
    "configuration.md": "# Configuration\n\nEvery setting, with its default.\n",
    # clock and virtual said often, in a page about something else: the clock page still ranks first
    "architecture.md": "# How it is built\n\n## Temporal\n\n" + "The virtual time and the clock of a run. " * 12 + "\n",
    "orphan.md": "Text before any heading.\n\n# An orphan page\n\nNot in the nav.\n",
}
TRICKY = (
    "# Title: the `agent-env` CLI!\n\n## 4. The clock (virtual) & more\n\n```bash\n# not a heading\n```\n\n"
    "## Don't *panic* — über [links](index.md) **bold**\n\n### snake_case_name and `--port 0`\n\n"
    "## Title: the `agent-env` CLI!\n\n## What's `a/b` + c? 1.2.3\n\n## &amp; entity\n\n## Repeat_1\n\n## Repeat\n\n"
    "## Repeat\n\n## Explicit {#my-id}\n"
)


@pytest.fixture
def guide(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    for name, text in PAGES.items():
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text(text)
    (tmp_path / "mkdocs.yml").write_text(NAV)
    return docs


def test_ranking_puts_the_page_whose_title_says_it_first(guide: Path) -> None:
    index = load_index(guide)
    hits = index.search("virtual clock", 10)
    assert hits[0].path == "environments/clock.md" and hits[0].title == "The virtual clock"
    assert [h.path for h in hits][:5] == ["environments/clock.md"] * 5  # every section of it, then the rest
    assert {h.path for h in hits[5:]} == {"architecture.md", "index.md"}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # a section's own heading brings it up, with the anchor read_doc takes
    top = index.search("paced", 3)[0]
    assert (top.path, top.heading, top.anchor) == ("environments/clock.md", "Paced", "paced")
    assert top.snippet == "Up to a day per second. # not a heading agent-env run hello"  # fences dropped
    assert index.search("who sees which tool")[0].anchor == "who-sees-which-tool"
    # a word's start finds the longer word; plurals fold
    assert index.search("config")[0].path == "configuration.md"
    assert index.search("settings")[0].path == "configuration.md"
    # only stop words, or words the guide never uses: nothing; comments are not text
    assert index.search("how do I") == [] and index.search("zzzz") == [] and index.search("stub written") == []
    assert len(index.search("the clock", 1)) == 1 and len(index.search("clock", 500)) <= 50


def test_the_section_headed_by_the_query_itself_comes_first(tmp_path: Path) -> None:
    page = (
        "# The virtual clock\n\nEvery run has one.\n\n"
        "## Giving a task a virtual clock\n\nA virtual clock per task: the virtual clock starts frozen, a clock.\n"
    )
    (tmp_path / "clock.md").write_text(page)
    hits = load_index(tmp_path).search("virtual clock", 2)
    assert [h.heading for h in hits] == ["The virtual clock", "Giving a task a virtual clock"]


def test_a_long_section_gives_a_snippet_around_the_query(guide: Path) -> None:
    hit = DocsIndex(load_pages(guide)).search("temporal run", 1)[0]
    assert hit.anchor == "temporal" and len(hit.snippet) <= 202 and "run" in hit.snippet


def test_titles_and_order_come_from_the_nav_and_pages_outside_it_follow(guide: Path) -> None:
    assert read_nav(guide.parent / "mkdocs.yml") == [
        ("index.md", "Welcome", ()),
        ("environments/clock.md", "The virtual clock", ("Environments",)),
        ("environments/rbac.md", "Roles: who sees what", ("Environments",)),
        ("configuration.md", "Configuration", ()),
    ]
    pages = load_pages(guide, guide.parent / "mkdocs.yml")
    assert [p.path for p in pages] == [
        "index.md",
        "environments/clock.md",
        "environments/rbac.md",
        "configuration.md",
        "architecture.md",
        "orphan.md",
    ]
    assert [p.title for p in pages][-2:] == ["How it is built", "An orphan page"]  # their first heading
    assert load_pages(guide)[0].title == "How it is built"  # without a nav: by path, titles from headings


def test_sections_and_reading_one(guide: Path) -> None:
    page = find_page(load_index(guide), "environments/clock.md")
    assert [(s.level, s.anchor) for s in page.sections] == [
        (1, "the-virtual-clock"),
        (2, "modes-frozen-paced-event-driven"),
        (3, "paced"),
        (2, "modes-frozen-paced-event-driven_1"),
        (2, "horizon-id"),
    ]
    assert page.sections[2].parents == ("The virtual clock", "Modes: frozen, paced & event-driven")
    section = page.markdown("modes-frozen-paced-event-driven")
    assert section.startswith("## Modes") and "### Paced" in section and "# not a heading" in section
    assert "The same heading again" not in section  # the next heading of its level ends it
    assert page.markdown("horizon-id") == "## The `horizon` {#horizon-id}\n\nThe next event.\n"
    assert page.markdown() == PAGES["environments/clock.md"]
    with pytest.raises(NotFound, match="no heading with the anchor 'nope'"):
        page.markdown("nope")
    orphan = find_page(load_index(guide), "orphan.md")
    assert orphan.sections[0].level == 0 and orphan.markdown(None).startswith("Text before")


def test_paths_stay_inside_the_guide(guide: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text("# Secret\n\nvirtual clock password\n")
    (guide / "link.md").symlink_to(outside)  # a link out of the guide is not one of its pages
    index = load_index(guide)
    assert "link.md" not in index.pages and all(h.path != "link.md" for h in index.search("password"))
    for bad in ("../secret.md", "/etc/passwd", "environments/../../secret.md", "", "a" * 301, "x\x00.md"):
        with pytest.raises(BadInput):
            find_page(index, bad)
    with pytest.raises(NotFound, match="list_docs"):
        find_page(index, "nope.md")
    # what clients write for a page: with docs/, ./, an anchor, without .md
    for name in ("docs/configuration.md", "./configuration.md", "configuration.md#x", "configuration"):
        assert find_page(index, name).path == "configuration.md"
    assert page_path("environments\\clock.md") == "environments/clock.md"


def test_anchors_are_the_ones_mkdocs_builds(tmp_path: Path) -> None:
    """Headings with punctuation, code, links, emphasis, entities, repeats and attribute lists: the anchors are
    the ids in the HTML `mkdocs build` makes of them (with the extensions mkdocs.yml turns on)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(TRICKY)
    config = (ROOT / "mkdocs.yml").read_text()
    extensions = config[config.index("markdown_extensions:") : config.index("validation:")]
    (tmp_path / "mkdocs.yml").write_text(f"site_name: t\ntheme:\n  name: mkdocs\n{extensions}")
    built = subprocess.run(
        [str(Path(sys.executable).parent / "mkdocs"), "build", "-q", "-d", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    ids = re.findall(r'<h[1-6] id="([^"]+)"', (tmp_path / "site" / "index.html").read_text())
    ours = [s.anchor for s in split_sections(TRICKY.splitlines(keepends=True))]
    assert ours == ids
    assert "4-the-clock-virtual-more" in ours and "whats-ab-c-123" in ours and "repeat_2" in ours


def test_every_heading_of_the_guide_gets_mkdocs_anchor() -> None:
    """The same check over every page of the real guide, against Python-Markdown's toc (what MkDocs runs)."""
    import markdown

    for page in load_pages(ROOT / "docs"):
        md = markdown.Markdown(extensions=["toc", "attr_list", "tables", "admonition", "pymdownx.superfences"])
        md.convert("".join(page.lines))
        ids: list[str] = []
        tokens = list(md.toc_tokens)
        while tokens:
            token = tokens.pop(0)
            ids.append(token["id"])
            tokens[:0] = token["children"]
        assert [s.anchor for s in page.sections if s.level] == ids, page.path


# -- served, as clients reach it --


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """`agent-env docs serve --port 0` serving the shipped guide: its MCP URL."""
    proc = subprocess.Popen(
        [AGENT_ENV, "docs", "serve", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line)
        assert found, f"no URL in {line!r} ({proc.stderr.read() if proc.poll() is not None else ''})"
        yield found.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def check_the_guide(client) -> None:
    """What every transport must give: the tools, the clock page first, a page and a section read."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"search_docs", "read_doc", "list_docs"}
    assert tools["search_docs"].input_schema["properties"]["limit"]["maximum"] == 50
    found = await client.call_tool("search_docs", {"query": "virtual clock", "limit": 5})
    assert not found.is_error
    hits = found.structured_content["hits"]
    assert hits[0]["path"] == "environments/clock.md" and hits[0]["title"] == "The virtual clock"
    assert set(hits[0]) == {"path", "title", "heading", "anchor", "snippet", "score"}
    page = await client.call_tool("read_doc", {"path": "environments/clock.md"})
    assert page.content[0].text.startswith("# The virtual clock")
    section = await client.call_tool("read_doc", {"path": "architecture.md", "anchor": "the-layer-map"})
    text = section.content[0].text
    assert text.startswith("### The layer map") and "```layers" in text and "## 3." not in text
    resources = {str(r.uri): r for r in (await client.list_resources()).resources}
    clock = resources["agent-env-docs://environments/clock.md"]
    assert clock.title == "The virtual clock" and clock.mime_type == "text/markdown"
    read = await client.read_resource("agent-env-docs://environments/clock.md")
    assert read.contents[0].text == page.content[0].text
    listed = (await client.call_tool("list_docs", {})).structured_content["pages"]
    assert (
        listed[0]["path"] == "index.md"
        and {"path": "environments/clock.md"}.items()
        <= next(p for p in listed if p["path"] == "environments/clock.md").items()
    )


@pytest.mark.processes
async def test_over_streamable_http(served: str) -> None:
    from mcp import Client

    async with Client(served) as client:
        await check_the_guide(client)
        # bounds: each refused as the tool's error, naming the limit
        refusals = {
            "search_docs": [{"query": "clock", "limit": 51}, {"query": "x" * 501}, {"query": ""}],
            "read_doc": [
                {"path": "../pyproject.toml"},
                {"path": "/etc/passwd"},
                {"path": "environments/clock.md", "anchor": "nope"},
                {"path": "a" * 301},
            ],
        }
        for tool, cases in refusals.items():
            for arguments in cases:
                answer = await client.call_tool(tool, arguments)
                assert answer.is_error, (tool, arguments)
        said = await client.call_tool("read_doc", {"path": "../pyproject.toml"})
        assert "is not a page of the guide" in said.content[0].text


@pytest.mark.processes
def test_the_door_refuses_other_hosts_origins_and_forms(served: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}
    with httpx.Client(timeout=10) as http:
        assert http.post(served, json=body, headers=accept).status_code == 200
        port = served.split(":")[2].split("/")[0]
        rebound = http.post(served, json=body, headers={**accept, "host": f"evil.example:{port}"})
        assert rebound.status_code == 421 and "does not answer for host" in rebound.json()["error"]
        other_site = http.post(served, json=body, headers={**accept, "origin": "https://evil.example"})
        assert other_site.status_code == 403
        form = http.post(served, content=json.dumps(body), headers={**accept, "content-type": "text/plain"})
        assert form.status_code == 415
        deep = http.post(served, content="[" * 100 + "]" * 100, headers={**accept, "content-type": "application/json"})
        assert deep.status_code == 400
        huge = http.post(served, json={**body, "pad": "x" * 100_000}, headers=accept)
        assert huge.status_code == 413
        assert http.get(served.removesuffix("/mcp") + "/healthz").text == "ok"


@pytest.mark.processes
async def test_over_stdio() -> None:
    from mcp import Client, StdioServerParameters

    async with Client(StdioServerParameters(command=AGENT_ENV, args=["docs", "serve", "--stdio"])) as client:
        await check_the_guide(client)


@pytest.mark.processes
async def test_a_folder_of_its_own_over_stdio(guide: Path) -> None:
    from mcp import Client, StdioServerParameters

    spawned = StdioServerParameters(command=AGENT_ENV, args=["docs", "serve", "--stdio", "--docs-dir", str(guide)])
    async with Client(spawned) as client:
        hits = (await client.call_tool("search_docs", {"query": "who sees which tool"})).structured_content["hits"]
        assert (hits[0]["path"], hits[0]["title"]) == ("environments/rbac.md", "Roles: who sees what")


@pytest.mark.processes
def test_a_taken_port_is_said_plainly(served: str) -> None:
    port = served.split(":")[2].split("/")[0]
    taken = subprocess.run([AGENT_ENV, "docs", "serve", "--port", port], capture_output=True, text=True, timeout=60)
    assert taken.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr + taken.stdout


@pytest.mark.processes
def test_docs_help_loads_no_mcp() -> None:
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('LOADED', sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'uvicorn'})))\n"
        "sys.argv = ['agent-env', 'docs', 'serve', '--help']\n"
        "from agent_env.cli import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--stdio" in out.stdout and "LOADED []" in out.stdout


@pytest.fixture(scope="session")
def inspector() -> Path:
    """The MCP Inspector's CLI, pinned, installed once into a cache folder by npm."""
    binary = INSPECTOR_CACHE / "node_modules" / ".bin" / "mcp-inspector"
    package, version = INSPECTOR.rsplit("@", 1)
    manifest = INSPECTOR_CACHE / "node_modules" / package / "package.json"
    if not (binary.exists() and manifest.exists() and json.loads(manifest.read_text())["version"] == version):
        if shutil.which("npm") is None or shutil.which("node") is None:
            if os.environ.get("CI") == "true" or os.environ.get("AGENT_ENV_REQUIRE_INSPECTOR"):
                pytest.fail("node and npm are required in CI, to run the MCP Inspector against `docs serve`")
            pytest.skip("needs node and npm (to install and run the MCP Inspector's CLI)")
        INSPECTOR_CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(INSPECTOR_CACHE), INSPECTOR],
            check=True,
            capture_output=True,
            timeout=600,
        )
    return binary


@pytest.mark.processes
def test_the_mcp_inspector_lists_and_calls_the_tools(served: str, inspector: Path) -> None:
    def inspect(*args: str) -> dict:
        out = subprocess.run(
            [str(inspector), "--cli", served, "--transport", "http", *args], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr + out.stdout
        return json.loads(out.stdout)

    listed = inspect("--method", "tools/list")
    assert {t["name"] for t in listed["tools"]} == {"search_docs", "read_doc", "list_docs"}
    called = inspect("--method", "tools/call", "--tool-name", "search_docs", "--tool-arg", "query=virtual clock")
    assert called["structuredContent"]["hits"][0]["path"] == "environments/clock.md"
    read = inspect(
        "--method", "tools/call", "--tool-name", "read_doc", "--tool-arg", "path=architecture.md", "anchor=4-the-clock"
    )
    assert read["content"][0]["text"].startswith("## 4. The clock")
