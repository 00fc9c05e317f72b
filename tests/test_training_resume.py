"""Exact resume for every real model: every dropout on, variable BPTT, on CPU.

For each model one uninterrupted 2-epoch run is compared with (a) 1 epoch + ``resume`` to 2 (an
end-of-epoch checkpoint), (b) a run killed mid-epoch 2 and resumed from its periodic mid-epoch
checkpoint, (c) a run interrupted by SIGINT mid-epoch 2 (checkpoint written at the interrupt) and
resumed. The weights, optimiser tensors and per-epoch metrics must be equal bit for bit.

Regression: the first training forward of a process used to draw from torch's global RNG (a
one-time probe of oneDNN's packed products), so a resumed process drew its dropout masks one
step off and parted from the uninterrupted run after its first batch.
"""
from __future__ import annotations

import json
import os
import signal

import pytest
import torch
from rich.console import Console

from induce.config import load_config
from induce.training import load_checkpoint
from induce.training.trainer import TIMING_FIELDS, TrainingInterrupted, read_status, resume, train

from helpers import make_corpus

QUIET = Console(quiet=True)
pytestmark = pytest.mark.usefixtures("one_thread")

PALM_TINY = ["model.emb_size=6", "model.hidden_size=8", "model.rrnn_size=4", "model.attention_size=4",
             "model.max_span_length=3"]
RELMEM_TINY = ["model.emb_size=6", "model.hidden_size=8", "model.attention_size=4", "model.nu=3", "model.rho=2"]
TINY = {
    "prpn": ["model.emb_size=6", "model.hidden_size=8", "model.n_slots=3", "model.n_lookback=2", "model.dropoute=0.1"],
    "onlstm": ["model.emb_size=8", "model.hidden_size=8", "model.chunk_size=4"],
    "palm": PALM_TINY,
    "palm-s": PALM_TINY,
    "palm-rb": PALM_TINY,
    "rellstm": RELMEM_TINY,
    "relrnn": RELMEM_TINY,
    "memlstm": RELMEM_TINY,
}
# Variable BPTT (AWD-LSTM's random lengths) on for every model; the models' own dropout defaults stay
# (all non-zero for ON-LSTM and PaLM; PRPN's embedding dropout, 0 by default, is switched on above).
# RelLSTM / RelRNN / MemLSTM have no dropout: they check the carried state and the optimiser.
COMMON = ["data.batch_size=3", "data.eval_batch_size=2", "data.bptt=6", "data.variable_bptt=true",
          "data.bptt_std=2", "data.min_bptt=2", "train.dev_f1=false", "train.log_interval=2", "train.epochs=2",
          "train.device=cpu", "train.seed=11"]


class Killed(Exception):
    pass


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpora"), train=24, valid=4, test=2)


def config(model, corpus, *extra):
    return load_config(model, overrides=[*TINY[model], *COMMON, f"data.corpus={corpus}", *extra])


def run_tensors(run_dir):
    tensors, _ = load_checkpoint(run_dir / "last")
    return {k: v for k, v in tensors.items() if k.startswith(("model.", "optim."))}


def metrics(run_dir):
    timing = TIMING_FIELDS
    return [{k: v for k, v in json.loads(line).items() if k not in timing}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_same_run(a, b):
    ta, tb = run_tensors(a), run_tensors(b)
    assert ta.keys() == tb.keys()
    different = [k for k in ta if not torch.equal(ta[k], tb[k])]
    assert not different, f"tensors differ after resume: {different[:5]}"
    assert metrics(a) == metrics(b)
    assert read_status(b)["state"] == "finished"


@pytest.mark.slow
@pytest.mark.parametrize("model", list(TINY))
def test_resume_is_exact_with_dropout_and_variable_bptt(tmp_path, corpus, model):
    cfg = config(model, corpus, "train.checkpoint_every=2")
    straight = tmp_path / "straight"
    train(cfg, straight, console=QUIET, progress=False)
    steps = metrics(straight)[0]["steps"]
    assert steps >= 5, "the test needs a few batches per epoch"
    mid = steps // 2 + 1  # epoch 2 is killed / interrupted after this batch

    # (a) an end-of-epoch checkpoint: 1 epoch, then resumed to 2 (in this same process, so any
    # one-time draw from the global RNG at the first forward would show here too)
    ended = tmp_path / "ended"
    train(config(model, corpus, "train.checkpoint_every=2", "train.epochs=1"), ended, console=QUIET, progress=False)
    resume(ended, {"epochs": 2}, console=QUIET, progress=False)
    assert_same_run(straight, ended)

    # (b) killed mid-epoch: the periodic checkpoint (every 2 batches) is before the kill, so the
    # batches after it are done again
    def kill(trainer, epoch, batch):
        if (epoch, batch) == (2, mid):
            raise Killed

    killed = tmp_path / "killed"
    with pytest.raises(Killed):
        train(cfg, killed, console=QUIET, progress=False, on_batch=kill)
    _, meta = load_checkpoint(killed / "last")
    assert meta["trainer"]["epoch"] == 2 and 0 < meta["trainer"]["batch"] < mid
    resume(killed, console=QUIET, progress=False)
    assert_same_run(straight, killed)

    # (c) SIGINT mid-epoch: the trainer finishes the batch, writes `last` there and stops
    def interrupt(trainer, epoch, batch):
        if (epoch, batch) == (2, mid):
            os.kill(os.getpid(), signal.SIGINT)

    interrupted = tmp_path / "interrupted"
    with pytest.raises(TrainingInterrupted) as stopped:
        train(cfg, interrupted, console=QUIET, progress=False, on_batch=interrupt)
    assert stopped.value.result.stop_reason == "interrupted" and (stopped.value.epoch, stopped.value.batch) == (2, mid)
    assert stopped.value.resume_command == f"induce train --resume {interrupted}"
    assert read_status(interrupted)["state"] == "interrupted"
    _, meta = load_checkpoint(interrupted / "last")
    assert (meta["trainer"]["epoch"], meta["trainer"]["batch"]) == (2, mid)
    resume(interrupted, console=QUIET, progress=False)
    assert_same_run(straight, interrupted)


def test_first_forward_leaves_the_global_rng_alone():
    """The one-time oneDNN probe must use its own generator (it runs inside the first forward)."""
    from induce.models.common import awd

    awd._onednn_packing_available.cache_clear()
    before = torch.get_rng_state()
    awd._onednn_packing_available()
    assert torch.equal(before, torch.get_rng_state())


def test_sigint_during_the_end_of_epoch_evaluation(tmp_path, corpus, monkeypatch):
    """Ctrl-C while epoch 1 is evaluated: the epoch ends normally (metrics, best, last), the run stops
    there marked interrupted, and resuming gives the uninterrupted run."""
    from induce.training import trainer as trainer_module

    cfg = config("onlstm", corpus)
    train(cfg, tmp_path / "straight", console=QUIET, progress=False)
    evaluate = trainer_module.Trainer._evaluate

    def interrupted_evaluation(self):
        if self.parts.loop.epoch == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return evaluate(self)

    monkeypatch.setattr(trainer_module.Trainer, "_evaluate", interrupted_evaluation)
    with pytest.raises(TrainingInterrupted) as stopped:
        train(cfg, tmp_path / "run", console=QUIET, progress=False)
    assert (stopped.value.epoch, stopped.value.batch) == (2, 0)
    assert read_status(tmp_path / "run")["state"] == "interrupted" and len(metrics(tmp_path / "run")) == 1
    monkeypatch.setattr(trainer_module.Trainer, "_evaluate", evaluate)
    resume(tmp_path / "run", console=QUIET, progress=False)
    assert_same_run(tmp_path / "straight", tmp_path / "run")
