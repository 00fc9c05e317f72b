"""ON-LSTM against the released code (yikangshen/Ordered-Neurons): AR on the raw
last-layer output, DropConnect without rescale in training and scaled by 1 - p at evaluation, and
the ASGD restart of main.py's ``--finetuning``. Tiny models, one thread."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from induce.config import load_config, model_config_path
from induce.models.common.awd import dropconnect
from induce.models.onlstm import model as onlstm_module
from induce.models.onlstm.model import ONLSTM, ONLSTMConfig
from induce.training.optim import Schedule, build_optimizer
from induce.training.trainer import LMLoss

VOCAB = 23
TINY = dict(emb_size=12, hidden_size=20, chunk_size=4)
NO_DROPOUT = dict(dropout=0.0, dropouth=0.0, dropouti=0.0, dropoute=0.0, wdrop=0.0)


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def make(seed: int = 0, **overrides) -> ONLSTM:
    torch.manual_seed(seed)
    return ONLSTM(VOCAB, ONLSTMConfig(**{**TINY, **overrides}))


def test_shipped_config_and_defaults_follow_the_released_code():
    raw = yaml.safe_load(model_config_path("onlstm").read_text())
    for cfg in (ONLSTMConfig(**raw["model"]), ONLSTMConfig()):
        assert cfg.ar_target == "raw" and cfg.dropconnect_scale == "eval"
    assert load_config("onlstm").optim.asgd_restart_epoch == 500


# --------------------------------------------------------------------------------------------- AR


@pytest.mark.parametrize("target", ["raw", "dropped"])
def test_activation_regulariser_target(target):
    """Only the output dropout is on (p = 0.45), so the raw outputs do not depend on the random draws.
    AR = alpha * mean(h^2) of the raw last-layer output (ON-LSTM code), or of the dropped one (AWD-LSTM),
    whose squares are 1 / 0.55 = 1.8x larger in expectation."""
    model = make(**{**NO_DROPOUT, "dropout": 0.45}, ar_target=target).train()
    tokens, targets = torch.randint(0, VOCAB, (3, 7)), torch.randint(0, VOCAB, (3, 7))
    torch.manual_seed(1)
    with torch.no_grad():  # larger inputs: outputs ~0.03 instead of ~1e-3, and a large alpha, so that
        model.embedding.weight.mul_(20.0)  # the term stands far above the float32 rounding of the loss
        for layer in model.layers:
            layer.weight_ih.mul_(5.0)
    alpha = 100.0
    loss, cross_entropy, _ = LMLoss(model, alpha=alpha, beta=0.0)(tokens, targets, model.init_state(3))
    torch.manual_seed(1)  # the same output mask again
    out = model(tokens, model.init_state(3))
    raw, dropped = out.raw_outputs[-1], out.hidden
    assert not torch.equal(raw, dropped)
    # hand computation of the term, element by element
    raw_term = alpha * sum(v * v for v in raw.flatten().tolist()) / raw.numel()
    dropped_term = alpha * sum(v * v for v in dropped.flatten().tolist()) / dropped.numel()
    expected = raw_term if target == "raw" else dropped_term
    assert raw_term > 0.1 and dropped_term > 0.1
    assert (loss - cross_entropy).item() == pytest.approx(expected, rel=1e-4)
    assert torch.equal(out.dropped_outputs[-1], raw if target == "raw" else dropped)


# ------------------------------------------------------------------------------------- DropConnect


def test_dropconnect_hand_example():
    weight = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    torch.testing.assert_close(dropconnect(weight, 0.5, False, scale_at_eval=True),
                               torch.tensor([[0.5, 1.0], [1.5, 2.0]]))
    assert torch.equal(dropconnect(weight, 0.5, False), weight)
    assert torch.equal(dropconnect(weight, 0.0, True, scale_at_eval=True), weight)
    assert torch.equal(dropconnect(weight, 0.0, False, scale_at_eval=True), weight)


def test_dropconnect_training_masks():
    torch.manual_seed(0)
    weight = torch.rand(60, 70) + 1.0
    plain = dropconnect(weight, 0.45, True, scale_at_eval=True)
    kept = plain != 0
    assert torch.equal(plain[kept], weight[kept])  # no rescale
    assert 0.5 < kept.float().mean() < 0.6  # keep probability 0.55
    inverted = dropconnect(weight, 0.45, True)
    kept = inverted != 0
    torch.testing.assert_close(inverted[kept], weight[kept] / 0.55)


def test_onlstm_layer_uses_the_unscaled_mask_in_training_and_scaled_weight_in_eval(monkeypatch):
    """The recurrent matrix the layer multiplies by: entries 0 or W in training (one mask for the
    whole forward), W * (1 - p) in evaluation; the AWD-LSTM option: 0 or W / (1 - p), and W."""
    seen = []

    class Recording(onlstm_module.RecurrentProjection):
        def __init__(self, weight, packing=None):
            seen.append(weight.detach().clone())
            super().__init__(weight, packing)

    monkeypatch.setattr(onlstm_module, "RecurrentProjection", Recording)
    tokens = torch.randint(0, VOCAB, (2, 5))
    for scale, train_factor, eval_factor in (("eval", 1.0, 0.55), ("train", 1 / 0.55, 1.0)):
        model = make(**{**NO_DROPOUT, "wdrop": 0.45}, dropconnect_scale=scale)
        weights = [layer.weight_hh.detach().t() for layer in model.layers]
        seen.clear()
        model.train()(tokens, model.init_state(2))
        for used, weight in zip(seen, weights):
            kept = used != 0
            assert 0.3 < kept.float().mean() < 0.8
            torch.testing.assert_close(used[kept], weight[kept] * train_factor)
        seen.clear()
        model.eval()(tokens, model.init_state(2))
        for used, weight in zip(seen, weights):
            torch.testing.assert_close(used, weight * eval_factor)


# ------------------------------------------------------------------------------------ ASGD restart


def restart_schedule(**overrides):
    items = {"optim.asgd": "nonmono", "optim.nonmono": "1", "optim.asgd_restart_epoch": "6", "optim.lr": "30"}
    items.update(overrides)
    return Schedule(load_config("onlstm", overrides=[f"{k}={v}" for k, v in items.items()]).optim)


def test_asgd_restart_at_the_finetuning_epoch():
    """ON-LSTM main.py: ASGD from the non-monotone trigger (epoch 3 here); at the evaluation of epoch
    ``finetuning`` (6) a fresh ASGD (lr back to lr) and an empty validation history; nothing after."""
    schedule = restart_schedule()
    assert [schedule.after_evaluation(e, loss) for e, loss in enumerate([5.0, 4.0, 5.5], 1)] == [False, False, True]
    assert schedule.asgd_active
    schedule.base_lr = 3.0  # e.g. lowered since: the restart sets it back
    assert not schedule.after_evaluation(4, 3.0) and not schedule.after_evaluation(5, 2.9)
    assert schedule.after_evaluation(6, 2.8)
    assert schedule.asgd_active and schedule.base_lr == 30.0 and schedule.val_losses == []
    assert not any(schedule.after_evaluation(e, 9.0) for e in range(7, 12))  # no stop, no further restart


def test_no_restart_before_asgd_runs():
    """main.py checks ``epoch == finetuning`` only in its ASGD branch: a switch that comes at the
    restart epoch itself, or later, is a plain switch."""
    schedule = restart_schedule(**{"optim.asgd_restart_epoch": "3"})
    results = [schedule.after_evaluation(e, loss) for e, loss in enumerate([5.0, 4.0, 5.5, 6.0, 6.0], 1)]
    assert results == [False, False, True, False, False]  # epoch 3: the switch, no second event
    schedule = restart_schedule(**{"optim.asgd_restart_epoch": "2"})
    results = [schedule.after_evaluation(e, loss) for e, loss in enumerate([5.0, 4.0, 5.5, 6.0], 1)]
    assert results == [False, False, True, False]
    off = restart_schedule(**{"optim.asgd_restart_epoch": "null"})
    assert [off.after_evaluation(e, loss) for e, loss in enumerate([5.0, 4.0, 5.5, 1.0, 1.0, 1.0], 1)] == [
        False, False, True, False, False, False]


def test_restarted_asgd_starts_a_new_average():
    """What the trainer does on True: a new ASGD, whose average starts from the current parameters."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    cfg = load_config("onlstm", overrides=["optim.lr=0.1"]).optim
    optimizer = build_optimizer(model.parameters(), cfg, asgd=True)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 3)).pow(2).sum().backward()
        optimizer.step()
    assert not torch.allclose(optimizer.state[model.weight]["ax"], model.weight.detach())
    optimizer = build_optimizer(model.parameters(), cfg, asgd=True)
    before = model.weight.detach().clone()
    optimizer.zero_grad()
    model(torch.randn(4, 3)).pow(2).sum().backward()
    optimizer.step()
    # first step of a fresh ASGD (t0 = 0): the average is the parameter itself
    torch.testing.assert_close(optimizer.state[model.weight]["ax"], model.weight.detach())
    assert not torch.equal(before, model.weight.detach())


# --------------------------------------------------------------------------- initialisation
# ON_LSTM.ONLSTMCell: ih = nn.Linear(I, G) and hh = LinearDropConnect(H, G), an nn.Linear: weight and bias
# of each U(+-1/sqrt(fan_in)) (PyTorch 0.4 and today alike); model.RNNModel.init_weights: embedding
# and decoder weight U(+-0.1), decoder bias 0.


def uniform_sum_cdf(x: torch.Tensor, a: float, b: float) -> torch.Tensor:
    """CDF of U(-a, a) + U(-b, b) (independent): with t = x + a + b the sum of U(0, 2a) and U(0, 2b),
    whose CDF is (R(t) - R(t - 2a) - R(t - 2b) + R(t - 2a - 2b)) / (4ab), R(t) = max(t, 0)^2 / 2."""
    t = x.double() + a + b
    ramp = lambda v: v.clamp(min=0) ** 2 / 2  # noqa: E731
    return (ramp(t) - ramp(t - 2 * a) - ramp(t - 2 * b) + ramp(t - 2 * a - 2 * b)) / (4 * a * b)


def test_uniform_sum_cdf_hand_values():
    """a = b = 1: the triangle on [-2, 2]: F(-2) = 0, F(-1) = 1/8, F(0) = 1/2, F(1) = 7/8, F(2) = 1."""
    got = uniform_sum_cdf(torch.tensor([-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0]), 1.0, 1.0)
    torch.testing.assert_close(got, torch.tensor([0, 0, 1 / 8, 1 / 2, 7 / 8, 1, 1], dtype=torch.float64))


def test_gate_weights_and_two_biases_are_drawn_as_the_code_does():
    torch.manual_seed(0)
    layer = onlstm_module.ONLSTMLayer(40, 90, 10, wdrop=0.45)  # G = 2 * 9 + 4 * 90 = 378 rows
    names = [name for name, _ in layer.named_parameters()]
    assert names == ["weight_ih", "weight_hh", "bias", "bias_hh"]
    for tensor, bound in ((layer.weight_ih, 40**-0.5), (layer.weight_hh, 90**-0.5),
                          (layer.bias, 40**-0.5), (layer.bias_hh, 90**-0.5)):
        top = tensor.detach().abs().max().item()
        assert top <= bound and top > 0.97 * bound, (tensor.shape, top, bound)
        assert abs(tensor.detach().mean().item()) < 0.1 * bound
        # variance of U(-c, c) is c^2 / 3
        assert tensor.detach().var().item() == pytest.approx(bound**2 / 3, rel=0.15)
    assert not torch.equal(layer.bias, layer.bias_hh)
    torch.testing.assert_close(layer.gate_bias(), layer.bias + layer.bias_hh)


def test_summed_gate_bias_is_a_sum_of_two_uniforms():
    """The bias a gate pre-activation gets (both biases): Kolmogorov-Smirnov distance to the exact
    CDF of U(+-1/sqrt(I)) + U(+-1/sqrt(H)) below the 0.1% critical value, and far from one uniform."""
    torch.manual_seed(1)
    layer = onlstm_module.ONLSTMLayer(100, 400, 4, wdrop=0.0)  # G = 2 * 100 + 1600 = 1800
    a, b = 100**-0.5, 400**-0.5
    total = layer.gate_bias().detach().sort().values
    n = total.numel()
    empirical = torch.arange(1, n + 1, dtype=torch.float64) / n
    distance = (empirical - uniform_sum_cdf(total, a, b)).abs().max().item()
    assert distance < 1.95 / n**0.5, distance
    one_uniform = ((total.double() + a + b) / (2 * (a + b))).clamp(0, 1)  # a single U(+-(a+b)): rejected
    assert (empirical - one_uniform).abs().max().item() > 3 / n**0.5
    assert total.abs().max() <= a + b and total.abs().max() > a  # beyond either bound alone


def test_one_bias_option_is_the_earlier_layer():
    """gate_biases: one — one zero bias, the parameters (names, order) and draws of the layer before
    the second bias existed (the weights are the same draws from the same seed)."""
    torch.manual_seed(2)
    one = onlstm_module.ONLSTMLayer(12, 20, 4, wdrop=0.45, gate_biases="one")
    torch.manual_seed(2)
    two = onlstm_module.ONLSTMLayer(12, 20, 4, wdrop=0.45)
    assert [name for name, _ in one.named_parameters()] == ["weight_ih", "weight_hh", "bias"]
    assert one.bias_hh is None and torch.equal(one.bias, torch.zeros_like(one.bias))
    assert torch.equal(one.weight_ih, two.weight_ih) and torch.equal(one.weight_hh, two.weight_hh)
    assert torch.equal(one.gate_bias(), one.bias)


def test_embedding_and_decoder_init():
    model = make(emb_size=40)  # 23 x 40 from U(-0.1, 0.1), tied; output bias 0
    weight = model.embedding.weight.detach()
    assert weight.abs().max() <= 0.1 and weight.abs().max() > 0.095
    assert model.output_weight is None and torch.equal(model.output_bias, torch.zeros(VOCAB))
    untied = make(emb_size=40, tie_weights=False)
    # untied: init_weights draws the decoder weight on its own (not a copy of the embedding)
    assert not torch.equal(untied.output_weight, untied.embedding.weight)
    assert untied.output_weight.abs().max() <= 0.1 and untied.output_weight.abs().max() > 0.095


def test_paper_size_parameter_count_is_the_released_codes():
    """bench/ORIGINALS.md: the released ON-LSTM at the README's PTB size has 25,232,180 parameters
    (vocabulary 10,000); ours had 25,220,840 with one bias per gate (11,340 fewer: 4830 + 4830 + 1680
    gate rows). Built on the meta device: no memory, no draws."""
    with torch.device("meta"):
        two = ONLSTM(10_000, ONLSTMConfig())
        one = ONLSTM(10_000, ONLSTMConfig(gate_biases="one"))
    assert sum(p.numel() for p in two.parameters()) == 25_232_180
    assert sum(p.numel() for p in one.parameters()) == 25_220_840


def test_shipped_config_has_two_biases_and_old_checkpoints_have_one():
    from induce.models.configs import resolve_config, stored_config

    assert ONLSTMConfig(**yaml.safe_load(model_config_path("onlstm").read_text())["model"]).gate_biases == "two"
    assert ONLSTMConfig().gate_biases == "two"
    written = resolve_config(load_config("onlstm")).to_dict()
    old = {**written, "model": {k: v for k, v in written["model"].items() if k != "gate_biases"}}
    assert stored_config(old)["model"]["gate_biases"] == "one"
    assert stored_config(written) == written  # a stored value wins
    unknown = {"model_name": "no-such-model", "model": {}}
    assert stored_config(unknown) is unknown


# ------------------------------------------------------------- checkpoints written before the second bias


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    from helpers import make_corpus

    return make_corpus(tmp_path_factory.mktemp("corpora"), train=24, valid=4, test=2)


def tiny_run_config(corpus, *extra):
    overrides = ["model.emb_size=8", "model.hidden_size=8", "model.chunk_size=4", "data.batch_size=3",
                 "data.eval_batch_size=2", "data.bptt=6", "train.dev_f1=false", "train.epochs=2",
                 "train.device=cpu", "train.seed=11", f"data.corpus={corpus}", *extra]
    return load_config("onlstm", overrides=overrides)


def make_old(run_dir: Path) -> None:
    """Rewrite both checkpoints of ``run_dir`` as the code before ``gate_biases`` wrote them: the
    same tensors, a config without the key (re-hashed, as that code would have)."""
    from induce.training.checkpoint import load_checkpoint, save_checkpoint

    for stem in ("best", "last"):
        tensors, meta = load_checkpoint(run_dir / stem)
        assert meta["config"]["model"].pop("gate_biases") == "one"
        keep = {k: v for k, v in meta.items() if k not in ("format", "format_version", "weights_file",
                                                           "weights_sha256", "model_sha256")}
        save_checkpoint(run_dir / stem, tensors, keep)
    # the folder's config.yaml as that code wrote it too (load_run compares it with the checkpoint)
    folder_config = run_dir / "config.yaml"
    saved = yaml.safe_load(folder_config.read_text())
    assert saved["model"].pop("gate_biases") == "one"
    folder_config.write_text(yaml.safe_dump(saved))


def test_old_checkpoint_loads_and_parses_as_it_was_trained(tmp_path, tiny_corpus):
    from rich.console import Console

    from induce.inference.loading import load_run
    from induce.training.checkpoint import load_checkpoint
    from induce.training.trainer import train

    run = tmp_path / "old"
    train(tiny_run_config(tiny_corpus, "model.gate_biases=one", "train.epochs=1"), run,
          console=Console(quiet=True), progress=False)
    make_old(run)
    loaded = load_run(run, device="cpu")
    assert loaded.model.config.gate_biases == "one"
    assert all(layer.bias_hh is None for layer in loaded.model.layers)
    tensors, _ = load_checkpoint(run / "best")
    for name, value in loaded.model.state_dict().items():
        assert torch.equal(value, tensors[f"model.{name}"]), name


@pytest.mark.slow
def test_old_run_resumes_exactly(tmp_path, tiny_corpus):
    """A run trained with one bias and checkpointed before the option existed resumes as that model
    (not with a second bias, which would not load), bit for bit as the uninterrupted run."""
    from rich.console import Console

    from induce.training.checkpoint import load_checkpoint
    from induce.training.trainer import resume, train

    quiet = Console(quiet=True)
    straight = tmp_path / "straight"
    train(tiny_run_config(tiny_corpus, "model.gate_biases=one"), straight, console=quiet, progress=False)
    old = tmp_path / "old"
    train(tiny_run_config(tiny_corpus, "model.gate_biases=one", "train.epochs=1"), old, console=quiet, progress=False)
    make_old(old)
    resume(old, {"epochs": 2}, console=quiet, progress=False)
    a, meta = load_checkpoint(straight / "last")
    b, meta_b = load_checkpoint(old / "last")
    keys = [k for k in a if k.startswith(("model.", "optim."))]
    assert keys == [k for k in b if k.startswith(("model.", "optim."))]
    assert not any(k.endswith("bias_hh") for k in keys)
    assert all(torch.equal(a[k], b[k]) for k in keys)
    assert meta_b["config"]["model"]["gate_biases"] == "one"  # the resumed run now says so
