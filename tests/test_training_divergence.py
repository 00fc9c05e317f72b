"""A run whose loss becomes NaN or infinite stops as *diverged*: a clear error, ``status.json`` says so, a
non-zero exit, no ``best`` written from the broken weights, strict JSON files (``json.loads`` with
``parse_constant`` raising), and it is never the default run. Caught at the early log points, at the
epoch's end and in the validation loss, with and without ``train.cuda_graphs``."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from induce.cli.main import app
from induce.config import load_config
from induce.errors import InduceError
from induce.inference.runs import latest_run
from induce.training import train
from induce.training.trainer import TrainingDiverged

from helpers import STANDIN, make_corpus

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")


def strict_load(text: str):
    """``json.loads`` that refuses NaN / Infinity (they are not JSON)."""
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("diverge") / "corpora", train=40, valid=5, test=5)


def tiny(corpus: Path, *overrides: str):
    return load_config(STANDIN, overrides=[
        f"data.corpus={corpus}", "data.batch_size=4", "data.bptt=8", "optim.asgd=never", "train.epochs=2",
        "train.device=cpu", *overrides,
    ])


def check_diverged(run: Path, where: str) -> dict:
    status = strict_load((run / "status.json").read_text())
    assert status["state"] == "diverged" and status["stop_reason"] == "diverged"
    assert where in status["error"] and "nan" in status["error"].lower()
    for line in (run / "metrics.jsonl").read_text().splitlines():
        strict_load(line)
    return status


@pytest.mark.parametrize("graphs", [False, True])
def test_a_huge_learning_rate_stops_the_run_as_diverged(tmp_path, corpus, graphs):
    run = tmp_path / "run"
    overrides = ["optim.lr=1e30"] + (["train.cuda_graphs=true"] if graphs else [])
    with pytest.raises(TrainingDiverged, match="diverged.*smaller learning rate"):
        train(tiny(corpus, *overrides), run, console=Console(quiet=True), progress=False)
    status = check_diverged(run, "training loss")
    assert status["epoch"] == 1 and status["batch"] == 2  # caught at the first log points, not epochs later
    assert not (run / "best.json").exists()  # nothing selected from broken weights
    with pytest.raises(InduceError, match="no finished run"):
        latest_run(tmp_path)


def train_poisoned(run: Path, corpus: Path, when) -> None:
    """Train (logging only at batches 1, 2, 4, 8 and epoch ends) with the weights set to NaN after the
    batch where ``when(trainer, epoch, batch)`` holds; it must stop as diverged."""
    def poison(trainer, epoch, batch):
        if when(trainer, epoch, batch):
            with torch.no_grad():
                next(trainer.parts.model.parameters()).fill_(math.nan)

    with pytest.raises(TrainingDiverged):
        train(tiny(corpus, "train.log_interval=1000"), run, console=Console(quiet=True), progress=False,
              on_batch=poison)


def test_nan_after_the_early_log_points_is_caught_at_the_epoch_end(tmp_path, corpus):
    """The weights turn NaN after batch 9, past the early log points: the epoch's running sum is what
    catches it (no extra host sync per batch)."""
    train_poisoned(tmp_path / "run", corpus, lambda trainer, epoch, batch: epoch == 1 and batch == 9)
    check_diverged(tmp_path / "run", "training loss nan in epoch 1")
    assert not (tmp_path / "run" / "best.json").exists()


def test_nan_weights_after_the_last_batch_are_caught_by_the_validation_loss(tmp_path, corpus):
    def last_batch_of_epoch_2(trainer, epoch, batch):
        return epoch == 2 and trainer.parts.loop.position >= trainer.parts.objective.train_data.size(1) - 2

    run = tmp_path / "run"
    train_poisoned(run, corpus, last_batch_of_epoch_2)
    check_diverged(run, "validation loss nan after epoch 2")
    # epoch 1 was fine and stays the selected checkpoint; the broken epoch 2 is not recorded
    best = json.loads((run / "best.json").read_text())
    assert best["metrics"]["epoch"] == 1 and math.isfinite(best["metrics"]["valid_ppl"])
    assert [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1]


def test_the_cli_exits_non_zero_with_one_line(tmp_path, corpus):
    result = runner.invoke(app, ["train", "--model", STANDIN, "--corpus", str(corpus), "--out", str(tmp_path / "r"),
                                 "--device", "cpu", "--no-progress", "data.batch_size=4", "data.bptt=8",
                                 "optim.lr=1e30"])
    assert result.exit_code == 2, result.output
    assert "training diverged" in result.output and "Traceback" not in result.output
    assert "finished" not in result.output


def test_strict_json_even_for_a_run_without_a_finite_best(tmp_path, corpus):
    """A finished status carries best_valid_ppl; where none is finite it is written null, not Infinity."""
    from induce.training.run_folder import write_metrics, write_status

    write_status(tmp_path, "finished", best_valid_ppl=math.inf)
    write_metrics(tmp_path, [{"epoch": 1, "valid_ppl": math.nan}])
    assert strict_load((tmp_path / "status.json").read_text())["best_valid_ppl"] is None
    assert strict_load((tmp_path / "metrics.jsonl").read_text())["valid_ppl"] is None
