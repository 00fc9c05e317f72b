"""Triton tier of the dense-PCFG inside algorithm against the reference, through Triton's CPU interpreter.

``TRITON_INTERPRET=1`` is set at import, before anything imports Triton (see ``tests/test_kernels_triton.py``
for why that is early enough). On a machine with a GPU the compiled kernels run on CUDA tensors.
"""
from __future__ import annotations

import os

import torch  # does not import triton

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

import pytest

import induce.kernels as K
from induce.kernels.testing import compare_with_reference, pcfg_inputs

from helpers import triton_tier_marks

TIER = "triton"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = triton_tier_marks()

SHAPES = [  # B, T, NT, P, lengths: tiles padded (NT 3, 5), lengths 1 and 2, padded batches
    (1, 1, 2, 3, [1]),
    (2, 2, 3, 2, [2, 1]),
    (3, 5, 2, 5, [5, 1, 2]),
    (2, 7, 5, 3, [4, 7]),
]


@pytest.mark.parametrize("B,T,NT,P,lengths", SHAPES)
@pytest.mark.parametrize("semiring", ["sum", "max"])
def test_triton_tier_matches_reference(B, T, NT, P, lengths, semiring):
    inp = pcfg_inputs(B, T, NT, P, lengths=lengths, seed=B * 100 + T)
    compare_with_reference("inside", TIER, inp, rtol=1e-4, atol=1e-4, device=DEVICE, semiring=semiring, chart=True)


@pytest.mark.parametrize("semiring", ["sum", "max"])
def test_several_blocks_of_parents(semiring):
    """17 nonterminals: a 32-wide tile, the rules read in five blocks of 4 parents (the last one partial)."""
    inp = pcfg_inputs(1, 5, 17, 3, lengths=[5], seed=1)
    compare_with_reference("inside", TIER, inp, rtol=1e-4, atol=1e-4, device=DEVICE, semiring=semiring)


@pytest.mark.slow
def test_marginals_and_viterbi_match_the_torch_tier():
    inp = pcfg_inputs(2, 6, 3, 4, lengths=[6, 4], seed=8, span_scores=False)
    moved = {k: v.to(DEVICE) for k, v in inp.items()}
    got = K.span_marginals(lambda s: K.inside(**moved, span_scores=s, backend=TIER), moved["terms"])
    want = K.span_marginals(lambda s: K.inside(**inp, span_scores=s, backend="torch"), inp["terms"])
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    score, trees = K.viterbi(**moved, backend=TIER)
    want_score, want_trees = K.viterbi(**inp, backend="torch")
    torch.testing.assert_close(score.cpu(), want_score, rtol=1e-5, atol=1e-5)
    assert trees == want_trees


def test_too_many_nonterminals_is_a_clear_error():
    inp = pcfg_inputs(1, 3, 65, 1, seed=0, span_scores=False)
    with pytest.raises(K.KernelBackendError, match="at most 64 nonterminals"):
        K.inside(**{k: v.to(DEVICE) for k, v in inp.items()}, backend=TIER)
