"""Every kernel op exists in every tier with one signature, defined where the dispatcher looks for it.

The ops are the functions of :mod:`induce.kernels` (its ``__all__``) that take ``backend``; where each op lives
in each tier is ``induce.kernels._dispatch.TIER_MODULES``. That module must define (not import: no module
re-exports another's op) a function of the op's name with the op's parameters (names, kinds, order,
defaults) less ``backend``, and no module of the package may import an op from another one. A tier module's
other public functions must be declared in its ``TIER_HELPERS``, so a kernel added to one tier cannot go
missing from the others unnoticed. A new op or tier is covered without editing this file.

The modules are read as source (``ast``), not imported: importing the Triton tier decorates its kernels,
which fixes ``TRITON_INTERPRET`` for the whole test process (``test_kernels_triton.py`` sets it first).
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from pathlib import Path
from typing import Callable

import torch

import induce.kernels
from induce.kernels import _dispatch

PACKAGE = "induce.kernels"


def module_source(module: str) -> str:
    """The source of an ``induce.kernels`` module, found without importing it."""
    return Path(importlib.util.find_spec(module).origin).read_text(encoding="utf-8")


def signature(function: ast.FunctionDef) -> list[tuple[str, str, str | None]]:
    """``(name, kind, default source)`` for each parameter of ``function``, in order."""
    args = function.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + [ast.unparse(d) for d in args.defaults]
    params = [(a.arg, "positional-only" if a in args.posonlyargs else "positional", d)
              for a, d in zip(positional, defaults)]
    if args.vararg:
        params.append((args.vararg.arg, "*args", None))
    params += [(a.arg, "keyword-only", None if d is None else ast.unparse(d))
               for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        params.append((args.kwarg.arg, "**kwargs", None))
    return params


def public_functions(module: str, read: Callable[[str], str]) -> dict[str, ast.FunctionDef]:
    """The public functions a module defines itself (imported names do not count)."""
    return {node.name: node for node in ast.parse(read(module)).body
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}


def imported_names(module: str, read: Callable[[str], str]) -> dict[str, str]:
    """``{name bound here: module it comes from}`` of the ``from induce.kernels... import name`` statements
    anywhere in a module."""
    return {alias.asname or alias.name: node.module for node in ast.walk(ast.parse(read(module)))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE)
            for alias in node.names}


def declared_names(module: str, read: Callable[[str], str], name: str) -> set[str]:
    """The strings of a module-level tuple/list/set assignment ``name = (...)`` (empty when absent)."""
    for node in ast.parse(read(module)).body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return set(ast.literal_eval(node.value))
    return set()


def ops(read: Callable[[str], str]) -> dict[str, list[tuple[str, str, str | None]]]:
    """The kernel ops: each public function of the package that takes ``backend``, with its signature less
    ``backend``, except the package's ``COMPOSITE_OPS`` (built on other ops: no tier of their own)."""
    exported = declared_names(PACKAGE, read, "__all__")
    composite = declared_names(PACKAGE, read, "COMPOSITE_OPS")
    found = {}
    for name, function in public_functions(PACKAGE, read).items():
        params = signature(function)
        if name in exported and name not in composite and any(p[0] == "backend" for p in params):
            found[name] = [p for p in params if p[0] != "backend"]
    return found


def tier_problems(read: Callable[[str], str], tier_modules: dict[str, dict[str, str]],
                  tiers: tuple[str, ...] = _dispatch.TIERS) -> list[str]:
    """Every op without a module in a tier, every module that does not define its op or defines it with
    another signature, every entry for a name that is not an op, and every public function of a tier module
    that is neither one of its ops nor a declared helper."""
    found = ops(read)
    problems = [f"TIER_MODULES names {name!r}, which is not a kernel op" for name in tier_modules if name not in found]
    own: dict[str, set[str]] = {}  # module -> the ops it is named for
    for name, params in found.items():
        for tier in tiers:
            module = tier_modules.get(name, {}).get(tier)
            if module is None:
                problems.append(f"{name}: no {tier} module in TIER_MODULES")
                continue
            own.setdefault(module, set()).add(name)
            functions = public_functions(module, read)
            if name not in functions:
                problems.append(f"{module}: defines no {name}() (a re-exported one does not count)")
            elif signature(functions[name]) != params:
                problems.append(f"{module}.{name}{signature(functions[name])} differs from the op's {params}")
    for module, names in sorted(own.items()):
        extra = set(public_functions(module, read)) - names - declared_names(module, read, "TIER_HELPERS")
        problems += [f"{module}.{name}() is public but neither its op nor in its TIER_HELPERS"
                     for name in sorted(extra)]
    return problems


def reexports(read: Callable[[str], str], modules: list[str]) -> list[str]:
    """``module: imports op from other`` for every op that a module other than the package imports by name."""
    names = set(ops(read))
    return [f"{module}: imports {name} from {source}" for module in modules if module != PACKAGE
            for name, source in imported_names(module, read).items() if name in names]


def kernel_modules() -> list[str]:
    """Every module of :mod:`induce.kernels`, the package included."""
    return [PACKAGE] + [info.name for info in pkgutil.walk_packages(induce.kernels.__path__, PACKAGE + ".")]


def test_every_op_is_in_every_tier_with_one_signature():
    assert ops(module_source), "no kernel ops found: has induce.kernels changed how it declares them?"
    assert _dispatch.TIERS == tuple(b for b in _dispatch.BACKENDS if b != "auto")
    assert tier_problems(module_source, _dispatch.TIER_MODULES) == []


def test_no_module_reexports_an_op():
    assert reexports(module_source, kernel_modules()) == []


def test_the_trees_import_no_kernel():
    """Kernels build on trees (:mod:`induce.trees.nodes`, the decoders' tree building), never the reverse:
    no module of :mod:`induce.trees` imports one of :mod:`induce.kernels` or names one in a string."""
    trees = Path(importlib.util.find_spec("induce.trees").origin).parent
    found = []
    for path in sorted(trees.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str) else [])
            found += [f"{path.name}:{node.lineno} {name}" for name in names if name.startswith(PACKAGE)]
    assert found == []


def test_the_dispatcher_returns_the_function_its_module_defines():
    """At run time too: each op and CPU tier resolves to the function of the module named for it."""
    x = torch.zeros(2, 3)
    for name, tiers in _dispatch.TIER_MODULES.items():
        for tier in ("reference", "torch"):
            function = _dispatch.kernel(name, tier, x)
            assert (function.__module__, function.__name__) == (tiers[tier], name)


def test_composite_ops_dispatch_through_other_ops_only():
    """A function declared in ``COMPOSITE_OPS`` calls kernel ops of the package, never ``kernel(...)`` itself
    (it would be an op without tiers), and each name there is a public function taking ``backend``."""
    composite = declared_names(PACKAGE, module_source, "COMPOSITE_OPS")
    functions = public_functions(PACKAGE, module_source)
    for name in composite:
        assert name in functions and any(p[0] == "backend" for p in signature(functions[name])), name
        calls = {getattr(node.func, "id", None) for node in ast.walk(functions[name]) if isinstance(node, ast.Call)}
        assert "kernel" not in calls and calls & set(ops(module_source)), f"{name} calls {sorted(calls)}"


def test_each_op_dispatches_to_its_own_name():
    """``cumax`` must not call ``kernel("linear_scan", ...)``: the name is the contract with the tiers."""
    for name, function in public_functions(PACKAGE, module_source).items():
        if name in ops(module_source):
            called = [node.args[0].value for node in ast.walk(function) if isinstance(node, ast.Call)
                      and getattr(node.func, "id", None) == "kernel" and isinstance(node.args[0], ast.Constant)]
            assert called == [name], f"induce.kernels.{name} dispatches to {called}"


FAKE = {
    PACKAGE: ('__all__ = ["scan", "gate", "tools"]\n'
              'def scan(x, dim=-1, *, reverse=False, backend="auto"): ...\n'
              'def gate(d, window, tau=20.0, backend="auto"): ...\n'
              'def tools(x): ...\n'),
    f"{PACKAGE}.ref": 'def scan(x, dim=-1, *, reverse=False): ...\ndef gate(d, window, tau=20.0): ...\n',
    f"{PACKAGE}.fast": ('from induce.kernels.fast_span import scan\n'
                        'def gate(d, window, tau=10.0): ...\ndef extra(x): ...\ndef helper(x): ...\n'
                        'def _private(x): ...\nTIER_HELPERS = ("helper",)\n'),
    f"{PACKAGE}.fast_span": 'def scan(x, dim, *, reverse=False): ...\n',
    f"{PACKAGE}.gpu": 'def scan(x, dim=-1, *, reverse=False): ...\n',
}


def test_the_check_finds_missing_ops_differing_signatures_reexports_and_undeclared_functions():
    ref, fast, span, gpu = (f"{PACKAGE}.{name}" for name in ("ref", "fast", "fast_span", "gpu"))
    modules = {"scan": {"reference": ref, "torch": fast, "triton": gpu},
               "gate": {"reference": ref, "torch": fast}, "nothing": {"reference": ref}}
    problems = tier_problems(FAKE.__getitem__, modules, ("reference", "torch", "triton"))
    assert problems == [
        "TIER_MODULES names 'nothing', which is not a kernel op",
        f"{fast}: defines no scan() (a re-exported one does not count)",
        f"{fast}.gate[('d', 'positional', None), ('window', 'positional', None), ('tau', 'positional', '10.0')] "
        "differs from the op's [('d', 'positional', None), ('window', 'positional', None), "
        "('tau', 'positional', '20.0')]",
        "gate: no triton module in TIER_MODULES",
        f"{fast}.extra() is public but neither its op nor in its TIER_HELPERS",
    ], problems
    assert "tools" not in " ".join(problems)  # no backend: not an op
    modules["scan"]["torch"] = span  # defined there, with another signature
    assert any(p.startswith(f"{span}.scan[") for p in tier_problems(FAKE.__getitem__, modules))
    assert reexports(FAKE.__getitem__, list(FAKE)) == [f"{fast}: imports scan from {span}"]
