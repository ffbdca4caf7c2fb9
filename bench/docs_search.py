"""`agent-env docs serve`: searching the whole user guide. Goal: a search's p50 <= 20 ms end to end.

- The index alone, in-process: building it from the guide's pages (once, at the server's start), and a search's
  p50 and p95 over 50 varied queries; baseline, measured in the same run: a scan of every section's text for the
  query's words (what a server without an index would do per query).
- End to end, through the MCP SDK's client over streamable HTTP to `agent-env docs serve` (a process of its
  own): `search_docs` for the same queries, p50 and p95; baseline: `tools/list` on the same connection (the
  transport's floor: a round trip that does no work). And the server's start: spawn to its first answer.

`python bench/docs_search.py [DOCS_DIR]`: another folder of pages (`--docs-dir`) instead of the shipped guide.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import AGENT_ENV, row

from agent_env.docs_server.search import stem
from agent_env.docs_server.server import load_index

ROUNDS = 5
QUERIES = [
    "virtual clock",
    "how do I run a task",
    "gateway pool placement",
    "role tokens",
    "sandbox providers docker",
    "modal sandbox",
    "trigger fires when a tool is called",
    "snapshot and restore an environment",
    "universe artifacts",
    "registry push pull",
    "evals",
    "trainer episodes gymnasium",
    "group rollouts fork",
    "human agents inbox",
    "A2A extensions",
    "skills for agents",
    "deploy_env step",
    "check_response grading",
    "rubrics verifier judge model",
    "custom step type plugin",
    "environment card",
    "MCP endpoint of an instance",
    "data plane load export reset",
    "layer map",
    "Temporal workflow history replay",
    "continue as new",
    "worker health port metrics",
    "tracing OpenTelemetry",
    "configuration settings file",
    "secrets secret:NAME",
    "stores aws gcp",
    "explorer web page",
    "fake model server",
    "model providers anthropic openai",
    "Host Origin checks security",
    "rate limit per agent",
    "storage budget 507",
    "cookbook invoice queue",
    "escalation between two agents",
    "agent-env run --watch",
    "troubleshooting a run that hangs",
    "python api Task",
    "composing environments",
    "topology own server",
    "collecting artifacts from a sandbox",
    "protocol validators",
    "env validate",
    "built-in bundles hello",
    "seal plan key",
    "docs MCP server search_docs",
]


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def scan(entries: list[tuple[str, str]], query: str) -> list[tuple[int, str]]:
    """The baseline: every section's text scanned for the query's words, counted, best first."""
    words = re.findall(r"[a-z0-9]+", query.lower())
    counted = [(sum(text.count(w) for w in words), path) for path, text in entries]
    return sorted((c for c in counted if c[0]), reverse=True)[:8]


def in_process(docs_dir: Path | None) -> dict:
    builds = []
    for _ in range(ROUNDS):
        stem.cache_clear()  # as at a server's start: no word stemmed yet
        start = time.perf_counter()
        index = load_index(docs_dir)
        builds.append(time.perf_counter() - start)
    searches, scans = [], []
    entries = [(e.page.path, (e.page.title + " " + e.section.heading + " " + e.text).lower()) for e in index.entries]
    for _ in range(ROUNDS):
        for query in QUERIES:
            start = time.perf_counter()
            index.search(query, 8)
            searches.append(time.perf_counter() - start)
            start = time.perf_counter()
            scan(entries, query)
            scans.append(time.perf_counter() - start)
    return {
        "pages": len(index.pages),
        "sections": len(index.entries),
        "build_ms": statistics.median(builds) * 1000,
        "search_p50_ms": statistics.median(searches) * 1000,
        "search_p95_ms": percentile(searches, 0.95) * 1000,
        "scan_p50_ms": statistics.median(scans) * 1000,
    }


async def over_mcp(url: str) -> dict:
    from mcp import Client

    calls, floor = [], []
    async with Client(url) as client:
        await client.call_tool("search_docs", {"query": "warm up"})
        for _ in range(ROUNDS):
            for query in QUERIES:
                start = time.perf_counter()
                answer = await client.call_tool("search_docs", {"query": query, "limit": 8})
                calls.append(time.perf_counter() - start)
                assert not answer.is_error, answer
                start = time.perf_counter()
                await client.list_tools()
                floor.append(time.perf_counter() - start)
    return {
        "mcp_p50_ms": statistics.median(calls) * 1000,
        "mcp_p95_ms": percentile(calls, 0.95) * 1000,
        "tools_list_p50_ms": statistics.median(floor) * 1000,
    }


async def first_answer(url: str, started: float) -> float:
    from mcp import Client

    async with Client(url) as client:
        await client.call_tool("search_docs", {"query": "virtual clock"})
    return time.perf_counter() - started


def end_to_end(docs_dir: Path | None) -> dict:
    started = time.perf_counter()
    extra = ["--docs-dir", str(docs_dir)] if docs_dir else []
    proc = subprocess.Popen([AGENT_ENV, "docs", "serve", "--port", "0", *extra], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        found = re.search(r"(http://\S+/mcp)", proc.stdout.readline())
        assert found, "docs serve printed no URL"
        url = found.group(1)
        start_s = asyncio.run(first_answer(url, started))
        result = asyncio.run(over_mcp(url))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return {**result, "start_s": start_s}


def measure(docs_dir: Path | None = None) -> dict:
    result = {**in_process(docs_dir), **end_to_end(docs_dir)}
    n = len(QUERIES)
    print(f"docs search ({result['pages']} pages, {result['sections']} sections; {n} queries x {ROUNDS})")
    row("index build (load pages, index sections)", f"{result['build_ms']:.1f} ms", "once, at the server's start")
    row(
        "search, in-process: p50",
        f"{result['search_p50_ms']:.3f} ms",
        f"p95 {result['search_p95_ms']:.3f} ms",
    )
    row(
        "baseline: scanning every section, p50",
        f"{result['scan_p50_ms']:.3f} ms",
        f"ratio {result['search_p50_ms'] / result['scan_p50_ms']:.2f}x (index / scan)",
    )
    row(
        "search_docs over MCP (streamable HTTP): p50",
        f"{result['mcp_p50_ms']:.1f} ms",
        f"goal <= 20 ms; p95 {result['mcp_p95_ms']:.1f} ms",
    )
    row(
        "baseline: tools/list on the same connection",
        f"{result['tools_list_p50_ms']:.1f} ms",
        f"ratio {result['mcp_p50_ms'] / result['tools_list_p50_ms']:.2f}x (the transport's floor)",
    )
    row("server start: spawn to first answer", f"{result['start_s'] * 1000:.0f} ms")
    return result


if __name__ == "__main__":
    measure(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
