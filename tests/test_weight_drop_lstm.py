"""WeightDropLSTM's GPU-motivated paths, checked on CPU: the state dtype across autocast steps and the
weights handed to the fused op in one chunk.

A bf16-autocast training step followed by a full-precision one:

The recurrent state leaves an autocast step and enters the next step; it must keep the dtype it
came in with, or the fused LSTM of the next fp32 step fails ("input and hidden tensors are not the
same dtype"). Checked on CPU autocast with the fused LSTM forced on (on CUDA it is the default).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from induce.models.common.awd import WeightDropLSTM
from induce.models.registry import get_model_class

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 19
TINY = {
    "onlstm": dict(emb_size=12, hidden_size=20, chunk_size=4),
    "prpn": dict(emb_size=12, hidden_size=16, n_slots=4, n_lookback=2),
    "palm": dict(emb_size=12, hidden_size=16, rrnn_size=5, attention_size=7, max_span_length=4),
}


def detach_state(state):
    if isinstance(state, torch.Tensor):
        return state.detach()
    if isinstance(state, dict):
        return {k: detach_state(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(detach_state(s) for s in state)
    return state


def _states(state):
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for value in state.values():
            yield from _states(value)
    elif isinstance(state, (list, tuple)):
        for value in state:
            yield from _states(value)


@pytest.mark.parametrize("fused", [True, False])
def test_weight_drop_lstm_state_dtype_survives_autocast(fused):
    torch.manual_seed(0)
    layer = WeightDropLSTM(6, 5, wdrop=0.3, fused=fused).train()
    x = torch.randn(2, 4, 6)
    state = (torch.zeros(2, 5), torch.zeros(2, 5))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, state = layer(x, state)
    assert all(s.dtype == torch.float32 for s in state)
    out, state = layer(x, tuple(s.detach() for s in state))  # the fp32 step that used to fail
    assert out.dtype == torch.float32 and all(s.dtype == torch.float32 for s in state)
    out.sum().backward()
    assert layer.weight_hh.grad is not None and torch.isfinite(layer.weight_hh.grad).all()


@pytest.mark.parametrize("name", sorted(TINY))
def test_bf16_step_then_fp32_step(name):
    cls = get_model_class(name)
    torch.manual_seed(0)
    model = cls(VOCAB, cls.Config(**TINY[name])).train()
    for module in model.modules():
        if isinstance(module, WeightDropLSTM):
            module.fused = True  # the CUDA default; CPU autocast would otherwise take the loop
    tokens = torch.randint(0, VOCAB, (3, 7))
    state = model.init_state(3)
    dtypes = [s.dtype for s in _states(state)]
    for bf16 in (True, False):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(tokens[:, :-1], state)
            logits = model.logits(out.hidden)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        assert torch.isfinite(loss)
        # the recurrent states (PaLM's span memory, None at first, is left out: it is the last
        # outputs, in the step's dtype, and concatenated with type promotion)
        got = [s.dtype for s in _states(out.state)][: len(dtypes)]
        assert got == dtypes, f"{name}: state dtypes changed after bf16={bf16}"
        state = detach_state(out.state)


@pytest.mark.parametrize("bf16", [False, True])
def test_weights_in_one_chunk_path_equals_the_plain_call(bf16):
    """The one-buffer weights (the CUDA default, against cuDNN's per-call re-compaction) give the same
    outputs and gradients as separate weights, also under autocast; forced on here, on CPU (oneDNN)."""
    results = []
    for one_chunk in (False, True):
        torch.manual_seed(0)
        layer = WeightDropLSTM(6, 5, wdrop=0.4, fused=True, one_chunk=one_chunk).train()
        x = torch.randn(2, 4, 6, requires_grad=True)
        state = (torch.randn(2, 5), torch.randn(2, 5))
        torch.manual_seed(1)  # the DropConnect mask
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out, (h, c) = layer(x, state)
        (out.float().sum() + 2 * h.sum() - c.sum()).backward()
        results.append([out.detach(), h.detach(), c.detach(), x.grad]
                       + [p.grad for p in layer.parameters()])
    assert results[0][0].dtype == (torch.bfloat16 if bf16 else torch.float32)
    for plain, chunked in zip(*results):
        torch.testing.assert_close(chunked, plain)


def test_recurrent_projection_gradcheck_with_undefined_gradients():
    """The per-step ``bias + h @ W`` with its deferred weight gradient (``_RecurrentAddmm``) against
    finite differences, including an undefined upstream gradient (gradcheck's check; the Function does
    not materialise zero gradients)."""
    from induce.models.common.awd import RecurrentProjection

    gen = torch.Generator().manual_seed(0)
    bias, h, weight = (torch.randn(*shape, dtype=torch.float64, generator=gen).requires_grad_()
                       for shape in ((3, 5), (3, 4), (4, 5)))
    assert torch.autograd.gradcheck(lambda b, x, w: RecurrentProjection(w)(b, x), (bias, h, weight))
