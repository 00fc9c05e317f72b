"""The project's habits, checked: test modules share helpers through ``tests/helpers.py`` (or fixtures in
``conftest.py``), never by importing another test module; ``ruff check`` (``[tool.ruff]`` in
pyproject.toml) passes over :data:`CHECKED` (paths from the repository root). Function length is checked by
``test_layout.py``; no issue number in the package (history lives in git; figures in bench/results/).
"""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
#: The folders held to ruff: the whole tree.
CHECKED = ("induce", "tests", "bench")


def imports_of_test_modules(source: str) -> list[tuple[int, str]]:
    """``(line, module)`` for each import of a test module (``test_x``, ``tests.test_x``) in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom):  # ``from . import test_x``
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in names if any(part.startswith("test_") for part in name.split("."))]
    return sorted(set(found))


def test_the_check_finds_each_form_of_importing_a_test_module():
    source = ("import test_a\nimport tests.test_b as b\nfrom test_c import x\nfrom tests.test_d import y\n"
              "from . import test_e\nfrom tests import test_f\ndef f():\n    from test_g import z\n"
              "from helpers import make_corpus\nimport testing\nfrom induce.kernels import testing\n")
    assert sorted({line for line, _ in imports_of_test_modules(source)}) == [1, 2, 3, 4, 5, 6, 8]


def test_no_test_module_imports_another():
    offenders = [f"{path.name}:{line}: {module}" for path in sorted(TESTS.glob("*.py"))
                 for line, module in imports_of_test_modules(path.read_text(encoding="utf-8"))]
    assert not offenders, "move shared helpers into tests/helpers.py (or a conftest.py fixture):\n" + "\n".join(
        offenders)


def ruff_command() -> list[str]:
    """``ruff`` from this interpreter's environment (the ``test`` extra pins it), else from PATH."""
    import importlib.util

    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    found = shutil.which("ruff")
    assert found, "ruff is not installed: pip install -c constraints.txt -e '.[test]' (or pip install ruff)"
    return [found]


def test_ruff_check_passes():
    done = subprocess.run([*ruff_command(), "check", "--no-cache", *CHECKED], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"ruff check {' '.join(CHECKED)}:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"



#: A reference to the project's issue tracker ("issue 18", "issues 4 and 5", "Issue #3").
ISSUE_NUMBER = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)


def test_the_package_names_no_issue_number():
    """Docstrings and comments say what the code does and why; history lives in git, figures in bench/results/
    (where a decision came from a measurement, the code names the figure's section there)."""
    assert ISSUE_NUMBER.search("as measured in issue 18") and ISSUE_NUMBER.search("Issues 4 and 5")
    assert not ISSUE_NUMBER.search("tissue 3") and not ISSUE_NUMBER.search("an issue with 3 words")
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for path in sorted((REPO / "induce").rglob("*"))
             if path.is_file() and path.suffix in {".py", ".cpp", ".md", ".yaml"}
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if ISSUE_NUMBER.search(line)]
    assert not found, "issue numbers in induce/ (say what and why instead):\n" + "\n".join(found)
