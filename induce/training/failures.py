"""What a training run that failed on the machine (not on a bug) tells its user, in one line.

:func:`user_error` turns a full disk (or any other failed file operation) and running out of memory
into an :class:`~induce.errors.InduceError` that the command prints without a traceback: what
happened, that the run is marked ``failed`` in its ``status.json``, and, when the run has a
checkpoint to continue from, the ``--resume`` command (checkpoints are written whole or not at all,
so the last one written is intact: :func:`induce.training.checkpoint.save_checkpoint`).
"""
from __future__ import annotations

import errno
from pathlib import Path
from typing import Optional

from induce.errors import InduceError
from induce.files import os_error_message

from .checkpoint import checkpoint_paths
from .fits import out_of_memory_message
from .run_folder import LAST, resume_command


class TrainingFailed(InduceError):
    """The run stopped on an error of the machine (disk, memory); its folder is marked failed."""


def user_error(err: BaseException, run_dir: Path, config, started: bool = True, world_size: int = 1,
               length_key: Optional[str] = None) -> Optional[TrainingFailed]:
    """A one-line :class:`TrainingFailed` for ``err`` when it is a failed file operation or an
    out-of-memory error; None for anything else (a bug: its traceback is wanted). ``started``: the
    run folder was written (and is now marked failed); ``length_key``: the config key of the length a
    step reads, named among the settings to lower (the objective's ``length_key``; None: not named)."""
    fix = "fix that"
    if isinstance(err, OSError):
        what = os_error_message(err)
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            fix = "free some space"
    else:
        what = out_of_memory_message(err, config, length_key)
        if what is None:
            return None
    if not started:
        return TrainingFailed(f"training could not start: {what}")
    weights, sidecar = checkpoint_paths(Path(run_dir) / LAST)
    if weights.is_file() and sidecar.is_file():
        after = (f"its last checkpoint ({sidecar.with_suffix('')}.*) is intact: {fix} and continue with "
                 f"{resume_command(Path(run_dir), world_size)}")
    else:
        after = f"it has no checkpoint yet: {fix} and start it again"
    return TrainingFailed(f"training stopped: {what}; the run in {run_dir} is marked failed, {after}")
