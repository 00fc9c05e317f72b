"""The package layout: no import circle between induce's modules (the CLI's, induce.cli, included), only the
agreed modules at the root of ``induce``, and no long function without a reason.

Imports are read from the source (``ast``), those inside functions included: a circle hidden behind a
function-level import (the report and its findings once imported each other that way) is still a circle.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("induce",)  # the CLI is induce.cli
#: The modules that stay at the root of ``induce`` (README, "Layout"); ``__main__`` is ``python -m induce``.
ROOT_MODULES = {"__init__", "__main__", "config", "errors", "files"}


def module_files() -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of :data:`PACKAGES`."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that module ``name`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import sub` imports the submodule; `from mod import name` the module
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        out.update(target for target in targets if target in modules and target != name)
    return out


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    names = set(files)
    return {name: imports_of(name, path, names) for name, path in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(node):
        # iterative Tarjan: the graph is small, but recursion depth is not worth the risk
        work = [(node, iter(sorted(graph[node])))]
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[current] = min(low[current], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[current])
                if low[current] == index[current]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == current:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_imports_of_resolves_relative_and_submodule_imports(tmp_path):
    source = tmp_path / "__init__.py"
    source.write_text("from .b import x\nfrom . import c\ndef f():\n    from p.d import y\n    import p.e\n")
    assert imports_of("p", source, {"p", "p.b", "p.c", "p.d", "p.e"}) == {"p.b", "p.c", "p.d", "p.e"}
    module = tmp_path / "m.py"
    module.write_text("from ..q import z\nfrom .b import x\n")
    assert imports_of("p.s.m", module, {"p.q", "p.s.b"}) == {"p.q", "p.s.b"}


def test_no_import_circle():
    found = circles(import_graph())
    assert not found, "import circles (each: modules that import each other, directly or not):\n" + "\n".join(
        " <-> ".join(component) for component in found)


def test_only_the_agreed_modules_at_the_root():
    loose = {path.stem for path in (ROOT / "induce").glob("*.py")} - ROOT_MODULES
    assert not loose, f"modules at the root of induce/: {sorted(loose)}; give each a package (README, Layout)"


def test_every_package_says_what_lives_in_it():
    for init in sorted((ROOT / "induce").rglob("__init__.py")):
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert docstring and len(docstring) > 40, f"{init.relative_to(ROOT)}: no docstring saying what lives here"


#: Functions longer than :data:`MAX_FUNCTION_LINES` may stay so when their docstring says why, in a
#: sentence starting "Long because".
MAX_FUNCTION_LINES = 80
LONG_REASON = "Long because"
#: Long functions not yet split or explained, as ``path::qualified name``: this list only shrinks (an
#: entry that is no longer long, or gone, fails the test too, so that it is taken off).
LONG_FUNCTIONS_LEFT: set[str] = set()


def long_functions(paths, root: Path = ROOT) -> dict[str, int]:
    """``{"path::Class.function": lines}`` of the functions (methods and nested functions included) longer
    than :data:`MAX_FUNCTION_LINES` lines, signature and docstring included, whose docstring gives no reason."""
    found = {}
    for path in paths:
        relative = Path(path).relative_to(root).as_posix()

        def visit(node, prefix: str, relative: str = relative) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        lines = child.end_lineno - child.lineno + 1
                        if lines > MAX_FUNCTION_LINES and LONG_REASON not in (ast.get_docstring(child) or ""):
                            found[f"{relative}::{name}"] = lines
                    visit(child, name + ".")

        visit(ast.parse(Path(path).read_text(encoding="utf-8")), "")
    return found


def test_long_function_finder(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    reason = '"""' + LONG_REASON + ' it is a probe."""'
    source = tmp_path / "probe.py"
    method_body = body.replace("\n", "\n    ")
    source.write_text(f"class A:\n    def f(self):\n    {method_body}\n\n"
                      f"def g():\n    {reason}\n{body}\n\ndef h():\n    return 1\n")
    assert long_functions([source], root=tmp_path) == {"probe.py::A.f": MAX_FUNCTION_LINES + 1}


def test_no_long_function_without_a_reason():
    found = long_functions(path for folder in (*PACKAGES, "tests", "bench")
                           for path in sorted((ROOT / folder).rglob("*.py")))
    new = {name: lines for name, lines in found.items() if name not in LONG_FUNCTIONS_LEFT}
    assert not new, (f"functions over {MAX_FUNCTION_LINES} lines: split them, or say why in the docstring "
                     f"('{LONG_REASON} ...'): {new}")
    done = sorted(LONG_FUNCTIONS_LEFT - set(found))
    assert not done, f"no longer long (take them off LONG_FUNCTIONS_LEFT): {done}"
