"""The neural PCFGs' faster training step against the computation it replaces, written out here as it was:
the same objective and the same gradient of every parameter (to float rounding), for npcfg, cpcfg and tnpcfg,
in float32 (the compiled paths) and float64; the emission scores' function on its own (one grammar or one per
sentence, a second backward pass); and checkpoints of the old computation load and score the same."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from induce.kernels import inside, inside_lowrank
from induce.kernels.pcfg import native
from induce.kernels.pcfg.emissions import emission_scores
from induce.models.common.grammar import gaussian_kl
from induce.models.registry import get_model_class

pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB = 50
SIZES = {
    "npcfg": dict(nt_states=5, t_states=7, state_dim=16),
    "cpcfg": dict(nt_states=5, t_states=7, state_dim=16, z_dim=4, h_dim=8, w_dim=6),
    "tnpcfg": dict(nt_states=5, t_states=7, rank=6, state_dim=16),
}


# ------------------------------------------------------------------------------ the old computation, as it was
def old_latent(model, tokens, lengths, noise):
    """``q(z | x)`` through ``nn.LSTM`` over packed sequences, max pool, Linear; ``z = mean + std * noise``."""
    encoder = model.encoder
    packed = nn.utils.rnn.pack_padded_sequence(encoder.embedding(tokens), lengths.cpu(), batch_first=True,
                                               enforce_sorted=False)
    states, _ = encoder.rnn(packed)
    states, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=tokens.size(1),
                                                 padding_value=float("-inf"))
    params = encoder.params(states.max(1).values)
    mean, logvar = params[:, : encoder.z_dim], params[:, encoder.z_dim:]
    return mean + (0.5 * logvar).exp() * noise, gaussian_kl(mean, logvar)


def old_dense_grammar(g, tokens, z):
    """Every layer over the concatenation ``[embedding; z]`` per sentence, the emissions ``[B, T, V]``
    log-softmaxed, then gathered at the words."""
    batch, n = tokens.shape
    S = g.symbols

    def with_z(emb):
        emb = emb.unsqueeze(0).expand(batch, *emb.shape)
        return emb if z is None else torch.cat([emb, z.unsqueeze(1).expand(-1, emb.shape[1], -1)], -1)

    if z is None:
        roots = g.root_mlp(g.root_emb).log_softmax(-1).expand(batch, g.nt)
        rules = g.rule_mlp(g.nt_emb).log_softmax(-1).view(1, g.nt, S, S).expand(batch, -1, -1, -1)
        emissions = g.vocab_mlp(g.t_emb).log_softmax(-1).unsqueeze(0).expand(batch, -1, -1)
    else:
        roots = g.root_mlp(torch.cat([g.root_emb.expand(batch, -1), z], -1)).log_softmax(-1)
        rules = g.rule_mlp(with_z(g.nt_emb)).log_softmax(-1).view(batch, g.nt, S, S)
        emissions = g.vocab_mlp(with_z(g.t_emb)).log_softmax(-1)
    terms = emissions.gather(2, tokens.unsqueeze(1).expand(batch, g.t, n)).transpose(1, 2)
    return terms, rules, roots


def old_tnpcfg_grammar(m, tokens):
    batch = tokens.shape[0]
    roots = m.root_mlp(m.root_emb).log_softmax(-1).expand(batch, m.nt)
    terms = m.term_mlp(m.term_emb).log_softmax(-1)[:, tokens].permute(1, 2, 0)
    head = m.parent_mlp(m.rule_state_emb[: m.nt]).log_softmax(-1)
    left = m.left_mlp(m.rule_state_emb).log_softmax(-2)
    right = m.right_mlp(m.rule_state_emb).log_softmax(-2)
    return (terms, roots, *(x.unsqueeze(0).expand(batch, -1, -1) for x in (head, left, right)))


def old_loss(model, tokens, lengths, noise):
    """The negative ELBO per sentence as computed before (the inside passes on their eager loops)."""
    with native.use_native(False):
        if model.name == "tnpcfg":
            return -inside_lowrank(*old_tnpcfg_grammar(model, tokens), lengths, backend="torch")
        z, kl = (None, torch.zeros(tokens.shape[0], dtype=noise.dtype)) if model.encoder is None else \
            old_latent(model, tokens, lengths, noise)
        terms, rules, roots = old_dense_grammar(model.grammar, tokens, z)
        return -inside(terms, rules, roots, lengths, backend="torch") + kl


def new_loss(model, tokens, lengths, noise, monkeypatch):
    """``model.sentence_loss`` with the training sample's noise fixed to ``noise``."""
    monkeypatch.setattr(torch, "randn", lambda *args, **kwargs: noise.clone())
    try:
        return model.sentence_loss(tokens, lengths)
    finally:
        monkeypatch.undo()


def _losses_and_grads(model, loss_fn):
    model.zero_grad(set_to_none=True)
    loss = loss_fn()
    loss.sum().backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _close(got, want, rtol, name):
    scale = float(want.abs().max()) if want.numel() else 0.0
    torch.testing.assert_close(got, want, rtol=rtol, atol=rtol * max(scale, 1e-3), msg=name)


@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 2e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("name", ["npcfg", "cpcfg", "tnpcfg"])
def test_the_objective_and_every_gradient_are_the_old_computations(monkeypatch, name, dtype, rtol):
    """A padded batch (lengths 9, 7, 4, 2): the loss of each sentence and the gradient of every parameter; the
    float64 run pins the functions, the float32 run the compiled paths against the old eager ones (relative
    to the largest entry of each gradient)."""
    torch.manual_seed(0)
    cls = get_model_class(name)
    model = cls(VOCAB, cls.Config(**SIZES[name])).to(dtype).train()
    tokens = torch.randint(0, VOCAB, (4, 9))
    lengths = torch.tensor([9, 7, 4, 2])
    noise = torch.randn(4, SIZES[name].get("z_dim", 1), dtype=dtype)
    want, want_grads = _losses_and_grads(model, lambda: old_loss(model, tokens, lengths, noise))
    got, got_grads = _losses_and_grads(model, lambda: new_loss(model, tokens, lengths, noise, monkeypatch))
    _close(got, want, rtol, "loss")
    assert got_grads.keys() == want_grads.keys()
    for key in want_grads:
        _close(got_grads[key], want_grads[key], 50 * rtol, key)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["npcfg", "cpcfg"])
def test_at_the_papers_sizes_the_step_is_the_old_computations(monkeypatch, name):
    """30 nonterminals, 60 preterminals, the inference network 512 wide, a vocabulary of 10,000, sentences of
    20 to 2 words, float32: every gradient is no further from the float64 computation than the old float32
    step's (twice its distance, plus 1e-5 of the largest entry). Some gradients (the roots') cancel so much that
    the old float32 step is ~1e-2 from float64 itself; a fixed tolerance cannot tell that from a loss of
    precision (the emission network's first layer split over [embedding; z] lost it: ~3e-2 against ~5e-6)."""
    torch.manual_seed(1)
    cls = get_model_class(name)
    model = cls(10_000, cls.Config()).train()
    tokens = torch.randint(0, 10_000, (4, 20))
    lengths = torch.tensor([20, 17, 9, 2])
    noise = torch.randn(4, max(1, model.config.z_dim))
    exact = copy.deepcopy(model).double()
    ref, ref_grads = _losses_and_grads(exact, lambda: old_loss(exact, tokens, lengths, noise.double()))
    want, want_grads = _losses_and_grads(model, lambda: old_loss(model, tokens, lengths, noise))
    got, got_grads = _losses_and_grads(model, lambda: new_loss(model, tokens, lengths, noise, monkeypatch))
    _close(got, want, 2e-5, "loss")
    assert got_grads.keys() == want_grads.keys()
    for key in want_grads:
        scale = float(ref_grads[key].abs().max())
        old_error = float((want_grads[key].double() - ref_grads[key]).abs().max()) / scale
        new_error = float((got_grads[key].double() - ref_grads[key]).abs().max()) / scale
        assert new_error <= 2 * old_error + 1e-5, (key, new_error, old_error)


# ---------------------------------------------------------------------------------------- the emission scores
def _reference_scores(hidden, weight, bias, tokens):
    log_probs = F.linear(hidden, weight, bias).log_softmax(-1)  # [G, P, V]
    B, N = tokens.shape
    if hidden.shape[0] == 1:
        return log_probs[0][:, tokens].permute(1, 2, 0)
    return log_probs.gather(2, tokens[:, None, :].expand(B, hidden.shape[1], N)).transpose(1, 2)


@pytest.mark.parametrize("native_on", [True, False])
@pytest.mark.parametrize("G,V", [(1, 37), (3, 37), (1, 10_000), (3, 19)])
def test_emission_scores_are_the_log_softmax_read_at_the_words(G, V, native_on):
    """Values and the gradients of the hidden layer, the weight and the bias, for one grammar or one per sentence
    (words repeated across and within sentences); a second backward pass through the same graph too."""
    gen = torch.Generator().manual_seed(V + G)
    hidden = torch.randn(G, 6, 8, generator=gen, requires_grad=True)
    weight = torch.randn(V, 8, generator=gen, requires_grad=True)
    bias = torch.randn(V, generator=gen, requires_grad=True)
    tokens = torch.randint(0, min(V, 11), (3, 5), generator=gen)
    upstream = torch.randn(3, 5, 6, generator=gen)
    want = _reference_scores(hidden, weight, bias, tokens)
    want_grads = torch.autograd.grad((want * upstream).sum(), (hidden, weight, bias))
    with native.use_native(native_on):
        got = emission_scores(hidden, weight, bias, tokens)
        first = torch.autograd.grad((got * upstream).sum(), (hidden, weight, bias), retain_graph=True)
        second = torch.autograd.grad((got * upstream).sum(), (hidden, weight, bias))
    _close(got.detach(), want.detach(), 1e-6, "scores")
    for name, a, b, c in zip(("hidden", "weight", "bias"), first, second, want_grads):
        _close(a, c, 1e-5, name)
        assert torch.equal(a, b), name


def test_emission_scores_refuse_a_hidden_layer_of_another_batch():
    with pytest.raises(ValueError, match=r"hidden must be \[1 or B=3, P, D\]"):
        emission_scores(torch.zeros(2, 4, 5), torch.zeros(7, 5), None, torch.zeros(3, 2, dtype=torch.long))


@pytest.mark.parametrize("G", [1, 3])
def test_emission_scores_under_bf16_autocast_give_float32_gradients_near_the_eager_ones(G):
    """Under autocast the layer's logits are bf16 while its inputs stay float32: the backward returns each
    gradient in its input's dtype (it raised a dtype mismatch), close to the eager log-softmax's under the same
    autocast."""
    torch.manual_seed(0)
    B, N, P, D, V = 3, 5, 4, 8, 50
    tokens = torch.randint(0, V, (B, N))
    leaves = [torch.randn(G, P, D, requires_grad=True), torch.randn(V, D, requires_grad=True),
              torch.randn(V, requires_grad=True)]
    grads = []
    for fused in (True, False):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if fused:
                terms = emission_scores(*leaves, tokens)
            else:
                logp = F.log_softmax(F.linear(leaves[0], leaves[1], leaves[2]), -1)  # [G, P, V]
                index = tokens.reshape(1, 1, -1).expand(G, P, -1) if G == 1 else tokens[:, None, :].expand(B, P, N)
                picked = logp.gather(2, index)
                terms = picked.view(P, B, N).permute(1, 2, 0) if G == 1 else picked.transpose(1, 2)
        grads.append(torch.autograd.grad(terms.float().sum(), leaves))
    for ours, eager, leaf in zip(*grads, leaves):
        assert ours.dtype == leaf.dtype == torch.float32
        torch.testing.assert_close(ours, eager, rtol=0.05, atol=0.05 * eager.abs().max().item())
