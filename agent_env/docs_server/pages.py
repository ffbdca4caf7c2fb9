"""The guide's pages and their sections: where the guide is, its nav, and each heading's anchor as MkDocs makes it.

The guide ships inside the package (pyproject force-includes docs/ as `agent_env/docs_pages`, with mkdocs.yml in
it); an editable checkout has no such folder, so there it is the checkout's docs/ beside the package, with the
checkout's mkdocs.yml. Titles and order come from mkdocs.yml's nav when there is one, else from each page's first
heading. Headings inside fenced code (a shell comment, say) are not headings.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath

from agent_env.errors import BadInput, NotFound

SHIPPED = "docs_pages"  # the guide's folder inside the installed package
MAX_PAGE_BYTES = 2 * 1024 * 1024  # a page larger than this is not a page of the guide: skipped
MAX_PAGES = 2000

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
ATTR_LIST = re.compile(r"\s*\{:?\s*([^}]*)\}\s*$")  # `## Title {#id .class}` (attr_list)
COMMENT = re.compile(r"<!--.*?-->", re.S)


@dataclass(frozen=True)
class Section:
    """One heading of a page and the text under it. `start`/`end`: its lines (the heading line first; `end`
    before the next heading of any level); `whole_end`: before the next heading of its level or above, so
    its subsections are inside."""

    heading: str  # as plain text (inline Markdown rendered away)
    level: int  # 1-6; 0 for the text before a page's first heading
    anchor: str  # the id MkDocs gives the heading ("" for the text before the first heading)
    parents: tuple[str, ...]  # the headings above it, outermost first
    start: int
    end: int
    whole_end: int


@dataclass
class GuidePage:
    path: str  # relative to the guide's root, with '/' (`environments/clock.md`)
    title: str
    nav: tuple[str, ...]  # the nav sections it sits under (`("Environments",)`); () outside the nav
    order: int  # its place in the nav (pages outside it come after, by path)
    lines: list[str]
    sections: list[Section] = field(default_factory=list)

    def markdown(self, anchor: str | None = None) -> str:
        """The page's Markdown, or one section's with its subsections."""
        if not anchor:
            return "".join(self.lines)
        section = self.section(anchor)
        return "".join(self.lines[section.start : section.whole_end])

    def section(self, anchor: str) -> Section:
        for section in self.sections:
            if section.anchor == anchor:
                return section
        known = ", ".join(s.anchor for s in self.sections if s.anchor)[:600]
        raise NotFound(f"{self.path} has no heading with the anchor {anchor[:100]!r}", f"use one of: {known}")


def shipped_root() -> tuple[Path, Path | None]:
    """(the guide's folder, its mkdocs.yml or None): the package's copy, else the checkout's docs/."""
    package = resources.files("agent_env")
    shipped = Path(str(package)) / SHIPPED
    if shipped.is_dir():
        config = shipped / "mkdocs.yml"
        return shipped, config if config.is_file() else None
    checkout = Path(str(package)).parent
    if (checkout / "docs").is_dir():
        config = checkout / "mkdocs.yml"
        return checkout / "docs", config if config.is_file() else None
    raise BadInput(
        "this install of agent-env has no user guide (no agent_env/docs_pages in the package, no docs/ beside it)",
        "install agent-env from its wheel, or give a folder of Markdown pages with --docs-dir",
    )


def read_nav(config: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """mkdocs.yml's nav as (path, title, sections) in order. Read by hand: the nav is a plain YAML list of
    `- "Title": page.md` and `- Section:` items, and the rest of the file (tags of plugins) need not parse."""
    entries: list[tuple[str, str, tuple[str, ...]]] = []
    stack: list[tuple[int, str]] = []  # (indent, section title)
    inside = False
    for raw in config.read_text(encoding="utf-8", errors="replace").splitlines():
        if not inside:
            inside = raw.rstrip() == "nav:"
            continue
        if raw.strip() == "" or raw.lstrip().startswith("#"):
            continue
        if not raw.startswith((" ", "-")):
            break  # the next top-level key
        indent = len(raw) - len(raw.lstrip())
        item = raw.strip()
        if not item.startswith("- "):
            continue
        item = item[2:].strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, sep, value = _split_item(item)
        if not sep:  # `- page.md`
            entries.append((_unquote(key), "", tuple(s for _, s in stack)))
        elif value:  # `- "Title": page.md`
            entries.append((_unquote(value), _unquote(key), tuple(s for _, s in stack)))
        else:  # `- Section:` with items below
            stack.append((indent, _unquote(key)))
    return [e for e in entries if e[0].endswith(".md") and "://" not in e[0]]


def _split_item(item: str) -> tuple[str, str, str]:
    if item[:1] in "\"'":  # a quoted key may hold a colon
        close = item.find(item[0], 1)
        if close > 0:
            rest = item[close + 1 :].lstrip()
            if rest.startswith(":"):
                return item[: close + 1], ":", rest[1:].strip()
            return item, "", ""
    key, sep, value = item.partition(": ")
    if not sep and item.endswith(":"):
        return item[:-1], ":", ""
    return key, sep, value.strip()


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def load_pages(root: Path, config: Path | None = None) -> list[GuidePage]:
    """Every Markdown page under `root` (links are not followed out of it), in nav order, split into sections."""
    root = root.resolve()
    nav = read_nav(config) if config is not None else []
    places = {path: (i, title, sections) for i, (path, title, sections) in enumerate(nav)}
    pages: list[GuidePage] = []
    for file in sorted(root.rglob("*.md")):
        if len(pages) >= MAX_PAGES:
            break
        real = file.resolve()
        if not real.is_relative_to(root) or not real.is_file() or real.stat().st_size > MAX_PAGE_BYTES:
            continue
        rel = file.relative_to(root).as_posix()
        lines = real.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        order, title, sections = places.get(rel, (len(nav), "", ()))
        page = GuidePage(rel, title, sections, order, lines)
        page.sections = split_sections(lines)
        if not page.title:
            first = next((s for s in page.sections if s.level == 1), None)
            page.title = first.heading if first else PurePosixPath(rel).stem.replace("-", " ")
        pages.append(page)
    pages.sort(key=lambda p: (p.order, p.path))
    return pages


def split_sections(lines: list[str]) -> list[Section]:
    """The page's sections, one per heading (and one for any text before the first), with MkDocs' anchors."""
    found: list[tuple[int, int, str, str | None]] = []  # (line, level, plain text, explicit id)
    fence = ""
    for i, line in enumerate(lines):
        opened = FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                if not line.strip().lstrip(fence[0]):
                    fence = ""
            continue
        if opened:
            fence = opened.group(1)
            continue
        match = HEADING.match(line.rstrip("\n"))
        if match:
            text, explicit = heading_text(match.group(2) or "")
            found.append((i, len(match.group(1)), text, explicit))
    used = {explicit for _, _, _, explicit in found if explicit}
    sections: list[Section] = []
    if not found or found[0][0] > 0:
        first = found[0][0] if found else len(lines)
        if any(line.strip() for line in lines[:first]):
            sections.append(Section("", 0, "", (), 0, first, first))
    for n, (at, level, heading, explicit) in enumerate(found):
        anchor = explicit or unique(slugify(heading), used)
        end = found[n + 1][0] if n + 1 < len(found) else len(lines)
        whole_end = next((f[0] for f in found[n + 1 :] if f[1] <= level), len(lines))
        sections.append(Section(heading, level, anchor, _parents(found[:n], level), at, end, whole_end))
    return sections


def _parents(before: list[tuple[int, int, str, str | None]], level: int) -> tuple[str, ...]:
    chain: list[str] = []
    for _, above_level, above_text, _ in reversed(before):
        if above_level < level:
            chain.append(above_text)
            level = above_level
    return tuple(chain[::-1])


def heading_text(raw: str) -> tuple[str, str | None]:
    """A heading's Markdown as the plain text MkDocs slugifies, and the id an attribute list gives it."""
    explicit = None
    attrs = ATTR_LIST.search(raw)
    if attrs:
        raw = raw[: attrs.start()]
        ident = re.search(r"(?:^|\s)#([^\s}]+)", attrs.group(1))
        explicit = ident.group(1) if ident else None
    text = re.sub(r"(`+)(.+?)\1", lambda m: m.group(2).strip(), raw)  # code spans: their text
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images: their text
    text = re.sub(r"!?\[([^\]]*)\]\[[^\]]*\]", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"(\*{1,3})(\S(?:.*?\S)?)\1", r"\2", text)  # *emphasis*, **strong**
    text = re.sub(r"(?<!\w)(_{1,3})(\S(?:.*?\S)?)\1(?!\w)", r"\2", text)
    text = re.sub(r"\\([\\`*_{}\[\]()#+\-.!])", r"\1", text)  # backslash escapes
    return html.unescape(text).strip(), explicit


def slugify(text: str, separator: str = "-") -> str:
    """The id Python-Markdown's toc (MkDocs' default) makes of a heading's text: accents folded to ASCII, what is
    neither a word character, a space nor a hyphen dropped, lower-cased, runs of spaces and hyphens joined."""
    value = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(rf"[{separator}\s]+", separator, value)


def unique(anchor: str, used: set[str]) -> str:
    """`anchor`, or `anchor_1`, `anchor_2`... when a heading above already has it (as the toc does)."""
    while anchor in used or not anchor:
        counted = re.match(r"^(.*)_([0-9]+)$", anchor)
        anchor = f"{counted.group(1)}_{int(counted.group(2)) + 1}" if counted else f"{anchor}_1"
    used.add(anchor)
    return anchor


def page_path(path: str) -> str:
    """A page's path as a client names it, checked: relative, inside the guide, a .md page."""
    if len(path) > 300:
        raise BadInput("the page path is over 300 characters", "give a path list_docs() names")
    clean = path.strip().replace("\\", "/").split("#", 1)[0]
    while clean.startswith("./"):
        clean = clean[2:]
    parts = PurePosixPath(clean).parts
    if not clean or clean.startswith("/") or ".." in parts or "\x00" in clean:
        raise BadInput(f"{path[:100]!r} is not a page of the guide", "give a relative path list_docs() names")
    return clean


def strip_comments(text: str) -> str:
    return COMMENT.sub("", text)
