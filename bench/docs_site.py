"""The user guide's site: `mkdocs build --strict` of docs/ (issue 33's figure; tests/test_docs_site.py builds it
too). Goal: a few seconds, so that building the site stays part of every test run."""

from __future__ import annotations

import sys
from pathlib import Path

from common import BIN, row, summarize, temp_dir, timed

ROOT = Path(__file__).parent.parent
RUNS = 3


def measure() -> dict:
    config = str(ROOT / "mkdocs.yml")
    samples = [
        timed([str(BIN / "mkdocs"), "build", "--strict", "--quiet", "-f", config, "-d", str(temp_dir() / "site")])
        for _ in range(RUNS)
    ]
    pages = len(list((ROOT / "docs").rglob("*.md")))
    wall = summarize([w for w, _ in samples])["median"]
    result = {"mkdocs_build_s": wall, "mkdocs_build_mib": max(m for _, m in samples), "pages": pages}
    print("the docs site")
    row(
        f"mkdocs build --strict (median of {RUNS})",
        f"{wall:.2f} s",
        f"{pages} pages; peak {result['mkdocs_build_mib']:.0f} MiB",
    )
    return result


if __name__ == "__main__":
    measure()
    sys.exit(0)
