"""Kernel launches of a piece of code, counted at dispatch: what a GPU's launch-bound step costs,
measurable on a CPU.

A recurrent model's training step on a GPU is bound by the launches the host issues (a few µs of
CPU each, ~10-30 µs all told in PyTorch eager), not by the kernels' work. The number of launches is
decided by Python control flow and PyTorch's dispatcher, not by the device, so it can be counted on
any machine. :func:`count_launches` counts, while its block runs:

* **aten launches**: every call of an aten operator that reaches the dispatcher's backend (seen by a
  :class:`~torch.utils._python_dispatch.TorchDispatchMode`, i.e. after autograd and after composite
  operators are split into the operators that have device kernels), in the forward, in the backward
  (the autograd engine carries the mode) and in the optimiser, **except** operators that launch no
  kernel on any device: views and other metadata-only operators (``view``, ``t``, ``unbind``,
  ``_unsafe_view``, ``detach`` ...: the schema's ``is_view``, plus :data:`NO_KERNEL`), allocations
  without a fill (``empty``, ``empty_like`` ...), scalar reads (``_local_scalar_dense``, ``item``: a
  copy to the host, not a kernel), ``record_function`` markers, and calls whose tensor outputs are
  all empty;
* **Triton launches**: every ``kernel[grid](...)`` call of a ``@triton.jit`` kernel (one grid, one
  launch; helper ``@triton.jit`` functions called from inside a kernel are inlined and not counted).
  They are counted at the launcher (``KernelInterface.__getitem__``), so the count is the same with
  the real compiler on a GPU and with Triton's interpreter (``TRITON_INTERPRET=1``) on a CPU; what a
  launch dispatches on the host while it runs (the interpreter's copies between torch and numpy) is
  part of that one launch, not counted again. With ``run_triton=False`` the launch is counted and
  skipped (its outputs stay uninitialised), which is how the Triton tier is counted on a CPU at the
  papers' sizes without the interpreter's hours.

So one dispatched operator counts as one launch. That is exact for most operators (elementwise,
GEMM, a reduction over a small tensor) and a **lower bound** for a few that launch several kernels on
CUDA: cuDNN's LSTM (``_cudnn_rnn``: per-layer, per-step kernels inside one call; on a CPU the
corresponding ``mkldnn_rnn_layer``), multi-tensor ``_foreach_*`` operators (one launch per chunk of
the tensor lists: at most 110 tensors or 320 blocks of 64K elements for a one-list operator, so a few
per call at the papers' sizes), ``embedding_dense_backward`` (a sort and a reduction), two-pass norms
of large tensors. It is the number of times the host enters the dispatcher for device work,
which is what the launch-bound time scales with.

:func:`as_on_cuda` makes a CPU count follow the choices PyTorch makes on CUDA where they change the
number of operators: torch's optimisers take their ``foreach`` implementation (their CUDA default;
on a CPU they default to a per-parameter loop), our recurrent products skip oneDNN's packed weights
(CPU-only) and :class:`~induce.models.common.awd.WeightDropLSTM` puts its weights in one chunk (what it
does for cuDNN). Counting the same step on a GPU with this module gives the device's own count.

Not emulated (a CPU count differs from the device's by these): non-capturable Adam keeps its step
counts on the host on CUDA, so their increment (one ``_foreach_add_``) is not a device launch there;
the LSTM is one ``mkldnn_rnn_layer`` per layer on a CPU, one ``_cudnn_rnn`` on CUDA (both one call
forward and one backward per layer here: our layers are single-layer LSTMs).
"""
from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

#: Operators without a device kernel that the schema does not mark as views: metadata changes and
#: allocations without a fill (their names, as ``OpOverloadPacket`` names).
NO_KERNEL = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "_unsafe_view", "set_", "resize_",
    "resize_as_", "lift_fresh", "lift_fresh_copy", "record_stream", "_local_scalar_dense", "is_same_size",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "_has_compatible_shallow_copy_type",
    "_nested_tensor_size", "is_pinned", "_propagate_xla_data", "detach", "is_nonzero", "equal",
})

#: Namespaces of operators that are markers, not work (``record_function`` around an optimiser step).
NO_KERNEL_NAMESPACES = frozenset({"profiler"})


@dataclass
class LaunchCount:
    """What :func:`count_launches` saw: ``aten`` launches per operator overload name (e.g.
    ``aten.mm.default``), ``triton`` launches per kernel name."""

    aten: Counter = field(default_factory=Counter)
    triton: Counter = field(default_factory=Counter)
    inside_triton: int = field(default=0, repr=False)  # > 0 while a Triton launch runs (its host work is its own)

    @property
    def total(self) -> int:
        """aten launches + Triton launches."""
        return sum(self.aten.values()) + sum(self.triton.values())

    def top(self, n: int = 10) -> list[tuple[str, int]]:
        """The ``n`` most frequent launches (aten operators and Triton kernels together)."""
        return (self.aten + Counter({f"triton:{k}": v for k, v in self.triton.items()})).most_common(n)


def launches_kernel(func, outputs) -> bool:
    """Whether a dispatched aten call counts as a launch (see the module docstring)."""
    name = func.overloadpacket.__name__
    if func.namespace in NO_KERNEL_NAMESPACES or name in NO_KERNEL or getattr(func, "is_view", False):
        return False
    tensors = [t for t in tree_flatten(outputs)[0] if isinstance(t, torch.Tensor)]
    return not tensors or any(t.numel() > 0 for t in tensors)


class _DispatchCounter(TorchDispatchMode):
    def __init__(self, count: LaunchCount):
        super().__init__()
        self.count = count

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        outputs = func(*args, **(kwargs or {}))
        if not self.count.inside_triton and launches_kernel(func, outputs):
            self.count.aten[str(func)] += 1
        return outputs


@contextlib.contextmanager
def _count_triton(count: LaunchCount, run: bool) -> Iterator[None]:
    """Count every ``kernel[grid](...)`` launch; ``run=False`` skips the kernels. No-op without Triton."""
    try:
        from triton.runtime.jit import KernelInterface
    except ImportError:
        yield
        return
    original = KernelInterface.__getitem__

    def counting_getitem(kernel, grid):
        launch = original(kernel, grid)
        name = getattr(kernel, "__name__", None) or getattr(getattr(kernel, "fn", None), "__name__", "kernel")

        def counted(*args, **kwargs):
            count.triton[name] += 1
            if not run:
                return None
            count.inside_triton += 1
            try:
                return launch(*args, **kwargs)
            finally:
                count.inside_triton -= 1

        return counted

    KernelInterface.__getitem__ = counting_getitem
    try:
        yield
    finally:
        KernelInterface.__getitem__ = original


@contextlib.contextmanager
def count_launches(run_triton: bool = True) -> Iterator[LaunchCount]:
    """``with count_launches() as count: step()`` -> ``count.total`` launches (module docstring).

    ``run_triton=False``: Triton kernels are counted but not run (outputs left uninitialised; for
    counting the Triton tier at full size in the CPU interpreter, where values do not matter)."""
    count = LaunchCount()
    with _count_triton(count, run_triton), _DispatchCounter(count):
        yield count


@contextlib.contextmanager
def as_on_cuda() -> Iterator[None]:
    """Inside, a CPU step dispatches the operators it would on CUDA where PyTorch or this project
    choose by device: torch's optimisers take their ``foreach`` implementation (the CUDA default),
    :class:`~induce.models.common.awd.RecurrentProjection` uses plain ``mm`` (no oneDNN packing) and
    :class:`~induce.models.common.awd.WeightDropLSTM` passes its weights in one chunk (as for cuDNN)."""
    from torch.optim import optimizer as torch_optimizer

    from induce.models.common.awd import RecurrentProjection, WeightDropLSTM

    # torch decides an optimiser's default implementation from this list of device types (a private
    # name: where a torch version lacks it, the optimisers keep their CPU default)
    supported = getattr(torch_optimizer, "_get_foreach_kernels_supported_devices", None)
    packing, one_chunk = RecurrentProjection.use_packing, WeightDropLSTM.__dict__["_one_chunk_by_default"]
    RecurrentProjection.use_packing = False
    WeightDropLSTM._one_chunk_by_default = staticmethod(lambda x: True)
    if supported is not None:
        torch_optimizer._get_foreach_kernels_supported_devices = lambda: [*supported(), "cpu"]
    try:
        yield
    finally:
        RecurrentProjection.use_packing = packing
        WeightDropLSTM._one_chunk_by_default = one_chunk
        if supported is not None:
            torch_optimizer._get_foreach_kernels_supported_devices = supported
