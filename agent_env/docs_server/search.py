"""A ranked search over the guide's sections, built once when the server starts (milliseconds for the guide).

Ranking is BM25F: each section is a document of four fields (its page's title, its heading, the headings above
it, its text), each field's term counts weighted and normalised by the field's length before BM25's saturation.
A term's weight in a section does not depend on the query, so it is computed once per (term, section) at build
time, and a query only adds up its terms' postings. Words are compared by their English stems (Snowball), and a
query word of four letters or more also matches, at a lower weight, the guide's words it begins (`sandbox`
finds `sandboxed`). Sections whose title or heading hold
the query's words in a row rank higher.
"""

from __future__ import annotations

import functools
import math
import re
from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass

import snowballstemmer  # type: ignore[import-untyped]

from agent_env.docs_server.pages import FENCE, GuidePage, Section, strip_comments

MAX_QUERY_CHARS = 500
MAX_QUERY_TERMS = 32
MAX_LIMIT = 50
SNIPPET_CHARS = 200

K1 = 1.2
# field: (weight, length normalisation b)
FIELDS = {"title": (4.0, 0.3), "heading": (3.0, 0.3), "parents": (1.0, 0.3), "body": (1.0, 0.75)}
PREFIX_WEIGHT = 0.6  # a query word matched only as the start of the guide's words
PREFIX_MAX = 12  # words a prefix may stand for
PHRASE_BONUS = 1.3
# A section whose own heading is the query, word for word (the page's opening under its title, a section named
# for it), is what the asker meant: it comes before the sections that merely mention the phrase.
EXACT_HEADING_BONUS = 1.5
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i if in into is it its me my of on or so that the their "
    "then there these this to was what when where which who why will with you your".split()
)
WORD = re.compile(r"[a-z0-9]+")
STEMMER = snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """The word's English stem (Snowball's Porter2: `running`, `runs` -> `run`; `configured`, `configuration` ->
    `configur`), the same for the guide's words and a query's."""
    return STEMMER.stemWord(word)


def terms(text: str) -> list[str]:
    return [stem(w) for w in WORD.findall(text.lower()) if w not in STOPWORDS]


@dataclass(frozen=True)
class IndexedSection:
    """One searchable section."""

    page: GuidePage
    section: Section
    title_terms: tuple[str, ...]
    heading_terms: tuple[str, ...]
    text: str  # its own text, comments dropped and whitespace joined (snippets come from it)
    lower: str  # the same, lower-cased


@dataclass(frozen=True)
class SearchHit:
    path: str
    title: str
    heading: str
    anchor: str
    snippet: str
    score: float


class DocsIndex:
    """The guide's pages by path and the search over their sections."""

    def __init__(self, pages: list[GuidePage]) -> None:
        self.pages = {page.path: page for page in pages}
        self.entries: list[IndexedSection] = []
        fields: list[dict[str, Counter[str]]] = []
        for page in pages:
            title_terms = tuple(terms(page.title))
            for section in page.sections:
                own = strip_comments("".join(page.lines[section.start + (1 if section.level else 0) : section.end]))
                heading_terms = tuple(terms(section.heading))
                prose = " ".join(line for line in own.splitlines() if not FENCE.match(line))  # no ``` lines
                text = " ".join(prose.split())
                self.entries.append(IndexedSection(page, section, title_terms, heading_terms, text, text.lower()))
                fields.append(
                    {
                        "title": Counter(title_terms),
                        "heading": Counter(heading_terms),
                        "parents": Counter(terms(" ".join(section.parents))),
                        "body": Counter(terms(own)),
                    }
                )
        count = max(len(fields), 1)
        averages = {name: max(sum(sum(f[name].values()) for f in fields) / count, 1.0) for name in FIELDS}
        weighted: dict[str, dict[int, float]] = defaultdict(dict)
        for doc, counted in enumerate(fields):
            for name, (weight, b) in FIELDS.items():
                length = sum(counted[name].values())
                norm = 1 - b + b * length / averages[name]
                for term, tf in counted[name].items():
                    weighted[term][doc] = weighted[term].get(doc, 0.0) + weight * tf / norm
        # term -> [(section, its share of a score)]: BM25's idf and saturation, done once
        self.postings: dict[str, list[tuple[int, float]]] = {}
        for term, docs in weighted.items():
            idf = math.log(1 + (count - len(docs) + 0.5) / (len(docs) + 0.5))
            self.postings[term] = [(doc, idf * tf * (K1 + 1) / (K1 + tf)) for doc, tf in docs.items()]
        self.vocabulary = sorted(self.postings)

    def _expand(self, term: str) -> list[tuple[str, float]]:
        """The index's words a query word stands for, with their weights: itself, and (at a lower weight) the
        words it begins when it has 4 letters or more, or when the guide does not use it."""
        exact = [(term, 1.0)] if term in self.postings else []
        if len(term) < 3 or (exact and len(term) < 4):
            return exact
        start = bisect_left(self.vocabulary, term)
        for word in self.vocabulary[start : start + PREFIX_MAX + 1]:
            if not word.startswith(term):
                break
            if word != term:
                exact.append((word, PREFIX_WEIGHT))
        return exact

    def search(self, query: str, limit: int = 10) -> list[SearchHit]:
        """The sections that best answer `query`, best first (at most `limit`)."""
        query = query[:MAX_QUERY_CHARS]
        limit = max(1, min(limit, MAX_LIMIT))
        wanted = list(dict.fromkeys(terms(query)))[:MAX_QUERY_TERMS]
        scores: dict[int, float] = defaultdict(float)
        matched: dict[int, int] = defaultdict(int)
        for term in wanted:
            for word, weight in self._expand(term):
                for doc, share in self.postings[word]:
                    scores[doc] += weight * share
                    matched[doc] += 1
        if not scores:
            return []
        phrase = tuple(wanted)
        ranked: list[tuple[float, int]] = []
        for doc, score in scores.items():
            entry = self.entries[doc]
            if len(phrase) > 1 and (_holds(entry.title_terms, phrase) or _holds(entry.heading_terms, phrase)):
                score *= PHRASE_BONUS
            if entry.heading_terms == phrase:
                score *= EXACT_HEADING_BONUS
            score *= 0.5 + 0.5 * min(matched[doc], len(wanted)) / len(wanted)  # more of the query's words
            ranked.append((score, doc))
        ranked.sort(key=lambda x: (-x[0], x[1]))
        return [self._hit(self.entries[doc], score, wanted) for score, doc in ranked[:limit]]

    def _hit(self, entry: IndexedSection, score: float, wanted: list[str]) -> SearchHit:
        return SearchHit(
            path=entry.page.path,
            title=entry.page.title,
            heading=entry.section.heading or entry.page.title,
            anchor=entry.section.anchor,
            snippet=snippet(entry.text, wanted, entry.lower),
            score=round(score, 3),
        )


def _holds(words: tuple[str, ...], phrase: tuple[str, ...]) -> bool:
    n = len(phrase)
    return any(words[i : i + n] == phrase for i in range(len(words) - n + 1))


def snippet(text: str, wanted: list[str], lower: str | None = None) -> str:
    """About SNIPPET_CHARS of `text` around the first place a query word begins a word (its start when none
    does); `lower`: the text lower-cased, when the caller has it."""
    if len(text) <= SNIPPET_CHARS:
        return text
    lower = text.lower() if lower is None else lower
    first = len(text)
    for term in wanted:
        at = lower.find(term)
        while 0 < at < first and lower[at - 1].isalnum():  # inside a word: the next one
            at = lower.find(term, at + 1)
        if 0 <= at < first:
            first = at
    if first == len(text):
        first = 0
    start = max(0, first - SNIPPET_CHARS // 4)
    if start:
        space = text.find(" ", start)
        start = space + 1 if 0 <= space < first else start
    end = min(len(text), start + SNIPPET_CHARS)
    if end < len(text):
        space = text.rfind(" ", start, end)
        end = space if space > start + SNIPPET_CHARS // 2 else end
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")
