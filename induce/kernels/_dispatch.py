"""Backend selection for :mod:`induce.kernels`.

Three tiers implement every kernel op:

* ``"reference"``: plain PyTorch loops in (at least) float32, obviously correct, slow; the tests'
  ground truth.
* ``"torch"``: vectorised PyTorch, differentiable by autograd; the default on CPU.
* ``"triton"``: Triton kernels with hand-written backward passes; the default on CUDA tensors.

Each op is a function of the op's name in one module per tier of its op package (:data:`TIER_MODULES`):
the recurrent models' ops in :mod:`induce.kernels.recurrent`, the PCFGs' inside algorithms in
:mod:`induce.kernels.pcfg`. The dispatcher imports that module itself; no module re-exports another's op.

``backend="auto"`` (every kernel's default) defers to the process-wide choice made with
:func:`set_backend` / :func:`use_backend` (the CLI's ``--kernels``); when that is ``"auto"`` too,
CUDA tensors go to Triton if it imports and everything else goes to the torch tier.

Triton is imported lazily, only when the Triton tier is first needed, so that a test module can set
``TRITON_INTERPRET=1`` (Triton's CPU interpreter) before Triton reads it: Triton reads that variable
when a kernel is decorated, i.e. when a Triton module is imported. The first need imports every
Triton module of :data:`TIER_MODULES` at once, so that all kernels are decorated under one setting.
"""
from __future__ import annotations

import contextlib
import importlib
import os
from typing import Callable, Dict, Iterator, List, Optional

import torch

from induce.errors import InduceError

BACKENDS = ("auto", "reference", "torch", "triton")
#: The concrete tiers (every backend but ``"auto"``).
TIERS = ("reference", "torch", "triton")

_RECURRENT = "induce.kernels.recurrent"
_PCFG = "induce.kernels.pcfg"
_RECURRENT_TIERS = {"reference": f"{_RECURRENT}.reference", "torch": f"{_RECURRENT}.torch_impl",
                    "triton": f"{_RECURRENT}.triton_impl"}
_SPAN_TIERS = {**_RECURRENT_TIERS, "triton": f"{_RECURRENT}.triton_span"}

#: ``{op: {tier: module}}``: the module defining each op of :mod:`induce.kernels` in each tier, as a function
#: of the op's name and signature (less ``backend``); ``tests/test_kernel_tiers.py`` checks it by introspection.
TIER_MODULES: Dict[str, Dict[str, str]] = {
    "cumax": _RECURRENT_TIERS,
    "onlstm_cell": _RECURRENT_TIERS,
    "stick_breaking_gates": _RECURRENT_TIERS,
    "linear_scan": _RECURRENT_TIERS,
    "span_representations": _SPAN_TIERS,
    "span_attention": _SPAN_TIERS,
    "inside": {"reference": f"{_PCFG}.dense_reference", "torch": f"{_PCFG}.dense_torch",
               "triton": f"{_PCFG}.dense_triton"},
    "inside_lowrank": {"reference": f"{_PCFG}.lowrank_reference", "torch": f"{_PCFG}.lowrank_torch",
                       "triton": f"{_PCFG}.lowrank_triton"},
    "inside_simple": {"reference": f"{_PCFG}.simple_reference", "torch": f"{_PCFG}.simple_torch",
                      "triton": f"{_PCFG}.simple_triton"},
}

_global_backend = "auto"
_triton_loaded = False
_triton_import_error: Optional[str] = None


class KernelBackendError(InduceError):
    """A kernel backend was asked for that does not exist or cannot run here."""


def _check_name(name: str) -> str:
    if name not in BACKENDS:
        raise KernelBackendError(f"unknown kernel backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return name


def set_backend(name: str) -> None:
    """Set the process-wide backend used when a kernel is called with ``backend="auto"``."""
    global _global_backend
    _global_backend = _check_name(name)


def get_backend() -> str:
    """The process-wide backend (``"auto"`` unless :func:`set_backend` changed it)."""
    return _global_backend


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Context manager: ``with use_backend("reference"): ...`` restores the previous choice on exit."""
    previous = get_backend()
    set_backend(name)
    try:
        yield
    finally:
        set_backend(previous)


def triton_interpreting() -> bool:
    """Whether Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def triton_unavailable_reason() -> Optional[str]:
    """``None`` when the Triton tier can be imported, otherwise why not."""
    _load_triton()
    return _triton_import_error


def triton_modules() -> List[str]:
    """The modules of the Triton tier, each once."""
    return sorted({tiers["triton"] for tiers in TIER_MODULES.values()})


def _load_triton() -> bool:
    """Import every module of the Triton tier (on the first call); whether they all imported."""
    global _triton_loaded, _triton_import_error
    if not _triton_loaded and _triton_import_error is None:
        try:
            for module in triton_modules():
                importlib.import_module(module)
        except Exception as error:  # ImportError, or a Triton that fails to initialise
            _triton_import_error = f"{type(error).__name__}: {error}"
        else:
            _triton_loaded = True
    return _triton_loaded


def resolve(backend: str, *tensors: Optional[torch.Tensor]) -> str:
    """The concrete tier (``reference``/``torch``/``triton``) for a call on ``tensors``."""
    name = _check_name(backend)
    if name == "auto":
        name = _global_backend
    on_cuda = any(t is not None and t.is_cuda for t in tensors)
    if name == "auto":
        if on_cuda and _load_triton():
            return "triton"
        return "torch"
    if name == "triton":
        if not _load_triton():
            raise KernelBackendError(f"kernel backend 'triton' is unavailable: {_triton_import_error}")
        if not on_cuda and not triton_interpreting():
            raise KernelBackendError(
                "kernel backend 'triton' needs CUDA tensors (or TRITON_INTERPRET=1 set before Triton is "
                "imported, for Triton's slow CPU interpreter); use --kernels torch on CPU"
            )
    return name


def implementation(op: str, tier: str) -> Callable:
    """The function implementing ``op`` in ``tier`` (``reference``, ``torch`` or ``triton``), from the module
    :data:`TIER_MODULES` names for it (imported on first use)."""
    if tier == "triton" and not _load_triton():
        raise KernelBackendError(f"kernel backend 'triton' is unavailable: {_triton_import_error}")
    return getattr(importlib.import_module(TIER_MODULES[op][tier]), op)


def kernel(op: str, backend: str, *tensors: Optional[torch.Tensor]) -> Callable:
    """The function implementing ``op`` in the tier chosen by :func:`resolve` for ``tensors``."""
    return implementation(op, resolve(backend, *tensors))
