"""What a resumable checkpoint holds and how the trainer writes and restores it.

:class:`LoopState` is the training loop's state: everything that decides the next step besides the
model's weights and the optimiser: the position (epoch, batch, segment start), the step counter, the
epoch's running loss sums, the best metric and the patience counter, the validation history, the lr
schedule (and ASGD switch), the carried recurrent state and the BPTT-length generator. Its
:meth:`~LoopState.checkpoint` / :meth:`~LoopState.restore` write and read it, together with the
process-wide RNG states (python ``random``, numpy's global generator, torch CPU and CUDA per
process), in ``last``'s tensors and sidecar keys (``trainer``, ``schedule``, ``rng``, ``hidden``,
``history``). Nothing else may draw from these generators between a checkpoint and the next step (a
draw that happens only once per process, e.g. a lazy probe inside the first forward, would make a
resumed process drift from the uninterrupted one).

What ``last`` and ``best`` hold beyond the loop state (the weights, the optimiser, the objective's own
state, the run's identity) is written and read by :mod:`induce.training.parts`.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import torch

from induce.config import RunConfig

from . import batching, ddp
from .checkpoint import flatten_state, unflatten_state
from .ddp import DistContext
from .optim import Schedule


def detach_state(state: Any) -> Any:
    """The recurrent state with every tensor detached (truncated BPTT)."""
    if isinstance(state, torch.Tensor):
        return state.detach()
    if isinstance(state, tuple):
        return tuple(detach_state(x) for x in state)
    if isinstance(state, list):
        return [detach_state(x) for x in state]
    if isinstance(state, dict):
        return {k: detach_state(v) for k, v in state.items()}
    return state


def map_state(state: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply ``fn`` to every tensor of a nested recurrent state."""
    if isinstance(state, torch.Tensor):
        return fn(state)
    if isinstance(state, tuple):
        return tuple(map_state(x, fn) for x in state)
    if isinstance(state, list):
        return [map_state(x, fn) for x in state]
    if isinstance(state, dict):
        return {k: map_state(v, fn) for k, v in state.items()}
    return state


def _rng_json_state(bptt_rng: Optional[np.random.Generator]) -> dict:
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "bptt": None if bptt_rng is None else bptt_rng.bit_generator.state,
    }


def _restore_rng_json(state: dict, bptt_rng: Optional[np.random.Generator]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if bptt_rng is not None and state.get("bptt") is not None:
        bptt_rng.bit_generator.state = state["bptt"]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass
class LoopState:
    """Where the training loop stands, one per process: what decides the next step besides the weights
    and the optimiser (and the process-wide RNGs, which :meth:`checkpoint` / :meth:`restore` carry too).

    The sidecar's ``trainer`` key holds the counters (its keys are the checkpoint format: old
    checkpoints must stay readable), ``schedule`` the lr schedule, ``history`` the epochs' metrics.
    """

    schedule: Schedule
    #: Draws the variable BPTT segment lengths (None: fixed lengths).
    bptt_rng: Optional[np.random.Generator]
    #: The epoch in progress (from 1).
    epoch: int = 1
    #: Optimiser steps done in this epoch.
    batch: int = 0
    #: The next segment's start in this epoch's rows.
    position: int = 0
    #: Optimiser steps done in the whole run.
    steps_total: int = 0
    #: This process's training tokens of the whole run (``train.max_tokens``; a resumed run's rank 0 carries
    #: the global count, so that the sum over the processes is the whole run's).
    tokens_total: int = 0
    #: This process's CPU seconds in training steps over the whole run (rank 0 carries a resumed run's
    #: global count, as for ``tokens_total``): ``metrics.jsonl``'s ``train_cpu_seconds``.
    train_cpu_seconds: float = 0.0
    #: This process's running sum of token losses in the epoch: ``[]`` float64 on the training device
    #: (summed there without a host sync).
    epoch_loss_sum: torch.Tensor = field(default_factory=lambda: torch.zeros((), dtype=torch.float64))
    #: This process's tokens in the epoch.
    epoch_tokens: int = 0
    #: The best selection value so far (higher is better; None before the first evaluation).
    best_metric: Optional[float] = None
    best_valid_ppl: float = math.inf
    #: Complete epochs since the selection value last improved (``train.patience``).
    bad_epochs: int = 0
    #: One metrics dict per evaluation: each epoch's end and the mid-epoch ones (``metrics.jsonl``).
    history: list[dict] = field(default_factory=list)
    #: The recurrent state carried to the next segment: this process's rows (nested tuples of ``[B/W, ...]``).
    hidden: Any = None

    @classmethod
    def fresh(cls, config: RunConfig, device: torch.device) -> LoopState:
        """The state before the first step of a run."""
        return cls(
            schedule=Schedule(config.optim),
            bptt_rng=np.random.default_rng(config.train.seed) if config.data.variable_bptt else None,
            epoch_loss_sum=torch.zeros((), dtype=torch.float64, device=device),
        )

    def next_epoch(self) -> None:
        """After a complete epoch: the next one starts at its first batch with a fresh recurrent state."""
        self.epoch += 1
        self.batch = self.position = 0
        self.hidden = None
        self.epoch_loss_sum.zero_()
        self.epoch_tokens = 0

    def counters(self, ctx: DistContext) -> dict:
        """The sidecar's ``trainer`` entry; the running sums all-reduced over the processes (a collective)."""
        return {
            "epoch": self.epoch,
            "batch": self.batch,
            "position": self.position,
            "epoch_loss_sum": float(ddp.all_reduce_sum(ctx, self.epoch_loss_sum).item()),
            "epoch_tokens": int(ddp.all_reduce_sum(ctx, torch.tensor(float(self.epoch_tokens))).item()),
            "steps_total": self.steps_total,
            "tokens_total": self.run_tokens(ctx),
            "train_cpu_seconds": self.run_cpu_seconds(ctx),
            "best_metric": self.best_metric,
            "best_valid_ppl": self.best_valid_ppl,
            "bad_epochs": self.bad_epochs,
            "world_size": ctx.world_size,
        }

    def run_tokens(self, ctx: DistContext) -> int:
        """The whole run's training tokens, all processes (a collective under DDP)."""
        if not ctx.distributed:
            return self.tokens_total
        return int(ddp.all_reduce_sum(ctx, torch.tensor(self.tokens_total, dtype=torch.float64)).item())

    def run_cpu_seconds(self, ctx: DistContext) -> float:
        """The whole run's CPU seconds in training steps, all processes (a collective under DDP)."""
        if not ctx.distributed:
            return self.train_cpu_seconds
        return float(ddp.all_reduce_sum(ctx, torch.tensor(self.train_cpu_seconds, dtype=torch.float64)).item())

    def checkpoint(self, ctx: DistContext) -> tuple[dict[str, torch.Tensor], dict]:
        """``(tensors, sidecar entries)`` of ``last`` for this state and every process's RNGs; a collective
        under DDP (every rank must call it; only rank 0's result is written). The carried state is stored
        as the global batch (the rows of all ranks concatenated), as a 1-process run stores it."""
        tensors = {}
        for rank, state in enumerate(ddp.gather_bytes(ctx, torch.get_rng_state())):
            tensors[f"rng.torch_cpu.{rank}"] = state
        if ctx.device.type == "cuda":
            for rank, state in enumerate(ddp.gather_bytes(ctx, torch.cuda.get_rng_state(ctx.device))):
                tensors[f"rng.cuda.{rank}"] = state
        hidden_skeleton = None
        if self.hidden is not None:
            full = map_state(self.hidden, lambda t: ddp.gather_rows(ctx, t))
            hidden_tensors, hidden_skeleton = flatten_state(full, "hidden")
            tensors.update(hidden_tensors)
        meta = {
            "schedule": self.schedule.state_dict(),
            "trainer": self.counters(ctx),
            "rng": _rng_json_state(self.bptt_rng),
            "hidden": hidden_skeleton,
            "history": self.history,
        }
        return tensors, meta

    def restore(self, tensors: dict[str, torch.Tensor], meta: dict, ctx: DistContext) -> Optional[str]:
        """Take this state and this process's RNGs from ``last`` (as :meth:`checkpoint` wrote them, or an
        older version of it); returns a note when the checkpoint was written by another number of processes."""
        self.schedule.load_state_dict(meta["schedule"])
        state = meta["trainer"]
        self.epoch, self.batch, self.position = state["epoch"], state["batch"], state["position"]
        self.steps_total = state["steps_total"]
        self.best_metric = state["best_metric"]
        self.best_valid_ppl = state["best_valid_ppl"]
        self.bad_epochs = state["bad_epochs"]
        # The running sums are global; rank 0 carries them so that the all-reduce gives them back.
        self.epoch_loss_sum.fill_(state["epoch_loss_sum"] if ctx.is_main else 0.0)
        self.epoch_tokens = state["epoch_tokens"] if ctx.is_main else 0
        self.history = list(meta.get("history", []))
        # (A checkpoint older than these counters: the tokens of the epochs it recorded, its CPU time unknown.)
        tokens = state.get("tokens_total")
        if tokens is None:
            tokens = sum(int(h.get("train_tokens", 0)) for h in self.history
                         if not h.get("partial") and not h.get("mid_epoch")) + state["epoch_tokens"]
        self.tokens_total = int(tokens) if ctx.is_main else 0
        self.train_cpu_seconds = float(state.get("train_cpu_seconds", 0.0)) if ctx.is_main else 0.0
        if meta.get("hidden") is not None:
            full = unflatten_state(tensors, meta["hidden"])
            # Fresh copies: a tensor read from the file may sit at an address with another alignment than
            # a fresh allocation, and CPU kernels pick their vector paths (hence their rounding) by it.
            self.hidden = map_state(
                full, lambda t: batching.shard_rows(t, ctx.rank, ctx.world_size).to(ctx.device, copy=True)
            )
        _restore_rng_json(meta["rng"], self.bptt_rng)
        cpu_key = f"rng.torch_cpu.{ctx.rank}"
        if cpu_key in tensors:
            torch.set_rng_state(tensors[cpu_key].cpu())
        cuda_key = f"rng.cuda.{ctx.rank}"
        if ctx.device.type == "cuda" and cuda_key in tensors:
            torch.cuda.set_rng_state(tensors[cuda_key].cpu(), ctx.device)
        if state.get("world_size", 1) != ctx.world_size:
            return (f"checkpoint written by {state.get('world_size')} processes, resuming with {ctx.world_size}: "
                    f"dropout masks will differ from an uninterrupted run")
        return None
