"""PRPN against the released code (yikangshen/PRPN): the predict network's
read (positions and gates), per-step dropout masks, the attention keys' input dropout instead of
DropConnect, and the embedding init range. Tiny models, one thread."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
import yaml

from induce.config import model_config_path
from induce.models.prpn import model as prpn_module
from induce.models.prpn import reading as prpn_reading
from induce.models.prpn.model import PRPN, PRPNConfig, ReadingLayer, drop, step_masks

VOCAB = 23
TINY = dict(emb_size=12, hidden_size=16, n_slots=3, n_lookback=2)
NO_DROPOUT = dict(dropout=0.0, dropouth=0.0, dropouti=0.0, dropoute=0.0, wdrop=0.0, rdropout=0.0,
                  key_dropout=0.0, parser_dropout=0.0)


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def make(seed: int = 0, **overrides) -> PRPN:
    torch.manual_seed(seed)
    return PRPN(VOCAB, PRPNConfig(**{**TINY, **overrides}))


# ---------------------------------------------------------------------------------- 1. predict read


def test_predict_gates_hand_computed():
    """M = 2, tau = 20 (alpha(x) = clamp(1 + 10 x, 0, 1)); previous distances d_-2 = 0.5, d_-1 = 0.3,
    current d_0 = 0.3, d_1 = 0.4, predicted d^_1 = 0.28, d^_2 = 0.33. Slot w holds position t-2+w.
    t = 0: h_-1 gets alpha(d^_1 - d_0) = 0.8, h_-2 also alpha(d^_1 - d_-1) = 0.8: 0.64.
    t = 1: h_0 gets alpha(d^_2 - d_1) = 0.3, h_-1 also alpha(d^_2 - d_0) = 1: 0.3."""
    model = make(n_slots=2, tau=20.0)
    history = torch.tensor([[0.5, 0.3]])
    distances, d_next = torch.tensor([[0.3, 0.4]]), torch.tensor([[0.28, 0.33]])
    read, predict = model._gates(distances, history, d_next)
    torch.testing.assert_close(predict, torch.tensor([[[0.64, 0.8], [0.3, 0.3]]]))
    # the reading network's gates (query d_t): slot of h_{t-1} is exactly 1
    # t = 0: h_-1: alpha(0) = 1, h_-2: alpha(d_0 - d_-1) = 1; t = 1: h_0: 1, h_-1: alpha(d_1 - d_0) = 1
    torch.testing.assert_close(read, torch.ones(1, 2, 2))


def test_predict_read_positions_hand_computed():
    """d = 2 (both units equal), M = 2, key = 0 (uniform attention over the open slots): the read at t
    is the mean of h_{t-2} and h_{t-1}; h_t itself is not read. Memory h_-2 = 16, h_-1 = 32; top
    h_0..h_3 = 1, 2, 4, 8."""
    model = make(hidden_size=2, n_slots=2).eval()
    with torch.no_grad():
        model.output_key.weight.zero_()
        model.output_key.bias.zero_()
    top = torch.tensor([1.0, 2.0, 4.0, 8.0]).view(1, 4, 1).expand(1, 4, 2)
    old = torch.tensor([16.0, 32.0]).view(1, 2, 1).expand(1, 2, 2)
    read = model._read_output_memory(top, old, torch.ones(1, 4, 2))
    torch.testing.assert_close(read[0, :, 0], torch.tensor([24.0, 16.5, 1.5, 3.0]), rtol=1e-5, atol=1e-4)
    # closed gates: h_{t-1} alone (gate 1), h_{t-2} shut
    read = model._read_output_memory(top, old, torch.tensor([0.0, 1.0]).expand(1, 4, 2))
    torch.testing.assert_close(read[0, :, 0], torch.tensor([32.0, 1.0, 2.0, 4.0]), rtol=1e-5, atol=1e-4)


def test_predict_read_depends_on_exactly_the_previous_m_states():
    """Jacobian of the read at t w.r.t. every position (memory -M..-1, then the top outputs): nonzero
    for t-M .. t-1 only. The key's weight is zeroed (bias kept, so the attention is not uniform) to
    cut the key's own dependence on h_t."""
    torch.manual_seed(1)
    model = make(n_slots=3).eval()
    with torch.no_grad():
        model.output_key.weight.zero_()
    steps, slots = 6, 3
    top = torch.randn(1, steps, 16, requires_grad=True)
    old = torch.randn(1, slots, 16, requires_grad=True)
    gates = torch.rand(1, steps, slots) * 0.5 + 0.5
    for t in range(steps):
        read = model._read_output_memory(top, old, gates)
        grad_top, grad_old = torch.autograd.grad(read[0, t].sum(), [top, old])
        norms = torch.cat([grad_old[0].norm(dim=-1), grad_top[0].norm(dim=-1)])  # index p + M = position p
        reached = {p - slots for p in range(slots + steps) if norms[p] > 1e-6}
        assert reached == set(range(t - slots, t)), (t, reached)


def test_predict_network_matches_a_transcription_of_the_original():
    """Full model in eval mode, second segment of a carried state: the predict network's read equals
    a step-by-step transcription of PRPN's ParsingNetwork (memory_gate_next) and
    PredictNetwork.attention (read the memory, newest first, then push h_t)."""
    torch.manual_seed(3)
    model = make(n_slots=3, n_lookback=2).eval()
    seen = {}
    original_read, original_distances = model._read_output_memory, model._distances

    def record_read(top, old_memory, gates, relevant=None):
        seen.update(top=top, old=old_memory)
        seen["read"] = original_read(top, old_memory, gates, relevant)
        return seen["read"]

    def record_distances(emb, state):
        seen["d"], seen["d_next"] = original_distances(emb, state)
        return seen["d"], seen["d_next"]

    model._read_output_memory, model._distances = record_read, record_distances
    tokens = torch.randint(0, VOCAB, (2, 12))
    with torch.no_grad():
        first = model(tokens[:, :5], model.init_state(2))
        history = first.state["distances"]  # [B, M]: d of positions -3 .. -1
        model(tokens[:, 5:], first.state)
    top, old, d, d_next = seen["top"], seen["old"], seen["d"], seen["d_next"]
    batch, steps, hidden = top.shape
    slots, tau = 3, model.config.tau
    cum = torch.cat([history, d], 1)  # position p at index p + M

    def alpha(x):
        return (F.hardtanh(x * tau + 1) + 1) / 2

    memory = old.flip(1)  # newest first: slot k holds h_{t-1-k}
    expected = []
    for t in range(steps):
        gate_hat = torch.stack([cum[:, t + slots - k] for k in range(slots)], 1)  # d_{t-k}
        gate = torch.cumprod(alpha(d_next[:, t, None] - gate_hat), 1)
        key = model.output_key(top[:, t])
        logits = torch.bmm(memory, key[:, :, None]).squeeze(2) / math.sqrt(hidden)
        weights = torch.exp(logits - logits.max(-1, keepdim=True).values) * gate
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-8)
        expected.append((memory * weights[:, :, None]).sum(1))
        memory = torch.cat([top[:, t, None], memory[:, :-1]], 1)
    torch.testing.assert_close(seen["read"], torch.stack(expected, 1), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------- 5. regularisation


def test_shipped_config_and_defaults_follow_the_released_code():
    raw = yaml.safe_load((model_config_path("prpn")).read_text())["model"]
    for cfg in (PRPNConfig(**raw), PRPNConfig()):
        assert cfg.dropout_masks == "per_step" and cfg.key_dropout == 0.5 and cfg.wdrop == 0.0
        assert cfg.init_range == 0.01


def test_embedding_init_range():
    model = make(emb_size=40)  # 23 x 40 draws from U(-0.01, 0.01)
    weight = model.embedding.weight
    assert weight.abs().max() <= 0.01 and weight.abs().max() > 0.009
    wide = make(emb_size=40, init_range=0.1).embedding.weight
    assert wide.abs().max() > 0.09


def test_drop_per_step_masks_differ_over_time_locked_do_not():
    torch.manual_seed(0)
    ones = torch.ones(3, 8, 50)
    per_step = drop(ones, 0.5, True, per_step=True)
    locked = drop(ones, 0.5, True, per_step=False)
    assert set(per_step.unique().tolist()) == {0.0, 2.0}
    assert all(not torch.equal(per_step[:, 0], per_step[:, t]) for t in range(1, 8))
    assert all(torch.equal(locked[:, 0], locked[:, t]) for t in range(1, 8))
    assert torch.equal(drop(ones, 0.5, False, per_step=True), ones)
    masks = step_masks(0.5, True, True, 4, (3, 50), ones)
    assert len(masks) == 4 and all(not torch.equal(masks[0], m) for m in masks[1:])
    locked_masks = step_masks(0.5, True, False, 4, (3, 50), ones)
    assert all(m is locked_masks[0] for m in locked_masks)
    assert step_masks(0.5, False, True, 4, (3, 50), ones) is None


@pytest.mark.parametrize("mode", ["per_step", "locked"])
def test_model_input_dropout_masks(mode):
    """The mask on the first layer's input (emb * mask, recovered from the layer's input): new at every
    position with per_step, the same at every position with locked."""
    model = make(**{**NO_DROPOUT, "dropouti": 0.5}, dropout_masks=mode).train()
    seen = {}
    model.layers[0].register_forward_pre_hook(
        lambda module, args, kwargs: seen.update(x=args[0], key=kwargs["key_input"]), with_kwargs=True)
    model(torch.randint(0, VOCAB, (2, 6)), model.init_state(2))
    mask = seen["x"] / seen["key"]  # the key reads the input before the cell's dropout
    assert set(mask.unique().tolist()) <= {0.0, 2.0}
    same = [torch.equal(mask[:, 0], mask[:, t]) for t in range(1, 6)]
    assert all(same) if mode == "locked" else not any(same)


def test_attention_key_input_dropout_per_step():
    """ReadingLayer with key_dropout = 0.5 (the code's projector_summ): with A = I and b = 0 the
    input half of the key is the dropped x_t (kept entries doubled) and the recurrent half sees the
    dropped h_{t-1}, with a new mask at every step; the cell's input x is not the key's."""
    torch.manual_seed(4)
    d = 8
    layer = ReadingLayer(d, d, wdrop=0.0, rdropout=0.0, key_dropout=0.5, dropout_masks="per_step").train()
    with torch.no_grad():
        layer.key_x.weight.copy_(torch.eye(d))
        layer.key_x.bias.zero_()
    calls = []

    class Recording(prpn_reading.RecurrentProjection):
        def __call__(self, bias, h):
            calls.append((self, bias.detach(), h.detach()))
            return super().__call__(bias, h)

    original = prpn_reading.RecurrentProjection
    prpn_reading.RecurrentProjection = Recording
    try:
        batch, steps = 3, 5
        key_input = torch.rand(batch, steps, d) + 0.5
        memory = (torch.rand(batch, 3, d) + 0.5, torch.zeros(batch, 3, d))
        out, _ = layer(torch.zeros(batch, steps, d), torch.ones(batch, steps, 3), memory, key_input=key_input)
    finally:
        prpn_reading.RecurrentProjection = original
    key_calls = [(bias, h) for projection, bias, h in calls if projection is calls[0][0]]  # key_h is made first
    assert len(key_calls) == steps
    h_prev = torch.cat([memory[0][:, -1:], out[:, :-1]], 1).detach()
    x_masks, h_masks = [], []
    for t, (bias, h) in enumerate(key_calls):
        x_masks.append(bias / key_input[:, t])
        h_masks.append(h / h_prev[:, t])
    for masks in (x_masks, h_masks):
        for mask in masks:
            assert torch.allclose(mask, mask.round()) and set(mask.round().unique().tolist()) <= {0.0, 2.0}
        assert all(not torch.equal(masks[0].round(), m.round()) for m in masks[1:])


@pytest.mark.parametrize("wdrop,key_dropout", [(0.0, 0.5), (0.5, 0.0)])
def test_dropconnect_only_when_asked(wdrop, key_dropout):
    """DropConnect on the key matrices leaves exact zeros in their gradient where entries were dropped;
    the code's input dropout (the shipped choice: wdrop 0) does not."""
    model = make(**{**NO_DROPOUT, "wdrop": wdrop, "key_dropout": key_dropout}).train()
    out = model(torch.randint(0, VOCAB, (4, 6)), model.init_state(4))
    F.cross_entropy(model.logits(out.hidden).reshape(-1, VOCAB), torch.randint(0, VOCAB, (24,))).backward()
    for weight in (model.layers[0].key_x.weight, model.layers[1].key_h.weight, model.output_key.weight):
        zeros = (weight.grad == 0).float().mean().item()
        assert (0.3 < zeros < 0.7) if wdrop else zeros == 0.0


# --------------------------------------------------------------------------- initialisation
# The released code (PyTorch 0.3, README) keeps every module's default except PRPN.init_weights. 0.3's
# defaults: nn.Linear and nn.Conv1d weight and bias U(+-1/sqrt(n)), n = fan-in counted over ALL input
# channels (groups ignored); nn.BatchNorm1d scale U(0, 1), shift 0. Its LayerNorm: scale 1, shift 0.

PAPER_TINY = dict(emb_size=30, hidden_size=50, n_slots=3, n_lookback=2)


def assert_uniform(tensor: torch.Tensor, low: float, high: float, closeness: float = 0.95):
    """Inside [low, high], reaching near both ends, with the mean and variance of U(low, high)."""
    values = tensor.detach().flatten()
    width = high - low
    assert values.min() >= low and values.max() <= high, (values.min(), values.max(), low, high)
    assert values.min() < low + (1 - closeness) * width and values.max() > high - (1 - closeness) * width
    assert abs(values.mean().item() - (low + high) / 2) < 0.1 * width
    assert values.var().item() == pytest.approx(width**2 / 12, rel=0.25)


def test_attention_key_is_drawn_as_one_linear_over_input_and_state():
    """projector_summ = nn.Linear(I + d, d): both halves of A and the bias from U(+-1/sqrt(I + d)), not the
    halves' own bounds 1/sqrt(I) and 1/sqrt(d)."""
    torch.manual_seed(0)
    layer = ReadingLayer(30, 50, wdrop=0.0, rdropout=0.0)
    bound = (30 + 50) ** -0.5
    for tensor in (layer.key_x.weight, layer.key_h.weight):
        assert_uniform(tensor, -bound, bound, closeness=0.99)
    assert_uniform(layer.key_x.bias, -bound, bound, closeness=0.8)  # 50 draws
    assert layer.key_h.bias is None


def test_reading_cell_and_predict_linears_keep_the_linear_default():
    """LSTMCell's ih and hh (with biases), projector_pred and ffd's projection: U(+-1/sqrt(fan_in)) for
    weight and bias; LayerNorm scale 1, shift 0."""
    torch.manual_seed(1)
    model = make(**PAPER_TINY)
    layer = model.layers[0]
    for linear, fan_in in ((layer.ih, 30), (layer.hh, 50), (model.layers[1].ih, 50), (model.output_key, 50),
                           (model.output_proj, 100)):
        assert_uniform(linear.weight, -(fan_in**-0.5), fan_in**-0.5, closeness=0.99)
        assert_uniform(linear.bias, -(fan_in**-0.5), fan_in**-0.5, closeness=0.8)
    for norm in (layer.norm_ih, layer.norm_hh, layer.norm_c):
        assert torch.equal(norm.weight, torch.ones_like(norm.weight)) and not norm.bias.any()


@pytest.mark.parametrize("defaults", ["torch-0.3", "torch-1"])
def test_parsing_network_and_batch_norm_init(defaults):
    """The distance convolution U(+-1/sqrt(E (Q + 1))) either way. torch-0.3 (the code's): both batch
    norms' scales U(0, 1), the grouped 1x1 convolution U(+-1/sqrt(d)); torch-1: scales 1 and the
    group's bound 1/sqrt(d / 2)."""
    torch.manual_seed(2)
    model = make(**{**PAPER_TINY, "emb_size": 100, "hidden_size": 400}, module_defaults=defaults)
    parser = model.parser
    conv_bound = (100 * 3) ** -0.5
    assert_uniform(parser.conv.weight, -conv_bound, conv_bound, closeness=0.99)
    assert_uniform(parser.conv.bias, -conv_bound, conv_bound, closeness=0.9)
    out_bound = 400**-0.5 if defaults == "torch-0.3" else 200**-0.5
    assert_uniform(parser.out.weight, -out_bound, out_bound, closeness=0.95)  # 2 x 200 draws
    assert parser.out.bias.abs().max() <= out_bound
    for norm in (parser.norm, model.output_norm):
        assert not norm.bias.any()
        if defaults == "torch-0.3":
            assert_uniform(norm.weight, 0.0, 1.0, closeness=0.9)  # 400 and 100 draws
        else:
            assert torch.equal(norm.weight, torch.ones_like(norm.weight))


def test_torch_03_conv_init_is_todays_default_without_groups():
    """0.3's bound counts all input channels: the same as today's for groups = 1, sqrt(groups) narrower
    with groups."""
    torch.manual_seed(3)
    plain, grouped = torch.nn.Conv1d(64, 300, 3), torch.nn.Conv1d(64, 300, 3, groups=4)
    today = [conv.weight.abs().max().item() for conv in (plain, grouped)]
    prpn_module.torch_03_conv_init(plain)
    prpn_module.torch_03_conv_init(grouped)
    bound = (64 * 3) ** -0.5
    assert today[0] <= bound and today[0] > 0.99 * bound  # today's ungrouped bound is 0.3's
    assert today[1] > 1.9 * bound  # today's grouped bound: 1/sqrt(64 / 4 * 3), twice 0.3's
    for conv in (plain, grouped):
        assert_uniform(conv.weight, -bound, bound, closeness=0.99)
        assert_uniform(conv.bias, -bound, bound, closeness=0.9)


def test_embedding_untied_decoder_is_its_own_draw():
    model = make(emb_size=40, tie_weights=False)
    assert not torch.equal(model.output_weight, model.embedding.weight)
    assert_uniform(model.output_weight, -0.01, 0.01, closeness=0.99)
    assert not model.output_bias.any()


def test_module_defaults_shipped_and_stored():
    """The configs use the code's torch-0.3 defaults; a checkpoint written before the option existed
    says torch-1 (what its weights were drawn with) when read back."""
    from induce.config import load_config
    from induce.models.configs import resolve_config, stored_config

    raw = yaml.safe_load((model_config_path("prpn")).read_text())["model"]
    assert PRPNConfig(**raw).module_defaults == "torch-0.3" and PRPNConfig().module_defaults == "torch-0.3"
    written = resolve_config(load_config("prpn")).to_dict()
    old = {**written, "model": {k: v for k, v in written["model"].items() if k != "module_defaults"}}
    assert stored_config(old)["model"]["module_defaults"] == "torch-1"
    assert stored_config(written)["model"]["module_defaults"] == "torch-0.3"


def test_paper_size_parameter_count_is_the_released_codes():
    """bench/ORIGINALS.md: the released PRPN (main_LM.py defaults, --tied) has 43,603,202 parameters at
    vocabulary 10,000; the init changes add none. Meta device: no memory, no draws."""
    with torch.device("meta"):
        model = PRPN(10_000, PRPNConfig())
    assert sum(p.numel() for p in model.parameters()) == 43_603_202
