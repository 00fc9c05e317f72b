"""Training runner: config -> trained run folder (see :mod:`induce.training.trainer`).

* :mod:`~induce.training.batching` — token streams, rows, BPTT lengths, DDP shards;
* :mod:`~induce.training.optim` — SGD/Adam, the ASGD switch, lr plateaus;
* :mod:`~induce.training.checkpoint` — safetensors + JSON sidecar, atomic, hash-checked;
* :mod:`~induce.training.ddp` — torchrun / DistributedDataParallel setup;
* :mod:`~induce.training.objectives` — what a model trains on and minimises: BPTT streams or whole sentences;
* :mod:`~induce.training.lm` — the language-model loss, validation loss, dev F1;
* :mod:`~induce.training.state` — what ``last`` holds (every RNG, carried state) and its restore;
* :mod:`~induce.training.run_folder` — status, metrics, the folder lock, no silent overwrite;
* :mod:`~induce.training.advice` — the size and time estimate of runs too large for the machine;
* :mod:`~induce.training.trainer` — the loop, evaluation, selection, interruption, resume.
"""
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .run_folder import RunFolderError
from .trainer import Trainer, TrainingInterrupted, TrainResult, evaluate_lm, resume, train

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
