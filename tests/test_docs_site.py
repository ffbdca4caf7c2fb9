"""The user guide as a site and as a package: `mkdocs build --strict` (a broken link or anchor fails it) builds it,
every page of docs/ is in mkdocs.yml's nav, and the wheel carries the pages (`agent-env docs serve` reads them
from agent_env/docs_pages)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import yaml
from docs_examples import ROOT, pages

BIN = Path(sys.executable).parent


def nav_pages(nav: object) -> list[str]:
    """The pages mkdocs.yml's nav names, in order (sections hold lists of `title: page` entries)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for entry in nav for page in nav_pages(entry)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return []


def the_nav() -> list[str]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())  # plain YAML: no !!python tags in it
    return nav_pages(config["nav"])


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    nav = the_nav()
    missing = sorted(set(pages()) - set(nav))
    assert not missing, f"pages of docs/ that mkdocs.yml's nav does not list (a reader cannot reach them): {missing}"
    absent = [page for page in nav if page not in pages()]
    assert not absent, f"mkdocs.yml's nav names pages docs/ does not have: {absent}"
    twice = sorted({page for page in nav if nav.count(page) > 1})
    assert not twice, f"pages the nav lists twice: {twice}"


def test_nav_pages_reads_sections():
    nav = [{"Home": "index.md"}, {"Envs": [{"One": "envs/a.md"}, {"Deep": [{"Two": "envs/b.md"}]}]}, "plain.md"]
    assert nav_pages(nav) == ["index.md", "envs/a.md", "envs/b.md", "plain.md"]


@pytest.mark.processes
def test_the_site_builds_strictly(tmp_path: Path, record_property):
    site = tmp_path / "site"
    started = time.perf_counter()
    done = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    took = time.perf_counter() - started
    record_property("mkdocs_build_s", round(took, 2))
    print(f"mkdocs build --strict: {took:.2f} s for {len(pages())} pages")  # one of issue 33's figures (-s shows it)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    assert (site / "index.html").is_file()
    built = {page for page in pages() if (site / Path(page).with_suffix("") / "index.html").is_file()}
    built |= {
        page
        for page in pages()
        if Path(page).name == "index.md" and (site / Path(page).parent / "index.html").is_file()
    }
    assert built == set(pages()), f"pages without their HTML: {sorted(set(pages()) - built)}"


@pytest.mark.slow  # ~13 s here: pip sets up hatchling in a build environment of its own first
def test_the_wheel_carries_the_docs(tmp_path: Path):
    """Built as a user's pip builds it (hatchling, in its own build environment): every nav page is inside, as the
    docs server reads them, byte for byte."""
    done = subprocess.run(
        [str(BIN / "python"), "-m", "pip", "wheel", "--quiet", "--no-deps", str(ROOT), "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = tmp_path.glob("agentenv_framework-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        assert "agent_env/docs_pages/index.md" in names, "the wheel has no agent_env/docs_pages/index.md"
        missing = [page for page in the_nav() if f"agent_env/docs_pages/{page}" not in names]
        assert not missing, f"nav pages the wheel does not carry: {missing}"
        stale = [
            page
            for page in the_nav()
            if whl.read(f"agent_env/docs_pages/{page}") != (ROOT / "docs" / page).read_bytes()
        ]
        assert not stale, f"pages whose copy in the wheel differs from docs/: {stale}"
