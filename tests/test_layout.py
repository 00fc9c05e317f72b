"""The package layout: layers that only point down, no import circle between induce's modules (the CLI's,
induce.cli, included), only the agreed modules at the root of ``induce``, and no long function without a reason.

The layers are stated once, in the docstring of ``induce/__init__.py`` (lowest first); every module belongs to
the layer of its top-level package (``induce.models.pcfg.model``: ``models``; ``induce.config``: ``config``; the
package ``induce`` itself: ``induce``). A module may use modules of its own layer and of lower ones.

References are read from the source (``ast``): every import, those inside functions included (a circle hidden
behind a function-level import is still a circle), and every string literal that names a module of induce,
``"induce.trees.decoders:peel_decoder"`` or ``"induce.models.onlstm.model"`` (imported on first use, so no import
statement shows it).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("induce",)  # the CLI is induce.cli
#: The modules that stay at the root of ``induce`` (README, "Layout"); ``__main__`` is ``python -m induce``.
ROOT_MODULES = {"__init__", "__main__", "config", "errors", "files"}
#: A string literal that names a module (and maybe one of its attributes): ``"induce.x.y"``, ``"induce.x.y:attr"``.
MODULE_STRING = re.compile(r"induce(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_][\w.]*)?")

#: Upward references that the branches reorganising ``induce/kernels/`` (compile-check tooling to
#: ``induce/devtools/``; MBR/Viterbi tree building in one direction between ``trees/`` and ``kernels/``) and
#: ``induce/training/`` remove. Merge-time list: empty it when those branches land. An entry that is no longer
#: an upward reference fails the test too, so that it is taken off.
UPWARD_BEING_FIXED: set[tuple[str, str]] = set()
#: Layers named in the order whose package does not exist yet (added by a branch being merged); merge-time
#: list as well.
LAYERS_NOT_YET_CREATED: set[str] = set()


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


def references_of(name: str, path: Path, modules: set[str], strings: bool = True) -> dict[str, int]:
    """``{module: first line}`` of the modules of ``modules`` that module ``name`` imports anywhere in its
    source, or (``strings``) names in a string literal (:data:`MODULE_STRING`)."""
    is_package = path.name == "__init__.py"
    out: dict[str, int] = {}
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
        elif (strings and isinstance(node, ast.Constant) and isinstance(node.value, str)
              and MODULE_STRING.fullmatch(node.value)):
            dotted = node.value.partition(":")[0]
            # "induce.pkg.module.attribute": the longest prefix that is a module
            parts = dotted.split(".")
            targets = [next((".".join(parts[:end]) for end in range(len(parts), 0, -1)
                             if ".".join(parts[:end]) in modules), dotted)]
        else:
            continue
        for target in targets:
            if target in modules and target != name:
                out.setdefault(target, node.lineno)
    return out


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that module ``name`` imports anywhere in its source."""
    return set(references_of(name, path, modules, strings=False))


def import_graph(strings: bool = False) -> dict[str, set[str]]:
    """``{module: the modules it imports}`` (``strings``: and those it names in a string literal)."""
    files = module_files()
    names = set(files)
    return {name: set(references_of(name, path, names, strings)) for name, path in files.items()}


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


def layer_order(init: Path = ROOT / "induce" / "__init__.py") -> list[set[str]]:
    """The layers, lowest first, as ``induce/__init__.py``'s docstring states them: the indented lines after
    the paragraph that starts "Layers, lowest first", ``a, b < c < ...``."""
    docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    _, found, rest = docstring.partition("Layers, lowest first")
    assert found, f"{init}: its docstring states no layer order (a paragraph starting 'Layers, lowest first')"
    block = rest.split("::", 1)[1].strip("\n").split("\n\n")[0]
    return [{name.strip() for name in layer.split(",")} for layer in " ".join(block.split()).split("<")]


def layer_of(module: str) -> str:
    """``induce.models.pcfg.model`` -> ``models``; ``induce.config`` -> ``config``; ``induce`` -> ``induce``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_references(graph: dict[str, set[str]], order: list[set[str]]) -> set[tuple[str, str]]:
    """``(module, referenced module)`` pairs where the referenced module's layer is above the module's."""
    rank = {name: index for index, layer in enumerate(order) for name in layer}
    return {(module, target) for module, targets in graph.items() for target in targets
            if rank[layer_of(target)] > rank[layer_of(module)]}


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


def test_references_of_reads_module_strings(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('A = "p.q:f"\nB = ("induce.x.y:attr", "induce.x.z", "induce.x.y.Class.method")\n'
                      'C = "see induce.x.w"  # a sentence naming a module is not a reference\n')
    modules = {"induce.x.y", "induce.x.z", "induce.x.w"}
    assert references_of("induce.a", source, modules) == {"induce.x.y": 2, "induce.x.z": 2}


def test_layer_order_is_read_from_the_package_docstring(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text('"""Toolkit.\n\nLayers, lowest first (a note)::\n\n    a, b < c\n    < d\n\nMore text."""\n')
    assert layer_order(init) == [{"a", "b"}, {"c"}, {"d"}]
    graph = {"induce.c.m": {"induce.a", "induce.d.n"}, "induce.a": {"induce.b.k"}, "induce.b.k": set(),
             "induce.d.n": set()}
    assert upward_references(graph, layer_order(init)) == {("induce.c.m", "induce.d.n")}


def test_every_package_has_a_layer():
    order = layer_order()
    named = [name for layer in order for name in layer]
    assert len(named) == len(set(named)), f"a name in two layers of the order: {named}"
    present = {layer_of(module) for module in module_files()}
    missing = sorted(present - set(named))
    assert not missing, f"packages without a layer: {missing}; place them in induce/__init__.py's layer order"
    absent = sorted(set(named) - present - LAYERS_NOT_YET_CREATED)
    assert not absent, f"layers without a package (take them off the order in induce/__init__.py): {absent}"
    arrived = sorted(LAYERS_NOT_YET_CREATED & present)
    assert not arrived, f"these packages exist now (take them off LAYERS_NOT_YET_CREATED): {arrived}"


def test_readme_shows_the_layer_order():
    """README's Layout section repeats the order of ``induce/__init__.py`` (the one the test reads)."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    stated = " < ".join(", ".join(sorted(layer)) for layer in layer_order())
    shown = readme.partition("Layers, lowest first")[2].partition("```")[2].partition("```")[0]
    assert [{n.strip() for n in layer.split(",")} for layer in shown.split("<")] == layer_order(), (
        f"README.md's layer order differs from induce/__init__.py's: {stated}")


def test_layers_point_down():
    """No module imports, or names in a string, a module of a higher layer (induce/__init__.py's order)."""
    files = module_files()
    order = layer_order()
    found = upward_references(import_graph(strings=True), order)
    new = sorted(found - UPWARD_BEING_FIXED)
    lines = []
    for module, target in new:
        line = references_of(module, files[module], set(files))[target]
        lines.append(f"{files[module].relative_to(ROOT)}:{line}: {module} ({layer_of(module)}) -> {target} "
                     f"({layer_of(target)})")
    assert not new, ("references to a higher layer (move the code, or let the higher layer register itself "
                     "with the lower one):\n" + "\n".join(lines))
    fixed = sorted(UPWARD_BEING_FIXED - found)
    assert not fixed, f"no longer upward (take them off UPWARD_BEING_FIXED): {fixed}"


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
