"""Checkpoints written by an earlier induce stay readable and resumable.

``tests/data/checkpoint-1c45b6b/`` is a run folder written by commit 1c45b6b (checkpoint format version
2, before the trainer's loop state became :class:`~induce.training.state.LoopState`): ON-LSTM at tiny
sizes, its dropouts and variable BPTT on, 2 epochs, stopped by SIGINT at epoch 2, batch 3, over the
corpus ``make_corpus(corpora, train=24, valid=4, test=2)`` writes (``data.corpus: tiny``, a name under
the corpora folder, so the folder holds no path of the machine that wrote it).
"""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.console import Console

from induce.config import load_config_file
from induce.training import load_checkpoint
from induce.training.ddp import DistContext
from induce.training.state import LoopState
from induce.training.trainer import read_status, resume

from helpers import make_corpus

OLD_RUN = Path(__file__).resolve().parent / "data" / "checkpoint-1c45b6b"
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def keep_global_rngs():
    """Restoring a loop state sets the process's RNGs: give the other tests theirs back."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    yield
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch.set_rng_state(states[2])


def test_the_loop_state_reads_an_old_checkpoint_and_writes_it_back_unchanged(keep_global_rngs):
    tensors, meta = load_checkpoint(OLD_RUN / "last")
    assert meta["format_version"] == 2
    config = load_config_file(OLD_RUN / "config.yaml")
    loop = LoopState.fresh(config, torch.device("cpu"))
    python_before = torch.get_rng_state()
    assert loop.restore(tensors, meta, DistContext()) is None
    assert (loop.epoch, loop.batch, loop.position, loop.steps_total) == (2, 3, 19, 19)
    assert loop.history == meta["history"] and len(loop.history) == 1
    assert loop.best_metric == -loop.best_valid_ppl and loop.bad_epochs == 0
    assert torch.equal(torch.get_rng_state(), tensors["rng.torch_cpu.0"])
    assert not torch.equal(python_before, torch.get_rng_state())
    assert loop.bptt_rng.bit_generator.state == meta["rng"]["bptt"]
    assert [tuple(t.shape) for t in loop.hidden[0]] == [(3, 8), (3, 8)]  # (h, c) of the first layer, 3 rows

    written_tensors, written = loop.checkpoint(DistContext())
    for key in ("trainer", "schedule", "rng", "hidden", "history"):
        entry = json.loads(json.dumps(written[key]))
        if key == "trainer":
            # the run's token and CPU counters are newer than this checkpoint: its tokens are those of its
            # recorded epoch and of the one in progress, its CPU seconds unknown (0)
            added = {name: entry.pop(name) for name in ("tokens_total", "train_cpu_seconds")}
            assert added == {"tokens_total": meta["history"][0]["train_tokens"] + meta["trainer"]["epoch_tokens"],
                             "train_cpu_seconds": 0.0}
        assert entry == meta[key], key
    assert written_tensors.keys() == {k for k in tensors if k.startswith(("rng.", "hidden."))}
    for key, tensor in written_tensors.items():
        assert torch.equal(tensor, tensors[key]), key


def test_an_old_checkpoint_resumes_to_the_end(tmp_path, keep_global_rngs):
    make_corpus(tmp_path / "corpora", train=24, valid=4, test=2)
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    result = resume(run, corpora_dir=tmp_path / "corpora", console=Console(quiet=True), progress=False)
    assert result.stop_reason == "epochs" and result.epochs_done == 2
    assert read_status(run)["state"] == "finished"
    _, meta = load_checkpoint(run / "last")
    assert meta["trainer"]["epoch"] == 3 and meta["trainer"]["steps_total"] > 19
