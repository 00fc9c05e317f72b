"""Helpers that check a kernel tier against the reference tier (used by the tests and the benchmark).

``compare_with_reference`` runs one public kernel with ``backend=tier`` and with
``backend="reference"`` on the same inputs, compares the outputs (``-inf`` must match ``-inf``) and
the gradient of every floating-point input under one random upstream gradient.
"""
from __future__ import annotations

from typing import Callable, Dict, Sequence

import torch

import induce.kernels as kernels


def random_scan_inputs(B: int, T: int, D: int, dtype=torch.float32, generator=None) -> Dict[str, torch.Tensor]:
    """``log_f = log(sigmoid(z))`` (so ``f`` in (0, 1)) and ``u = (1 - f) tanh(z')`` as in PaLM Eq. 1."""
    z = torch.randn(B, T, D, dtype=dtype, generator=generator)
    log_f = torch.nn.functional.logsigmoid(2 * z)
    u = (1 - log_f.exp()) * torch.tanh(torch.randn(B, T, D, dtype=dtype, generator=generator))
    return {"log_f": log_f, "u": u}


def span_attention_inputs(
    B: int, T: int, D: int, A: int, dtype=torch.float32, seed: int = 0, log_f: torch.Tensor | None = None
) -> Dict[str, torch.Tensor]:
    """Consistent inputs of :func:`induce.kernels.span_attention` (``c`` from real scans of ``u``)."""
    gen = torch.Generator().manual_seed(seed)
    fwd = random_scan_inputs(B, T, D, dtype, gen)
    bwd = random_scan_inputs(B, T, D, dtype, gen)
    if log_f is not None:
        fwd["log_f"] = bwd["log_f"] = log_f.to(dtype)
    return {
        "query": torch.randn(B, T, A, dtype=dtype, generator=gen),
        "c_fwd": kernels.linear_scan(fwd["log_f"], fwd["u"], backend="torch"),
        "logf_fwd": fwd["log_f"],
        "c_bwd": kernels.linear_scan(bwd["log_f"], bwd["u"], reverse=True, backend="torch"),
        "logf_bwd": bwd["log_f"],
        "w_span": torch.randn(2 * D, A, dtype=dtype, generator=gen) / (2 * D) ** 0.5,
        "v": torch.randn(A, dtype=dtype, generator=gen),
    }


def onlstm_cell_inputs(B: int, n_chunks: int, chunk: int, scale: float = 2.0, seed: int = 0,
                       dtype=torch.float32) -> Dict[str, torch.Tensor]:
    """Inputs of :func:`induce.kernels.onlstm_cell`: ``gates [B, 2p + 4H]`` (``scale`` times a normal
    draw: larger scales saturate the gates and sharpen the cumax) and ``c [B, H]``, ``H = p * chunk``."""
    gen = torch.Generator().manual_seed(seed)
    H = n_chunks * chunk
    return {
        "gates": scale * torch.randn(B, 2 * n_chunks + 4 * H, dtype=dtype, generator=gen),
        "c": torch.randn(B, H, dtype=dtype, generator=gen),
    }


def pcfg_inputs(B, T, NT, P, lengths=None, seed=0, scale=1.0, dtype=torch.float32, span_scores=True):
    """Inputs of :func:`induce.kernels.inside`: random unnormalised log scores ``terms [B, T, P]``,
    ``rules [B, NT, NT + P, NT + P]``, ``roots [B, NT]``, ``span_scores [B, T + 1, T + 1]`` (fenceposts;
    unless False) and
    ``lengths [B]`` (``T`` unless given), normal draws times ``scale``."""
    gen = torch.Generator().manual_seed(seed)
    S = NT + P
    out = {
        "terms": scale * torch.randn(B, T, P, generator=gen, dtype=dtype),
        "rules": scale * torch.randn(B, NT, S, S, generator=gen, dtype=dtype),
        "roots": scale * torch.randn(B, NT, generator=gen, dtype=dtype),
        "lengths": torch.tensor(lengths if lengths is not None else [T] * B),
    }
    if span_scores:
        out["span_scores"] = scale * torch.randn(B, T + 1, T + 1, generator=gen, dtype=dtype)
    return out


def _outputs(result) -> Sequence[torch.Tensor]:
    return result if isinstance(result, tuple) else (result,)


def run_with_grads(fn: Callable, inputs: Dict[str, torch.Tensor], kwargs: dict, upstream_seed: int = 1):
    """Outputs and ``{name: grad}`` for a fixed random upstream gradient (``-inf`` outputs excluded)."""
    leaves = {
        name: t.detach().clone().requires_grad_(t.is_floating_point())
        for name, t in inputs.items()
        if isinstance(t, torch.Tensor)
    }
    outs = _outputs(fn(**leaves, **kwargs))
    gen = torch.Generator().manual_seed(upstream_seed)
    loss = 0.0
    for out in outs:
        upstream = torch.randn(out.shape, dtype=out.dtype, generator=gen).to(out.device)
        loss = loss + torch.where(torch.isfinite(out), out * upstream, torch.zeros_like(out)).sum()
    wanted = [name for name, t in leaves.items() if t.requires_grad]
    # Outputs that are constant (e.g. all gates before the sequence start) still get zero gradients.
    loss = loss + sum(0.0 * leaves[n].sum() for n in wanted)
    grads = torch.autograd.grad(loss, [leaves[n] for n in wanted], allow_unused=True)
    grads = [None if g is None else g.cpu() for g in grads]
    return [o.detach().cpu() for o in outs], dict(zip(wanted, grads))


def compare_with_reference(
    name: str,
    tier: str,
    inputs: Dict[str, torch.Tensor],
    rtol: float = 1e-5,
    atol: float = 1e-5,
    device: str = "cpu",
    **kwargs,
) -> None:
    """Assert that ``induce.kernels.<name>`` agrees between ``tier`` and ``reference`` (values and gradients).

    ``tier`` runs on ``device`` (inputs and tensor keyword arguments moved there); the reference on CPU.
    """
    fn = getattr(kernels, name)
    moved_inputs = {k: v.to(device) for k, v in inputs.items()}
    moved_kwargs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    outs, grads = run_with_grads(lambda **kw: fn(**kw, backend=tier), moved_inputs, moved_kwargs)
    ref_outs, ref_grads = run_with_grads(lambda **kw: fn(**kw, backend="reference"), inputs, kwargs)
    for i, (out, ref) in enumerate(zip(outs, ref_outs)):
        assert out.shape == ref.shape, f"{name}[{tier}] output {i}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
        torch.testing.assert_close(out, ref, rtol=rtol, atol=atol, msg=lambda m, i=i: f"{name}[{tier}] output {i}: {m}")
    for arg, ref in ref_grads.items():
        got = grads.get(arg)
        if ref is None:
            continue
        assert got is not None, f"{name}[{tier}]: no gradient for {arg}"
        assert torch.isfinite(got).all(), f"{name}[{tier}]: non-finite gradient for {arg}"
        torch.testing.assert_close(got, ref, rtol=rtol, atol=atol,
                                   msg=lambda m, arg=arg: f"{name}[{tier}] d/d{arg}: {m}")
