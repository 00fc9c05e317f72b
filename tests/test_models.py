"""ON-LSTM, PRPN and PaLM (and, where it applies, the language-model-only RelLSTM / RelRNN / MemLSTM)
on tiny configurations: shapes, gradients, causality, state carry-over, batched parsing, PaLM
variants, weight drop and a small overfitting run."""
from __future__ import annotations

import math

import pydantic
import pytest
import torch
import torch.nn.functional as F
import yaml

from induce.config import model_config_path
from induce.models.common.awd import RecurrentProjection, WeightDropLSTM, _onednn_packing_available
from induce.models.registry import get_model_class, list_models
from induce.trees.decoders import gold_span_targets, parse_batch, peel_tree
from induce.trees.kinds import DISTANCE, NO_PARSER, SPAN
from induce.trees.nodes import to_nltk

VOCAB = 23
PALM_TINY = dict(emb_size=12, hidden_size=16, rrnn_size=5, attention_size=7, max_span_length=4)
TINY = {
    "onlstm": dict(emb_size=12, hidden_size=20, chunk_size=4),
    "prpn": dict(emb_size=12, hidden_size=16, n_slots=4, n_lookback=2),
    "palm": PALM_TINY,
    "palm-s": PALM_TINY,
    "palm-rb": PALM_TINY,
}
RELMEM_TINY = dict(emb_size=12, hidden_size=10, attention_size=5, nu=3, rho=2)
#: Models without syntactic structure (parser_kind "none"): language-model tests only.
LM_ONLY = {"rellstm": RELMEM_TINY, "relrnn": RELMEM_TINY, "memlstm": RELMEM_TINY}
#: The models that parse (the structure / parsing / config tests loop over these).
NAMES = sorted(TINY)
TINY.update(LM_ONLY)
ALL_NAMES = sorted(TINY)
NO_DROPOUT = dict(dropout=0.0, dropouth=0.0, dropouti=0.0, dropoute=0.0, wdrop=0.0)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: threads only add synchronisation (and CI machines are shared)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make(name: str, seed: int = 0, **overrides):
    cls = get_model_class(name)
    torch.manual_seed(seed)
    return cls(VOCAB, cls.Config(**{**TINY[name], **overrides}))


def structure_key(model) -> str:
    return model.parser_kind.structure_key


def test_registry_lists_all_models():
    assert set(ALL_NAMES) <= set(list_models())
    for name in NAMES:
        assert get_model_class(name).parser_kind in (DISTANCE, SPAN), name
    for name in LM_ONLY:
        assert get_model_class(name).parser_kind is NO_PARSER, name


@pytest.mark.parametrize("name", ALL_NAMES)
@pytest.mark.parametrize("batch,steps", [(1, 5), (3, 7)])
def test_forward_backward(name, batch, steps):
    model = make(name).train()
    tokens = torch.randint(0, VOCAB, (batch, steps))
    gold = None
    if name == "palm-s":
        gold = torch.zeros(batch, steps, PALM_TINY["max_span_length"])
        gold[:, 2, 1] = 1.0
    out = model(tokens, model.init_state(batch), gold_spans=gold)
    # tied models feed the embedding size to the output layer; the LM-only models their state s_t
    width = TINY[name]["hidden_size" if name in LM_ONLY else "emb_size"]
    assert out.hidden.shape == (batch, steps, width)
    logits = model.logits(out.hidden)
    assert logits.shape == (batch, steps, VOCAB)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens.reshape(-1))
    if out.extra_loss is not None:
        loss = loss + out.extra_loss
    loss.backward()
    assert torch.isfinite(loss)
    if name in LM_ONLY:
        assert out.structure == {} and len(out.raw_outputs) == len(out.dropped_outputs) == 1
    else:
        structure = out.structure[structure_key(model)]
        expected = (batch, steps) if model.parser_kind is DISTANCE else (batch, steps, PALM_TINY["max_span_length"])
        assert structure.shape == expected
        assert len(out.raw_outputs) == len(out.dropped_outputs) == model.config.n_layers
    unused = {"span_attention.w_span", "span_attention.v", "span_attention.query.weight", "span_attention.query.bias"}
    for param_name, param in model.named_parameters():
        if name == "palm-rb" and param_name in unused:
            continue  # fixed scores: the scorer is not used
        assert param.grad is not None, param_name
        assert torch.isfinite(param.grad).all(), param_name


@pytest.mark.parametrize("name", NAMES)
def test_bf16_autocast_training_step(name):
    """Under CPU bf16 autocast the recurrent matmuls run in bf16, the recurrent state stays fp32,
    and forward/backward work with finite gradients."""
    model = make(name).train()
    tokens = torch.randint(0, VOCAB, (2, 6))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(tokens, model.init_state(2))
        logits = model.logits(out.hidden)
    assert out.raw_outputs[0].dtype == torch.float32
    loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), tokens.reshape(-1))
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_causal(name):
    """Changing token t0 changes nothing at positions before t0 (span scores: rows before t0-1,
    since row t is scored with the query of position t+1)."""
    model = make(name).eval()
    torch.manual_seed(1)
    tokens = torch.randint(0, VOCAB, (2, 9))
    changed = tokens.clone()
    t0 = 5
    changed[:, t0] = (changed[:, t0] + 1) % VOCAB
    a = model(tokens, model.init_state(2))
    b = model(changed, model.init_state(2))
    torch.testing.assert_close(a.hidden[:, :t0], b.hidden[:, :t0])
    assert not torch.allclose(a.hidden[:, t0], b.hidden[:, t0])
    if name in LM_ONLY:
        return  # no structure
    key = structure_key(model)
    rows = t0 if key == "distances" else t0 - 1
    torch.testing.assert_close(a.structure[key][:, :rows], b.structure[key][:, :rows])


@pytest.mark.parametrize("name", NAMES)
def test_state_carries_over_segments(name):
    """In eval mode, two BPTT segments with the carried state equal one pass over the whole text."""
    model = make(name).eval()
    torch.manual_seed(2)
    tokens = torch.randint(0, VOCAB, (2, 11))
    whole = model(tokens, model.init_state(2))
    first = model(tokens[:, :4], model.init_state(2))
    second = model(tokens[:, 4:], first.state)
    torch.testing.assert_close(torch.cat([first.hidden, second.hidden], 1), whole.hidden)
    key = structure_key(model)
    joined = torch.cat([first.structure[key], second.structure[key]], 1)
    if key == "span_scores":
        # the last row of a segment needs the next segment's query: -inf there, compare the rest
        assert torch.isinf(first.structure[key][:, -1]).all()
        joined, whole_scores = joined[:, 4:], whole.structure[key][:, 4:]
        torch.testing.assert_close(joined, whole_scores)
    else:
        torch.testing.assert_close(joined, whole.structure[key])


@pytest.mark.parametrize("name", ["palm", "palm-rb"])
def test_palm_span_score_rows(name):
    """Fresh state: row t scores the spans ending at t, so exactly min(t+1, m) are valid; the last
    row (no next query) has none."""
    model = make(name).eval()
    scores = model(torch.randint(0, VOCAB, (1, 7)), model.init_state(1)).structure["span_scores"][0]
    m = PALM_TINY["max_span_length"]
    for t in range(6):
        assert torch.isfinite(scores[t]).tolist() == [k <= t for k in range(m)]
    assert torch.isinf(scores[6]).all()


@pytest.mark.parametrize("name", ["onlstm", "prpn", "palm"])
def test_batched_parsing_equals_one_at_a_time(name):
    model = make(name)
    torch.manual_seed(3)
    sentences = [torch.randint(1, VOCAB, (n,)).tolist() for n in (5, 1, 8, 3, 8, 2)]
    words = [[f"w{i}" for i in range(len(s))] for s in sentences]
    batched = parse_batch(model, sentences, words, eos_id=0, batch_size=4)
    single = [parse_batch(model, [s], [w], eos_id=0)[0] for s, w in zip(sentences, words)]
    assert batched == single
    assert [t.leaves() for t in batched] == words
    assert model.training  # parse_batch restores the mode


def test_distance_decoders_on_model_output():
    model = make("onlstm")
    sentence = [3, 5, 7, 9, 11]
    tokens = torch.tensor([[0, *sentence, 0]])
    distances = model.eval().parse_structure(tokens, torch.tensor([7]))["distances"][0, 1:6]
    expected = to_nltk(peel_tree(distances.tolist()), [str(w) for w in sentence])
    assert parse_batch(model, [sentence], decoder="peel", eos_id=0)[0] == expected
    with pytest.raises(ValueError):
        parse_batch(model, [sentence], decoder="span")


def test_palm_rb_parses_right_branching_beyond_m():
    model = make("palm-rb")
    sentence = list(range(1, 10))  # 9 words > m = 4: the span length is lifted for parsing
    tree = parse_batch(model, [sentence], eos_id=0)[0]
    expected = str(sentence[-1])
    for word in reversed(sentence[:-1]):
        expected = f"(S {word} {expected})"
    assert tree.pformat(margin=10**6) == expected
    with pytest.raises(ValueError):
        parse_batch(model, [sentence])  # PaLM needs the end mark


def test_palm_s_supervision_loss():
    m = PALM_TINY["max_span_length"]
    model = make("palm-s").train()
    tokens = torch.randint(0, VOCAB, (2, 6))
    # two sentences of 2 and 3 words: "a b <eos> c d e <eos>" minus the final token -> 6 LM tokens
    targets = gold_span_targets([(2, []), (3, [(1, 3)])], m)  # [2 + 1 + 3 + 1, m]
    gold = torch.stack([targets[:6], targets[1:7]])
    out = model(tokens, model.init_state(2), gold_spans=gold)
    scores = out.structure["span_scores"]
    log_p = torch.log_softmax(scores.masked_fill(torch.isinf(scores), -1e30), -1)
    manual = -(gold * torch.where(torch.isinf(scores), torch.zeros_like(log_p), log_p)).sum(-1).mean()
    assert out.extra_loss is not None and out.extra_loss.item() > 0
    torch.testing.assert_close(out.extra_loss, model.config.supervision_weight * manual)
    out.extra_loss.backward()
    assert model.span_attention.v.grad.abs().sum() > 0
    # the unsupervised model ignores gold spans
    plain = make("palm").train()
    assert plain(tokens, plain.init_state(2), gold_spans=gold).extra_loss is None


@pytest.mark.parametrize("fused", [False, True])
def test_weight_drop_lstm(fused):
    """Both paths (time loop, ``torch._VF.lstm``) equal ``nn.LSTM`` in eval mode; DropConnect acts in
    training mode only and its gradient reaches ``weight_hh``."""
    torch.manual_seed(4)
    layer = WeightDropLSTM(5, 6, wdrop=0.5, fused=fused)
    reference = torch.nn.LSTM(5, 6, batch_first=True)
    with torch.no_grad():
        reference.weight_ih_l0.copy_(layer.weight_ih)
        reference.weight_hh_l0.copy_(layer.weight_hh)
        reference.bias_ih_l0.copy_(layer.bias_ih)
        reference.bias_hh_l0.copy_(layer.bias_hh)
    x = torch.randn(3, 7, 5)
    h0, c0 = torch.randn(3, 6), torch.randn(3, 6)
    layer.eval()
    assert torch.equal(layer.effective_weight_hh(), layer.weight_hh)
    out, (h, c) = layer(x, (h0, c0))
    ref_out, (ref_h, ref_c) = reference(x, (h0[None], c0[None]))
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(h, ref_h[0])
    torch.testing.assert_close(c, ref_c[0])
    layer.train()
    dropped = layer.effective_weight_hh()
    zeroed = dropped == 0
    assert 0.3 < zeroed.float().mean() < 0.7
    torch.testing.assert_close(dropped[~zeroed], layer.weight_hh[~zeroed] * 2)
    out_a, _ = layer(x, (h0, c0))
    out_b, _ = layer(x, (h0, c0))
    assert not torch.allclose(out_a, out_b)
    out_a.sum().backward()
    assert layer.weight_hh.grad is not None and layer.weight_hh.grad.abs().sum() > 0


@pytest.mark.parametrize("packing", [False, True], ids=["mm", "onednn-packed"])
def test_recurrent_projection_gradients_match_autograd(packing):
    """The deferred weight gradient of RecurrentProjection equals plain autograd's, with the per-step
    products as plain mm and as oneDNN-packed products (where this torch build has them)."""
    if packing and not _onednn_packing_available():
        pytest.skip("this torch build has no oneDNN packed linear ops")
    torch.manual_seed(7)
    weight = torch.randn(4, 6, requires_grad=True)
    pre = torch.randn(5, 3, 6, requires_grad=True)
    h0 = torch.randn(3, 4, requires_grad=True)
    projection = RecurrentProjection(weight, packing=packing)
    assert (projection.packed_forward(h0) is not None) == packing

    def run(step):
        h, outs = h0, []
        for t in range(5):
            h = torch.tanh(step(pre[t], h))[:, :4]
            outs.append(h)
        return (torch.stack(outs) ** 2).sum()

    grads = torch.autograd.grad(run(projection), [weight, pre, h0])
    expected = torch.autograd.grad(run(lambda bias, h: bias + h @ weight), [weight, pre, h0])
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want)


def test_onlstm_layer_matches_the_equations():
    """The fused layer against a direct transcription of Stratos' equations (cumax = cumsum softmax)."""
    model = make("onlstm", **NO_DROPOUT).eval()
    layer = model.layers[0]
    p, chunk, hidden = layer.n_chunks, layer.chunk_size, layer.hidden_size
    torch.manual_seed(5)
    x = torch.randn(2, 6, 12)
    h, c = torch.zeros(2, hidden), torch.zeros(2, hidden)
    outs, dists = [], []
    stretch = lambda v: v.repeat_interleave(chunk, -1)  # noqa: E731
    for t in range(6):
        z = x[:, t] @ layer.weight_ih.T + h @ layer.weight_hh.T + layer.bias + layer.bias_hh  # two biases, as the code
        v1, v2, u = z[:, :p], z[:, p : 2 * p], z[:, 2 * p :]
        f, i, o = (torch.sigmoid(u[:, k * hidden : (k + 1) * hidden]) for k in range(3))
        cand = torch.tanh(u[:, 3 * hidden :])
        cf = torch.cumsum(torch.softmax(v1, -1), -1)
        ci = 1 - torch.cumsum(torch.softmax(v2, -1), -1)
        w = cf * ci
        f_hat = f * stretch(w) + stretch(cf - w)
        i_hat = i * stretch(w) + stretch(ci - w)
        c = f_hat * c + i_hat * cand
        h = o * torch.tanh(c)
        outs.append(h)
        dists.append(p - cf.sum(-1))  # expected breaking point (Stratos eq. 2 with n = p - 1 ... p)
    out, _, dist = layer(x, (torch.zeros(2, hidden), torch.zeros(2, hidden)))
    torch.testing.assert_close(out, torch.stack(outs, 1))
    # the model's distance is the expected breaking point divided by p
    torch.testing.assert_close(dist, torch.stack(dists, 1) / p)


@pytest.mark.parametrize("name", NAMES)
def test_shipped_config_model_section_is_valid(name):
    """induce/models/<family>/<name>.yaml names the model and its model section validates with the model's Config."""
    path = model_config_path(name)
    raw = yaml.safe_load(path.read_text())
    assert raw["model_name"] == name
    get_model_class(name).Config(**raw["model"])


def test_config_rejects_unknown_keys_and_bad_sizes():
    cls = get_model_class("onlstm")
    with pytest.raises(pydantic.ValidationError, match="nhid"):
        cls.Config(nhid=3)
    with pytest.raises(pydantic.ValidationError):
        cls.Config(hidden_size=21, chunk_size=4)
    with pytest.raises(pydantic.ValidationError):
        get_model_class("palm").Config(attention_after=3, n_layers=3)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES + ["rellstm"])  # relrnn / memlstm share rellstm's loop
def test_tiny_model_overfits_repeated_text(name):
    torch.manual_seed(6)
    text = torch.randperm(VOCAB)[:20]  # 20 distinct tokens: the next token is a function of the current
    stream = text.repeat(4)
    no_dropout = {} if name in LM_ONLY else NO_DROPOUT  # the LM-only models have no dropout
    model = make(name, **no_dropout, emb_size=32, hidden_size=32).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    inputs = torch.stack([stream[0:20], stream[7:27]])
    targets = torch.stack([stream[1:21], stream[8:28]])
    losses = []
    for _ in range(150):
        out = model(inputs, model.init_state(2))
        loss = F.cross_entropy(model.logits(out.hidden).reshape(-1, VOCAB), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] > 0.8 * math.log(VOCAB)
    assert min(losses[-5:]) < 0.1 * losses[0], losses[::20]


# ------------------------------------------------------------------- PaLM variant=released (the authors' code)
# (the released points themselves are pinned by hand-worked checks in tests/test_fidelity_palm.py)


@pytest.mark.parametrize("name", ["palm", "palm-rb"])
def test_palm_released_is_causal_and_carries_state(name):
    model = make(name, variant="released").eval()
    torch.manual_seed(1)
    tokens = torch.randint(0, VOCAB, (2, 11))
    changed = tokens.clone()
    changed[:, 6] = (changed[:, 6] + 1) % VOCAB
    a, b = model(tokens, model.init_state(2)), model(changed, model.init_state(2))
    torch.testing.assert_close(a.hidden[:, :6], b.hidden[:, :6])
    torch.testing.assert_close(a.structure["span_scores"][:, :5], b.structure["span_scores"][:, :5])
    assert not torch.allclose(a.hidden[:, 6], b.hidden[:, 6])
    first = model(tokens[:, :4], model.init_state(2))
    second = model(tokens[:, 4:], first.state)
    torch.testing.assert_close(torch.cat([first.hidden, second.hidden], 1), a.hidden)
    torch.testing.assert_close(second.structure["span_scores"], a.structure["span_scores"][:, 4:])


def test_palm_released_kernel_tiers_agree():
    """The released span attention runs on linear_scan / span_representations (not the fused span
    kernel): the torch tier matches the fp32 reference in values and every gradient."""
    from induce.kernels import use_backend

    model = make("palm", variant="released", **NO_DROPOUT).double().train()
    tokens = torch.randint(0, VOCAB, (2, 9))
    results = {}
    for backend in ("reference", "torch"):
        model.zero_grad()
        with use_backend(backend):
            out = model(tokens, model.init_state(2))
            (out.hidden.square().sum() + out.structure["span_scores"].nan_to_num(neginf=0.0).sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[backend] = (out.hidden.detach(), grads)
    torch.testing.assert_close(results["torch"][0], results["reference"][0])
    assert results["torch"][1].keys() == results["reference"][1].keys()
    for key, grad in results["reference"][1].items():
        torch.testing.assert_close(results["torch"][1][key], grad, msg=key)
