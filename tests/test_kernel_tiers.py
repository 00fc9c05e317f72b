"""Every kernel op exists in every tier with one signature.

The ops are the functions of :mod:`induce.kernels` (its ``__all__``) that take ``backend``; the tiers are
``induce.kernels._dispatch.TIER_MODULES``. Each tier module must define (or re-export from another
``induce.kernels`` module) a function of each op's name with the op's parameters (names, kinds, order,
defaults) less ``backend``. The only gaps allowed are the ops declared in ``_dispatch.NO_TRITON_TIER``;
a tier's other public functions must be declared in its ``TIER_HELPERS``, so a kernel added to one tier
cannot go missing from the others unnoticed. A new op or tier is covered without editing this file.

The modules are read as source (``ast``), not imported: importing the Triton tier decorates its kernels,
which fixes ``TRITON_INTERPRET`` for the whole test process (``test_kernels_triton.py`` sets it first).
"""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Callable

import pytest
import torch

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
    """The public functions a module defines or re-exports from another module of the package."""
    found = {}
    for node in ast.parse(read(module)).body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            found[node.name] = node
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
            exported = public_functions(node.module, read)
            found.update({alias.asname or alias.name: exported[alias.name] for alias in node.names
                          if alias.name in exported and not (alias.asname or alias.name).startswith("_")})
    return found


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


def tier_problems(read: Callable[[str], str], tiers: dict[str, str], no_triton: dict[str, str]) -> list[str]:
    """Every op missing from a tier, every signature that differs from the op's, every stale declaration
    and every public tier function that is neither an op nor a declared helper."""
    problems = [f"NO_TRITON_TIER names {name!r}, which is not a kernel op" for name in no_triton
                if name not in ops(read)]
    for tier, module in tiers.items():
        functions = public_functions(module, read)
        for name, params in ops(read).items():
            exempt = tier == "triton" and name in no_triton
            if name not in functions and not exempt:
                problems.append(f"{module}: no {name}() (declare it in NO_TRITON_TIER if that is deliberate)")
            elif name in functions and exempt:
                problems.append(f"{module}: defines {name}(), which NO_TRITON_TIER says it lacks")
            elif name in functions and signature(functions[name]) != params:
                problems.append(f"{module}.{name}{signature(functions[name])} differs from the op's {params}")
        helpers = declared_names(module, read, "TIER_HELPERS")
        problems += [f"{module}.{name}() is public but neither a kernel op nor in its TIER_HELPERS"
                     for name in sorted(set(functions) - set(ops(read)) - helpers)]
    return problems


def test_every_op_is_in_every_tier_with_one_signature():
    assert ops(module_source), "no kernel ops found: has induce.kernels changed how it declares them?"
    assert set(_dispatch.TIER_MODULES) == set(_dispatch.BACKENDS) - {"auto"}
    assert tier_problems(module_source, _dispatch.TIER_MODULES, _dispatch.NO_TRITON_TIER) == []


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


def test_the_check_finds_missing_ops_differing_signatures_and_undeclared_functions():
    tiers = {"reference": f"{PACKAGE}.ref", "torch": f"{PACKAGE}.fast", "triton": f"{PACKAGE}.gpu"}
    problems = tier_problems(FAKE.__getitem__, tiers, {})
    assert len(problems) == 4, problems
    assert "induce.kernels.fast.scan[('x', 'positional', None)" in problems[0]  # re-exported, default dropped
    assert "induce.kernels.fast.gate" in problems[1] and "'20.0'" in problems[1]
    assert "induce.kernels.fast.extra() is public but neither" in problems[2]
    assert problems[3].startswith("induce.kernels.gpu: no gate()")
    assert "tools" not in " ".join(problems)  # no backend: not an op

    declared = tier_problems(FAKE.__getitem__, tiers, {"gate": "why", "scan": "why", "nothing": "why"})
    assert "NO_TRITON_TIER names 'nothing', which is not a kernel op" in declared
    assert "induce.kernels.gpu: defines scan(), which NO_TRITON_TIER says it lacks" in declared
    assert not any("gpu: no gate()" in p for p in declared)


def test_an_op_without_a_triton_tier_runs_on_torch_under_auto_and_says_why_when_asked_for(monkeypatch):
    from induce.kernels.recurrent import torch_impl

    monkeypatch.setattr(_dispatch, "NO_TRITON_TIER", {"cumax": "no kernel written yet"})
    monkeypatch.setattr(_dispatch, "resolve", lambda backend, *tensors: "triton")
    x = torch.zeros(2, 3)
    assert _dispatch.kernel("cumax", "auto", x) is torch_impl.cumax
    with pytest.raises(_dispatch.KernelBackendError, match="'cumax' has no Triton tier .no kernel written yet."):
        _dispatch.kernel("cumax", "triton", x)
