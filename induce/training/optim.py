"""Optimisers and schedules: SGD/Adam, the switch to averaged SGD (ASGD), lr plateaus.

* ``asgd: nonmono`` — AWD-LSTM's non-monotone trigger: after an evaluation, switch to ASGD when
  there are more than ``nonmono`` validation losses and the newest is worse than the best of all
  but the last ``nonmono`` of them.
* ``asgd: epoch`` — PaLM: switch after ``asgd_after_epochs`` epochs.
* ASGD is ``torch.optim.ASGD(t0=0, lambd=0)`` as in AWD-LSTM: a constant step size and the running
  average ``ax`` of the parameters since the switch; evaluation and the best checkpoint use the
  average (:func:`averaged_parameters`).
* ``asgd_restart_epoch: N`` — ON-LSTM's ``--finetuning`` (``main.py``, default 500): at the
  evaluation of epoch N, if ASGD is already running, a fresh ASGD replaces it (the running average
  starts again from the current parameters, the lr goes back to ``asgd_lr`` / ``lr``) and the
  validation history is cleared. Nothing happens if the switch to ASGD has not come by then (the
  original checks it only inside its ASGD branch). The original also has a non-monotone stop after
  the restart, but its ASGD branch never appends to that history (``best_val_loss``), so the stop
  can never fire: training runs to ``--epochs``; here too (``train.epochs``).
* ``plateau_factor``: the base lr is multiplied by it after ``plateau_patience`` + 1 evaluations
  without a new best validation loss (PRPN's ReduceLROnPlateau, threshold 0).

With variable-length BPTT the lr of a step is ``base_lr * T / bptt`` (AWD-LSTM): short segments
take proportionally smaller steps.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator

import torch

from induce.config import OptimConfig


def build_optimizer(params: Iterable[torch.nn.Parameter], config: OptimConfig, asgd: bool = False) -> torch.optim.Optimizer:
    """The optimiser of the current phase: ``config.optimizer`` before the switch, ASGD after it."""
    params = list(params)
    if asgd:
        lr = config.asgd_lr if config.asgd_lr is not None else config.lr
        # capturable keeps step/eta/mu on the GPU: without it every step reads them back per parameter.
        on_cuda = bool(params) and params[0].is_cuda
        return torch.optim.ASGD(params, lr=lr, t0=0, lambd=0.0, weight_decay=config.wdecay, capturable=on_cuda)
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.lr, weight_decay=config.wdecay)
    return torch.optim.Adam(params, lr=config.lr, betas=tuple(config.betas), eps=config.eps, weight_decay=config.wdecay)


class Schedule:
    """Tracks the phase (base optimiser / ASGD), the base lr and the validation history.

    All of its state is plain JSON (:meth:`state_dict`), stored in the checkpoint sidecar.
    """

    def __init__(self, config: OptimConfig):
        self.config = config
        self.asgd_active = False
        self.base_lr = config.lr
        self.val_losses: list[float] = []
        self.plateau_best = float("inf")
        self.plateau_bad = 0

    def step_lr(self, optimizer: torch.optim.Optimizer, scale: float = 1.0) -> None:
        """Set the lr of the next step: ``base_lr * scale`` (scale = segment length / bptt)."""
        for group in optimizer.param_groups:
            group["lr"] = self.base_lr * scale

    def after_evaluation(self, epoch: int, val_loss: float) -> bool:
        """Record a validation loss (``epoch`` counts from 1); returns True when the optimiser must be
        (re)built as ASGD now: the switch to ASGD, or the ASGD restart at ``asgd_restart_epoch``."""
        cfg = self.config
        history = self.val_losses
        switch = restart = False
        if not self.asgd_active:
            if cfg.asgd == "nonmono":
                switch = len(history) > cfg.nonmono and val_loss > min(history[: -cfg.nonmono])
            elif cfg.asgd == "epoch":
                switch = epoch >= cfg.asgd_after_epochs
        else:
            restart = cfg.asgd_restart_epoch is not None and epoch == cfg.asgd_restart_epoch
        history.append(val_loss)
        if restart:
            history.clear()  # ON-LSTM main.py: best_val_loss = [] after the restart's evaluation
        if cfg.plateau_factor is not None:
            if val_loss < self.plateau_best:
                self.plateau_best, self.plateau_bad = val_loss, 0
            else:
                self.plateau_bad += 1
                if self.plateau_bad > cfg.plateau_patience:
                    self.base_lr *= cfg.plateau_factor
                    self.plateau_bad = 0
        if switch or restart:
            self.asgd_active = True
            self.base_lr = cfg.asgd_lr if cfg.asgd_lr is not None else cfg.lr
        return switch or restart

    def state_dict(self) -> dict:
        return {
            "asgd_active": self.asgd_active,
            "base_lr": self.base_lr,
            "val_losses": list(self.val_losses),
            "plateau_best": self.plateau_best,
            "plateau_bad": self.plateau_bad,
        }

    def load_state_dict(self, state: dict) -> None:
        self.asgd_active = bool(state["asgd_active"])
        self.base_lr = float(state["base_lr"])
        self.val_losses = [float(x) for x in state["val_losses"]]
        self.plateau_best = float(state["plateau_best"])
        self.plateau_bad = int(state["plateau_bad"])


@contextmanager
def averaged_parameters(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """Inside the block the parameters hold ASGD's averages ``ax`` (no-op for other optimisers)."""
    if not isinstance(optimizer, torch.optim.ASGD):
        yield
        return
    saved = []
    with torch.no_grad():
        for param in model.parameters():
            state = optimizer.state.get(param, {})
            if "ax" in state:
                saved.append((param, param.detach().clone()))
                param.copy_(state["ax"])
    try:
        yield
    finally:
        with torch.no_grad():
            for param, original in saved:
                param.copy_(original)
