"""Shared pieces of the Triton tier (:mod:`induce.kernels.recurrent.triton_impl`,
:mod:`induce.kernels.recurrent.triton_span`, the inside kernels of :mod:`induce.kernels.pcfg`): launch-size
helpers, the length-free ``triton.jit`` and jit helpers used by several kernels."""
from __future__ import annotations

import triton
import triton.language as tl


def _pow2(n: int, minimum: int = 16) -> int:
    return max(minimum, triton.next_power_of_2(max(int(n), 1)))


# Arguments that change with the segment length (T, and the row / position counts derived from it)
# are not specialised on: Triton compiles a kernel again for each new value class of an integer
# argument (divisible by 16 or not, equal to 1), and AWD-LSTM's random BPTT lengths would stall the
# first epoch on recompilations. Nor is the span tiling that follows the span count (positions per
# tile P, tiles per position): a parse's span count is its sentence length, and P as a constexpr
# gives ~15 compiled variants of the scores kernel for the lengths of one dev set. Feature sizes
# (D, A, N) stay specialised: they never change; so does the span count M (three classes: 1, a
# multiple of 16, other), which changes only when parsing.


def _length_free_jit(*names: str):
    """``triton.jit`` with ``do_not_specialize`` on the named (length-dependent) integer arguments."""

    def decorate(fn):
        return triton.jit(fn, do_not_specialize=list(names))

    return decorate


@triton.jit
def _tanh(x):
    # 1 - 2 / (exp(2x) + 1): saturates cleanly to +-1 (exp overflow gives inf -> 1)
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)
