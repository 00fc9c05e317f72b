"""Backend selection for :mod:`induce.kernels`.

Three tiers implement every kernel:

* ``"reference"``: plain PyTorch loops in (at least) float32, obviously correct, slow; the tests'
  ground truth.
* ``"torch"``: vectorised PyTorch, differentiable by autograd; the default on CPU.
* ``"triton"``: Triton kernels with hand-written backward passes; the default on CUDA tensors.

``backend="auto"`` (every kernel's default) defers to the process-wide choice made with
:func:`set_backend` / :func:`use_backend` (the CLI's ``--kernels``); when that is ``"auto"`` too,
CUDA tensors go to Triton if it imports and everything else goes to the torch tier.

Triton is imported lazily, only when the Triton tier is first needed, so that a test module can set
``TRITON_INTERPRET=1`` (Triton's CPU interpreter) before Triton reads it: Triton reads that variable
when a kernel is decorated, i.e. when :mod:`induce.kernels.recurrent.triton_impl` is imported.
"""
from __future__ import annotations

import contextlib
import importlib
import os
from types import ModuleType
from typing import Callable, Iterator, Optional

import torch

from induce.errors import InduceError

BACKENDS = ("auto", "reference", "torch", "triton")
#: The module implementing each tier; every op of :mod:`induce.kernels` is a function of the same name and
#: signature (less ``backend``) in each of them (``tests/test_kernel_tiers.py`` checks it by introspection).
TIER_MODULES = {
    "reference": "induce.kernels.recurrent.reference",
    "torch": "induce.kernels.recurrent.torch_impl",
    "triton": "induce.kernels.recurrent.triton_impl",
}
#: Ops deliberately left out of the Triton tier, ``{op: why}``: the one place such a gap is declared (the
#: reference and torch tiers implement every op: one is the tests' ground truth, the other the CPU
#: default). Under ``backend="auto"`` such an op runs on the torch tier; asking for ``"triton"`` by
#: name raises :class:`KernelBackendError` with the reason. Empty: every op has a Triton kernel.
NO_TRITON_TIER: dict[str, str] = {}

_global_backend = "auto"
_triton_module: Optional[ModuleType] = None
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


def _load_triton() -> Optional[ModuleType]:
    global _triton_module, _triton_import_error
    if _triton_module is None and _triton_import_error is None:
        try:
            _triton_module = importlib.import_module(TIER_MODULES["triton"])
        except Exception as error:  # ImportError, or a Triton that fails to initialise
            _triton_import_error = f"{type(error).__name__}: {error}"
    return _triton_module


def resolve(backend: str, *tensors: Optional[torch.Tensor]) -> str:
    """The concrete tier (``reference``/``torch``/``triton``) for a call on ``tensors``."""
    name = _check_name(backend)
    if name == "auto":
        name = _global_backend
    on_cuda = any(t is not None and t.is_cuda for t in tensors)
    if name == "auto":
        if on_cuda and _load_triton() is not None:
            return "triton"
        return "torch"
    if name == "triton":
        if _load_triton() is None:
            raise KernelBackendError(f"kernel backend 'triton' is unavailable: {_triton_import_error}")
        if not on_cuda and not triton_interpreting():
            raise KernelBackendError(
                "kernel backend 'triton' needs CUDA tensors (or TRITON_INTERPRET=1 set before Triton is "
                "imported, for Triton's slow CPU interpreter); use --kernels torch on CPU"
            )
    return name


def kernel(op: str, backend: str, *tensors: Optional[torch.Tensor]) -> Callable:
    """The function implementing ``op`` in the tier chosen by :func:`resolve` for ``tensors``.

    An op declared in :data:`NO_TRITON_TIER` runs on the torch tier where ``"auto"`` chose Triton.
    """
    name = resolve(backend, *tensors)
    if name == "triton" and op in NO_TRITON_TIER:
        if _check_name(backend) == "auto" and _global_backend == "auto":
            name = "torch"
        else:
            raise KernelBackendError(f"kernel {op!r} has no Triton tier ({NO_TRITON_TIER[op]}); use --kernels torch")
    module = _load_triton() if name == "triton" else importlib.import_module(TIER_MODULES[name])
    return getattr(module, op)
