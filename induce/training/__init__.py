"""Training runner: config -> trained run folder (see :mod:`induce.training.trainer`).

* :mod:`~induce.training.batching` — token streams, rows, BPTT lengths, DDP shards;
* :mod:`~induce.training.optim` — SGD/Adam, the ASGD switch, lr plateaus;
* :mod:`~induce.training.checkpoint` — safetensors + JSON sidecar, atomic, hash-checked;
* :mod:`~induce.training.ddp` — torchrun / DistributedDataParallel setup;
* :mod:`~induce.training.trainer` — the loop, evaluation, selection, resume.
"""
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .trainer import Trainer, TrainResult, evaluate_lm, resume, train

__all__ = [
    "CheckpointError",
    "TrainResult",
    "Trainer",
    "evaluate_lm",
    "load_checkpoint",
    "resume",
    "save_checkpoint",
    "train",
]
