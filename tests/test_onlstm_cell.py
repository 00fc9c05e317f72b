"""The ON-LSTM layer with the fused Triton cell step against its eager twin (the torch tier).

Same parameters, same DropConnect mask (same seed), same segment: outputs, distances, final state
and every parameter and input gradient must agree. The Triton tier runs in Triton's CPU interpreter
here (``TRITON_INTERPRET=1``, set before anything imports Triton, as in ``test_kernels_triton.py``)
and on CUDA where there is a GPU.
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

import pytest  # noqa: E402

import induce.kernels as K  # noqa: E402
from induce.models.onlstm.model import ONLSTMLayer  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _run(layer: ONLSTMLayer, x: torch.Tensor, state, backend: str):
    """Outputs and gradients of one training forward + backward of ``layer`` under ``backend``."""
    layer.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_()
    h0, c0 = (s.clone().requires_grad_() for s in state)
    torch.manual_seed(3)  # the DropConnect mask
    with K.use_backend(backend):
        out, (h, c), dist = layer(x, (h0, c0))
    gen = torch.Generator().manual_seed(4)
    loss = sum((t * torch.randn(t.shape, generator=gen).to(t.device)).sum() for t in (out, h, c, dist))
    loss.backward()
    grads = {name: p.grad.cpu() for name, p in layer.named_parameters()}
    grads.update(x=x.grad.cpu(), h0=h0.grad.cpu(), c0=c0.grad.cpu())
    return [t.detach().cpu() for t in (out, h, c, dist)], grads


def test_cpu_default_is_the_eager_step():
    """Fused only where it pays: on CPU tensors ``auto`` resolves to the torch tier (the eager ops)."""
    assert K.resolve("auto", torch.zeros(1)) == "torch"


@pytest.mark.triton
@pytest.mark.skipif(K.triton_unavailable_reason() is not None, reason="triton cannot be imported")
@pytest.mark.parametrize("batch,steps,input_size,hidden,chunk", [(1, 1, 3, 4, 4), (3, 6, 5, 21, 3)])
def test_fused_layer_matches_eager_layer(batch, steps, input_size, hidden, chunk):
    torch.manual_seed(0)
    layer = ONLSTMLayer(input_size, hidden, chunk, wdrop=0.3).train().to(DEVICE)
    x = torch.randn(batch, steps, input_size, device=DEVICE)
    state = (0.5 * torch.randn(batch, hidden, device=DEVICE), torch.randn(batch, hidden, device=DEVICE))
    fused, fused_grads = _run(layer, x, state, "triton")
    eager, eager_grads = _run(layer, x, state, "torch")
    for name, got, want in zip(("out", "h", "c", "distances"), fused, eager):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
    for name, want in eager_grads.items():
        torch.testing.assert_close(fused_grads[name], want, rtol=1e-4, atol=1e-5,
                                   msg=lambda m, name=name: f"d/d{name}: {m}")
