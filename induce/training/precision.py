"""The precision a run trains in: ``train.amp`` resolved against the device it runs on.

``train.amp=true`` asks for bfloat16 autocast around the forward pass (weights, optimiser state, gradients
and losses stay float32; bf16 needs no loss scaling, its exponent range is float32's). It is granted

* on CUDA, always (every GPU the project supports multiplies bf16 matrices natively);
* on a CPU only where the processor has a bf16 matrix unit, where oneDNN's bf16 products run 2-4x the float32
  ones: Intel AMX (``amx_bf16``, Xeon since Sapphire Rapids), AVX512-BF16 (``avx512_bf16``: Cooper Lake, AMD
  Zen 4 and 5), Arm's BF16 extension (``bf16`` / ``sve_bf16``). Elsewhere bf16 is emulated, slower than float32,
  so the run trains in float32 and says why.

The detection reads ``torch.cpu.get_capabilities()`` (cpuinfo, the library torch itself dispatches with).
``INDUCE_CPU_BF16=0`` forces it off (float32, saying so), ``INDUCE_CPU_BF16=1`` forces bf16 on a CPU without the
unit (slow: for testing the bf16 path there).

What must stay float32 does so by construction rather than by this module: the PCFG kernels cast their inputs
to float32 (or keep float64) and run their charts there, the LSTM cells' recurrent state is float32, and
autocast itself keeps reductions (``log_softmax``, ``logsumexp``, losses) in float32 on the CPU.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Optional

import torch

#: The environment variable that forces the CPU detection: ``0`` off, ``1`` on; unset: detect.
FORCE_ENV = "INDUCE_CPU_BF16"

#: cpuinfo's capability names of bf16 matrix units, best first, and how the start line names them.
BF16_UNITS = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("sve_bf16", "Arm SVE-BF16"), ("bf16", "Arm BF16"))


def cpu_bf16_unit(capabilities: Optional[Mapping[str, Any]] = None) -> Optional[str]:
    """The name of this CPU's bf16 matrix unit (``"AMX"``, ``"AVX512-BF16"``, ...), or ``None`` without one.
    ``capabilities``: a mapping as ``torch.cpu.get_capabilities()`` returns (read from the machine when None)."""
    if capabilities is None:
        capabilities = torch.cpu.get_capabilities()
    return next((name for key, name in BF16_UNITS if capabilities.get(key) is True), None)


@dataclasses.dataclass(frozen=True)
class Precision:
    """What a run computes its forward pass in: ``dtype`` ``"bf16"`` (autocast) or ``"float32"``; ``unit`` the
    matrix unit that runs the bf16 products (``"CUDA"``, ``"AMX"``, ...; None in float32); ``reason`` one line
    saying why, as the start line prints it."""

    dtype: str
    unit: Optional[str]
    reason: str

    @property
    def bf16(self) -> bool:
        return self.dtype == "bf16"

    def as_dict(self) -> dict:
        """What the run's status, ``results.json`` and the report record."""
        return {"dtype": self.dtype, "unit": self.unit, "reason": self.reason}


def resolve_precision(amp: bool, device_type: str, capabilities: Optional[Mapping[str, Any]] = None,
                      environ: Optional[Mapping[str, str]] = None) -> Precision:
    """``train.amp`` on ``device_type`` (``"cpu"``, ``"cuda"``) as a :class:`Precision` (see the module
    docstring); ``capabilities`` and ``environ`` default to this machine's."""
    environ = os.environ if environ is None else environ
    if not amp:
        return Precision("float32", None, "float32 (train.amp=false)")
    if device_type == "cuda":
        return Precision("bf16", "CUDA", "bf16 autocast on CUDA (train.amp=true)")
    if device_type != "cpu":
        return Precision("float32", None, f"float32: train.amp has no bf16 path on device type {device_type!r}")
    forced = environ.get(FORCE_ENV, "").strip()
    if forced not in ("", "0", "1"):
        from induce.errors import InduceError

        raise InduceError(f"{FORCE_ENV}={forced!r}: expected 0 (float32), 1 (bf16 without the unit) or unset (detect)")
    unit = cpu_bf16_unit(capabilities)
    if forced == "0":
        return Precision("float32", None, f"float32: the bf16 matrix unit is switched off ({FORCE_ENV}=0)")
    if unit is not None:
        return Precision("bf16", unit, f"bf16 autocast on {unit} (train.amp=true)")
    if forced == "1":
        return Precision("bf16", "emulated", f"bf16 autocast without a bf16 matrix unit ({FORCE_ENV}=1: slower than "
                                             "float32, for testing the bf16 path)")
    return Precision("float32", None, "float32: this CPU has no bf16 matrix unit (AMX, AVX512-BF16 or Arm BF16), "
                                      "where bf16 would be slower than float32 (train.amp=true)")
