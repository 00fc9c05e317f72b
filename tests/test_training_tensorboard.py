"""train.tensorboard / --tensorboard: event files of loss, perplexity, dev F1, branching and
learning rate in RUN/tensorboard/; a one-line error without the optional package; exact resume holds.

The tests put a recording stand-in for ``torch.utils.tensorboard`` in ``sys.modules`` (the package is
an optional extra, not installed for the tests); with the real package installed, one more test
reads the event files back with TensorBoard's own reader.
"""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from induce.cli.main import app
from induce.config import load_config
from induce.training import load_checkpoint
from induce.training.trainer import TIMING_FIELDS, resume, train

from helpers import make_corpus

runner = CliRunner()
QUIET = Console(quiet=True)
pytestmark = pytest.mark.usefixtures("one_thread")


class RecordingWriter:
    """Stands in for SummaryWriter: keeps what it is given, per folder, in ``RecordingWriter.logs``."""

    logs: dict = {}

    def __init__(self, log_dir, purge_step=None):
        self.log = RecordingWriter.logs.setdefault(log_dir, [])
        self.log.append(("open", purge_step))

    def add_scalar(self, tag, value, step):
        assert isinstance(value, float) and isinstance(step, int)
        self.log.append((tag, value, step))

    def flush(self):
        pass

    def close(self):
        self.log.append(("close",))


@pytest.fixture
def fake_tensorboard(monkeypatch):
    RecordingWriter.logs = {}
    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = RecordingWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    return RecordingWriter.logs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpora"), train=60, valid=6, test=2)


def config(corpus, *extra):
    return load_config("tiny-lstm", overrides=[
        f"data.corpus={corpus}", "data.batch_size=3", "data.bptt=6", "data.variable_bptt=true", "data.bptt_std=2",
        "data.min_bptt=2", "model.dropout=0.3", "train.log_interval=4", "train.epochs=2", "train.device=cpu",
        "train.seed=5", *extra])


def scalars(log: list) -> dict:
    out: dict = {}
    for entry in log:
        if len(entry) == 3:
            out.setdefault(entry[0], []).append((entry[2], entry[1]))
    return out


def history(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_without_the_package_the_run_is_refused_before_it_starts(tmp_path, corpus, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # `import` fails as without the package
    result = runner.invoke(app, ["train", "--model", "tiny-lstm", "--corpus", str(corpus), "--out",
                                 str(tmp_path / "run"), "--tensorboard", "--no-progress"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().splitlines() == [
        "error: train.tensorboard (--tensorboard) needs the tensorboard package: pip install "
        "'induce[tensorboard]' (or pip install tensorboard)"]
    assert not (tmp_path / "run").exists()


def test_event_files_hold_the_metrics_of_every_epoch(tmp_path, corpus, fake_tensorboard):
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", "--model", "tiny-lstm", "--corpus", str(corpus), "--out", str(run),
                                 "--tensorboard", "--no-progress", "data.batch_size=3", "data.bptt=6",
                                 "train.log_interval=4", "train.epochs=2", "train.device=cpu"])
    assert result.exit_code == 0, result.output
    log = fake_tensorboard[str(run / "tensorboard")]
    assert log[0] == ("open", None) and log[-1] == ("close",)
    series = scalars(log)
    records = history(run)
    for key, tag in (("train_loss", "train/loss"), ("train_ppl", "train/perplexity"), ("valid_loss", "valid/loss"),
                     ("valid_ppl", "valid/perplexity"), ("lr", "train/lr"), ("dev_f1", "dev/f1"),
                     ("dev_left_split_pct", "dev/left_split_pct"), ("dev_right_split_pct", "dev/right_split_pct")):
        assert series[tag] == [(record["steps"], pytest.approx(record[key])) for record in records], tag
    running = series["train/running_loss"]
    assert len(running) >= 2 and [step for step, _ in running] == sorted({step for step, _ in running})
    assert running[-1][0] <= records[-1]["steps"]


def test_resume_is_exact_with_tensorboard_and_drops_the_steps_done_again(tmp_path, corpus, fake_tensorboard):
    """A run with event files, killed mid-epoch 2 and resumed, ends with the weights and metrics of an
    uninterrupted run without them; the resumed writer purges from the checkpoint's step."""
    straight = tmp_path / "straight"
    train(config(corpus), straight, console=QUIET, progress=False)
    steps = history(straight)[0]["steps"]

    class Killed(Exception):
        pass

    def kill(trainer, epoch, batch):
        if (epoch, batch) == (2, steps // 2 + 1):
            raise Killed

    run = tmp_path / "run"
    with pytest.raises(Killed):
        train(config(corpus, "train.tensorboard=true", "train.checkpoint_every=2"), run, console=QUIET,
              progress=False, on_batch=kill)
    _, meta = load_checkpoint(run / "last")
    resume(run, console=QUIET, progress=False)
    a, _ = load_checkpoint(straight / "last")
    b, _ = load_checkpoint(run / "last")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a if k.startswith(("model.", "optim.")))
    timing = TIMING_FIELDS
    assert [{k: v for k, v in r.items() if k not in timing} for r in history(straight)] == \
        [{k: v for k, v in r.items() if k not in timing} for r in history(run)]
    log = fake_tensorboard[str(run / "tensorboard")]
    opened = [entry for entry in log if entry[0] == "open"]
    assert opened == [("open", None), ("open", meta["trainer"]["steps_total"])]


def test_force_removes_the_old_runs_event_files(tmp_path, corpus, fake_tensorboard):
    run = tmp_path / "run"
    train(config(corpus, "train.epochs=1", "train.tensorboard=true"), run, console=QUIET, progress=False)
    (run / "tensorboard").mkdir(exist_ok=True)
    (run / "tensorboard" / "events.out.tfevents.old").write_text("old")
    train(config(corpus, "train.epochs=1"), run, console=QUIET, progress=False, force=True)
    assert not (run / "tensorboard").exists()


def test_real_event_files_read_back(tmp_path, corpus):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    train(config(corpus, "train.tensorboard=true"), run, console=QUIET, progress=False)
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    valid = [(event.step, event.value) for event in events.Scalars("valid/perplexity")]
    assert valid == [(record["steps"], pytest.approx(record["valid_ppl"], rel=1e-6)) for record in history(run)]
