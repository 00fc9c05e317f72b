"""The components of a run (:class:`RunParts`, built by :func:`induce.training.setup.build_run`) and its
checkpoints: what ``last`` and ``best`` hold beyond the loop state (:class:`~induce.training.state.LoopState`,
which writes its own part) and how a run is restored from ``last``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Optional

import torch
from torch import nn

from induce.config import RunConfig

from .checkpoint import CheckpointError, join_optimizer_state, prefixed, save_checkpoint, split_optimizer_state
from .ddp import DistContext
from .objectives import Objective
from .optim import Optimisation, averaged_parameters
from .run_folder import BEST, LAST, now
from .state import LoopState

if TYPE_CHECKING:
    from induce.data.corpus import PreparedCorpus, Vocab

    from .graphs import StaticSteps


class DevSet(NamedTuple):
    """Dev sentences for the per-epoch F1 (aligned lists): the words without punctuation, their LM ids and
    the gold trees (with POS tags)."""

    words: list[list[str]]
    ids: list[list[int]]
    gold: list


@dataclass
class RunParts:
    """The components of a run, built together by :func:`~induce.training.setup.build_run`.

    ``config`` is the resolved config (the default corpus's path, the automatic ``data.bptt_bucket``);
    ``loss_module`` is ``objective.loss_module``, DDP-wrapped under torchrun; ``static_steps`` the
    graph-captured steps (``train.cuda_graphs``; None: the eager step); ``optimisation`` the optimiser
    (which the ASGD switch replaces) and its step; ``loop`` where the loop stands."""

    config: RunConfig
    ctx: DistContext
    corpus: PreparedCorpus
    vocab: Vocab
    model: nn.Module
    objective: Objective
    loss_module: nn.Module
    dev: Optional[DevSet]
    static_steps: Optional[StaticSteps]
    optimisation: Optimisation
    loop: LoopState


def identity(kind: str, parts: RunParts) -> dict:
    """The sidecar entries that say what a checkpoint is: its kind (``best`` / ``last``), the model, the
    resolved config, the vocabulary, the epoch and when it was written."""
    return {
        "kind": kind,
        "model_name": parts.config.model_name,
        "config": parts.config.to_dict(),
        "vocab": parts.vocab.to_json(),
        "epoch": parts.loop.epoch,
        "written_at": now(),
    }


def save_last(run_dir: Path, parts: RunParts) -> None:
    """The resumable checkpoint ``last``: the weights, the optimiser, the loop state (with every process's
    RNGs) and the objective's own state (:meth:`~induce.training.objectives.Objective.state_dict`: written
    only when it has any). A collective under DDP: every rank must call it; rank 0 writes."""
    optimizer = parts.optimisation.optimizer
    tensors = {f"model.{k}": v for k, v in parts.model.state_dict().items()}
    optim_tensors, optim_json = split_optimizer_state(optimizer.state_dict())
    tensors.update(optim_tensors)
    loop_tensors, loop_meta = parts.loop.checkpoint(parts.ctx)
    tensors.update(loop_tensors)
    if not parts.ctx.is_main:
        return
    meta = identity("last", parts)
    meta.update(optimizer=optim_json, optimizer_kind=type(optimizer).__name__, **loop_meta)
    objective_tensors, objective_state = parts.objective.state_dict()
    if objective_tensors or objective_state:
        tensors.update({f"objective.{k}": v for k, v in objective_tensors.items()})
        meta["objective"] = objective_state
    save_checkpoint(run_dir / LAST, tensors, meta)


def save_best(run_dir: Path, parts: RunParts, metrics: dict) -> None:
    """The selected model ``best``: the weights (ASGD's averages in the ASGD phase) and the epoch's
    ``metrics``; rank 0 only."""
    if not parts.ctx.is_main:
        return
    with averaged_parameters(parts.model, parts.optimisation.optimizer):
        tensors = {f"model.{k}": v.detach().clone() for k, v in parts.model.state_dict().items()}
    meta = identity("best", parts)
    meta["metrics"] = metrics
    save_checkpoint(run_dir / BEST, tensors, meta)


def restore_last(parts: RunParts, tensors: dict[str, torch.Tensor], meta: dict, run_dir: Path) -> Optional[str]:
    """Continue from ``last`` (as :func:`save_last` wrote it, or an older version of it): the weights, the
    loop state and RNGs, the optimiser (ASGD when the schedule had switched), the objective's state.
    Returns the loop state's note (a checkpoint of another number of processes), or None."""
    parts.model.load_state_dict(prefixed(tensors, "model"))
    # The loop state first: its schedule says whether the optimiser is ASGD by now.
    note = parts.loop.restore(tensors, meta, parts.ctx)
    if parts.loop.schedule.asgd_active:
        parts.optimisation.switch_to_asgd()
    optimizer = parts.optimisation.optimizer
    if meta.get("optimizer_kind") != type(optimizer).__name__:
        raise CheckpointError(
            f"{run_dir}: checkpoint optimiser {meta.get('optimizer_kind')} does not match {type(optimizer).__name__}"
        )
    optim_state = join_optimizer_state(tensors, meta["optimizer"])
    # Fresh (aligned) copies, not views into the file's buffer: see the recurrent state in LoopState.restore.
    optim_state["state"] = {
        i: {k: v.to(parts.ctx.device, copy=True) if isinstance(v, torch.Tensor) and v.dim() > 0 else v
            for k, v in s.items()}
        for i, s in optim_state["state"].items()
    }
    optimizer.load_state_dict(optim_state)
    parts.objective.load_state_dict(prefixed(tensors, "objective"), meta.get("objective", {}))
    return note
