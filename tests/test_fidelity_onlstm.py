"""ON-LSTM against the released code (yikangshen/Ordered-Neurons), issue 11 deviation 4: AR on the raw
last-layer output, DropConnect without rescale in training and scaled by 1 - p at evaluation, and
the ASGD restart of main.py's ``--finetuning``. Tiny models, one thread."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from induce.config import load_config
from induce.models import onlstm as onlstm_module
from induce.models.awd import dropconnect
from induce.models.onlstm import ONLSTM, ONLSTMConfig
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
    root = Path(__file__).resolve().parents[1] / "configs"
    raw = yaml.safe_load((root / "onlstm.yaml").read_text())
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
    torch.testing.assert_close(dropconnect(weight, 0.5, False, scale_at_eval=True), torch.tensor([[0.5, 1.0], [1.5, 2.0]]))
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
