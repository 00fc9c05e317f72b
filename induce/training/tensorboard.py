"""TensorBoard event files of a training run (``train.tensorboard: true`` or ``induce train --tensorboard``).

Written into ``RUN/tensorboard/`` with :class:`torch.utils.tensorboard.SummaryWriter`, which needs the
optional ``tensorboard`` package (``pip install 'induce[tensorboard]'``); without it the run is refused
before it starts (:func:`require_tensorboard`). ``tensorboard --logdir RUN`` (or a folder of runs) shows:

* every ``train.log_interval`` batches: ``train/running_loss`` (mean cross-entropy of the epoch so far,
  nats per token);
* every epoch: ``train/loss``, ``train/perplexity``, ``valid/loss``, ``valid/perplexity``, ``train/lr`` (the
  schedule's base learning rate, which changes only between epochs: plateaus, the switch to ASGD),
  and with dev trees ``dev/f1`` (sentence F1 of the monitored dev sentences), ``dev/corpus_f1``,
  ``dev/left_split_pct`` and ``dev/right_split_pct`` (branching), ``dev/f1_wsj10`` / ``dev/f1_wsj40``.

The step of every point is the number of optimiser steps so far, so the two series share one axis.
A resumed run opens the folder again with ``purge_step`` at its checkpoint's step: points written
after that checkpoint by the process that stopped (steps the resumed run does again) are dropped
by TensorBoard. Only the main process writes. The writer reads the metrics and draws no random
numbers: it takes no part in what the run computes, and is not in the checkpoint.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from induce.errors import InduceError

from .run_folder import TENSORBOARD_DIR

#: metrics.jsonl key -> TensorBoard tag, per epoch.
EPOCH_TAGS = {
    "train_loss": "train/loss", "train_ppl": "train/perplexity", "valid_loss": "valid/loss",
    "valid_ppl": "valid/perplexity", "lr": "train/lr", "dev_f1": "dev/f1", "dev_corpus_f1": "dev/corpus_f1",
    "dev_left_split_pct": "dev/left_split_pct", "dev_right_split_pct": "dev/right_split_pct",
    "dev_f1_wsj10": "dev/f1_wsj10", "dev_f1_wsj40": "dev/f1_wsj40",
}


def require_tensorboard():
    """:class:`torch.utils.tensorboard.SummaryWriter`, or an :class:`InduceError` saying how to install it."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise InduceError("train.tensorboard (--tensorboard) needs the tensorboard package: "
                          "pip install 'induce[tensorboard]' (or pip install tensorboard)") from None
    return SummaryWriter


class TensorBoardLog:
    """The event files of one run (see the module docstring); ``purge_step``: the step a resumed run
    starts from (None for a new run)."""

    def __init__(self, run_dir: Path, purge_step: Optional[int] = None):
        writer_class = require_tensorboard()
        self.folder = Path(run_dir) / TENSORBOARD_DIR
        self.writer = writer_class(log_dir=str(self.folder), purge_step=purge_step)

    def _scalar(self, tag: str, value, step: int) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            self.writer.add_scalar(tag, float(value), step)

    def interval(self, running_loss: float, step: int) -> None:
        """The running training loss, every ``train.log_interval`` batches."""
        self._scalar("train/running_loss", running_loss, step)

    def epoch(self, metrics: dict, step: int) -> None:
        """One epoch's record of ``metrics.jsonl`` (a partial epoch too: its figures are real)."""
        for key, tag in EPOCH_TAGS.items():
            if key in metrics:
                self._scalar(tag, metrics[key], step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
