"""The project's habits, checked: test modules share helpers through ``tests/helpers.py`` (or fixtures in
``conftest.py``), never by importing another test module; ``ruff check`` (``[tool.ruff]`` in
pyproject.toml) passes; no function is longer than :data:`MAX_FUNCTION_LINES` lines unless its docstring
says why (a sentence starting "Long because"). Both cover :data:`CHECKED` (paths from the repository root).
"""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
#: The folders held to ruff and to the function length (the whole tree once issue 21's move is merged).
CHECKED = ("induce/training", "induce/kernels", "tests", "bench")
MAX_FUNCTION_LINES = 80
LONG_REASON = "Long because"


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


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """``(name, lines)`` of each function longer than ``limit`` lines whose docstring gives no reason."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit and LONG_REASON not in (ast.get_docstring(node) or ""):
                found.append((node.name, lines))
    return found


def test_the_length_check_counts_lines_and_accepts_a_stated_reason():
    body = "".join(f"    x{i} = {i}\n" for i in range(5))
    assert long_functions(f"def f():\n{body}", limit=6) == []
    assert long_functions(f"def f():\n{body}    return x0\n", limit=6) == [("f", 7)]
    reason = f'    """Does f.\n\n    {LONG_REASON} it must."""\n'
    assert long_functions(f"def f():\n{reason}{body}", limit=6) == []
    method = "class C:\n    def g(self):\n        \"\"\"Does g.\"\"\"\n" + body.replace("    ", "        ")
    assert long_functions(method, limit=6) == [("g", 7)]


def test_no_function_is_long_without_a_reason():
    long = [f"{path.relative_to(REPO)}: {name} ({lines} lines)" for folder in CHECKED
            for path in sorted((REPO / folder).rglob("*.py"))
            for name, lines in long_functions(path.read_text(encoding="utf-8"))]
    assert not long, (f"functions over {MAX_FUNCTION_LINES} lines: split them, or say why in the docstring "
                      f"({LONG_REASON} ...):\n" + "\n".join(long))
