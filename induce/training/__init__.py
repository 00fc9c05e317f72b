"""Training runner: config -> trained run folder (see :mod:`induce.training.trainer`).

* :mod:`~induce.training.batching` — token streams, rows, BPTT lengths, DDP shards;
* :mod:`~induce.training.optim` — SGD/Adam, the ASGD switch, lr plateaus, and the one optimiser step;
* :mod:`~induce.training.checkpoint` — safetensors + JSON sidecar, atomic, hash-checked;
* :mod:`~induce.training.ddp` — torchrun / DistributedDataParallel setup;
* :mod:`~induce.training.objectives` — what a model trains on and minimises: BPTT streams or whole
  sentences, and the :class:`~induce.training.objectives.Objective` interface a family with its own implements;
* :mod:`~induce.training.setup` — the run's components, built in one pass before the first step;
* :mod:`~induce.training.parts` — those components, and what ``last`` / ``best`` hold of them;
* :mod:`~induce.training.graphs` — the graph-captured training step (``train.cuda_graphs``);
* :mod:`~induce.training.fits` — does a run fit its data and its memory (checked before the first step);
* :mod:`~induce.training.lm` — the language-model loss, validation loss, dev F1;
* :mod:`~induce.training.state` — what ``last`` holds (every RNG, carried state) and its restore;
* :mod:`~induce.training.run_folder` — status, metrics, the folder lock, no silent overwrite;
* :mod:`~induce.training.advice` — the size and time estimate of runs too large for the machine;
* :mod:`~induce.training.trainer` — the loop, evaluation, selection, interruption, resume.
"""
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .lm import evaluate_lm
from .run_folder import RunFolderError
from .trainer import Trainer, TrainingInterrupted, TrainResult, resume, train

__all__ = [
    "CheckpointError",
    "RunFolderError",
    "TrainResult",
    "Trainer",
    "TrainingInterrupted",
    "evaluate_lm",
    "load_checkpoint",
    "resume",
    "save_checkpoint",
    "train",
]
