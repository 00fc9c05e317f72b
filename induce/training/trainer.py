"""The training loop: variable-length BPTT, AR/TAR, clipping, SGD/Adam -> ASGD, evaluation, selection,
early stopping, budgets (steps, tokens, or the clock), interruption (SIGINT / SIGTERM), exact resume and
DistributedDataParallel.

A run folder ``runs/RUN/`` holds::

    config.yaml        the resolved config (every field)
    metrics.jsonl      one JSON line per evaluation: each epoch's end, and every train.eval_every steps
    best.safetensors   weights of the selected model (ASGD averages when in the ASGD phase)
    best.json          its sidecar: model name, config, vocabulary, metrics
    last.safetensors   everything to continue: weights, optimiser tensors, RNG states, carried state
    last.json          its sidecar: optimiser / schedule / trainer state, RNG states, history
    status.json        {"state": "running" | "interrupted" | "failed" | "diverged" | "finished", "stop_reason", ...}
    train.lock         the PID of the training writing into the folder (while it runs)

The run's components (corpus, model, objective, optimiser, loop state) are built in one pass by
:func:`induce.training.setup.build_run`; what one step reads and minimises is the model's objective
(:mod:`induce.training.objectives`), and the step itself is :func:`induce.training.optim.optimiser_step`
(through :mod:`induce.training.graphs` where the step is graph-captured). The folder's own files (status,
metrics, lock, overwrite refusal) are :mod:`induce.training.run_folder`; what ``last`` holds and how it is
restored is :mod:`induce.training.state`; the language-model loss and the dev F1 are :mod:`induce.training.lm`.

**metrics.jsonl** (one line per evaluation; the learning curves of a run are drawn from these lines).
Every line has

* ``epoch`` (the epoch in progress, from 1), ``steps`` (optimiser steps of the whole run so far), ``tokens``
  (training tokens of the whole run so far, all processes: what the objective counts, the sentence ends
  included), ``train_cpu_seconds`` (process CPU seconds spent in the training steps of the whole run so far,
  all processes and threads summed; evaluations and checkpoint writes are not counted; carried in ``last``,
  so a resumed run continues the count, and steps lost to a kill are counted once, when redone);
* ``valid_loss``, ``valid_ppl`` and, for a model that parses a corpus with trees, ``dev_f1`` (sentence F1
  in 0-100 on the monitor set: the first ``train.dev_f1_max_sentences`` dev sentences of 2-40 words),
  ``dev_f1_wsj10``, ``dev_f1_wsj40``, ``dev_corpus_f1``, ``dev_left_split_pct``, ``dev_right_split_pct``;
* ``best`` (these weights became ``best``), ``eval_seconds`` and ``eval_cpu_seconds`` (this evaluation).

An epoch's end adds ``train_loss`` / ``train_ppl`` / ``train_tokens`` (the epoch's), ``lr``, ``optimizer``,
``train_seconds``, ``epoch_seconds``, ``tokens_per_s``, and ``partial: true`` when a budget stopped the run
inside the epoch. An evaluation every ``train.eval_every`` optimiser steps (:attr:`TrainConfig.eval_every`)
is marked ``mid_epoch: true`` and adds ``batch`` (steps done in the epoch), ``train_loss`` (the epoch's mean so
far) and ``lr``; it does not count as an epoch (no ASGD trigger, no patience), but its weights may become
``best``. The timing fields (``*_seconds``, ``tokens_per_s``) vary from run to run; every other field is the
same, bit for bit, for the same command, seed and thread count.

**Budgets.** ``train.max_steps`` and ``train.max_tokens`` (the whole run's optimiser steps / training tokens,
across epochs) stop the run after the step that reaches the first of them, ``status.json``'s ``stop_reason``
then ``max_steps`` or ``max_tokens``; they do not depend on the machine's speed. ``train.time_budget`` (the
clock) stays an explicit choice: ``stop_reason`` ``time_budget`` and ``clock_stopped: true`` in the status,
whose ``note`` says that the figures depend on the machine's speed.

**Exact resume.** ``last`` is written at every epoch end, every ``train.checkpoint_every`` batches
and when SIGINT (Ctrl-C) or SIGTERM stops the run (after the batch in progress). Resuming from it replays the
rest of the run bit for bit on CPU, dropout and variable BPTT included.

**Speed.** The step does no host synchronisation: the running loss is summed on the device and
read (``.item()``) only every ``log_interval`` batches (and for the first few batches, to show the
loss and a time estimate at once) and at the end of the epoch.

**Divergence.** A NaN or infinite loss makes the running sum non-finite for the rest of the epoch, so
it is caught where the sum is read anyway (no extra host sync, the same with ``train.cuda_graphs``,
whose step adds to the same sum): at those log points, at the epoch's end, and in the validation
loss. The run stops there without writing ``best`` or ``last`` (their previous contents stay: weights
from before the divergence), ``status.json`` says ``diverged`` with where and why, and
:class:`TrainingDiverged` is raised (the CLI exits with status 2).
"""
from __future__ import annotations

import math
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Optional

import torch
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from induce.config import RunConfig, load_config_file, save_config
from induce.errors import InduceError
from induce.models.configs import resolve_config, stored_run_config

from . import advice, ddp, failures
from .checkpoint import load_checkpoint
from .ddp import DistContext
from .lm import LMLoss, dev_parse_metrics, evaluate_lm
from .objectives import Batch
from .optim import averaged_parameters
from .parts import RunParts, save_best, save_last
from .run_folder import (
    CONFIG_FILE,
    LAST,
    RunLock,
    claim_for_new_run,
    now,
    read_status,
    resume_command,
    write_metrics,
    write_status,
)
from .setup import build_run
from .state import detach_state
from .tensorboard import TensorBoardLog, require_tensorboard

#: The loop's names, and the helpers that callers of the trainer read with it (the run's status, the
#: language-model loss and its evaluation, the truncation of a carried state).
__all__ = ["LMLoss", "TrainResult", "Trainer", "TrainingDiverged", "TrainingInterrupted", "detach_state",
           "evaluate_lm", "read_status", "resume", "train"]


# ---------------------------------------------------------------------------------------------- trainer


@dataclass
class TrainResult:
    """What a finished :meth:`Trainer.run` returns (rank 0's view)."""

    run_dir: Path
    epochs_done: int
    stop_reason: str
    best_valid_ppl: float
    best_metric: float
    history: list = field(default_factory=list)
    #: The whole run's optimiser steps, training tokens and CPU seconds in training steps.
    steps: int = 0
    tokens: int = 0
    train_cpu_seconds: float = 0.0
    #: What ``best_valid_ppl`` is, in the model's words (``validation_loss_text``): a perplexity, or for a
    #: latent-variable model a bound or the loss at the latent's mean, each as ``exp`` of the loss per token.
    valid_loss_text: str = "validation perplexity"

    def best_valid_text(self) -> str:
        """``best validation perplexity 213.48``; the loss of a model whose figure is not a perplexity says so."""
        text = self.valid_loss_text
        note = "" if "perplexity" in text else " (exp of the loss per token)"
        return f"best {text} {self.best_valid_ppl:.2f}{note}"


#: Under DDP, SIGINT / SIGTERM, the clock and ``train.max_tokens`` are checked every this many batches (and at
#: logs); ``train.max_steps`` after every step (every process counts the same steps). On one process all of
#: them are checked after every step.
STOP_CHECK_BATCHES = 10
#: The ``train.*`` keys a resumed run may change (the others are the stored config's).
RESUME_UPDATABLE = ("epochs", "max_steps", "max_tokens", "time_budget", "device", "kernels", "threads",
                    "log_interval", "tensorboard")
#: The fields of a ``metrics.jsonl`` line that measure time, different from run to run (see the module
#: docstring); every other field is the same for the same command, seed and thread count.
TIMING_FIELDS = ("train_seconds", "epoch_seconds", "tokens_per_s", "train_cpu_seconds", "eval_seconds",
                 "eval_cpu_seconds")
#: The stop reasons of a budget that does not depend on the machine's speed.
STEP_BUDGETS = ("max_steps", "max_tokens")


def clock_note(steps: int) -> str:
    """What a run stopped by the clock (``train.time_budget``) says in its status and the report."""
    return f"stopped by the clock after {steps:,} steps: these figures depend on the machine's speed"


class TrainingInterrupted(KeyboardInterrupt):
    """Raised by :meth:`Trainer.run` after SIGINT once ``last`` is written at the interrupted step and
    the resume command printed: still a ``KeyboardInterrupt`` for callers (``induce reproduce`` stops)."""

    def __init__(self, result: TrainResult, epoch: int, batch: int):
        super().__init__(f"{result.run_dir}: interrupted at epoch {epoch}, batch {batch}")
        self.result, self.epoch, self.batch = result, epoch, batch
        self.resume_command = resume_command(result.run_dir)


class TrainingDiverged(InduceError):
    """The training loss or the validation loss became NaN or infinite; ``status.json`` says ``diverged``."""


class Trainer:
    """Trains ``config`` into ``run_dir``.

    ``resume=True`` continues from ``run_dir/last.*`` (the config stored there wins over
    ``config`` except the keys of :data:`RESUME_UPDATABLE`). ``on_batch(trainer, epoch, batch)`` is called after
    every optimiser step (tests use it to kill a run; ``trainer.parts`` holds the run's components).
    ``progress=False`` hides the progress bars. ``pause_after`` (seconds of this invocation, or None) stops
    the run like an interrupt, without an evaluation, status ``paused``: ``induce reproduce``'s chunks, which
    must not change what the run computes (a clock budget would evaluate a partial epoch there).

    **The clock budget** (``train.time_budget``) covers this invocation's training and evaluations and is
    checked between steps: training stops when the time used plus the expected cost of the evaluation that
    follows the stop would reach the budget (that cost: the last evaluation's duration in this invocation;
    before the first one, the evaluation's tokens at the training steps' measured time per token, an
    overestimate for the recurrent models, whose evaluation only runs forward; the invocation's first step,
    whose one-off costs are no step's speed, is not counted, so no reserve is kept before a second step has been
    timed). So the run ends within the
    budget unless that one evaluation takes longer than expected; the status records ``seconds`` (this
    invocation's wall time) either way.

    A new run refuses a ``run_dir`` that already holds a run unless ``force`` (which removes the old
    run's files first); ``allow_foreign=False`` also refuses a non-empty folder that is not a run
    (the CLI's ``--out``). Every run holds the folder's lock (``train.lock``) while it writes.
    SIGINT (Ctrl-C) or SIGTERM stops after the batch in progress (under DDP: within
    ``STOP_CHECK_BATCHES`` batches, all processes at the same step): ``last`` is written there, the status says
    ``interrupted``, the ``--resume`` command is printed and :class:`TrainingInterrupted` raised; a
    second SIGINT stops at once (``KeyboardInterrupt``, no new checkpoint).

    :meth:`run` joins the process group (``ctx``), builds every component in one pass
    (:func:`~induce.training.setup.build_run` -> ``parts``) and runs the loop; everything else the trainer
    holds is set here and only tracks the loop's progress in this invocation.
    """

    def __init__(
        self,
        config: RunConfig,
        run_dir: Path,
        *,
        resume: bool = False,
        console: Optional[Console] = None,
        progress: bool = True,
        on_batch: Optional[Callable[[Trainer, int, int], None]] = None,
        corpora_dir: Path = Path("corpora"),
        force: bool = False,
        allow_foreign: bool = True,
        pause_after: Optional[float] = None,
    ):
        self.run_dir = Path(run_dir)
        self.pause_after = pause_after
        self.resume = resume
        self.force = force
        self.allow_foreign = allow_foreign
        self.console = console or Console(stderr=True)
        self.show_progress = progress
        self.on_batch = on_batch
        self.corpora_dir = Path(corpora_dir)
        #: ``(tensors, sidecar)`` of ``last`` when resuming.
        self.checkpoint: Optional[tuple[dict, dict]] = None
        if resume:
            if ddp.env_is_main():
                RunLock(self.run_dir).check_free()  # "in use" says more than a missing checkpoint would
            self.checkpoint = load_checkpoint(self.run_dir / LAST)
            stored = stored_run_config(self.checkpoint[1]["config"], source=str(self.run_dir / (LAST + ".json")))
            updates = {k: getattr(config.train, k) for k in RESUME_UPDATABLE}
            config = stored.model_copy(update={"train": stored.train.model_copy(update=updates)})
        #: The run's config: as given (or stored, when resuming), its model section checked and stored with every
        #: field, until :meth:`run` fills in the rest (:func:`~induce.training.setup.fill_in_runtime`).
        self.config = resolve_config(config)
        #: The budget a resumed run had already reached and been evaluated at (None: it has steps to go).
        self.done_already: Optional[str] = None
        if resume:
            self._check_budget_left()
        if config.train.tensorboard:
            require_tensorboard()  # the missing package is an error before anything is done
        #: This process in the process group (None until :meth:`run` joins it).
        self.ctx: Optional[DistContext] = None
        #: The run's components (None until :meth:`run` has built them).
        self.parts: Optional[RunParts] = None
        self.tensorboard: Optional[TensorBoardLog] = None
        self.progress: Optional[Progress] = None
        self.interrupt_requested = False
        #: What became non-finite and where (set once; the run then stops as diverged).
        self.diverged: Optional[str] = None
        #: When this invocation's training started (``time.monotonic()``, for ``train.time_budget``).
        self.started = 0.0
        #: Optimiser steps of this invocation (the early log points and the time estimate count them).
        self.batches_this_run = 0
        #: Tokens of the current epoch before this invocation (a resumed epoch's speed counts the rest).
        self.epoch_tokens_at_start = 0
        #: A CPU run: the time of batches 2-4 is measured and extrapolated to the run's end (:mod:`advice`).
        self.estimate_time = False
        self.timing_started = 0.0
        #: Wall seconds of this invocation's training steps and their tokens (this process), its first step left
        #: out (a CUDA context, Triton and native compilation, the allocator's warm-up: on a GPU that one step
        #: can take longer than hundreds of others): the clock budget's estimate of the first evaluation.
        self.step_seconds = 0.0
        self.step_tokens = 0
        self.first_step_timed = False
        #: Wall seconds of this invocation's last evaluation (None before the first).
        self.last_eval_seconds: Optional[float] = None

    # ---------------------------------------------------------------------------------------- output

    def _log(self, message: str) -> None:
        if self.ctx is None or self.ctx.is_main:
            self.console.print(message, highlight=False, soft_wrap=True)

    def _write_status(self, state: str, **extra) -> None:
        if self.ctx.is_main:
            write_status(self.run_dir, state, model_name=self.config.model_name, **extra)

    def _write_metrics_file(self) -> None:
        if self.ctx.is_main:
            write_metrics(self.run_dir, self.parts.loop.history)

    # ------------------------------------------------------------------------------------- interrupt

    def _on_signal(self, signum, frame) -> None:
        """SIGINT / SIGTERM: stop after this batch with a checkpoint. A second SIGINT stops at once; a
        second SIGTERM does not (torchrun sends one to its workers after the terminal's SIGINT)."""
        if self.interrupt_requested:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            return
        self.interrupt_requested = True
        if self.ctx.is_main:
            when = "this batch" if not self.ctx.distributed else "at most a few batches"
            self.console.print(f"interrupted: stopping after {when} and writing a checkpoint "
                               "(Ctrl-C again to stop at once, without one)", highlight=False, soft_wrap=True)

    def _eval_reserve(self) -> float:
        """Expected wall seconds of the evaluation that follows a stop (see the class docstring)."""
        if self.last_eval_seconds is not None:
            return self.last_eval_seconds
        parts = self.parts
        tokens = parts.objective.validation_tokens()
        if parts.dev is not None:
            tokens += sum(len(ids) + 1 for ids in parts.dev.ids)
        return tokens * self.step_seconds / max(self.step_tokens, 1)

    def _time_over(self) -> bool:
        budget = self.config.train.time_budget
        if budget is None:
            return False
        return time.monotonic() - self.started + self._eval_reserve() >= budget

    def _pause_due(self) -> bool:
        return self.pause_after is not None and time.monotonic() - self.started >= self.pause_after

    def _budget_reached(self, tokens: bool = True) -> Optional[str]:
        """``"max_steps"`` or ``"max_tokens"`` when the run has done that many (read from ``parts.loop``, the
        state a resume restores), else None; ``tokens=False`` leaves the tokens out (under DDP, reading them is
        a collective: every process must call this at the same step with the same ``tokens``)."""
        train, loop = self.config.train, self.parts.loop
        if train.max_steps is not None and loop.steps_total >= train.max_steps:
            return "max_steps"
        if tokens and train.max_tokens is not None and loop.run_tokens(self.ctx) >= train.max_tokens:
            return "max_tokens"
        return None

    def _stop_reason(self, check_time: bool = True) -> Optional[str]:
        """``"diverged"`` (a non-finite running loss seen by :meth:`_show_loss`), ``"max_steps"`` /
        ``"max_tokens"`` (the budgets: the run is done), ``"interrupted"`` (SIGINT), ``"paused"``
        (``pause_after``), ``"time_budget"`` or None. Under DDP rank 0's flags decide (one broadcast), so that
        all processes stop after the same step (a NaN reaches every process's weights through the gradient
        all-reduce, so rank 0 sees it too); the step and token budgets are the same on every process."""
        flags = [float(self.interrupt_requested), float(check_time and self._time_over()),
                 float(self.diverged is not None), float(check_time and self._pause_due())]
        if self.ctx.distributed:
            flags = ddp.broadcast_floats(self.ctx, flags)
        budget = self._budget_reached()
        if flags[2]:
            return "diverged"
        if budget:
            return budget
        if flags[0]:
            return "interrupted"
        if flags[3]:
            return "paused"
        return "time_budget" if flags[1] else None

    # ------------------------------------------------------------------------------------------ loop

    def _show_loss(self, task, interval_start: float, interval_tokens: int) -> None:
        loop = self.parts.loop
        mean = loop.epoch_loss_sum.item() / max(loop.epoch_tokens, 1)  # a host sync
        if not math.isfinite(mean) and self.diverged is None:
            self.diverged = f"training loss {mean} at epoch {loop.epoch}, batch {loop.batch}"
        speed = interval_tokens * self.ctx.world_size / max(time.monotonic() - interval_start, 1e-9)
        if task is not None:
            self.progress.update(task, loss=f"loss {mean:.3f} ppl {math.exp(min(mean, 50)):.1f} {speed:,.0f} tok/s")
        if self.tensorboard is not None:
            self.tensorboard.interval(mean, loop.steps_total)

    def _step(self, batch: Batch) -> torch.Tensor:
        """One optimiser step on ``batch`` at its lr (graph-captured where enabled and the batch's shapes are
        static); returns its summed loss (the objective's account of the step's outputs)."""
        parts = self.parts
        optimisation = parts.optimisation
        parts.loop.schedule.step_lr(optimisation.optimizer, batch.lr_scale)
        if parts.static_steps is not None and batch.static:
            outputs = parts.static_steps.step(optimisation.optimizer, optimisation.params, *batch.args)
        else:
            outputs = optimisation.step(partial(parts.loss_module, *batch.args))
        return parts.objective.after_step(parts.loop, batch, outputs)

    def _train_epoch(self, progress: Optional[Progress]) -> Optional[str]:
        """Run (the rest of) the current epoch; returns None when it is complete, else why it stopped
        (``"max_steps"``, ``"max_tokens"``, ``"time_budget"``: the partial epoch is evaluated and ``last``
        written; ``"interrupted"`` / ``"paused"``: ``last`` must be written at this position; ``"diverged"``:
        nothing more is written).

        Long because the step, the running sums, the host syncs (loss shown, stop checks under DDP), the
        mid-epoch evaluation and the periodic checkpoint happen in one order per batch that exact resume and
        DDP's agreement on the stopping step depend on; it reads best as one loop."""
        cfg, ctx, loop, objective = self.config, self.ctx, self.parts.loop, self.parts.objective
        self.parts.model.train()
        batches_per_epoch = objective.batches_per_epoch(loop.epoch)
        task = None
        self.progress = progress
        if progress is not None:
            task = progress.add_task(f"epoch {loop.epoch}", total=batches_per_epoch, loss="")
            progress.update(task, completed=loop.batch)
        interval_start, interval_tokens = time.monotonic(), 0
        while True:
            # A budget is checked before each step too: a run resumed where its budget was reached (a
            # checkpoint at that step) takes no step more.
            reason = self._budget_reached(tokens=not ctx.distributed)
            if reason:
                if objective.has_batch(loop):
                    return reason
                break  # reached at the epoch's last step: the epoch is whole
            cpu_started, wall_started = time.process_time(), time.monotonic()
            batch = objective.next_batch(loop)
            if batch is None:
                break
            loop.epoch_loss_sum += self._step(batch)
            loop.train_cpu_seconds += time.process_time() - cpu_started
            if self.first_step_timed:  # the invocation's first step carries one-off costs: not a step's speed
                self.step_seconds += time.monotonic() - wall_started
                self.step_tokens += batch.tokens
            self.first_step_timed = True
            loop.epoch_tokens += batch.tokens
            loop.tokens_total += batch.tokens
            interval_tokens += batch.tokens
            loop.batch += 1
            loop.steps_total += 1
            self.batches_this_run += 1
            if task is not None:
                progress.update(task, advance=1)
            at_log = loop.batch % cfg.train.log_interval == 0
            if at_log:
                # The loop's host syncs: the running loss every log_interval batches ...
                self._show_loss(task, interval_start, interval_tokens)
                interval_start, interval_tokens = time.monotonic(), 0
            elif self.batches_this_run & (self.batches_this_run - 1) == 0 and self.batches_this_run < 64:
                # ... and after batches 1, 2, 4, ... of this invocation, so that the bar shows a loss
                # (and the ETA a rate) from the start.
                self._show_loss(task, interval_start, interval_tokens)
            if self.estimate_time and self.batches_this_run in (1, 4):
                # Timed on batches 2-4 (the first one pays for warm-up); both ends follow a host sync.
                if self.batches_this_run == 1:
                    self.timing_started = time.monotonic()
                else:
                    self._say_estimate((time.monotonic() - self.timing_started) / 3, batches_per_epoch)
            pending = None
            if ctx.distributed:
                # Under DDP the processes agree on stopping through a broadcast (a host sync), so it is
                # checked every few batches rather than every batch (the step budget needs none).
                if at_log or loop.batch % STOP_CHECK_BATCHES == 0:
                    pending = self._stop_reason()
                else:
                    pending = self._budget_reached(tokens=False)
            if pending == "diverged" or (self.diverged is not None and not ctx.distributed):
                return "diverged"  # before any checkpoint: `last` keeps the weights from before
            if (cfg.train.eval_every and loop.steps_total % cfg.train.eval_every == 0
                    and pending in (None, "interrupted", "paused")
                    and objective.has_batch(loop) and not self._budget_reached()):
                # Before the checkpoint and the stop checks, so that a run stopped at this step and resumed
                # has this evaluation as the uninterrupted run has (the epoch's end and a budget's stop
                # evaluate anyway).
                self._evaluate_mid_epoch()
                self.parts.model.train()
                if self.diverged is not None:
                    return "diverged"
            if cfg.train.checkpoint_every and loop.batch % cfg.train.checkpoint_every == 0:
                save_last(self.run_dir, self.parts)
            if self.on_batch is not None:
                self.on_batch(self, loop.epoch, loop.batch)
            if not ctx.distributed:
                pending = self._stop_reason()
            if pending in STEP_BUDGETS and not objective.has_batch(loop):
                break  # the budget is reached at the epoch's last step: the epoch is whole
            if pending:
                return pending
        # The epoch's batches are done; an interrupt or the clock now is handled after its evaluation.
        return None

    # ------------------------------------------------------------------------------------ evaluation

    def _evaluate(self) -> dict:
        """Validation loss/perplexity (and dev F1) on rank 0, shared with the other ranks; with its wall and
        CPU seconds (``eval_seconds``, ``eval_cpu_seconds``)."""
        parts = self.parts
        metrics: dict = {}
        values = [math.nan, math.nan]
        cpu_started, wall_started = time.process_time(), time.monotonic()
        if self.ctx.is_main:
            with averaged_parameters(parts.model, parts.optimisation.optimizer):
                valid_loss = parts.objective.validate()
                if parts.dev is not None:
                    metrics.update(dev_parse_metrics(parts.model, *parts.dev, eos_id=parts.vocab.eos_id))
            values = [valid_loss, metrics.get("dev_f1", math.nan)]
        valid_loss, dev_f1 = ddp.broadcast_floats(self.ctx, values)
        metrics["valid_loss"] = valid_loss
        metrics["valid_ppl"] = math.exp(min(valid_loss, 50.0))
        if not math.isnan(dev_f1):
            metrics["dev_f1"] = dev_f1
        self.last_eval_seconds = time.monotonic() - wall_started
        metrics.update(eval_seconds=round(self.last_eval_seconds, 3),
                       eval_cpu_seconds=round(time.process_time() - cpu_started, 3))
        return metrics

    def _selection_value(self, metrics: dict) -> Optional[float]:
        """Higher is better: ``-valid_ppl`` or ``dev_f1``."""
        if self.config.train.select_by == "dev_f1":
            return metrics.get("dev_f1")
        return -metrics["valid_ppl"]

    def _run_counters(self) -> dict:
        """``steps``, ``tokens`` and ``train_cpu_seconds`` of the whole run (collectives under DDP)."""
        loop = self.parts.loop
        return {"steps": loop.steps_total, "tokens": loop.run_tokens(self.ctx),
                "train_cpu_seconds": round(loop.run_cpu_seconds(self.ctx), 3)}

    def _select(self, metrics: dict, complete: bool) -> None:
        """``best`` when ``metrics`` (an evaluation, mid-epoch or at an epoch's end) improve the selection value
        (which resets the patience count); a complete epoch that does not adds one to it."""
        loop = self.parts.loop
        value = self._selection_value(metrics)
        improved = value is not None and (loop.best_metric is None or value > loop.best_metric)
        if improved:
            loop.best_metric = value
            loop.bad_epochs = 0
            save_best(self.run_dir, self.parts, metrics)
        elif complete:
            loop.bad_epochs += 1
        loop.best_valid_ppl = min(loop.best_valid_ppl, metrics["valid_ppl"])
        metrics["best"] = improved

    def _evaluate_mid_epoch(self) -> None:
        """``train.eval_every``: evaluate now, inside the epoch (a ``mid_epoch`` line of ``metrics.jsonl``; see
        the module docstring), select, and write the metrics; nothing else of the loop changes (no ASGD trigger,
        no patience count), so that the training does not depend on how often it is evaluated."""
        loop = self.parts.loop
        loss_sum = ddp.all_reduce_sum(self.ctx, loop.epoch_loss_sum).item()
        tokens = ddp.all_reduce_sum(self.ctx, torch.tensor(float(loop.epoch_tokens), dtype=torch.float64)).item()
        train_loss = loss_sum / max(tokens, 1)
        if not math.isfinite(train_loss):
            self.diverged = f"training loss {train_loss} at epoch {loop.epoch}, batch {loop.batch}"
            return
        metrics = {"epoch": loop.epoch, "mid_epoch": True, "batch": loop.batch, **self._run_counters(),
                   "train_loss": train_loss}
        metrics.update(self._evaluate())
        if not math.isfinite(metrics["valid_loss"]):
            self.diverged = f"validation loss {metrics['valid_loss']} at epoch {loop.epoch}, batch {loop.batch}"
            return
        metrics["lr"] = loop.schedule.base_lr
        self._select(metrics, complete=False)
        loop.history.append(metrics)
        self._write_metrics_file()
        if self.tensorboard is not None:
            self.tensorboard.epoch(metrics, loop.steps_total)
        self._log(f"epoch {loop.epoch:3d} step {loop.steps_total:,} | valid ppl {metrics['valid_ppl']:8.2f}"
                  + (f" | dev F1 {metrics['dev_f1']:.3f}" if "dev_f1" in metrics else "")
                  + (" *" if metrics["best"] else ""))

    def _end_of_epoch(self, complete: bool, epoch_started: float) -> dict:
        """Evaluate, select, log the epoch; ``{}`` (nothing saved or recorded) when the training or
        validation loss is not finite (``self.diverged`` says which)."""
        loop, optimisation = self.parts.loop, self.parts.optimisation
        loss_sum = ddp.all_reduce_sum(self.ctx, loop.epoch_loss_sum).item()  # (waits for the device)
        tokens = ddp.all_reduce_sum(self.ctx, torch.tensor(float(loop.epoch_tokens))).item()
        # Tokens of this invocation only (a resumed epoch counts from the resume point).
        new_tokens = tokens - self.epoch_tokens_at_start
        train_seconds = time.monotonic() - epoch_started
        train_loss = loss_sum / max(tokens, 1)
        if not math.isfinite(train_loss):  # the same value on every process (all-reduced)
            self.diverged = f"training loss {train_loss} in epoch {loop.epoch}"
            return {}
        metrics = {"epoch": loop.epoch}
        if not complete:
            metrics["partial"] = True
        metrics.update(train_loss=train_loss, train_ppl=math.exp(min(train_loss, 50.0)), train_tokens=int(tokens))
        metrics.update(self._run_counters())
        metrics.update(self._evaluate())
        if not math.isfinite(metrics["valid_loss"]):  # broadcast from rank 0: the same everywhere
            self.diverged = f"validation loss {metrics['valid_loss']} after epoch {loop.epoch}"
            return {}
        metrics.update(
            lr=loop.schedule.base_lr,
            optimizer=type(optimisation.optimizer).__name__,
            train_seconds=round(train_seconds, 3),
            epoch_seconds=round(time.monotonic() - epoch_started, 3),
            tokens_per_s=round(new_tokens / max(train_seconds, 1e-9), 1),
        )
        self._select(metrics, complete)
        if complete and loop.schedule.after_evaluation(loop.epoch, metrics["valid_loss"]):
            self._log(f"epoch {loop.epoch}: switching to ASGD")
            optimisation.switch_to_asgd()
        loop.history.append(metrics)
        return metrics

    # ---------------------------------------------------------------------------------------- the run

    def _claim_folder(self) -> Optional[RunLock]:
        """Rank 0 takes the folder's lock and checks that a new run may write there."""
        if not ddp.env_is_main():
            return None
        lock = RunLock(self.run_dir, note=lambda message: self.console.print(f"[yellow]note:[/] {message}",
                                                                                 highlight=False))
        lock.acquire()  # first: a forced claim must not remove the files of a run that is still going
        if not self.resume:
            try:
                claim_for_new_run(self.run_dir, self.force, self.allow_foreign)
            except BaseException:
                lock.release()
                raise
        return lock

    def _install_signal_handlers(self) -> dict:
        """Our handler for SIGINT and SIGTERM; returns the previous ones (none off the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}

    def _announce(self) -> None:
        cfg, ctx, parts = self.config, self.ctx, self.parts
        n_params = sum(p.numel() for p in parts.model.parameters())
        sentences = parts.corpus.lm_sentences("train")
        words = sum(len(sentence) for sentence in sentences)
        # One count, said what it counts: the words, the tokens with the sentence ends (what the model
        # reads), and what an epoch reads of them (the objective says).
        self._log(
            f"{cfg.model_name}: {n_params:,} parameters, {parts.corpus.name} ({len(parts.vocab)} types; train text: "
            f"{words:,} words + {len(sentences):,} sentence ends = {words + len(sentences):,} tokens, "
            f"{parts.objective.describe(parts.loop.epoch)}), device {ctx.device}"
            + (f", {ctx.world_size} processes" if ctx.distributed else "")
            + (f", resuming epoch {parts.loop.epoch} at batch {parts.loop.batch}" if self.resume else "")
        )
        if cfg.train.amp:
            self._log(f"precision: {parts.optimisation.precision.reason}")
        self.estimate_time = ctx.device.type == "cpu"

    def _say_estimate(self, seconds_per_batch: float, batches_per_epoch: int) -> None:
        """The time to the run's end (its budgets: epochs, steps, tokens) from the time of a batch; a run longer
        than :data:`advice.LARGE_RUN_SECONDS` also gets the note with a CPU-sized command."""
        cfg, loop, objective = self.config, self.parts.loop, self.parts.objective
        train = cfg.train
        tokens_per_epoch = objective.tokens_per_epoch()
        batches, ends = advice.batches_to_end(
            cfg.train.epochs - loop.epoch + 1, batches_per_epoch, loop.batch,
            steps_left=None if train.max_steps is None else train.max_steps - loop.steps_total,
            tokens_left=None if train.max_tokens is None else train.max_tokens - loop.run_tokens(self.ctx),
            tokens_per_batch=tokens_per_epoch / max(1, batches_per_epoch))
        seconds = seconds_per_batch * batches
        if seconds > advice.LARGE_RUN_SECONDS:
            n_params = sum(p.numel() for p in self.parts.model.parameters())
            self._log(advice.size_message(cfg.model_name, n_params, tokens_per_epoch, self.ctx.device.type))
        if seconds > advice.SHOW_ESTIMATE_SECONDS:
            self._log(advice.estimate_message(seconds_per_batch, batches_per_epoch, batches, ends, "2-4"))

    def _make_progress(self) -> Progress:
        """The epoch bar: batches, elapsed time, ETA and the running loss (shown from the first batch)."""
        return Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[loss]}"),
            console=self.console, transient=True,
        )

    def _stop_interrupted(self) -> None:
        """After SIGINT: write ``last`` at this exact position (again, after an epoch end: the same
        state), mark the run interrupted and say how to continue."""
        loop = self.parts.loop
        save_last(self.run_dir, self.parts)
        self._write_metrics_file()
        self._write_status("interrupted", interrupted_at=now(), stop_reason="interrupted",
                           epoch=loop.epoch, batch=loop.batch)
        self._log(f"interrupted at epoch {loop.epoch}, batch {loop.batch}: checkpoint written to "
                  f"{self.run_dir / LAST}.safetensors\ncontinue with: "
                  f"{resume_command(self.run_dir, self.ctx.world_size)}")

    def _stop_diverged(self) -> None:
        """A non-finite loss: mark the run diverged (``best`` and ``last`` keep what they held before)
        and raise :class:`TrainingDiverged` with what to do."""
        self._write_metrics_file()
        self._write_status("diverged", diverged_at=now(), stop_reason="diverged", epoch=self.parts.loop.epoch,
                           batch=self.parts.loop.batch, error=f"non-finite {self.diverged}")
        lr = f"optim.lr={self.config.optim.lr}"
        raise TrainingDiverged(
            f"{self.run_dir}: training diverged (non-finite {self.diverged}); the run is marked diverged "
            f"and is never used by default. Train again with a smaller learning rate than {lr} "
            f"(or a smaller optim.clip)"
        )

    def _started(self) -> bool:
        """Whether this run has written its folder (config and status), i.e. there is a run to report on."""
        return self.ctx is not None and self.ctx.is_main and (self.run_dir / CONFIG_FILE).is_file()

    def _run_epochs(self, progress: Optional[Progress]) -> str:
        """Train, evaluate and checkpoint epoch after epoch; returns why it stopped (``"epochs"``: all done,
        ``"early_stopping"``, ``"max_steps"``, ``"max_tokens"``, ``"time_budget"``, ``"interrupted"``,
        ``"paused"``, ``"diverged"``)."""
        cfg, ctx, loop = self.config, self.ctx, self.parts.loop
        if self.done_already:
            return self.done_already
        while loop.epoch <= cfg.train.epochs:
            epoch_started = time.monotonic()
            self.epoch_tokens_at_start = int(ddp.all_reduce_sum(ctx, torch.tensor(float(loop.epoch_tokens))).item())
            reason = self._train_epoch(progress)
            if reason in ("interrupted", "paused", "diverged"):
                # No evaluation of a partial epoch: the resumed run must see what an uninterrupted one sees.
                return reason
            complete = reason is None
            metrics = self._end_of_epoch(complete, epoch_started)
            if self.tensorboard is not None:
                self.tensorboard.epoch(metrics, loop.steps_total)
            if self.diverged is not None:
                return "diverged"
            self._log(
                f"epoch {metrics['epoch']:3d} | train ppl {metrics['train_ppl']:8.2f} | valid ppl "
                f"{metrics['valid_ppl']:8.2f}"
                + (f" | dev F1 {metrics['dev_f1']:.3f}" if "dev_f1" in metrics else "")
                + f" | {metrics['tokens_per_s']:,.0f} tok/s" + (" *" if metrics["best"] else "")
            )
            if complete:
                loop.next_epoch()
            save_last(self.run_dir, self.parts)
            self._write_metrics_file()
            if not complete:
                return reason
            if cfg.train.patience is not None and loop.bad_epochs >= cfg.train.patience:
                return "early_stopping"
            if loop.epoch <= cfg.train.epochs:
                reason = self._stop_reason()
                if reason:
                    return reason
        return "epochs"

    def _setup(self) -> None:
        """Join the process group and build the run's components (:func:`~induce.training.setup.build_run`)."""
        self.ctx = ddp.init_distributed(self.config.train.device)
        self.parts = build_run(self.config, self.ctx, corpora_dir=self.corpora_dir, console=self.console,
                               log=self._log, run_dir=self.run_dir, resume=self.checkpoint)
        self.config = self.parts.config

    def _open_folder(self) -> None:
        """Rank 0 writes the run's config, metrics and ``running`` status (and opens the TensorBoard log)."""
        ctx, cfg = self.ctx, self.config
        if not ctx.is_main:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        precision = self.parts.optimisation.precision
        save_config(cfg, self.run_dir / CONFIG_FILE, notes=[f"precision: {precision.dtype}"
                                                            + (f" on {precision.unit}" if precision.unit else "")
                                                            + f" ({precision.reason})"])
        self._write_metrics_file()
        status = {"started_at": now()} if not self.resume else {"resumed_at": now()}
        self._write_status("running", world_size=ctx.world_size, pid=os.getpid(), precision=precision.as_dict(),
                           **status)
        if cfg.train.tensorboard:
            self.tensorboard = TensorBoardLog(self.run_dir, self.parts.loop.steps_total if self.resume else None)

    def _stop_paused(self) -> None:
        """``pause_after`` reached: ``last`` at this exact position (as after SIGINT), status ``paused``."""
        loop = self.parts.loop
        save_last(self.run_dir, self.parts)
        self._write_metrics_file()
        self._write_status("paused", paused_at=now(), stop_reason="paused", epoch=loop.epoch, batch=loop.batch)
        self._log(f"paused at epoch {loop.epoch}, batch {loop.batch}: checkpoint written to "
                  f"{self.run_dir / LAST}.safetensors")

    def _finish(self, stop_reason: str) -> TrainResult:
        """The run's end: its status (or the interrupted / paused / diverged handling) and its result. A run
        stopped by the clock says so (``clock_stopped``, ``note``); the mark stays when a later invocation
        continues it, since its evaluations and selection then depended on where the clock stopped it."""
        loop = self.parts.loop
        if stop_reason == "diverged":
            self._stop_diverged()
        counters = self._run_counters()
        epochs_done = sum(1 for line in loop.history if not line.get("mid_epoch"))
        if stop_reason == "interrupted":
            self._stop_interrupted()
        elif stop_reason == "paused":
            self._stop_paused()
        else:
            clock = {}
            if stop_reason == "time_budget":
                clock = {"clock_stopped": True, "note": clock_note(loop.steps_total)}
            self._write_status("finished", finished_at=now(), stop_reason=stop_reason, epochs_done=epochs_done,
                               best_valid_ppl=loop.best_valid_ppl, **counters,
                               seconds=round(time.monotonic() - self.started, 1), **clock)
        result = TrainResult(self.run_dir, epochs_done, stop_reason, loop.best_valid_ppl,
                             loop.best_metric if loop.best_metric is not None else math.nan, list(loop.history),
                             counters["steps"], counters["tokens"], counters["train_cpu_seconds"],
                             self.parts.model.validation_loss_text)
        if stop_reason == "interrupted":
            raise TrainingInterrupted(result, loop.epoch, loop.batch)
        return result

    def _check_budget_left(self) -> None:
        """A resumed run whose step or token budget is used up and was evaluated there (``last``'s counters and
        history) has nothing to train: when its status says ``finished``, an error that says which key to raise
        (rather than one more evaluation of the same weights); otherwise (killed after its last checkpoint) it
        is marked finished (:attr:`done_already`)."""
        meta = self.checkpoint[1]
        counters, history = meta.get("trainer", {}), meta.get("history") or []
        train = self.config.train
        steps, tokens = counters.get("steps_total", 0), counters.get("tokens_total")
        reached = [(key, flag) for key, flag, done in (("max_steps", "--max-steps", steps),
                                                        ("max_tokens", "--max-tokens", tokens))
                   if getattr(train, key) is not None and done is not None and done >= getattr(train, key)]
        if not reached or not history or history[-1].get("steps") != steps:
            return
        key, flag = reached[0]
        if read_status(self.run_dir).get("state") != "finished":
            self.done_already = key
            return
        raise InduceError(f"{self.run_dir}: the run has reached its budget (train.{key}={getattr(train, key)}, "
                          f"after {steps:,} steps); to train it further, give a larger one: "
                          f"{resume_command(self.run_dir)} {flag} N")

    def run(self) -> TrainResult:
        created = not self.run_dir.exists()
        lock = self._claim_folder()
        previous_handlers: dict = {}
        ranks_agree = False
        threads_before = torch.get_num_threads()
        try:
            self._setup()  # fills in the values left to the run (setup.fill_in_runtime: threads, corpus, bucket)
            # From here Ctrl-C means "stop after this batch" (during setup it stops at once).
            previous_handlers = self._install_signal_handlers()
            self._open_folder()
            self._announce()
            self.started = time.monotonic()
            self.batches_this_run = 0
            progress = self._make_progress() if self.show_progress and self.ctx.is_main else None
            if progress is not None:
                progress.start()
            try:
                stop_reason = self._run_epochs(progress)
            finally:
                if progress is not None:
                    progress.stop()
            ranks_agree = True  # every process took the same stop decision (a broadcast): they can meet once more
            return self._finish(stop_reason)
        except (TrainingInterrupted, TrainingDiverged):
            raise
        except KeyboardInterrupt:
            # A second Ctrl-C (or one during setup): no new checkpoint; say what there is.
            if self._started():
                self._write_status("interrupted", interrupted_at=now(), stop_reason="interrupted")
                if (self.run_dir / f"{LAST}.json").is_file():
                    self.console.print(f"stopped; the last checkpoint is older than this point. continue with: "
                                       f"{resume_command(self.run_dir)}", highlight=False)
            raise
        except Exception as err:
            if self._started():
                try:
                    self._write_status("failed", failed_at=now(), error=f"{type(err).__name__}: {err}")
                except OSError:  # e.g. the disk that is full: the error to report is still err
                    pass
            message = failures.user_error(
                err, self.run_dir, self.config, started=self._started(),
                world_size=self.ctx.world_size if self.ctx is not None else 1,
                length_key=self.parts.objective.length_key if self.parts is not None else None)
            if message is not None:  # a full disk, no memory: one line, not a traceback
                raise message from err
            raise
        finally:
            if self.tensorboard is not None:
                self.tensorboard.close()
            for sig, handler in previous_handlers.items():
                signal.signal(sig, handler)
            if self.parts is not None:
                self.parts.loss_module = ddp.unwrap(self.parts.loss_module)
            if self.ctx is not None:
                ddp.shutdown(self.ctx, meet_first=ranks_agree)
            if torch.get_num_threads() != threads_before:
                torch.set_num_threads(threads_before)
            if lock is not None:
                lock.release()
                if created and self.run_dir.is_dir() and not any(self.run_dir.iterdir()):
                    self.run_dir.rmdir()  # nothing was written: leave no empty folder behind


def train(config: RunConfig, run_dir: Path, **kwargs) -> TrainResult:
    """Train ``config`` into ``run_dir`` (see :class:`Trainer` for the keyword arguments)."""
    return Trainer(config, run_dir, **kwargs).run()


def resume(run_dir: Path, updates: Optional[dict] = None, **kwargs) -> TrainResult:
    """Continue the run in ``run_dir`` from ``last.*``; ``updates`` may change the ``train.*`` keys of
    :data:`RESUME_UPDATABLE` (the budgets, the epochs, where and how it runs)."""
    run_dir = Path(run_dir)
    if ddp.env_is_main():
        RunLock(run_dir).check_free()
    if not (run_dir / CONFIG_FILE).is_file():
        what = "no such folder" if not run_dir.is_dir() else f"no {CONFIG_FILE}: not a run folder"
        raise InduceError(f"--resume {run_dir}: {what}")
    config = load_config_file(run_dir / CONFIG_FILE)
    if updates:
        config = config.model_copy(update={"train": config.train.model_copy(update=updates)})
    return Trainer(config, run_dir, resume=True, **kwargs).run()
