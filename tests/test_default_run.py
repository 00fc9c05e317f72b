"""The run the commands use, and the data they use it on: the default run is never a control or a diverged
run and is described; a run is evaluated on the corpus it was trained on (a reproduction's subset corpus
standing for the corpus it was cut from) with the trainer's own perplexity; a folder without ``best`` says
what it holds; a checkpoint copied into another run's folder is refused."""
from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import nltk
import pytest
from rich.console import Console
from typer.testing import CliRunner

from induce.cli.main import app
from induce.config import load_config
from induce.data import locate
from induce.errors import InduceError
from induce.inference.loading import load_run
from induce.inference.runs import describe_run, latest_run
from induce.models.registry import is_control
from induce.training import train
from induce.training.checkpoint import CheckpointError

from helpers import STANDIN, make_corpus

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")
QUIET = Console(quiet=True)


def train_tiny(corpus: Path, run: Path, *overrides: str, **kwargs) -> Path:
    cfg = load_config(STANDIN, overrides=[
        f"data.corpus={corpus}", "data.batch_size=4", "data.bptt=8", "optim.asgd=never", "train.epochs=1",
        "train.device=cpu", "train.dev_f1=false", *overrides,
    ])
    train(cfg, run, console=QUIET, progress=False, **kwargs)
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("default-run")
    corpus = make_corpus(root / "corpora", train=40, valid=6, test=4)
    run = train_tiny(corpus, root / "runs" / "tiny")
    return root, corpus, run


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """An empty working folder without any data: the default corpus there would be the synthetic one."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(locate.ENV_VAR, raising=False)
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "no-nltk-data")])
    return tmp_path


def fake_run(folder: Path, model: str, metrics: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "best.json").write_text(json.dumps({"model_name": model, "metrics": metrics}))
    (folder / "status.json").write_text(json.dumps({"state": "finished", "finished_at": "2024-01-01T00:00:00+00:00"}))
    return folder


def test_the_registry_says_which_models_are_controls():
    assert is_control("palm-rb")
    assert not any(is_control(name) for name in ("palm", "palm-s", "prpn", "onlstm", "rellstm", "no-such-model"))
    result = runner.invoke(app, ["models"])
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert "[control]" in lines["palm-rb"] and "[control]" not in lines["palm"]


def test_default_run_is_never_a_control_or_diverged(tmp_path, runs):
    _, _, real = runs
    folder = tmp_path / "runs"
    shutil.copytree(real, folder / "palm-seed1")
    time.sleep(0.01)
    # newer, finished, but a control and a run that diverged before the trainer stopped such runs
    fake_run(folder / "palm-rb-seed1", "palm-rb", {"epoch": 3, "valid_loss": 5.0, "valid_ppl": 148.4, "dev_f1": 40.6})
    fake_run(folder / "nan-run", "palm", {"epoch": 1, "valid_loss": math.nan, "valid_ppl": math.nan, "dev_f1": 40.6})
    fake_run(folder / "lm-only", "rellstm", {"epoch": 1, "valid_loss": 5.0, "valid_ppl": 148.4})
    assert latest_run(folder, need_parser=True) == folder / "palm-seed1"  # parse, eval, show
    assert latest_run(folder) == folder / "lm-only"  # generate: a language model without a parser will do
    # which run is used is said: folder, model, when, its figures
    text = describe_run(folder / "palm-seed1")
    assert str(folder / "palm-seed1") in text and STANDIN in text and "finished" in text and "valid ppl" in text
    shutil.rmtree(folder / "palm-seed1")
    with pytest.raises(InduceError) as err:
        latest_run(folder, need_parser=True)
    message = str(err.value)
    assert "palm-rb-seed1 (palm-rb is a control" in message and "nan-run (it diverged" in message
    assert "lm-only (rellstm has no parser)" in message and "--checkpoint" in message


def test_parse_says_which_run_it_uses(runs, elsewhere):
    _, _, real = runs
    shutil.copytree(real, elsewhere / "runs" / "tiny")
    time.sleep(0.01)
    fake_run(elsewhere / "results" / "runs" / "palm-rb-seed1", "palm-rb", {"epoch": 1, "valid_loss": 5.0,
                                                                            "valid_ppl": 148.4})
    (elsewhere / "in.txt").write_text("the cat sat\n")
    result = runner.invoke(app, ["parse", "in.txt", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert f"using the latest finished run: {Path('runs') / 'tiny'} ({STANDIN}, finished" in result.output
    assert "palm-rb" not in result.output


def test_an_interrupted_folder_says_what_it_holds(tmp_path, runs):
    _, corpus, _ = runs

    def interrupt(trainer, epoch, batch):
        if batch == 3:
            trainer.interrupt_requested = True

    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train_tiny(corpus, run, on_batch=interrupt)
    assert (run / "last.safetensors").is_file() and not (run / "best.json").exists()
    with pytest.raises(CheckpointError) as err:
        load_run(run, "cpu")
    message = str(err.value)
    assert "interrupted at epoch 1, batch 3" in message and "last.safetensors" in message
    assert f"induce train --resume {run}" in message and f"--checkpoint {run / 'last'}" in message
    assert "missing best.json" not in message
    # what it suggests works: the last weights parse
    (tmp_path / "in.txt").write_text("the cat sat\n")
    result = runner.invoke(app, ["parse", str(tmp_path / "in.txt"), "--checkpoint", str(run / "last"),
                                 "--device", "cpu"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["parse", str(tmp_path / "in.txt"), "--checkpoint", str(run)])
    assert result.exit_code == 2 and "no best checkpoint yet" in result.output


def test_a_checkpoint_copied_from_another_run_is_refused(tmp_path, runs):
    _, corpus, run = runs
    other = train_tiny(corpus, tmp_path / "other", "model.hidden_size=10")
    target = tmp_path / "target"
    shutil.copytree(run, target)
    for name in ("best.json", "best.safetensors"):
        shutil.copyfile(other / name, target / name)  # intact files (their hashes agree), the wrong folder
    with pytest.raises(CheckpointError) as err:
        load_run(target, "cpu")
    message = str(err.value)
    assert str(target / "best.json") in message and str(target / "config.yaml") in message
    assert "model.hidden_size 10 vs 12" in message and "\n" not in message
    load_run(run, "cpu")  # its own folder: fine


def test_eval_uses_the_runs_own_corpus_and_the_trainers_perplexity(runs, elsewhere):
    _, corpus, run = runs
    result = runner.invoke(app, ["eval", "--checkpoint", str(run), "--json", "--device", "cpu", "--no-progress"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["gold"] == f"{corpus}/valid.gold.txt"
    assert f"evaluating on {corpus}, the corpus the run was trained on" in result.stderr
    assert "SYNTHETIC" not in result.output and not (elsewhere / "corpora").exists()
    result = runner.invoke(app, ["eval", "--checkpoint", str(run), "--lm", "--json", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert figures["corpus"] == str(corpus)
    assert figures["perplexity"] == pytest.approx(min(h["valid_ppl"] for h in history), rel=1e-12)
    # a corpus that is gone is a clear error, not another corpus
    moved = Path(str(corpus) + "-moved")
    corpus.rename(moved)
    try:
        result = runner.invoke(app, ["eval", "--checkpoint", str(run), "--json", "--device", "cpu"])
        assert result.exit_code == 2 and "is not there" in result.output and "--corpus" in result.output
    finally:
        moved.rename(corpus)


def test_a_subset_run_is_evaluated_on_the_corpus_it_was_cut_from(tmp_path, runs, elsewhere):
    from induce.reproduce import subset_corpus

    _, corpus, _ = runs
    subset = subset_corpus(corpus, corpus.parent, 30, 3)
    run = train_tiny(subset, tmp_path / "sub-run")
    result = runner.invoke(app, ["eval", "--checkpoint", str(run), "--json", "--device", "cpu", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["gold"] == f"{corpus}/valid.gold.txt"
    assert str(subset) in result.stderr and "first 3 dev sentences" in result.stderr
    # on the subset itself, the trainer's figure exactly
    result = runner.invoke(app, ["eval", "--checkpoint", str(run), "--lm", "--json", "--corpus", str(subset)])
    history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert json.loads(result.stdout)["perplexity"] == pytest.approx(history[-1]["valid_ppl"], rel=1e-12)


def test_show_index_takes_the_sentence_from_the_runs_corpus(runs, elsewhere):
    from induce.data.corpus import PreparedCorpus

    _, corpus, run = runs
    result = runner.invoke(app, ["show", "tree", "--index", "1", "--checkpoint", str(run), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    words = PreparedCorpus(corpus).gold_trees("valid")[1].leaves()
    assert f"sentence 1 of valid of {corpus}" in result.stderr
    assert all(word in result.stdout for word in words)
