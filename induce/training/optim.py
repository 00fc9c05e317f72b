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
* Parameter groups: a model declares how its parameters are trained
  (:meth:`induce.models.base.LanguageModel.param_groups`, a list of
  :class:`~induce.models.base.ParamGroup`). One group under the run's optimiser (the default) is the
  plain torch optimiser; several (PaLM's span scorer in its own Adam under ``optim.scorer_optimizer:
  adam``) make a :class:`ScorerSplitOptimizer`: one torch optimiser per group, each group clipped on its
  own, the lr schedule setting the run-optimiser groups' lr only; after the ASGD switch one ASGD takes all
  parameters and each group is clipped at its ``asgd_clip`` (:func:`clip_gradients`). This module names no
  family: what a group is, and which config keys set it, is the model's.
* ``plateau_factor``: the base lr is multiplied by it after ``plateau_patience`` + 1 evaluations
  without a new best validation loss (PRPN's ReduceLROnPlateau, threshold 0).

With variable-length BPTT the lr of a step is ``base_lr * T / bptt`` (AWD-LSTM): short segments
take proportionally smaller steps.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Optional, Sequence

import torch

from induce.config import OptimConfig
from induce.models.base import ParamGroup


def build_optimizer(
    params: Iterable[torch.nn.Parameter], config: OptimConfig, asgd: bool = False,
    groups: Optional[Sequence[ParamGroup]] = None,
) -> torch.optim.Optimizer:
    """The optimiser of the current phase over ``params`` (the model's parameters, in its order):
    ``config.optimizer`` before the switch, ASGD after it. ``groups`` (the model's
    :meth:`~induce.models.base.LanguageModel.param_groups`; ``None``: one group of ``params``): more than one, or
    one with an Adam of its own, make a :class:`ScorerSplitOptimizer` (see there)."""
    params = list(params)
    if groups is not None and (len(groups) > 1 or any(group.adam_lr is not None for group in groups)):
        return _split_optimizer(params, list(groups), config, asgd)
    if asgd:
        lr = config.asgd_lr if config.asgd_lr is not None else config.lr
        # capturable keeps step/eta/mu on the GPU: without it every step reads them back per parameter.
        on_cuda = bool(params) and params[0].is_cuda
        return torch.optim.ASGD(params, lr=lr, t0=0, lambd=0.0, weight_decay=config.wdecay, capturable=on_cuda)
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.lr, weight_decay=config.wdecay)
    return torch.optim.Adam(params, lr=config.lr, betas=tuple(config.betas), eps=config.eps, weight_decay=config.wdecay,
                            fused=_fused_on_cpu(params))


def _fused_on_cpu(params: list) -> Optional[bool]:
    """``True`` when every parameter is a floating-point CPU tensor: Adam's fused CPU kernel updates all of them
    in one pass instead of torch's per-tensor loop (about 2.5x faster for the PCFGs' steps, where the update took
    a third of the step; its results differ from the loop's by float rounding, the same on every run).
    ``None`` (torch's default) elsewhere: the GPU paths keep their own choice."""
    if params and all(p.device.type == "cpu" and p.is_floating_point() for p in params):
        return True
    return None


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
        """Set the lr of the next step: ``base_lr * scale`` (scale = segment length / bptt). A
        :class:`ScorerSplitOptimizer`'s groups with an Adam of their own keep their fixed lr."""
        for group in getattr(optimizer, "scheduled_param_groups", optimizer.param_groups):
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
    averaging = [opt for opt in getattr(optimizer, "optimizers", [optimizer]) if isinstance(opt, torch.optim.ASGD)]
    if not averaging:
        yield
        return
    saved = []
    with torch.no_grad():
        for param in model.parameters():
            state = next((opt.state[param] for opt in averaging if param in opt.state), {})
            if "ax" in state:
                saved.append((param, param.detach().clone()))
                param.copy_(state["ax"])
    try:
        yield
    finally:
        with torch.no_grad():
            for param, original in saved:
                param.copy_(original)


# --- Several optimisers over a model's parameter groups ------------------------------------------------


class ScorerSplitOptimizer:
    """Several torch optimisers over disjoint parameter lists, stepped together, with per-part clipping (the
    optimiser of a model with several :class:`~induce.models.base.ParamGroup`; its name, which checkpoints store
    as ``optimizer_kind``, is that of the first such split, PaLM's span scorer).

    ``parts``: ``(optimizer, scheduled)``; the lr schedule (:meth:`Schedule.step_lr`) sets the lr of
    the ``scheduled`` parts only. ``clip_parts``: ``(params, max_norm or None)``; :func:`clip_gradients`
    clips each list on its own. ``state_dict`` is one torch-style dict (parameter indices numbered
    across the parts in order), so the checkpoint code stores it like a single optimiser.
    """

    def __init__(self, parts: list[tuple[torch.optim.Optimizer, bool]],
                 clip_parts: list[tuple[list[torch.nn.Parameter], Optional[float]]]):
        self.optimizers = [opt for opt, _ in parts]
        self.scheduled = [scheduled for _, scheduled in parts]
        self.clip_parts = clip_parts

    @property
    def scheduled_param_groups(self) -> list[dict]:
        # looked up on every call: torch's load_state_dict replaces the group dicts
        return [group for opt, scheduled in zip(self.optimizers, self.scheduled) if scheduled
                for group in opt.param_groups]

    @property
    def param_groups(self) -> list[dict]:
        return [group for opt in self.optimizers for group in opt.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def clip(self) -> None:
        for params, max_norm in self.clip_parts:
            if max_norm is not None and params:
                torch.nn.utils.clip_grad_norm_(params, max_norm)

    def state_dict(self) -> dict:
        state, groups, offset = {}, [], 0
        for opt in self.optimizers:
            part = opt.state_dict()
            for index, entry in part["state"].items():
                state[index + offset] = entry
            for group in part["param_groups"]:
                groups.append({**group, "params": [i + offset for i in group["params"]]})
            offset += sum(len(group["params"]) for group in opt.param_groups)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups, offset, first_group = state_dict["param_groups"], 0, 0
        for opt in self.optimizers:
            count = sum(len(group["params"]) for group in opt.param_groups)
            own_groups = groups[first_group : first_group + len(opt.param_groups)]
            if len(own_groups) != len(opt.param_groups):
                raise ValueError("optimiser state does not match the split into parameter groups "
                                 "(different number of groups)")
            part = {
                "state": {int(i) - offset: v for i, v in state_dict["state"].items()
                          if offset <= int(i) < offset + count},
                "param_groups": [{**group, "params": [i - offset for i in group["params"]]} for group in own_groups],
            }
            opt.load_state_dict(part)
            offset += count
            first_group += len(opt.param_groups)


def _split_optimizer(params: list[torch.nn.Parameter], groups: list[ParamGroup], config: OptimConfig,
                     asgd: bool) -> ScorerSplitOptimizer:
    """The optimiser of a model's parameter groups (:class:`~induce.models.base.ParamGroup`):

    * before the switch: a group under the run's optimiser gets ``config.optimizer`` over its parameters, its lr
      scheduled (scaled per segment, plateaus); a group with ``adam_lr`` its own ``Adam(lr=adam_lr,
      weight_decay=wdecay)`` (torch's default betas and eps), lr not scheduled; each group clipped at its ``clip``;
    * after the switch: one ASGD over ``params`` (every parameter, in the model's order), each group clipped at its
      ``asgd_clip``.
    """
    if asgd:
        return ScorerSplitOptimizer([(build_optimizer(params, config, asgd=True), True)],
                                    [(list(group.params), group.asgd_clip) for group in groups])
    parts = []
    for group in groups:
        if group.adam_lr is None:
            parts.append((build_optimizer(group.params, config), True))
        else:
            parts.append((torch.optim.Adam(list(group.params), lr=group.adam_lr, weight_decay=config.wdecay), False))
    return ScorerSplitOptimizer(parts, [(list(group.params), group.clip) for group in groups])


def clip_gradients(optimizer, params: list[torch.nn.Parameter], clip: Optional[float]) -> None:
    """Gradient-norm clipping before ``optimizer.step()``: all ``params`` at ``clip`` (None: off), or a
    :class:`ScorerSplitOptimizer`'s own per-part clipping."""
    if isinstance(optimizer, ScorerSplitOptimizer):
        optimizer.clip()
    elif clip is not None:
        torch.nn.utils.clip_grad_norm_(params, clip)


# --- The training step ------------------------------------------------------------------------------


def optimiser_step(optimizer, params: list[torch.nn.Parameter], clip: Optional[float],
                   forward: Callable[[], tuple], device_type: str, bf16: bool = False,
                   cast_cache: bool = True) -> tuple:
    """One optimiser step, the one every training path runs (the trainer's eager step, the graph-captured
    step of :mod:`induce.training.graphs` and :mod:`induce.training.benchmark`'s bare step): gradients set
    to ``None``, ``forward()`` under bf16 autocast when ``bf16`` (``cast_cache=False`` inside a CUDA graph
    capture, whose lifetime autocast's weight-cast cache must not outlive), backward of its first output
    (the loss, a ``[]`` tensor), :func:`clip_gradients`, ``optimizer.step()``. Returns what ``forward``
    returned. No host synchronisation: the graph-captured step records exactly these operations.

    bf16 needs no loss scaling (its exponent range is float32's); an fp16 mode would add its gradient
    scaler here, around the backward and the step."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16, cache_enabled=None if cast_cache else False):
        outputs = forward()
    outputs[0].backward()
    clip_gradients(optimizer, params, clip)
    optimizer.step()
    return outputs


class Optimisation:
    """A run's optimiser and its step: ``optimizer`` (``config.optimizer`` until :meth:`switch_to_asgd`
    replaces it), ``params`` (the trained parameters, in the model's order: what is clipped), and
    :meth:`step`, :func:`optimiser_step` with the run's clipping and autocast (``train.amp``: bf16 on CUDA and on
    a CPU with a bf16 matrix unit; ``precision`` says which ran and why, :mod:`induce.training.precision`)."""

    def __init__(self, model: torch.nn.Module, config: OptimConfig, device: torch.device, amp: bool = False):
        from .precision import resolve_precision

        self.model, self.config = model, config
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.groups = model.param_groups(config)
        self.optimizer = build_optimizer(model.parameters(), config, groups=self.groups)
        self.device_type = device.type
        self.precision = resolve_precision(amp, device.type)
        self.bf16 = self.precision.bf16

    def switch_to_asgd(self) -> None:
        """The switch to averaged SGD (or its restart): a fresh ASGD over the model's parameters, its
        running average starting from their current values (:meth:`Schedule.after_evaluation` says when)."""
        self.optimizer = build_optimizer(self.model.parameters(), self.config, asgd=True, groups=self.groups)

    def step(self, forward: Callable[[], tuple]) -> tuple:
        """One optimiser step on the loss ``forward()[0]``; returns ``forward()``'s outputs."""
        return optimiser_step(self.optimizer, self.params, self.config.clip, forward, self.device_type, self.bf16)
