"""The documentation: the mkdocs site (``mkdocs.yml``, ``docs/``) builds with ``--strict`` (a broken link, a broken
anchor or a page left out of the navigation fails it); the README stays a two-minute read; the measured figures in
``bench/results/`` stay in files of at most 1,000 lines, each section naming its commands first; nothing points at
the single results file they replaced."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from helpers import REPO

#: The longest a text file under bench/ may be. Machine-written measurement files (JSON written whole by the
#: commands that measured them) are exempt: nobody reads or edits them line by line.
BENCH_MAX_LINES = 1000
README_MAX_LINES = 150
RESULTS = REPO / "bench" / "results"


def test_the_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -c constraints.txt -e '.[docs]')")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(REPO / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"mkdocs build --strict:\n{done.stdout[-3000:]}{done.stderr[-5000:]}"
    pages = sorted(path.stem for path in (REPO / "docs").glob("*.md"))
    built = sorted(path.parent.name if path.parent != tmp_path / "site" else "index"
                   for path in (tmp_path / "site").glob("**/index.html") if "search" not in path.parts)
    assert set(pages) <= set(built), f"pages not built: {sorted(set(pages) - set(built))}"


def test_the_strict_build_catches_a_broken_link(tmp_path):
    """The check itself: a page linking to a page that does not exist fails the build."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -c constraints.txt -e '.[docs]')")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[gone](nowhere.md)\n")
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    config = re.sub(r"(?ms)^nav:\n(  - .*?\n)+", "nav:\n  - Home: index.md\n", config)
    (tmp_path / "mkdocs.yml").write_text(config)
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "nowhere.md" in done.stdout + done.stderr


def test_the_readme_is_short():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to docs/")
    assert "## Quickstart" in lines, "README.md has no ## Quickstart section"
    long = [number for number, line in enumerate(lines, 1) if len(line) > 120 and not line.startswith("|")]
    assert not long, f"README.md lines over 120 characters: {long}"


def test_no_file_under_bench_is_longer_than_the_limit():
    files = [path for path in sorted((REPO / "bench").rglob("*")) if path.is_file() and "__pycache__" not in path.parts]
    too_long = []
    for path in files:
        try:
            count = len(path.read_text(encoding="utf-8").splitlines())
        except UnicodeDecodeError:  # an image
            continue
        if count > BENCH_MAX_LINES:
            too_long.append(f"{path.relative_to(REPO)}: {count}")
    assert not too_long, f"files under bench/ over {BENCH_MAX_LINES} lines (split them by topic): {too_long}"


def test_every_results_section_names_its_commands_first():
    for path in sorted(RESULTS.glob("*.md")):
        if path.name == "README.md":
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        starts = [number for number, line in enumerate(lines) if line.startswith("## ")]
        assert starts, f"{path.name} has no sections"
        for number in starts:
            following = next(line for line in lines[number + 1:] if line.strip())
            assert following.startswith("**Commands**"), (
                f"{path.name}: {lines[number]!r} does not name its commands first")


def test_the_results_index_links_every_file():
    index = (RESULTS / "README.md").read_text(encoding="utf-8")
    for path in sorted(RESULTS.glob("*.md")):
        assert path.name == "README.md" or f"]({path.name})" in index, f"bench/results/README.md omits {path.name}"


def test_nothing_points_at_the_old_results_file():
    """The figures moved from one file into bench/results/; README, docs, bench, tests and the Makefile say where."""
    old = "bench/" + "RESULTS.md"
    places = [REPO / "README.md", REPO / "Makefile", *(REPO / "docs").rglob("*.md"), *(REPO / "bench").rglob("*"),
              *(REPO / "tests").glob("*.py")]
    found = [str(path.relative_to(REPO)) for path in places
             if path.is_file() and path.suffix in {"", ".md", ".py", ".sh"} and old in path.read_text(errors="ignore")]
    assert not found, f"{old} is gone (its figures are in bench/results/): {found}"
