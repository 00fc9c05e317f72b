"""Triton launches recorded instead of run, on a machine without a GPU (:func:`intercept`).

Within :func:`intercept`, the kernel dispatcher sends CPU tensors to the Triton tier; a stand-in
driver answers Triton's questions about the device (an sm_90 target, device 0, stream 0); and
Triton's ``jit_cache_hook``, called before each launch would compile, records the launch's
specialisation (argument types, alignment and integer classes, constexprs, warps, stages) as a
:class:`Variant` and returns True, so that nothing compiles and nothing runs (the kernels' outputs
stay uninitialised). The tier's launchers (``cumax``, ``span_attention``, ...) are wrapped too: their
calls are kept as :class:`LauncherCall` (tensor arguments as shapes and dtypes), for
:mod:`induce.devtools.compile_workloads` to call again at other sizes.

Unlike :mod:`induce.devtools.launches` (which counts launches, through the interpreter on a CPU),
this goes through Triton's real JIT path up to the point where it would compile, so a variant here
is exactly what a GPU would compile. The hook's arguments and the driver methods used are the same
in Triton 3.6 and 3.9. Kernels that
were decorated under ``TRITON_INTERPRET=1`` (the interpreter tests set it when pytest imports them)
cannot be recorded: use a fresh process (:mod:`induce.devtools.compile_check` does).
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
from typing import Any, Callable, Iterator, Optional

from induce.kernels._dispatch import KernelBackendError

#: The compile target: an H100 (compute capability 9.0, 32 threads per warp).
TARGET = ("cuda", 90, 32)


@dataclasses.dataclass
class Variant:
    """One compiled form of a kernel: what ``triton.compile`` needs, plus where it was first launched."""

    kernel: str
    module: str
    signature: dict
    constants: dict  # argument path -> constexpr value
    attrs: dict  # argument path -> specialisation attributes (divisibility by 16, ...)
    options: dict  # num_warps, num_stages, ...
    seen_in: str  # the first workload that launched it (config and phase)
    order: tuple = ()  # (config number, phase number) of ``seen_in``: the first sighting wins a merge
    sightings: set = dataclasses.field(default_factory=set)  # every workload that launched it

    def constexpr_text(self) -> str:
        names = list(self.signature)
        parts = []
        for path, value in sorted(self.constants.items()):
            name = names[path[0]] if len(path) == 1 and path[0] < len(names) else str(path)
            if self.signature.get(name) == "constexpr":
                parts.append(f"{name}={value}")
        return " ".join(parts)

    def dtype_text(self) -> str:
        """The pointer dtypes, e.g. ``fp32`` or ``bf16 c:fp32`` (the most common one first, then the others)."""
        pointers = {name: ty[1:] for name, ty in self.signature.items() if isinstance(ty, str) and ty.startswith("*")}
        if not pointers:
            return "-"
        counts: dict = {}
        for ty in pointers.values():
            counts[ty] = counts.get(ty, 0) + 1
        main = max(counts, key=lambda t: (counts[t], t == "fp32"))
        others = [f"{name.removesuffix('_ptr')}:{ty}" for name, ty in pointers.items() if ty != main]
        return " ".join([main] + others)

    def divisible_text(self) -> str:
        """Integer arguments Triton specialised as multiples of 16 (``D H`` ...): part of the variant."""
        names = list(self.signature)
        return " ".join(names[p[0]] for p, a in sorted(self.attrs.items())
                        if len(p) == 1 and any(x[0] == "tt.divisibility" for x in a)
                        and not str(self.signature[names[p[0]]]).startswith("*"))

    def unaligned_text(self) -> str:
        """Pointer arguments not known to be 16-byte aligned (their loads cannot be vectorised)."""
        names = list(self.signature)
        aligned = {names[p[0]] for p, a in self.attrs.items()
                   if len(p) == 1 and any(x[0] == "tt.divisibility" for x in a)}
        loose = [n.removesuffix("_ptr") for n, ty in self.signature.items()
                 if isinstance(ty, str) and ty.startswith("*") and n not in aligned]
        return ",".join(loose)

    def spec(self) -> dict:
        """A picklable / JSON-able description (tuple keys become lists)."""
        return {
            "kernel": self.kernel, "module": self.module, "signature": self.signature,
            "constants": [[list(k), v] for k, v in self.constants.items()],
            "attrs": [[list(k), v] for k, v in self.attrs.items()],
            "options": self.options, "seen_in": self.seen_in, "sightings": sorted(self.sightings),
            "constexprs": self.constexpr_text(), "dtypes": self.dtype_text(), "divisible_by_16": self.divisible_text(),
            "unaligned": self.unaligned_text(),
        }


class _StandInDriver:
    """Answers the questions Triton's launch path asks of the active driver, for a device that is not here."""

    def __init__(self, target):
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def set_current_device(self, device):
        pass

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def is_active(self):
        return True


@dataclasses.dataclass(frozen=True)
class TensorArg:
    """A tensor argument of a recorded launcher call: its shape and dtype."""

    shape: tuple
    dtype: Any

    def make(self, shape: Optional[tuple] = None):
        import torch

        return torch.zeros(self.shape if shape is None else shape, dtype=self.dtype)


@dataclasses.dataclass
class LauncherCall:
    """A call of a Triton-tier launcher: its name, arguments (tensors as :class:`TensorArg`) and grad mode."""

    name: str
    arguments: dict
    grad: bool


class Recorder:
    """Collects the kernel variants (from Triton's hook) and the launcher calls (from wrappers).

    ``label`` / ``kind`` / ``order`` say what is being driven (e.g. ``"onlstm.yaml"``, ``"train bf16"``);
    ``driven`` lists the labels of the configs driven so far.
    """

    def __init__(self):
        self.variants: dict = {}
        self.calls: dict = {}
        self.label, self.kind, self.order = "", "", ()
        self.launches = 0
        self.driven: list = []

    def hook(self, *, key, fn, compile, **_ignored) -> bool:
        self.launches += 1
        ident = (fn.module, fn.name, str(key))
        variant = self.variants.get(ident)
        if variant is None:
            options = {k: compile[k] for k in ("num_warps", "num_ctas", "num_stages", "enable_fp_fusion",
                                                 "launch_cooperative_grid") if k in compile}
            variant = self.variants[ident] = Variant(
                kernel=fn.name, module=fn.jit_function.fn.__module__, signature=dict(compile["signature"]),
                constants=dict(compile["constants"]), attrs=dict(compile["configs"][0]), options=options,
                seen_in=f"{self.label} {self.kind}".strip(), order=self.order,
            )
        variant.sightings.add(f"{self.label} {self.kind}".strip())
        return True  # skip the compilation and the launch: nothing runs

    def merge(self, other: Recorder) -> None:
        """Add ``other``'s variants, calls and driven configs (a variant keeps its earliest sighting)."""
        self.launches += other.launches
        self.driven += other.driven
        for ident, variant in other.variants.items():
            mine = self.variants.get(ident)
            if mine is None:
                self.variants[ident] = variant
            else:
                mine.sightings |= variant.sightings
                if variant.order < mine.order:
                    mine.seen_in, mine.order = variant.seen_in, variant.order
        for key, call in other.calls.items():
            self.calls.setdefault(key, call)

    def wrap(self, name: str, launcher: Callable) -> Callable:
        parameters = inspect.signature(launcher)

        def recorded(*args, **kwargs):
            import torch

            bound = parameters.bind(*args, **kwargs)
            bound.apply_defaults()
            described = {k: TensorArg(tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else v
                         for k, v in bound.arguments.items()}
            call = LauncherCall(name, described, torch.is_grad_enabled())
            self.calls.setdefault(repr((name, sorted(described.items(), key=lambda kv: kv[0]), call.grad)), call)
            return launcher(*args, **kwargs)

        return recorded


def _interpreted(module) -> bool:
    from triton.runtime.jit import JITFunction

    return any(not isinstance(v, JITFunction) and type(v).__name__ == "InterpretedFunction"
               for v in vars(module).values())


@contextlib.contextmanager
def intercept(recorder: Recorder) -> Iterator[None]:
    """Within: Triton-tier launches on CPU tensors are recorded by ``recorder`` and not run.

    Installs the stand-in driver and the hook, makes the kernel dispatcher choose the Triton tier for
    CPU tensors and wraps the tier's launchers; everything is restored on exit.
    """
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    from induce.kernels import _dispatch

    if _dispatch.triton_unavailable_reason() is not None:
        raise KernelBackendError(f"the Triton tier cannot be imported: {_dispatch.triton_unavailable_reason()}")
    if any(_interpreted(importlib.import_module(name)) for name in _dispatch.triton_modules()):
        raise KernelBackendError("the Triton tier was imported under TRITON_INTERPRET=1 in this process: its kernels "
                                 "cannot be compiled here (record launches in a fresh process)")
    # {op: (the module the dispatcher takes it from, the launcher)}
    launchers = {op: (importlib.import_module(tiers["triton"]), _dispatch.implementation(op, "triton"))
                 for op, tiers in _dispatch.TIER_MODULES.items()}
    saved_hook = knobs.runtime.jit_cache_hook
    saved_interpreting = _dispatch.triton_interpreting
    saved_backend = _dispatch.get_backend()
    saved_driver = driver._active  # None until a driver was asked for; reset_active() would probe for a GPU
    driver.set_active(_StandInDriver(GPUTarget(*TARGET)))
    knobs.runtime.jit_cache_hook = recorder.hook
    _dispatch.triton_interpreting = lambda: True  # resolve() then accepts CPU tensors for the Triton tier
    _dispatch.set_backend("triton")
    for op, (module, launcher) in launchers.items():
        setattr(module, op, recorder.wrap(op, launcher))
    try:
        yield
    finally:
        for op, (module, launcher) in launchers.items():
            setattr(module, op, launcher)
        _dispatch.set_backend(saved_backend)
        _dispatch.triton_interpreting = saved_interpreting
        knobs.runtime.jit_cache_hook = saved_hook
        driver._active = saved_driver
