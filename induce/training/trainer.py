"""The training loop: variable-length BPTT, AR/TAR, clipping, SGD/Adam -> ASGD, evaluation, selection,
early stopping, time budget, interruption (SIGINT / SIGTERM), exact resume and DistributedDataParallel.

A run folder ``runs/RUN/`` holds::

    config.yaml        the resolved config (every field)
    metrics.jsonl      one JSON line per epoch (train/valid loss and perplexity, lr, dev F1, timing)
    best.safetensors   weights of the selected model (ASGD averages when in the ASGD phase)
    best.json          its sidecar: model name, config, vocabulary, metrics
    last.safetensors   everything to continue: weights, optimiser tensors, RNG states, carried state
    last.json          its sidecar: optimiser / schedule / trainer state, RNG states, history
    status.json        {"state": "running" | "interrupted" | "failed" | "diverged" | "finished", "stop_reason", ...}
    train.lock         the PID of the training writing into the folder (while it runs)

The folder's own files (status, metrics, lock, overwrite refusal) are :mod:`induce.training.run_folder`;
what ``last`` holds and how it is restored is :mod:`induce.training.state`; the loss and evaluation
are :mod:`induce.training.lm`.

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
from .lm import DEV_LENGTHS, LMLoss, dev_parse_metrics, evaluate_lm, resolve_corpus  # noqa: F401 (re-exported)
from .optim import averaged_parameters, build_optimizer
from .run_folder import (
    BEST,
    CONFIG_FILE,
    LAST,
    METRICS_FILE,
    STATUS_FILE,
    RunLock,
    claim_for_new_run,
    now,
    read_status,
    resume_command,
    write_metrics,
    write_status,
)
from .setup import TrainerSetup
from .state import CheckpointState, detach_state, map_state
from .tensorboard import TensorBoardLog, require_tensorboard

__all__ = [
    "BEST", "CONFIG_FILE", "DEV_LENGTHS", "LAST", "LMLoss", "METRICS_FILE", "STATUS_FILE", "TrainResult",
    "Trainer", "TrainingDiverged", "TrainingInterrupted", "detach_state", "dev_parse_metrics", "evaluate_lm",
    "map_state", "read_status", "resolve_corpus", "resume", "train",
]


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


#: Under DDP, SIGINT / SIGTERM and the time budget are checked every this many batches (and at logs).
STOP_CHECK_BATCHES = 10


class TrainingInterrupted(KeyboardInterrupt):
    """Raised by :meth:`Trainer.run` after SIGINT once ``last`` is written at the interrupted step and
    the resume command printed: still a ``KeyboardInterrupt`` for callers (``induce reproduce`` stops)."""

    def __init__(self, result: TrainResult, epoch: int, batch: int):
        super().__init__(f"{result.run_dir}: interrupted at epoch {epoch}, batch {batch}")
        self.result, self.epoch, self.batch = result, epoch, batch
        self.resume_command = resume_command(result.run_dir)


class TrainingDiverged(InduceError):
    """The training loss or the validation loss became NaN or infinite; ``status.json`` says ``diverged``."""


class Trainer(TrainerSetup, CheckpointState):
    """Trains ``config`` into ``run_dir``.

    ``resume=True`` continues from ``run_dir/last.*`` (the config stored there wins over
    ``config`` except ``train.epochs``, ``train.time_budget``, ``train.device``, ``train.kernels``,
    ``train.log_interval``, ``train.tensorboard``). ``on_batch(trainer, epoch, batch)`` is called after every optimiser
    step (tests use it to kill a run). ``progress=False`` hides the progress bars.

    A new run refuses a ``run_dir`` that already holds a run unless ``force`` (which removes the old
    run's files first); ``allow_foreign=False`` also refuses a non-empty folder that is not a run
    (the CLI's ``--out``). Every run holds the folder's lock (``train.lock``) while it writes.
    SIGINT (Ctrl-C) or SIGTERM stops after the batch in progress (under DDP: within
    ``STOP_CHECK_BATCHES`` batches, all processes at the same step): ``last`` is written there, the status says
    ``interrupted``, the ``--resume`` command is printed and :class:`TrainingInterrupted` raised; a
    second SIGINT stops at once (``KeyboardInterrupt``, no new checkpoint).
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
    ):
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.force = force
        self.allow_foreign = allow_foreign
        self.interrupt_requested = False
        #: What became non-finite and where (set once; the run then stops as diverged).
        self.diverged: Optional[str] = None
        self.console = console or Console(stderr=True)
        self.show_progress = progress
        self.on_batch = on_batch
        self.corpora_dir = Path(corpora_dir)
        self.resume_meta: Optional[dict] = None
        self.resume_tensors: Optional[dict] = None
        if resume:
            if ddp.env_is_main():
                RunLock(self.run_dir).check_free()  # "in use" says more than a missing checkpoint would
            self.resume_tensors, self.resume_meta = load_checkpoint(self.run_dir / LAST)
            stored = stored_run_config(self.resume_meta["config"], source=str(self.run_dir / (LAST + ".json")))
            keep = {"epochs", "time_budget", "device", "kernels", "log_interval", "tensorboard"}
            updates = {k: getattr(config.train, k) for k in keep}
            config = stored.model_copy(update={"train": stored.train.model_copy(update=updates)})
        self.config = resolve_config(config)  # the model section checked, stored with every field
        self.tensorboard: Optional[TensorBoardLog] = None
        if config.train.tensorboard:
            require_tensorboard()  # the missing package is an error before anything is done

    # ---------------------------------------------------------------------------------------- setup

    def _log(self, message: str) -> None:
        if self.ctx.is_main:
            self.console.print(message, highlight=False, soft_wrap=True)

    def _write_status(self, state: str, **extra) -> None:
        if self.ctx.is_main:
            write_status(self.run_dir, state, model_name=self.config.model_name, **extra)

    def _write_metrics_file(self) -> None:
        if self.ctx.is_main:
            write_metrics(self.run_dir, self.loop.history)

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

    def _time_over(self) -> bool:
        budget = self.config.train.time_budget
        return budget is not None and time.monotonic() - self.started > budget

    def _stop_reason(self, check_time: bool = True) -> Optional[str]:
        """``"diverged"`` (a non-finite running loss seen by :meth:`_show_loss`), ``"interrupted"``
        (SIGINT), ``"time_budget"`` or None. Under DDP rank 0's flags decide (one broadcast), so that all
        processes stop after the same step (a NaN reaches every process's weights through the gradient
        all-reduce, so rank 0 sees it too)."""
        flags = [float(self.interrupt_requested), float(check_time and self._time_over()),
                 float(self.diverged is not None)]
        if self.ctx.distributed:
            flags = ddp.broadcast_floats(self.ctx, flags)
        if flags[2]:
            return "diverged"
        if flags[0]:
            return "interrupted"
        return "time_budget" if flags[1] else None

    def _show_loss(self, task, interval_start: float, interval_tokens: int) -> None:
        mean = self.loop.epoch_loss_sum.item() / max(self.loop.epoch_tokens, 1)  # a host sync
        if not math.isfinite(mean) and self.diverged is None:
            self.diverged = f"training loss {mean} at epoch {self.loop.epoch}, batch {self.loop.batch}"
        speed = interval_tokens * self.ctx.world_size / max(time.monotonic() - interval_start, 1e-9)
        if task is not None:
            self.progress.update(task, loss=f"loss {mean:.3f} ppl {math.exp(min(mean, 50)):.1f} {speed:,.0f} tok/s")
        if self.tensorboard is not None:
            self.tensorboard.interval(mean, self.loop.steps_total)

    def _train_epoch(self, progress: Optional[Progress]) -> Optional[str]:
        """Run (the rest of) the current epoch; returns None when it is complete, else why it stopped
        (``"time_budget"`` or ``"interrupted"``: then ``last`` must be written at this position;
        ``"diverged"``: nothing more is written).

        Long because the step, the running sums, the host syncs (loss shown, stop checks under DDP) and the
        periodic checkpoint happen in one order per batch that exact resume and DDP's agreement on the
        stopping step depend on; it reads best as one loop."""
        cfg = self.config
        self.model.train()
        batches_per_epoch = self.objective.batches_per_epoch(self)
        task = None
        self.progress = progress
        if progress is not None:
            task = progress.add_task(f"epoch {self.loop.epoch}", total=batches_per_epoch, loss="")
            progress.update(task, completed=self.loop.batch)
        interval_start, interval_tokens = time.monotonic(), 0
        while self.objective.has_next(self):
            loss_sum, tokens = self.objective.step(self)  # the model's objective: one optimiser step
            self.loop.epoch_loss_sum += loss_sum
            self.loop.epoch_tokens += tokens
            interval_tokens += tokens
            self.loop.batch += 1
            self.loop.steps_total += 1
            self.batches_this_run += 1
            if task is not None:
                progress.update(task, advance=1)
            at_check = self.loop.batch % STOP_CHECK_BATCHES == 0 and self.loop.batch % cfg.train.log_interval
            if self.ctx.distributed and at_check:
                # Under DDP the processes agree on stopping through a broadcast (a host sync), so it
                # is checked every few batches rather than every batch.
                reason = self._stop_reason()
                if reason:
                    return reason
            if self.loop.batch % cfg.train.log_interval == 0:
                # The loop's host syncs: the running loss every log_interval batches ...
                self._show_loss(task, interval_start, interval_tokens)
                interval_start, interval_tokens = time.monotonic(), 0
                reason = self._stop_reason()
                if reason:
                    return reason
            elif self.batches_this_run & (self.batches_this_run - 1) == 0 and self.batches_this_run < 64:
                # ... and after batches 1, 2, 4, ... of this invocation, so that the bar shows a loss
                # (and the ETA a rate) from the start.
                self._show_loss(task, interval_start, interval_tokens)
                if self.diverged is not None and not self.ctx.distributed:  # (DDP: at the next broadcast)
                    return "diverged"
            if self.warn_large and self.batches_this_run in (1, 4):
                # Timed on batches 2-4 (the first one pays for warm-up); both ends follow a host sync.
                if self.batches_this_run == 1:
                    self.timing_started = time.monotonic()
                else:
                    seconds = (time.monotonic() - self.timing_started) / 3
                    epochs_left = cfg.train.epochs - self.loop.epoch + 1
                    self._log(advice.estimate_message(seconds, batches_per_epoch, epochs_left, "2-4"))
            if cfg.train.checkpoint_every and self.loop.batch % cfg.train.checkpoint_every == 0:
                self._save_last()
            if self.on_batch is not None:
                self.on_batch(self, self.loop.epoch, self.loop.batch)
            if self.interrupt_requested and not self.ctx.distributed:
                return "interrupted"
        # The epoch's batches are done; an interrupt now is handled after its evaluation and checkpoint.
        return "time_budget" if self._stop_reason() == "time_budget" else None

    def _evaluate(self) -> dict:
        """Validation loss/perplexity (and dev F1) on rank 0, shared with the other ranks."""
        metrics: dict = {}
        values = [math.nan, math.nan]
        if self.ctx.is_main:
            with averaged_parameters(self.model, self.optimizer):
                valid_loss = self.objective.validate(self)
                if self.dev is not None:
                    try:
                        metrics.update(dev_parse_metrics(self.model, *self.dev, eos_id=self.vocab.eos_id))
                    except (TypeError, ValueError, KeyError, AttributeError) as err:
                        # An evaluator API mismatch must not kill a long training run: report, go on.
                        self._log(f"[yellow]warning:[/] dev F1 skipped ({type(err).__name__}: {err})")
                        if self.config.train.select_by != "dev_f1":
                            self.dev = None
            values = [valid_loss, metrics.get("dev_f1", math.nan)]
        valid_loss, dev_f1 = ddp.broadcast_floats(self.ctx, values)
        metrics["valid_loss"] = valid_loss
        metrics["valid_ppl"] = math.exp(min(valid_loss, 50.0))
        if not math.isnan(dev_f1):
            metrics["dev_f1"] = dev_f1
        return metrics

    def _selection_value(self, metrics: dict) -> Optional[float]:
        """Higher is better: ``-valid_ppl`` or ``dev_f1``."""
        if self.config.train.select_by == "dev_f1":
            return metrics.get("dev_f1")
        return -metrics["valid_ppl"]

    def _end_of_epoch(self, complete: bool, epoch_started: float) -> dict:
        """Evaluate, select, log the epoch; ``{}`` (nothing saved or recorded) when the training or
        validation loss is not finite (``self.diverged`` says which)."""
        cfg = self.config
        loss_sum = ddp.all_reduce_sum(self.ctx, self.loop.epoch_loss_sum).item()  # (waits for the device)
        tokens = ddp.all_reduce_sum(self.ctx, torch.tensor(float(self.loop.epoch_tokens))).item()
        # Tokens of this invocation only (a resumed epoch counts from the resume point).
        new_tokens = tokens - self.epoch_tokens_at_start
        train_seconds = time.monotonic() - epoch_started
        train_loss = loss_sum / max(tokens, 1)
        if not math.isfinite(train_loss):  # the same value on every process (all-reduced)
            self.diverged = f"training loss {train_loss} in epoch {self.loop.epoch}"
            return {}
        metrics = {"epoch": self.loop.epoch}
        if not complete:
            metrics["partial"] = True
        metrics.update(train_loss=train_loss, train_ppl=math.exp(min(train_loss, 50.0)), train_tokens=int(tokens))
        metrics.update(self._evaluate())
        if not math.isfinite(metrics["valid_loss"]):  # broadcast from rank 0: the same everywhere
            self.diverged = f"validation loss {metrics['valid_loss']} after epoch {self.loop.epoch}"
            return {}
        metrics.update(
            lr=self.loop.schedule.base_lr,
            optimizer=type(self.optimizer).__name__,
            steps=self.loop.steps_total,
            train_seconds=round(train_seconds, 3),
            epoch_seconds=round(time.monotonic() - epoch_started, 3),
            tokens_per_s=round(new_tokens / max(train_seconds, 1e-9), 1),
        )
        value = self._selection_value(metrics)
        improved = value is not None and (self.loop.best_metric is None or value > self.loop.best_metric)
        if improved:
            self.loop.best_metric = value
            self.loop.bad_epochs = 0
            self._save_best(metrics)
        elif complete:
            self.loop.bad_epochs += 1
        self.loop.best_valid_ppl = min(self.loop.best_valid_ppl, metrics["valid_ppl"])
        metrics["best"] = improved
        if complete and self.loop.schedule.after_evaluation(self.loop.epoch, metrics["valid_loss"]):
            self._log(f"epoch {self.loop.epoch}: switching to ASGD")
            self.optimizer = build_optimizer(self.model.parameters(), cfg.optim, asgd=True)
        self.loop.history.append(metrics)
        return metrics

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
        cfg, ctx = self.config, self.ctx
        n_params = sum(p.numel() for p in self.model.parameters())
        tokens_per_epoch = self.objective.tokens_per_epoch(self)
        sentences = self.corpus.lm_sentences("train")
        words = sum(len(sentence) for sentence in sentences)
        # One count, said what it counts: the words, the tokens with the sentence ends (what the model
        # reads), and what an epoch reads of them (the objective says).
        self._log(
            f"{cfg.model_name}: {n_params:,} parameters, {self.corpus.name} ({len(self.vocab)} types; train text: "
            f"{words:,} words + {len(sentences):,} sentence ends = {words + len(sentences):,} tokens, "
            f"{self.objective.describe(self)}), device {self.device}"
            + (f", {ctx.world_size} processes" if ctx.distributed else "")
            + (f", resuming epoch {self.loop.epoch} at batch {self.loop.batch}" if self.resume else "")
        )
        self.warn_large = self.device.type == "cpu" and advice.is_large_run(n_params, tokens_per_epoch)
        if self.warn_large:
            self._log(advice.size_message(cfg.model_name, n_params, tokens_per_epoch, cfg.train.epochs,
                                          self.device.type))

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
        self._save_last()
        self._write_metrics_file()
        self._write_status("interrupted", interrupted_at=now(), stop_reason="interrupted",
                           epoch=self.loop.epoch, batch=self.loop.batch)
        self._log(f"interrupted at epoch {self.loop.epoch}, batch {self.loop.batch}: checkpoint written to "
                  f"{self.run_dir / LAST}.safetensors\ncontinue with: "
                  f"{resume_command(self.run_dir, self.ctx.world_size)}")

    def _stop_diverged(self) -> None:
        """A non-finite loss: mark the run diverged (``best`` and ``last`` keep what they held before)
        and raise :class:`TrainingDiverged` with what to do."""
        self._write_metrics_file()
        self._write_status("diverged", diverged_at=now(), stop_reason="diverged", epoch=self.loop.epoch,
                           batch=self.loop.batch, error=f"non-finite {self.diverged}")
        lr = f"optim.lr={self.config.optim.lr}"
        raise TrainingDiverged(
            f"{self.run_dir}: training diverged (non-finite {self.diverged}); the run is marked diverged "
            f"and is never used by default. Train again with a smaller learning rate than {lr} "
            f"(or a smaller optim.clip)"
        )

    def _started(self) -> bool:
        """Whether this run has written its folder (config and status), i.e. there is a run to report on."""
        return hasattr(self, "ctx") and self.ctx.is_main and (self.run_dir / CONFIG_FILE).is_file()

    def _run_epochs(self, progress: Optional[Progress]) -> str:
        """Train, evaluate and checkpoint epoch after epoch; returns why it stopped (``"epochs"``: all done,
        ``"early_stopping"``, ``"time_budget"``, ``"interrupted"``, ``"diverged"``)."""
        cfg, ctx = self.config, self.ctx
        while self.loop.epoch <= cfg.train.epochs:
            epoch_started = time.monotonic()
            self.epoch_tokens_at_start = int(
                ddp.all_reduce_sum(ctx, torch.tensor(float(self.loop.epoch_tokens))).item()
            )
            reason = self._train_epoch(progress)
            if reason in ("interrupted", "diverged"):
                # No evaluation of a partial epoch: the resumed run must see what an uninterrupted one sees.
                return reason
            complete = reason is None
            metrics = self._end_of_epoch(complete, epoch_started)
            if self.tensorboard is not None:
                self.tensorboard.epoch(metrics, self.loop.steps_total)
            if self.diverged is not None:
                return "diverged"
            self._log(
                f"epoch {metrics['epoch']:3d} | train ppl {metrics['train_ppl']:8.2f} | valid ppl "
                f"{metrics['valid_ppl']:8.2f}"
                + (f" | dev F1 {metrics['dev_f1']:.3f}" if "dev_f1" in metrics else "")
                + f" | {metrics['tokens_per_s']:,.0f} tok/s" + (" *" if metrics["best"] else "")
            )
            if complete:
                self.loop.next_epoch()
            self._save_last()
            self._write_metrics_file()
            if not complete:
                return "time_budget"
            if cfg.train.patience is not None and self.loop.bad_epochs >= cfg.train.patience:
                return "early_stopping"
            if self.loop.epoch <= cfg.train.epochs:
                reason = self._stop_reason()
                if reason:
                    return reason
        return "epochs"

    def run(self) -> TrainResult:
        created = not self.run_dir.exists()
        lock = self._claim_folder()
        previous_handlers: dict = {}
        ranks_agree = False
        try:
            self._setup()
            # From here Ctrl-C means "stop after this batch" (during setup it stops at once).
            previous_handlers = self._install_signal_handlers()
            ctx, cfg = self.ctx, self.config
            if ctx.is_main:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                save_config(cfg, self.run_dir / CONFIG_FILE)
                self._write_metrics_file()
                status = {"started_at": now()} if not self.resume else {"resumed_at": now()}
                self._write_status("running", world_size=ctx.world_size, pid=os.getpid(), **status)
                if cfg.train.tensorboard:
                    self.tensorboard = TensorBoardLog(self.run_dir, self.loop.steps_total if self.resume else None)
            self._announce()
            self.started = time.monotonic()
            self.batches_this_run = 0
            progress = self._make_progress() if self.show_progress and ctx.is_main else None
            if progress is not None:
                progress.start()
            try:
                stop_reason = self._run_epochs(progress)
            finally:
                if progress is not None:
                    progress.stop()
            ranks_agree = True  # every process took the same stop decision (a broadcast): they can meet once more
            if stop_reason == "diverged":
                self._stop_diverged()
            if stop_reason == "interrupted":
                self._stop_interrupted()
            else:
                self._write_status(
                    "finished", finished_at=now(), stop_reason=stop_reason, epochs_done=len(self.loop.history),
                    best_valid_ppl=self.loop.best_valid_ppl,
                )
            loop = self.loop
            result = TrainResult(self.run_dir, len(loop.history), stop_reason, loop.best_valid_ppl,
                                 loop.best_metric if loop.best_metric is not None else math.nan, list(loop.history))
            if stop_reason == "interrupted":
                raise TrainingInterrupted(result, self.loop.epoch, self.loop.batch)
            return result
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
            message = failures.user_error(err, self.run_dir, self.config, started=self._started(),
                                          world_size=getattr(getattr(self, "ctx", None), "world_size", 1))
            if message is not None:  # a full disk, no memory: one line, not a traceback
                raise message from err
            raise
        finally:
            if self.tensorboard is not None:
                self.tensorboard.close()
            for sig, handler in previous_handlers.items():
                signal.signal(sig, handler)
            if hasattr(self, "ctx"):
                if hasattr(self, "loss_module"):
                    self.loss_module = ddp.unwrap(self.loss_module)
                ddp.shutdown(self.ctx, meet_first=ranks_agree)
            if lock is not None:
                lock.release()
                if created and self.run_dir.is_dir() and not any(self.run_dir.iterdir()):
                    self.run_dir.rmdir()  # nothing was written: leave no empty folder behind


def train(config: RunConfig, run_dir: Path, **kwargs) -> TrainResult:
    """Train ``config`` into ``run_dir`` (see :class:`Trainer` for the keyword arguments)."""
    return Trainer(config, run_dir, **kwargs).run()


def resume(run_dir: Path, updates: Optional[dict] = None, **kwargs) -> TrainResult:
    """Continue the run in ``run_dir`` from ``last.*``; ``updates`` may change ``train.epochs``,
    ``train.time_budget``, ``train.device``, ``train.kernels``, ``train.log_interval``, ``train.tensorboard``."""
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
