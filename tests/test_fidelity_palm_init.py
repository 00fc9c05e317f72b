"""PaLM's initialisation as the released code draws it (Noahs-ARK/PaLM ``model.py`` ``init_weights``,
``span_parser.py`` ``SpanScorer.__init__``, ``rrnn.py`` ``RRNNCell.init_weights``), the released
backward-RRNN layout at batch > 1 (``model.backward_layout``), and that PaLM-S's supervised loss reaches
the span scorer. The bounds below are written out from the released formulas, not taken from the
implementation's helpers."""
from __future__ import annotations

import math

import pytest
import torch

from induce.models.common.awd import WeightDropLSTM
from induce.models.common.init import block_orthogonal_, xavier_uniform_
from induce.models.palm.attention import released_backward_layout
from induce.models.palm.model import PaLMConfig, SpanAttention
from induce.models.registry import get_model_class

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 50
# Sizes large enough that every uniform tensor reaches close to its bound (>= 120 entries each).
SIZES = dict(emb_size=24, hidden_size=40, rrnn_size=6, attention_size=120, max_span_length=5)


def make(variant: str, name: str = "palm", seed: int = 0, **config):
    cls = get_model_class(name)
    torch.manual_seed(seed)
    return cls(VOCAB, cls.Config(**{**SIZES, **config, "variant": variant}))


def assert_uniform(tensor: torch.Tensor, bound: float, name: str) -> None:
    """Drawn from U(-bound, bound): inside the bound, near it at the edges, with the uniform's spread."""
    values = tensor.detach().flatten()
    assert values.abs().max().item() <= bound * (1 + 1e-6), name
    assert values.abs().max().item() > 0.8 * bound, name
    assert values.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.2), name
    assert abs(values.mean().item()) < 0.2 * bound, name


@pytest.mark.parametrize("variant", ["paper", "released"])
def test_span_scorer_and_mixing_weights_follow_the_released_bounds(variant):
    model = make(variant)
    att = model.span_attention
    E, H, D, A = SIZES["emb_size"], SIZES["hidden_size"], SIZES["rrnn_size"], SIZES["attention_size"]
    expected = {
        # rrnn.py: xavier_uniform(weight [n_in, 2 n_out], fan_in=n_in, fan_out=n_out, gain=calculate_gain("tanh"))
        "rrnn.weight": 5 / 3 * math.sqrt(6 / (H + D)),
        # span_parser.py: _w1_token_ [A, H] and _w1_span_ [A, 2D] with fan_in = 2D + H, fan_out = A
        "query.weight": math.sqrt(6 / (2 * D + H + A)),
        "w_span": math.sqrt(6 / (2 * D + H + A)),
        # _w2_ [1, A]: fan_in = A, fan_out = 1
        "v": math.sqrt(6 / (A + 1)),
    }
    if variant == "released":
        # _w_gate_ [2D, H]: fan_in = H, fan_out = D (rrnn_size // 2), gain of sigmoid = 1
        expected["span_gate.weight"] = math.sqrt(6 / (H + D))
        # model.py: _hidden_layer_ = Linear(2D, H), _hidden_gate_ = Linear(H + 2D, H), fans from the shapes
        expected["mix_mlp.weight"] = math.sqrt(6 / (2 * D + H))
        expected["mix_gate.weight"] = math.sqrt(6 / (H + 2 * D + H))
    else:  # Eq. 6's W_m and W_g read [h; a]: the same xavier rule on the paper's shapes [H, H + 2D]
        expected["mix.weight"] = math.sqrt(6 / (H + 2 * D + H))
    params = dict(att.named_parameters())
    weights = {name for name in params if not name.endswith("bias")}
    assert weights == set(expected), "every weight of the block has its released bound here"
    for name, bound in expected.items():
        assert_uniform(params[name], bound, name)
    assert_uniform(model.embedding.weight, math.sqrt(3 / E), "embedding")  # model.py: U(+-sqrt(3 / ninp))


@pytest.mark.parametrize("variant", ["paper", "released"])
def test_every_bias_starts_at_zero(variant):
    """model.py, span_parser.py and rrnn.py zero every bias: the LSTMs', the decoder's, the span gate's
    (_b_gate_), the scoring MLP's (_b1_), the rational RNN's, the mixing layers'."""
    model = make(variant)
    biases = {name: p for name, p in model.named_parameters() if "bias" in name}
    assert {"layers.0.bias_ih", "layers.0.bias_hh", "output_bias", "span_attention.query.bias"} <= set(biases)
    assert ("span_attention.rrnn_forget_bias" in biases) == (variant == "released")
    assert ("span_attention.rrnn.bias" in biases) == (variant == "paper")  # the paper's u bias inside tanh too
    for name, bias in biases.items():
        assert torch.count_nonzero(bias) == 0, name


def test_lstm_gates_are_each_orthogonal():
    """model.py: block_orthogonal(v, [v.shape[0] // 4, v.shape[1]]) for weight_ih and weight_hh: each
    gate's [H, I] block orthogonal on its own (orthonormal rows when H <= I, else columns)."""
    model = make("released")
    for index, layer in enumerate(model.layers):
        hidden = layer.hidden_size
        for name in ("weight_ih", "weight_hh"):
            weight = getattr(layer, name).detach().double()
            blocks = weight.split(hidden, 0)
            assert len(blocks) == 4
            for gate, block in enumerate(blocks):
                rows, cols = block.shape
                gram = block @ block.T if rows <= cols else block.T @ block
                torch.testing.assert_close(gram, torch.eye(min(rows, cols), dtype=torch.float64),
                                           atol=1e-5, rtol=0, msg=f"layer {index} {name} gate {gate}")
            # independent blocks, not one orthogonal matrix cut in four
            assert (blocks[0].T @ blocks[1]).abs().max() > 1e-3
    # the AWD-LSTM default for other users of the layer is unchanged: all uniform, biases included
    torch.manual_seed(0)
    plain = WeightDropLSTM(5, 9)
    for name, p in plain.named_parameters():
        assert p.abs().max() <= 9**-0.5 and torch.count_nonzero(p) == p.numel(), name
    assert_uniform(plain.weight_ih, 9**-0.5, "weight_ih")
    with pytest.raises(ValueError, match="use uniform or orthogonal"):
        WeightDropLSTM(5, 9, init="xavier")


def test_init_helpers():
    torch.manual_seed(0)
    w = xavier_uniform_(torch.empty(300, 7), fan_in=10, fan_out=14, gain=2.0)
    assert_uniform(w, 2.0 * math.sqrt(6 / 24), "xavier")
    q = block_orthogonal_(torch.empty(12, 5), 3)  # three [4, 5] blocks: orthonormal rows
    for block in q.split(4, 0):
        torch.testing.assert_close(block @ block.T, torch.eye(4), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="split into 5 blocks"):
        block_orthogonal_(torch.empty(12, 5), 5)


def test_embedding_range_default_explicit_and_untied_decoder():
    assert PaLMConfig().init_range == pytest.approx(math.sqrt(3 / 400))
    assert PaLMConfig(emb_size=16).init_range == pytest.approx(math.sqrt(3 / 16))
    assert PaLMConfig(emb_size=16, init_range=0.05).init_range == 0.05  # explicit wins
    # the resolved value round-trips through a saved config
    cfg = PaLMConfig(variant="released", emb_size=32)
    assert PaLMConfig(**cfg.model_dump()) == cfg
    untied = make("released", tie_weights=False)
    assert_uniform(untied.output_weight, math.sqrt(3 / SIZES["emb_size"]), "decoder")
    assert not torch.equal(untied.output_weight, untied.embedding.weight)  # drawn on its own, as the decoder


def test_the_init_happens_at_construction_only(tmp_path):
    """A trained run's checkpoint loads as saved (nothing re-draws it), and a fresh model differs."""
    from rich.console import Console

    from induce.config import load_config
    from induce.inference.loading import load_run
    from induce.training import checkpoint, train

    from helpers import make_corpus

    corpus = make_corpus(tmp_path / "corpora", train=20, valid=4, test=2)
    cfg = load_config("palm", overrides=[
        f"data.corpus={corpus}", "data.batch_size=4", "data.eval_batch_size=2", "data.bptt=8", "train.epochs=1",
        "train.device=cpu", "train.dev_f1=false", "model.emb_size=8", "model.hidden_size=8", "model.rrnn_size=3",
        "model.attention_size=4", "model.max_span_length=3",
    ])
    train(cfg, tmp_path / "run", console=Console(quiet=True), progress=False)
    saved, _ = checkpoint.load_checkpoint(tmp_path / "run" / "best")
    loaded = load_run(tmp_path / "run", device="cpu").model
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, saved[f"model.{name}"]), name
    fresh = make("released", **{k: cfg.model[k] for k in ("emb_size", "hidden_size", "rrnn_size", "attention_size")})
    assert not torch.equal(fresh.span_attention.v, loaded.span_attention.v)


# ------------------------------------------------------------------------------ backward layout


def test_released_backward_layout_is_the_view_of_batch_major_states():
    """state [t, b] (time-major, as the released code reads it) = true state [(tB+b) mod L, (tB+b) div L]."""
    torch.manual_seed(0)
    batch, length, dim = 3, 5, 2
    true = torch.randn(batch, length, dim)  # batch-first: true[b, t]
    got = released_backward_layout(true)
    for t in range(length):
        for b in range(batch):
            flat = t * batch + b
            torch.testing.assert_close(got[b, t], true[flat // length, flat % length], rtol=0, atol=0)
    # the released rrnn.py's own steps: states of t = L-1 .. 0, reversed, stacked on dim 1, viewed [L, B, D]
    cs = [true[:, t] for t in range(length - 1, -1, -1)]
    cs.reverse()
    released = torch.stack(cs, dim=1).view(length, batch, -1)  # what RRNNCell.forward returns
    torch.testing.assert_close(got, released.transpose(0, 1), rtol=0, atol=0)
    assert not torch.equal(got, true)
    single = torch.randn(1, length, dim)
    assert torch.equal(released_backward_layout(single), single)  # batch 1: the correct layout


def _span_block(layout: str) -> SpanAttention:
    torch.manual_seed(4)
    return SpanAttention(hidden_size=6, rrnn_size=3, attention_size=5, variant="released",
                         backward_layout=layout).eval()


def test_backward_layout_option_changes_only_batches_of_more_than_one():
    correct, released = _span_block("correct"), _span_block("released")
    assert PaLMConfig().backward_layout == "correct"  # off by default
    torch.manual_seed(1)
    h = torch.randn(3, 7, 6)
    states_correct, states_released = correct.span_inputs(h), released.span_inputs(h)
    torch.testing.assert_close(states_released[2], released_backward_layout(states_correct[2]))
    for k in (0, 1, 3):  # forward states and both directions' forget gates are not moved
        torch.testing.assert_close(states_released[k], states_correct[k])
    _, scores_correct = correct(h, None, 4)
    _, scores_released = released(h, None, 4)
    assert not torch.allclose(scores_correct[:, :-1, :3], scores_released[:, :-1, :3])
    for b in range(3):  # one sentence at a time the two layouts are the same model
        torch.testing.assert_close(correct(h[b : b + 1], None, 4)[1], released(h[b : b + 1], None, 4)[1])
    model = make("released", backward_layout="released")
    assert model.span_attention.backward_layout == "released"
    with pytest.raises(ValueError, match="backward_layout"):
        PaLMConfig(backward_layout="scrambled")


# ------------------------------------------------------------------------------ PaLM-S


@pytest.mark.parametrize("variant", ["released", "paper"])
def test_supervised_loss_changes_the_span_scorers_gradient(variant):
    """At the configs' weight (lambda = 0.01) and the toy profile's sizes, the supervised attention loss
    changes the scoring MLP's gradient by more than its own size: PaLM-S's training differs from PaLM-U's
    where it matters for the trees."""
    from induce.config import load_config
    from induce.models.configs import model_config
    from induce.training.lm import LMLoss

    cfg = load_config("palm-s", overrides=[f"model.variant={variant}", "model.emb_size=16", "model.hidden_size=16",
                                           "model.rrnn_size=8", "model.attention_size=16", "model.max_span_length=8"])
    assert cfg.model["supervision_weight"] == 0.01
    torch.manual_seed(0)
    model = get_model_class("palm-s")(VOCAB, model_config(cfg)).train()
    batch, steps, m = 4, 12, cfg.model["max_span_length"]
    tokens, targets = torch.randint(0, VOCAB, (batch, steps)), torch.randint(0, VOCAB, (batch, steps))
    gold = torch.zeros(batch, steps, m)
    gold[:, torch.arange(steps), torch.arange(steps).clamp(max=m - 2)] = 1.0  # the longest span the model scores
    loss_module = LMLoss(model, alpha=2.0, beta=1.0)

    def scorer_gradient(gold_spans):
        torch.manual_seed(5)  # same dropout masks both times
        model.zero_grad()
        loss, _, _ = loss_module(tokens, targets, model.init_state(batch), gold_spans)
        loss.backward()
        att = model.span_attention
        return torch.cat([p.grad.flatten() for p in (att.query.weight, att.query.bias, att.w_span, att.v)])

    unsupervised, supervised = scorer_gradient(None), scorer_gradient(gold)
    assert (supervised - unsupervised).norm() > 0.5 * unsupervised.norm()
