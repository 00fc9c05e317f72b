"""Budgets that do not depend on the clock (``train.max_steps``, ``train.max_tokens``), exact under resume,
SIGINT and SIGKILL; the clock budget kept and flagged; evaluations every N steps; CPU seconds in the
metrics; the thread count of a run (tiny stand-in model, one thread)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from rich.console import Console

from induce.config import DEFAULT_THREADS, load_config, load_config_file
from induce.errors import InduceError
from induce.training.checkpoint import load_checkpoint
from induce.training.trainer import TIMING_FIELDS, Trainer, TrainingInterrupted, read_status, resume, train

from helpers import REPO, STANDIN, child_env, make_corpus

QUIET = Console(quiet=True)
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpora"), train=60, valid=8, test=4)


def overrides(corpus, *extra) -> list[str]:
    """Dropout and random BPTT lengths on (what makes exact resume hard), ASGD after epoch 1, 10 epochs: the
    budgets end the runs."""
    return [f"data.corpus={corpus}", "data.batch_size=4", "data.eval_batch_size=3", "data.bptt=8", "data.min_bptt=2",
            "data.bptt_std=2", "optim.lr=1.0", "optim.asgd=epoch", "optim.asgd_after_epochs=1", "model.dropout=0.3",
            "train.epochs=10", "train.log_interval=4", "train.device=cpu", "train.seed=5", *extra]


def config(corpus, *extra):
    return load_config(STANDIN, overrides=overrides(corpus, *extra))


def lines(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def figures(run_dir) -> list[dict]:
    """metrics.jsonl without its timing fields: what must be the same bit for bit."""
    return [{k: v for k, v in line.items() if k not in TIMING_FIELDS} for line in lines(run_dir)]


def tensors(run_dir, stem):
    loaded, _ = load_checkpoint(run_dir / stem)
    return {k: v for k, v in loaded.items() if k.startswith(("model.", "optim."))}


def assert_same(a, b):
    for stem in ("last", "best"):
        ta, tb = tensors(a, stem), tensors(b, stem)
        assert ta.keys() == tb.keys()
        assert not [k for k in ta if not torch.equal(ta[k], tb[k])], stem
    assert figures(a) == figures(b)


@pytest.fixture(scope="module")
def epoch_ends(corpus, tmp_path_factory) -> list[int]:
    """The run's step count at the end of epochs 1 and 2 of :func:`config`'s runs (random segment lengths:
    the epochs have different numbers of steps)."""
    probe = tmp_path_factory.mktemp("probe") / "run"
    train(config(corpus, "train.epochs=2", "train.dev_f1=false"), probe, console=QUIET, progress=False)
    return [line["steps"] for line in lines(probe)]


def test_max_steps_stops_between_steps_across_epochs(tmp_path, corpus, epoch_ends):
    budget = (epoch_ends[0] + epoch_ends[1]) // 2  # half way through epoch 2
    result = train(config(corpus, f"train.max_steps={budget}"), tmp_path / "run", console=QUIET, progress=False)
    assert result.stop_reason == "max_steps" and result.steps == budget and result.epochs_done == 2
    history = lines(tmp_path / "run")
    assert [h["epoch"] for h in history] == [1, 2] and history[-1]["partial"] and "partial" not in history[0]
    assert history[-1]["steps"] == budget and history[-1]["tokens"] == result.tokens
    assert history[-1]["tokens"] == sum(h["train_tokens"] for h in history)
    status = read_status(tmp_path / "run")
    assert status["stop_reason"] == "max_steps" and status["steps"] == budget and "clock_stopped" not in status
    # the CPU seconds of the training steps: counted, growing, and less than the run's process time
    assert 0 < history[0]["train_cpu_seconds"] < history[1]["train_cpu_seconds"]


def test_a_budget_at_an_epochs_last_step_ends_that_epoch_whole(tmp_path, corpus, epoch_ends):
    result = train(config(corpus, f"train.max_steps={epoch_ends[1]}"), tmp_path / "run", console=QUIET,
                   progress=False)
    history = lines(tmp_path / "run")
    assert result.stop_reason == "max_steps" and [h["epoch"] for h in history] == [1, 2]
    assert not any(h.get("partial") for h in history)


def test_max_tokens_stops_after_the_step_that_reaches_it(tmp_path, corpus):
    result = train(config(corpus, "train.max_tokens=500", "train.dev_f1=false"), tmp_path / "run", console=QUIET,
                   progress=False)
    assert result.stop_reason == "max_tokens" and result.tokens >= 500
    last_step_tokens = 4 * (8 + 2 + 20)  # at most: batch 4 x the longest segment
    assert result.tokens - last_step_tokens < 500
    assert read_status(tmp_path / "run")["tokens"] == result.tokens


@pytest.mark.parametrize("eval_every", [None, 5])
def test_a_budget_run_interrupted_and_resumed_equals_one_run(tmp_path, corpus, eval_every):
    """SIGINT at a step in epoch 2 (after the ASGD switch), resumed with the same budget: the same weights,
    optimiser state, checkpoints and figures, bit for bit (mid-epoch evaluations on or off)."""
    extra = ["train.max_steps=40"] + ([f"train.eval_every={eval_every}"] if eval_every else [])
    straight = tmp_path / "straight"
    train(config(corpus, *extra), straight, console=QUIET, progress=False)

    def interrupt(trainer, epoch, batch):
        if trainer.parts.loop.steps_total == 27:
            os.kill(os.getpid(), signal.SIGINT)

    stopped = tmp_path / "stopped"
    with pytest.raises(TrainingInterrupted):
        train(config(corpus, *extra), stopped, console=QUIET, progress=False, on_batch=interrupt)
    _, meta = load_checkpoint(stopped / "last")
    assert meta["trainer"]["steps_total"] == 27 and meta["trainer"]["train_cpu_seconds"] > 0
    cpu_before = meta["trainer"]["train_cpu_seconds"]
    result = resume(stopped, console=QUIET, progress=False)
    assert result.stop_reason == "max_steps" and result.steps == 40
    assert_same(straight, stopped)
    # the CPU count goes on from the checkpoint's
    assert lines(stopped)[-1]["train_cpu_seconds"] > cpu_before
    if eval_every:
        mid = [h for h in lines(straight) if h.get("mid_epoch")]
        assert mid and all(h["steps"] % eval_every == 0 for h in mid)
        assert {"batch", "steps", "tokens", "train_cpu_seconds", "valid_ppl", "dev_f1", "best"} <= set(mid[0])


def test_a_sigkilled_budget_run_resumed_from_its_checkpoint_equals_one_run(tmp_path, corpus):
    """A real SIGKILL (no handler runs) at step 33; the last checkpoint is at step 30 (checkpoint_every 10 in
    epoch 2): the resumed run redoes steps 31-33 and reaches the one run's final weights."""
    extra = ["train.max_steps=45", "train.checkpoint_every=10", "train.eval_every=7"]
    straight = tmp_path / "straight"
    train(config(corpus, *extra), straight, console=QUIET, progress=False)
    killed = tmp_path / "killed"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO / "tests")!r})
        import torch
        from rich.console import Console
        from helpers import STANDIN
        from induce.config import load_config
        from induce.training import train
        torch.set_num_threads(1)
        def kill(trainer, epoch, batch):
            if trainer.parts.loop.steps_total == 33:
                os.kill(os.getpid(), signal.SIGKILL)
        cfg = load_config(STANDIN, overrides={json.dumps(overrides(corpus, *extra))})
        train(cfg, {str(killed)!r}, console=Console(quiet=True), progress=False, on_batch=kill)
    """)
    done = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert read_status(killed)["state"] == "running"  # nothing ran after the kill
    _, meta = load_checkpoint(killed / "last")
    assert meta["trainer"]["steps_total"] < 33
    resume(killed, console=QUIET, progress=False)
    assert_same(straight, killed)


def test_a_finished_budget_is_said_and_a_larger_one_continues_the_same_training(tmp_path, corpus):
    short, long = tmp_path / "short", tmp_path / "long"
    train(config(corpus, "train.max_steps=20"), short, console=QUIET, progress=False)
    with pytest.raises(InduceError, match=r"reached its budget \(train.max_steps=20.*--max-steps N"):
        resume(short, console=QUIET, progress=False)
    assert read_status(short)["state"] == "finished"
    # killed after its last checkpoint, before its status said finished: resumed, it is finished, nothing trained
    status = json.loads((short / "status.json").read_text())
    (short / "status.json").write_text(json.dumps({**status, "state": "running"}))
    before, evaluated = tensors(short, "last"), figures(short)
    assert resume(short, console=QUIET, progress=False).stop_reason == "max_steps"
    assert read_status(short)["state"] == "finished" and figures(short) == evaluated
    assert all(torch.equal(before[k], v) for k, v in tensors(short, "last").items())
    resume(short, {"max_steps": 35}, console=QUIET, progress=False)
    train(config(corpus, "train.max_steps=35"), long, console=QUIET, progress=False)
    # the evaluation at step 20 changed nothing of the training: the same weights at step 35
    a, b = tensors(short, "last"), tensors(long, "last")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert read_status(short)["stop_reason"] == "max_steps" and read_status(short)["steps"] == 35


def test_evaluations_every_n_steps_do_not_change_the_training(tmp_path, corpus):
    plain, often = tmp_path / "plain", tmp_path / "often"
    train(config(corpus, "train.max_steps=40"), plain, console=QUIET, progress=False)
    train(config(corpus, "train.max_steps=40", "train.eval_every=6"), often, console=QUIET, progress=False)
    a, b = tensors(plain, "last"), tensors(often, "last")
    assert all(torch.equal(a[k], b[k]) for k in a)
    history = lines(often)
    mid = [h for h in history if h.get("mid_epoch")]
    ends = [h for h in history if not h.get("mid_epoch")]
    assert [h["steps"] for h in mid] == [s for s in range(6, 40, 6) if s not in {e["steps"] for e in ends}]
    assert figures(plain) == [{k: v for k, v in h.items() if k not in TIMING_FIELDS} for h in ends]
    # the lines of the learning curves: in order of steps, each with its counters
    assert [h["steps"] for h in history] == sorted(h["steps"] for h in history)
    assert all({"steps", "tokens", "train_cpu_seconds", "valid_ppl", "best"} <= set(h) for h in history)
    assert read_status(often)["epochs_done"] == len(ends)


def test_the_clock_budget_is_kept_evaluations_included_and_flagged(tmp_path, corpus, monkeypatch):
    """Each validation takes 0.8 s here (far more than the steps), and the loss is logged only every 1,000
    steps: the trainer checks the clock after every step and keeps room for the evaluation that follows its
    stop, so the whole run stays within its 3 s budget; the status says the clock stopped it."""
    from induce.training.objectives import StreamLM

    validate = StreamLM.validate

    def slow(self):
        time.sleep(0.8)
        return validate(self)

    monkeypatch.setattr(StreamLM, "validate", slow)
    first_step = []
    result = train(config(corpus, "train.epochs=1000", "train.time_budget=3", "train.dev_f1=false",
                          "train.log_interval=1000"), tmp_path / "run", console=QUIET, progress=False,
                   on_batch=lambda *_: first_step or first_step.append(time.monotonic()))
    elapsed = time.monotonic() - first_step[0]  # (the set-up before the first step is not counted)
    assert result.stop_reason == "time_budget"
    status = read_status(tmp_path / "run")
    assert elapsed <= 3.0 + 0.4 and status["seconds"] <= 3.0 + 0.4, status  # + one step and the checkpoint writes
    assert status["clock_stopped"] is True
    assert status["note"] == f"stopped by the clock after {result.steps:,} steps: these figures depend on the " \
                             "machine's speed"
    assert len(lines(tmp_path / "run")) >= 2  # several evaluations fitted


def test_the_first_evaluation_is_estimated_from_the_training_speed(tmp_path, corpus):
    trainer = Trainer(config(corpus, "train.dev_f1=false"), tmp_path / "unused", console=QUIET, progress=False)
    trainer.ctx = __import__("induce.training.ddp", fromlist=["x"]).init_distributed("cpu")
    from induce.training.setup import build_run

    trainer.parts = build_run(trainer.config, trainer.ctx, corpora_dir=tmp_path, console=QUIET, log=lambda m: None,
                              run_dir=tmp_path / "unused")
    trainer.step_seconds, trainer.step_tokens = 2.0, 1000
    tokens = trainer.parts.objective.validation_tokens()
    assert tokens == trainer.parts.objective.valid_data.numel() > 0
    assert trainer._eval_reserve() == pytest.approx(tokens * 2.0 / 1000)
    trainer.last_eval_seconds = 0.25  # once one is timed, its duration
    assert trainer._eval_reserve() == 0.25


def test_the_run_records_its_thread_count_and_sets_it_back(tmp_path, corpus):
    torch.set_num_threads(2)
    train(config(corpus, "train.max_steps=3", "train.dev_f1=false"), tmp_path / "run", console=QUIET,
          progress=False)
    assert torch.get_num_threads() == 2
    assert load_config_file(tmp_path / "run" / "config.yaml").train.threads == DEFAULT_THREADS


def test_a_slow_first_step_does_not_stop_a_clock_budget(tmp_path, corpus, monkeypatch):
    """On a GPU the first step of an invocation compiles kernels (Triton) and builds the CUDA context: timed as a
    step, it made the expected evaluation longer than the whole budget, and every invocation stopped after one
    step. The first step is left out of the training speed."""
    from induce.training.objectives import StreamLM

    batch = StreamLM.next_batch
    calls = []

    def first_slow(self, loop):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(1.5)  # one-off costs, ~100x a step here
        return batch(self, loop)

    monkeypatch.setattr(StreamLM, "next_batch", first_slow)
    result = train(config(corpus, "train.epochs=1000", "train.time_budget=4", "train.dev_f1=false",
                          "train.log_interval=1000"), tmp_path / "run", console=QUIET, progress=False)
    assert result.stop_reason == "time_budget"
    assert result.steps > 5, result.steps  # before: 1
