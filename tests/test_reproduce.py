"""`induce reproduce` end to end at toy size (tiny models, one short epoch, a tiny synthetic treebank):
the report and results.json with the papers' tables, figures, skipping of finished steps on a re-run,
continuing an interrupted run, profiles, the subset corpus, and the published figures against the
paper texts (when they are present)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from induce.cli.main import app
from induce.errors import InduceError
from induce.reproduce import list_profiles, load_profile, subset_corpus

from helpers import make_corpus, toy_profile

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """One toy pipeline run (all five models), shared by the tests below."""
    root = tmp_path_factory.mktemp("reproduce")
    corpus = make_corpus(root / "corpora", train=60, valid=12, test=10)
    profile = toy_profile(root / "profile")
    args = ["reproduce", "--profile", str(profile), "--corpus", str(corpus), "--corpora-dir", str(root / "corpora"),
            "--out", str(root / "results"), "--no-progress"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        first = runner.invoke(app, args)
    finally:
        torch.set_num_threads(threads)
    return {"root": root, "out": root / "results", "args": args, "first": first, "corpus": corpus}


def steps(out: Path) -> dict:
    return {step["name"]: step["status"] for step in json.loads((out / "results.json").read_text())["steps"]}


@pytest.mark.slow
def test_pipeline_writes_the_report_tables_and_figures(pipeline):
    result, out = pipeline["first"], pipeline["out"]
    assert result.exit_code == 0, result.output
    statuses = steps(out)
    models = ["prpn", "onlstm", "palm", "palm-s", "palm-rb"]
    for model in models:
        assert statuses[f"train {model} seed 1"] == "ran"
        assert statuses[f"evaluate {model} seed 1"] == "ran"
    # untrained: PaLM-RB (weights do not matter) and PaLM-S (same model as PaLM) are left out
    assert {name.split()[1] for name in statuses if name.startswith("untrained")} == {"prpn", "onlstm", "palm"}
    assert {f"baseline {b}" for b in ("left", "right", "balanced", "random")} <= set(statuses)
    # every step's detail is formatted (a string missing its f once printed "{scores['all'][...]:.1f}")
    details = {step["name"]: step.get("detail", "") for step in json.loads((out / "results.json").read_text())["steps"]}
    assert not [name for name, detail in details.items() if "{" in detail], details

    results = json.loads((out / "results.json").read_text())
    for model in models:
        summary = results["models"][model]["summary"]
        assert summary["perplexity"]["mean"] > 1.0
        for key in ("sentence_f1_all", "sentence_f1_wsj10", "sentence_f1_wsj40", "recall_NP"):
            assert 0.0 <= summary[key]["mean"] <= 100.0
        assert results["models"][model]["seeds"]["1"]["history"], "per-epoch metrics for the curves"
        # the precision each run trained in (the toy profile leaves train.amp off: float32) and the machine's unit
        assert results["models"][model]["seeds"]["1"]["run"]["precision"]["dtype"] == "float32"
    assert "bf16_unit" in results["machine"]
    assert "precision | float32 for every run" in (out / "REPORT.md").read_text()
    # PaLM-RB parses right-branching: its trees equal the right-branching baseline
    rb, right = results["models"]["palm-rb"]["summary"], results["baselines"]["right"]["scores"]["wsj40"]
    assert rb["right_split_pct_wsj40"]["mean"] == 100.0
    assert rb["sentence_f1_wsj40"]["mean"] == pytest.approx(right["sentence_f1"])
    assert results["random_init"]["palm"]["n_models"] == 2
    # the untrained rows come from induce.assess.untrained (as `induce eval --untrained`): inits seeded 1..N
    untrained = json.loads((out / "eval" / "init-palm.test.json").read_text())
    assert untrained["seeds"] == [1, 2] and untrained["model_config"] == results["configs"]["palm"]["model"]
    assert results["random_init"]["palm"]["left_split_pct"]["mean"] == pytest.approx(
        sum(row["left_split_pct"] for row in untrained["per_init"]) / 2)
    gold = results["gold"]["wsj40"]
    assert 0.0 < gold["right_split_pct"] < 100.0
    assert results["published"]["table3"]["rows"]["palm"] == 42.0

    report = (out / "REPORT.md").read_text()
    for heading in ("Read this first", "## Evaluation convention", "## 1. Language modelling (PaLM Table 1 style)",
                    "## 2. Unsupervised parsing, WSJ40 (PaLM Table 3)", "## 3. Branching, WSJ40 (PaLM Table 4)",
                    "## 4. WSJ10, all lengths and per-label recall", "## 5. Figures", "## 6. Steps"):
        assert heading in report
    assert "SYNTHETIC" in report  # the data is said to be synthetic, not PTB
    assert "not comparable 1:1" in report
    assert "| PaLM-U | " in report and "| gold | " in report
    assert re.search(r"\| right-branching \(baseline\) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| 40\.7 \|", report)
    # the papers' conventions, on the same trees: counting the whole-sentence span (always right) raises F1,
    # and ON-LSTM's keeps one-word sentences (F1 = 1 each)
    right_scores = results["baselines"]["right"]["scores"]
    assert right_scores["palm_wsj40"]["sentence_f1"] > right_scores["wsj40"]["sentence_f1"]
    assert right_scores["onlstm_all"]["n_sentences"] >= right_scores["all"]["n_sentences"]
    assert "PaLM's convention" in report and "ON-LSTM's convention" in report
    assert "39.3 ± 10.5" in report  # Table 4's random row, published
    # every embedded figure exists next to the report and is a PNG
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert {"figures/training-curves.png", "figures/branching.png", "figures/example-1.png",
            "figures/attention-palm.png", "figures/distances-onlstm.png", "figures/distances-prpn.png"} <= set(links)
    for link in links:
        assert (out / link).read_bytes()[:8] == PNG
    # the trees of each run are saved one per gold sentence, of each evaluated split
    assert len((out / "eval" / "onlstm-seed1.valid.trees.txt").read_text().splitlines()) == 12
    assert len((out / "eval" / "onlstm-seed1.test.trees.txt").read_text().splitlines()) == 10


@pytest.mark.slow
def test_a_corpus_with_a_test_split_gives_test_figures_of_models_selected_on_dev(pipeline):
    """The corpus has a test split: the final figures are on it, each run's dev figures beside them, every
    figure names its split, and each figure comes from the checkpoint chosen on the monitor (dev) set."""
    out = pipeline["out"]
    results = json.loads((out / "results.json").read_text())
    assert results["split"] == "test"
    assert results["splits"] == {"final": "test", "evaluated": ["valid", "test"], "test_available": True,
                                 "asked": "auto", "selection": "valid",
                                 "monitor_corpus": results["corpus"]["train"]["path"]}
    for model in ("prpn", "onlstm", "palm", "palm-s", "palm-rb"):
        entry = results["models"][model]
        test = json.loads((out / "eval" / f"{model}-seed1.test.json").read_text())
        dev = json.loads((out / "eval" / f"{model}-seed1.valid.json").read_text())
        assert test["split"] == "test" and dev["split"] == "valid"
        assert entry["seeds"]["1"]["scores"] == test["scores"] and entry["dev"]["seeds"]["1"]["scores"] == dev["scores"]
        assert test["scores"]["all"]["n_sentences"] == 10 and dev["scores"]["all"]["n_sentences"] == 12
        # both come from the best checkpoint, chosen by the lowest validation perplexity of the monitor set
        history = entry["seeds"]["1"]["history"]
        chosen = min(history, key=lambda h: h["valid_ppl"])
        assert entry["seeds"]["1"]["run"]["best_epoch"] == chosen["epoch"] == test["run"]["best_epoch"]
        assert test["key"]["weights_sha256"] == dev["key"]["weights_sha256"]
    for kind in ("left", "right"):
        assert (out / "eval" / f"baseline-{kind}.valid.json").is_file()
        assert (out / "eval" / f"baseline-{kind}.test.json").is_file()
    report = (out / "REPORT.md").read_text()
    assert "The figures of ours below are on **test (synthetic treebank)**, unless marked dev" in report
    assert "## 2. Unsupervised parsing, WSJ40 (PaLM Table 3), test (synthetic treebank)" in report
    assert "## Model selection: which checkpoint each figure comes from" in report
    assert "WSJ40 F1, dev (synthetic treebank)" in report and "WSJ40 F1, test (synthetic treebank)" in report


def test_the_final_split_is_test_when_the_corpus_has_one_and_selection_never_reads_it(tmp_path, monkeypatch):
    """Training (and the checkpoint selection in it) reads the training corpus's train and valid splits only,
    even where that corpus holds the test split (a profile without a subset corpus); the evaluation reads test."""
    import induce.training
    from induce.data.corpus import PreparedCorpus

    corpus = make_corpus(tmp_path / "corpora", train=40, valid=8, test=4)
    profile = toy_profile(tmp_path / "profile", models=["palm-rb"], random_init_seeds=0, train_sentences=None,
                          monitor_sentences=None)
    read, training = [], []
    for method in ("lm_sentences", "gold_trees", "nopunct_trees"):
        original = getattr(PreparedCorpus, method)

        def recording(self, split, *args, _original=original, _method=method, **kwargs):
            read.append((bool(training), split))
            return _original(self, split, *args, **kwargs)

        monkeypatch.setattr(PreparedCorpus, method, recording)
    real_train = induce.training.train

    def train(*args, **kwargs):
        training.append(True)
        try:
            return real_train(*args, **kwargs)
        finally:
            training.clear()

    monkeypatch.setattr(induce.training, "train", train)
    result = runner.invoke(app, ["reproduce", "--profile", str(profile), "--corpus", str(corpus), "--out",
                                 str(tmp_path / "out"), "--corpora-dir", str(tmp_path / "corpora"), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert {split for in_training, split in read if in_training} == {"train", "valid"}
    assert ("test" in {split for in_training, split in read if not in_training})
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["split"] == "test" and results["models"]["palm-rb"]["seeds"]["1"]["split"] == "test"
    # --split valid: dev only; --split test on a corpus without one: a clear error
    result = runner.invoke(app, ["reproduce", "--profile", str(profile), "--corpus", str(corpus), "--out",
                                 str(tmp_path / "out"), "--corpora-dir", str(tmp_path / "corpora"), "--no-progress",
                                 "--split", "valid"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "results.json").read_text())["splits"]["evaluated"] == ["valid"]
    report = (tmp_path / "out" / "REPORT.md").read_text()
    assert "**There are no test figures here** (`--split valid` was asked)" in report


@pytest.mark.slow
def test_rerun_skips_finished_steps(pipeline):
    out = pipeline["out"]
    before = (out / "eval" / "palm-seed1.valid.json").stat().st_mtime_ns
    result = runner.invoke(app, pipeline["args"])
    assert result.exit_code == 0, result.output
    statuses = steps(out)
    assert {s for name, s in statuses.items() if name != "report"} == {"skipped"}
    assert statuses["report"] == "ran"
    assert (out / "eval" / "palm-seed1.valid.json").stat().st_mtime_ns == before
    assert "| train palm seed 1 | skipped |" in (out / "REPORT.md").read_text()


@pytest.mark.slow
def test_a_reproduction_of_some_models_keeps_the_others_of_the_folder_in_the_report(pipeline):
    """`induce reproduce --models X` wrote REPORT.md and results.json with X alone (the others' figures
    were left in figures/ only); the report covers every run of the folder whose evaluation is current."""
    out = pipeline["out"]
    before = json.loads((out / "results.json").read_text())
    result = runner.invoke(app, pipeline["args"] + ["--models", "palm-rb"])
    assert result.exit_code == 0, result.output
    assert set(steps(out)) >= {"train palm-rb seed 1", "evaluate palm-rb seed 1"}
    assert "train prpn seed 1" not in steps(out)
    results = json.loads((out / "results.json").read_text())
    assert results["models_order"] == before["models_order"]  # the folder's order, not this invocation's
    for model in before["models_order"]:
        assert results["models"][model]["summary"]["sentence_f1_wsj40"] == before["models"][model]["summary"][
            "sentence_f1_wsj40"]
        assert results["models"][model]["earlier_invocation"] == (model != "palm-rb")
    assert sorted(results["earlier_runs"]) == ["onlstm seed 1", "palm seed 1", "palm-s seed 1", "prpn seed 1"]
    report = (out / "REPORT.md").read_text()
    assert re.search(r"^\| PRPN \| [\d.]+ \|", report, re.M), "PRPN's figures stay in the report"
    assert "runs of earlier invocations" in report and "prpn seed 1" in report


def test_the_report_covers_the_folders_earlier_runs_with_a_current_evaluation(tmp_path):
    """The runs reported: this invocation's, then every run of OUT/runs an earlier invocation left with a current
    evaluation, in the folder's previous report order; a run without one is named as left out, not reported."""
    from types import SimpleNamespace

    from induce.reproduce.results import reported_runs

    for folder in ("prpn-seed1", "palm-seed1", "palm-seed2", "onlstm-seed1", "notamodel-seed1"):
        (tmp_path / "runs" / folder).mkdir(parents=True)
    (tmp_path / "results.json").write_text(json.dumps({"models_order": ["onlstm", "palm", "prpn"]}))
    current = {("prpn", 1), ("palm", 2)}
    repro = SimpleNamespace(out=tmp_path, profile=SimpleNamespace(models=["palm-rb", "palm"], seeds=[1]),
                            current_evaluation=lambda model, seed: (model, seed) in current)
    seeds, left_out = reported_runs(repro)
    assert list(seeds) == ["palm", "prpn", "palm-rb"]
    assert seeds == {"palm": [1, 2], "prpn": [1], "palm-rb": [1]}
    assert left_out == ["onlstm seed 1"]


@pytest.mark.slow
def test_a_results_folder_copied_elsewhere_keeps_its_runs_and_evaluations(pipeline, tmp_path):
    """A copy (file times not kept, as `cp -r` does) run again with one model trains and evaluates nothing: every
    run's evaluation is still current there, and the report keeps the runs of the earlier invocation."""
    import shutil

    copy = tmp_path / "moved"
    shutil.copytree(pipeline["out"], copy, copy_function=shutil.copy)
    args = list(pipeline["args"])
    args[args.index("--out") + 1] = str(copy)
    result = runner.invoke(app, args + ["--models", "palm-rb"])
    assert result.exit_code == 0, result.output
    statuses = steps(copy)
    assert statuses["train palm-rb seed 1"] == "skipped" and statuses["evaluate palm-rb seed 1"] == "skipped"
    results = json.loads((copy / "results.json").read_text())
    assert sorted(results["earlier_runs"]) == ["onlstm seed 1", "palm seed 1", "palm-s seed 1", "prpn seed 1"]
    assert "not reported" not in (copy / "REPORT.md").read_text()


@pytest.mark.slow
def test_interrupted_run_is_continued_and_changed_config_retrained(pipeline):
    out, args = pipeline["out"], pipeline["args"]
    run = out / "runs" / "onlstm-seed1"
    status = json.loads((run / "status.json").read_text())
    status["state"] = "running"  # as if killed after its last checkpoint
    (run / "status.json").write_text(json.dumps(status))
    result = runner.invoke(app, args + ["--models", "onlstm"])
    assert result.exit_code == 0, result.output
    assert steps(out)["train onlstm seed 1"] == "resumed"
    assert json.loads((run / "status.json").read_text())["state"] == "finished"

    # another seed is another run; the finished one is kept
    result = runner.invoke(app, args + ["--models", "onlstm", "--seeds", "2"])
    assert result.exit_code == 0, result.output
    assert steps(out)["train onlstm seed 2"] == "ran"
    assert (out / "runs" / "onlstm-seed1" / "best.json").is_file()


@pytest.mark.slow
def test_a_damaged_checkpoint_is_never_reported_as_finished(pipeline, monkeypatch):
    """A finished run whose best checkpoint no longer verifies is trained again, not skipped; while that
    fails, its row has no figures (the old evaluation file is not shown) and the report says why."""
    import induce.training

    out, args = pipeline["out"], pipeline["args"]
    weights = out / "runs" / "palm-seed1" / "best.safetensors"
    stat = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size and time: only the hash tells

    def no_space(*args, **kwargs):
        raise RuntimeError("no space left on the device (simulated)")

    monkeypatch.setattr(induce.training, "train", no_space)
    result = runner.invoke(app, args + ["--models", "palm"])
    assert result.exit_code == 1, result.output
    statuses = steps(out)
    assert statuses["train palm seed 1"] == "failed" and statuses["evaluate palm seed 1"] == "failed"
    results = json.loads((out / "results.json").read_text())
    palm = results["models"]["palm"]
    assert palm["seeds"] == {} and palm["summary"]["sentence_f1_wsj40"]["mean"] is None
    assert "simulated" in palm["failed_seeds"]["1"]
    report = (out / "REPORT.md").read_text()
    assert re.search(r"^\| PaLM-U \| — \|", report, re.M), "the old figures are not shown"
    assert "Failed steps" in report and "simulated" in report

    monkeypatch.undo()
    result = runner.invoke(app, args + ["--models", "palm"])
    assert result.exit_code == 0, result.output
    statuses = steps(out)
    # Trained again, the run has the same weights bit for bit (seeded, one thread): the evaluation made from them
    # before the damage is current again (its key holds the weights' hash, verified), so it is not repeated.
    assert statuses["train palm seed 1"] == "ran" and statuses["evaluate palm seed 1"] == "skipped"
    palm = json.loads((out / "results.json").read_text())["models"]["palm"]
    assert palm["summary"]["sentence_f1_wsj40"]["mean"] is not None and palm["failed_seeds"] == {}


@pytest.mark.slow
def test_another_out_keeps_the_whole_reproduction_in_it(tmp_path, monkeypatch):
    """`--out DIR` (make reproduce OUT=DIR) puts the corpora it prepares in DIR/corpora, beside DIR/runs;
    the default output keeps ./corpora, where the other commands look."""
    from induce.cli.reproduce import default_corpora_dir

    assert default_corpora_dir(Path("results")) == Path("corpora")
    assert default_corpora_dir(Path("exp")) == Path("exp") / "corpora"
    corpus = make_corpus(tmp_path / "data", train=40, valid=8, test=4)
    profile = toy_profile(tmp_path / "profile", models=["palm-rb"], random_init_seeds=0)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["reproduce", "--profile", str(profile), "--corpus", str(corpus), "--out", "exp",
                                 "--no-progress"])
    assert result.exit_code == 0, result.output
    subset = Path("exp") / "corpora" / "tiny-train300-valid50"
    assert (subset / "meta.json").is_file() and not Path("corpora").exists()
    assert f"corpus: {subset}" in (Path("exp") / "runs" / "palm-rb-seed1" / "config.yaml").read_text()


def test_the_trees_files_hold_every_token_and_every_convention_scores_them(tmp_path, monkeypatch):
    """`induce eval --convention li2020` (or `all`) on a reproduction's trees file failed ("21 leaves but 22
    words"): it held the default convention's words only. Now every token (punctuation attached), which the
    default convention projects back to the figures the reproduction reported."""
    from induce.data.preprocess import preprocess_tree_files

    gold = Path(__file__).parent / "data" / "conventions" / "gold.mrg"
    corpus = preprocess_tree_files({"train": [gold], "valid": [gold]}, tmp_path / "corpora", "punct")
    profile = toy_profile(tmp_path / "profile", models=["palm-rb"], random_init_seeds=0)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["reproduce", "--profile", str(profile), "--corpus", str(corpus), "--out", "exp",
                                 "--no-progress"])
    assert result.exit_code == 0, result.output
    trees = Path("exp") / "eval" / "palm-rb-seed1.valid.trees.txt"
    tokens = [line.split()[-1] for line in (corpus / "valid.gold.txt").read_text().splitlines()]
    assert [line.replace(")", " ").split()[-1] for line in trees.read_text().splitlines()] == [
        token.rstrip(")") for token in tokens]  # the final period is there
    # this corpus has no test split: the figures are on dev, and the report says there are no test figures
    results = json.loads((Path("exp") / "results.json").read_text())
    assert results["split"] == "valid" and results["splits"]["evaluated"] == ["valid"]
    assert not results["splits"]["test_available"]
    assert ("**There are no test figures here** (the corpus has no test split): every figure of ours below is on "
            "**valid split**") in (Path("exp") / "REPORT.md").read_text()
    reported = json.loads((Path("exp") / "eval" / "palm-rb-seed1.valid.json").read_text())["scores"]
    valid = str(corpus / "valid.gold.txt")
    for flags, name in (([], "all"), (["--wsj10"], "wsj10")):
        scored = runner.invoke(app, ["eval", str(trees), "--gold", valid, "--json", "--no-progress", *flags])
        assert scored.exit_code == 0, scored.output
        assert json.loads(scored.stdout)["sentence_f1"] == pytest.approx(reported[name]["sentence_f1"])
    every = runner.invoke(app, ["eval", str(trees), "--gold", valid, "--convention", "all", "--json", "--no-progress"])
    assert every.exit_code == 0, every.output
    assert {row["convention"] for row in json.loads(every.stdout)["results"]} >= {"li2020", "li2020-punct", "kim2019"}


@pytest.mark.slow
def test_missing_test_split_and_unknown_profile_are_clear_errors(pipeline, tmp_path):
    result = runner.invoke(app, ["reproduce", "--profile", "no-such-profile"])
    assert result.exit_code == 2
    assert "unknown profile" in result.output and "cpu" in result.output
    lm_only = tmp_path / "lm"
    lm_only.mkdir()
    (lm_only / "meta.json").write_text(json.dumps({"name": "lm", "has_trees": False}))
    result = runner.invoke(app, ["reproduce", "--profile", "toy", "--corpus", str(lm_only),
                                 "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "treebank" in result.output
    bad = toy_profile(tmp_path / "bad")
    (bad / "profile.yaml").write_text((bad / "profile.yaml").read_text() + "epochz: 3\n")
    with pytest.raises(InduceError, match="epochz: unknown key"):
        load_profile(bad)


def test_a_finished_run_stays_current_when_only_its_checkpoint_interval_changes():
    from induce.reproduce.steps import _comparable

    base = {"model": {"h": 4}, "optim": {"lr": 0.001}, "train": {"seed": 1, "checkpoint_every": 50}}
    moved = {**base, "train": {"seed": 1, "checkpoint_every": 500}}
    other_lr = {**base, "optim": {"lr": 0.002}}
    assert _comparable(base) == _comparable(moved)
    assert _comparable(base) != _comparable(other_lr)


def test_profiles_are_valid():
    assert {"cpu", "cpu-long", "gpu", "paper", "toy"} <= set(list_profiles())
    cpu = load_profile("cpu")
    # the default profile stops by optimiser steps (the same training on every machine), one number per model,
    # and trains two models at a time
    assert cpu.time_per_model is None and cpu.jobs == 2 and cpu.threads == 1
    assert all(isinstance(cpu.step_budget(m), int) and cpu.step_budget(m) > 0 for m in cpu.models)
    assert set(cpu.steps_per_model) == set(cpu.models)
    assert load_profile("paper").random_init_seeds == 25
    from induce.reproduce import build_run_config

    for name in list_profiles():
        profile = load_profile(name)
        for model in profile.models:
            config = build_run_config(profile, model, ["train.seed=3"])
            assert config.model_name == model and config.train.seed == 3


def test_a_profile_extends_another_key_by_key_and_layer_by_layer(tmp_path):
    from induce.reproduce import build_run_config

    base = toy_profile(tmp_path / "base", steps_per_model={"prpn": 20, "onlstm": 30}, seeds=[1])
    (base / "prpn.yaml").write_text("model:\n  emb_size: 12\n  hidden_size: 14\n")
    longer = tmp_path / "longer"
    longer.mkdir()
    (longer / "profile.yaml").write_text("extends: base\nseeds: [1, 2]\nsteps_per_model:\n  prpn: 50\n")
    (longer / "prpn.yaml").write_text("model:\n  hidden_size: 16\n")
    profile = load_profile(longer)
    plain = load_profile(base)
    assert profile.name == "longer" and profile.base_folders == [base]
    # keys: the base's, this file's over them, mappings merged key by key
    assert profile.seeds == [1, 2] and profile.models == plain.models
    assert profile.step_budget("prpn") == 50 and profile.step_budget("onlstm") == 30
    # model layers: the base folder's file, then this folder's
    config = build_run_config(profile, "prpn", [])
    assert config.model["emb_size"] == 12 and config.model["hidden_size"] == 16
    assert build_run_config(profile, "onlstm", []).to_dict() == build_run_config(plain, "onlstm", []).to_dict()
    # a base that does not exist, and a loop, are errors naming the file
    (longer / "profile.yaml").write_text("extends: nowhere\n")
    with pytest.raises(InduceError, match=r"longer.*profile\.yaml: extends: unknown profile 'nowhere'"):
        load_profile(longer)
    (longer / "profile.yaml").write_text("extends: longer\n")
    with pytest.raises(InduceError, match="extends itself"):
        load_profile(longer)


def test_the_long_cpu_profile_is_the_cpu_profile_with_more_seeds_and_longer_prpn_and_palm_runs():
    from induce.reproduce import build_run_config

    cpu, long = load_profile("cpu"), load_profile("cpu-long")
    assert long.models == cpu.models and len(long.seeds) >= 4 and long.jobs == cpu.jobs
    for model in cpu.models:
        assert build_run_config(long, model, []).model == build_run_config(cpu, model, []).model
        assert long.cpu_minutes[model] > 0
        longer = model.startswith("palm") or model == "prpn"  # ON-LSTM peaks early; the grammars have levelled
        assert (long.step_budget(model) > cpu.step_budget(model)) == longer
        assert (long.step_budget(model) == cpu.step_budget(model)) != longer


def test_subset_corpus_keeps_the_vocabulary_and_is_reused(tmp_path):
    from induce.data.corpus import PreparedCorpus

    source = make_corpus(tmp_path / "corpora", train=30, valid=10, test=5)
    subset = subset_corpus(source, tmp_path / "corpora", 7, 4)
    small, full = PreparedCorpus(subset), PreparedCorpus(source)
    assert small.splits == ["train", "valid"]
    assert small.vocab.itos == full.vocab.itos
    assert small.lm_sentences("train") == full.lm_sentences("train")[:7]
    assert [t.leaves() for t in small.gold_trees("valid")] == [t.leaves() for t in full.gold_trees("valid")[:4]]
    assert small.meta["splits"]["train"]["lm_sentences"] == 7
    stamp = (subset / "meta.json").stat().st_mtime_ns
    assert subset_corpus(source, tmp_path / "corpora", 7, 4) == subset
    assert (subset / "meta.json").stat().st_mtime_ns == stamp


def _papers_dir():
    candidates = [os.environ.get("INDUCE_PAPERS", ""), Path(__file__).resolve().parents[1] / "shared" / "papers",
                  Path(__file__).resolve().parents[2] / "shared" / "papers"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "palm-peng-schwartz-smith-2019.txt").is_file():
            return Path(candidate)
    pytest.skip("the paper texts (shared/papers) are not available")


def test_published_figures_are_the_paper_texts():
    from induce.report.published import PAPER_FILE, PUBLISHED

    text = (_papers_dir() / PAPER_FILE).read_text(encoding="utf-8")
    table3 = text[text.index("Right Branching"): text.index("Table 3:")]
    rows = dict(re.findall(r"^[^\w]*([A-Za-z-]+(?: Branching)?)\s+([\d.]+)$", table3, re.M))
    published = PUBLISHED["table3"]["rows"]
    assert float(rows["Right Branching"]) == published["right"]
    assert float(rows["PRPN"]) == published["prpn"]
    assert float(rows["PaLM-U"]) == published["palm"]
    assert float(rows["DIORA"]) == published["DIORA"]
    table4 = text[text.index("% Left Splits"): text.index("Table 4:")]
    numbers = [float(x) for x in re.findall(r"\d+\.\d+", table4)]
    t4 = PUBLISHED["table4"]
    assert numbers == [t4["random"]["left"], t4["random"]["left_std"], t4["random"]["right"], t4["random"]["right_std"],
                       t4["palm"]["left"], t4["palm"]["right"], t4["gold"]["left"], t4["gold"]["right"]]
    assert "25 differently randomly initialized PaLM models" in text
    # the supervision finding is the paper's sentence (in the second extraction of its text)
    second = (_papers_dir() / PAPER_FILE.replace(".txt", ".second-extraction.txt")).read_text(encoding="utf-8")
    assert PUBLISHED["table1"]["supervision"] in second
    # Table 1's values are not in the text: the report must not quote any
    assert PUBLISHED["table1"]["rows"] == {}


@pytest.mark.slow
def test_chunked_training_pauses_and_the_same_command_continues(tmp_path, monkeypatch):
    """A chunk's end pauses the run in training (resumable checkpoint), leaves the rest pending,
    exits with status 75; the next invocation continues the paused run and finishes."""
    from induce.cli.reproduce import INCOMPLETE_EXIT
    from induce.reproduce.pipeline import Reproduction

    corpus = make_corpus(tmp_path / "corpora", train=60, valid=12, test=6)
    profile = toy_profile(tmp_path / "profile", models=["onlstm", "palm"], random_init_seeds=0)
    args = ["reproduce", "--profile", str(profile), "--corpus", str(corpus), "--corpora-dir", str(tmp_path / "corpora"),
            "--out", str(tmp_path / "results"), "--no-progress", "--chunk", "1h"]
    calls = iter([1e-3])  # the first run gets a sliver of the chunk, then the chunk is over
    monkeypatch.setattr(Reproduction, "chunk_left", lambda self: next(calls, -1.0))
    result = runner.invoke(app, args)
    assert result.exit_code == INCOMPLETE_EXIT, result.output
    statuses = steps(tmp_path / "results")
    assert statuses["train onlstm seed 1"] == "paused"
    assert statuses["train palm seed 1"] == "pending"
    assert statuses["evaluate onlstm seed 1"] == "pending" and statuses["evaluate palm seed 1"] == "pending"
    assert json.loads((tmp_path / "results" / "runs" / "onlstm-seed1" / "reproduce.json").read_text())["paused"]
    assert "Not finished yet" in (tmp_path / "results" / "REPORT.md").read_text()

    monkeypatch.setattr(Reproduction, "chunk_left", lambda self: None)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    statuses = steps(tmp_path / "results")
    assert statuses["train onlstm seed 1"] == "resumed" and statuses["train palm seed 1"] == "ran"
    assert statuses["evaluate onlstm seed 1"] == "ran"
    assert not json.loads((tmp_path / "results" / "runs" / "onlstm-seed1" / "reproduce.json").read_text())["paused"]


def test_auto_profile_is_gpu_with_cuda_else_cpu(monkeypatch):
    from induce.reproduce import resolve_profile_name

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_profile_name("auto") == "gpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_profile_name("auto") == "cpu"
    assert resolve_profile_name("toy") == "toy"
    gpu = load_profile("gpu")
    total = sum(gpu.time_budget(m) for m in gpu.models)
    assert total <= 20 * 60  # training's share of the 25 minutes (induce/configs/gpu/README.md)
    assert gpu.time_budget("onlstm") == max(gpu.time_budget(m) for m in gpu.models)
    assert load_profile("paper").chunk_seconds() is not None


def test_a_runs_summary_reads_mid_epoch_evaluations_as_evaluations_not_epochs(tmp_path):
    """``metrics.jsonl`` with evaluations every ``train.eval_every`` steps (``mid_epoch`` lines, the whole run's
    ``steps`` / ``tokens`` / ``train_cpu_seconds`` on every line): the epochs are the epoch ends, the tokens and
    CPU seconds the last line's, and the checkpoint chosen an evaluation inside an epoch, named by its step."""
    from induce.models.registry import get_model_class
    from induce.reproduce.results import run_summary

    lines = [
        {"epoch": 1, "mid_epoch": True, "batch": 50, "steps": 50, "tokens": 900, "train_cpu_seconds": 10.0,
         "dev_f1": 20.0, "valid_ppl": 700.0, "best": True},
        {"epoch": 1, "steps": 80, "tokens": 1400, "train_cpu_seconds": 16.0, "dev_f1": 35.0, "valid_ppl": 650.0,
         "best": True, "train_tokens": 1400, "epoch_seconds": 20.0},
        {"epoch": 2, "mid_epoch": True, "batch": 50, "steps": 130, "tokens": 2300, "train_cpu_seconds": 26.0,
         "dev_f1": 41.0, "valid_ppl": 640.0, "best": True},
        {"epoch": 2, "steps": 160, "tokens": 2800, "train_cpu_seconds": 32.0, "dev_f1": 38.0, "valid_ppl": 660.0,
         "train_tokens": 1400, "epoch_seconds": 21.0, "partial": True}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    npcfg = get_model_class("npcfg")
    summary = run_summary(tmp_path, npcfg(7, npcfg.Config(nt_states=2, t_states=3, state_dim=8)))
    assert (summary["epochs"], summary["complete_epochs"], summary["evaluations"]) == (2, 1, 4)
    assert (summary["train_tokens"], summary["train_cpu_seconds"], summary["steps"]) == (2800, 32.0, 160)
    assert summary["train_seconds"] == 41.0
    assert (summary["best_epoch"], summary["best_steps"], summary["best_mid_epoch"]) == (2, 130, True)
    assert (summary["best_dev_f1"], summary["peak_dev_f1"], summary["last_dev_f1"]) == (41.0, 41.0, 38.0)
    assert summary["monitor_valid_ppl"] == 640.0 and not summary["perplexity_bound"]


def test_models_of_all_train_sentences_train_on_every_sentence_and_the_report_says_so(tmp_path):
    """A profile that trains on the first N sentences gives the models of `all_train_sentences` every training
    sentence (the same monitor sentences of dev); the others keep the subset; results.json and the report say
    which model read which corpus."""
    from induce.config import load_config_file
    from induce.data.corpus import PreparedCorpus

    corpus = make_corpus(tmp_path / "corpora", train=40, valid=8, test=4)
    profile = toy_profile(tmp_path / "profile", models=["palm-rb", "prpn"], random_init_seeds=0,
                          train_sentences=10, monitor_sentences=5, all_train_sentences=["prpn"], steps_per_model=2)
    out = tmp_path / "out"
    result = runner.invoke(app, ["reproduce", "--profile", str(profile), "--corpus", str(corpus), "--out", str(out),
                                 "--corpora-dir", str(tmp_path / "corpora"), "--no-progress"])
    assert result.exit_code == 0, result.output
    corpora = {model: PreparedCorpus(load_config_file(out / "runs" / f"{model}-seed1" / "config.yaml").data.corpus)
               for model in ("palm-rb", "prpn")}
    assert [len(corpora[m].lm_sentences("train")) for m in ("palm-rb", "prpn")] == [10, 40]
    assert [len(corpora[m].lm_sentences("valid")) for m in ("palm-rb", "prpn")] == [5, 5]
    results = json.loads((out / "results.json").read_text())
    assert [entry["models"] for entry in results["corpus"]["train_other"].values()] == [["prpn"]]
    report = (out / "REPORT.md").read_text()
    assert "on the first 10 training sentences (PRPN: on every training sentence)" in report
    assert "training data of PRPN" in report


def test_a_profile_refuses_an_unknown_model_in_all_train_sentences(tmp_path):
    profile = toy_profile(tmp_path / "profile", all_train_sentences=["nosuch"])
    result = runner.invoke(app, ["reproduce", "--profile", str(profile), "--out", str(tmp_path / "out"),
                                 "--no-progress"])
    assert result.exit_code == 2 and "nosuch" in result.output and "Traceback" not in result.output


def test_the_reproductions_own_values_are_not_read_as_yaml():
    """The corpus folder, seed and budgets the reproduction sets go in typed: a folder `runs #1` was cut at its
    `#` (a YAML comment) and a folder `2024` became a number when written as `data.corpus=...` text."""
    from induce.reproduce import build_run_config

    profile = load_profile("toy")
    for folder in ("runs #1/corpora/x", "2024", "a: b", "010"):
        config = build_run_config(profile, "prpn", [], {"data.corpus": folder, "train.seed": 7})
        assert config.data.corpus == folder and config.train.seed == 7
# ------------------------------------------------------------------------------------------- the folder's lock
def _lock(out: Path, pid: int) -> None:
    import socket

    out.mkdir(parents=True, exist_ok=True)
    (out / "reproduce.lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname(),
                                                    "started_at": "2026-01-01T00:00:00+00:00"}))


def test_a_second_reproduction_into_a_busy_out_is_refused_at_once_naming_the_first(tmp_path):
    """A live reproduction's lock in ``--out`` (a process of this host): the second refuses before any step, with
    one line naming the first's PID and host, and leaves the lock as it was."""
    import socket
    import subprocess
    import sys

    corpus = make_corpus(tmp_path / "corpora", train=20, valid=4, test=4)
    profile = toy_profile(tmp_path / "profile", models=["palm-rb"], random_init_seeds=0)
    out = tmp_path / "results"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _lock(out, holder.pid)
        before = (out / "reproduce.lock").read_text()
        result = runner.invoke(app, ["reproduce", "--profile", str(profile), "--corpus", str(corpus),
                                     "--corpora-dir", str(tmp_path / "corpora"), "--out", str(out), "--no-progress"])
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_code != 0
    message = " ".join(result.output.split())
    assert f"is in use: another reproduction (PID {holder.pid} on host {socket.gethostname()}" in message
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert sorted(p.name for p in out.iterdir()) == ["reproduce.lock"]  # nothing of a step
    assert (out / "reproduce.lock").read_text() == before


def test_a_reproduction_holds_its_out_lock_while_it_runs_and_a_dead_ones_is_taken_over(tmp_path):
    """Two reproductions into one ``--out``: the second, started while the first runs (after its first step),
    is refused; the first finishes and removes its lock. A lock left by a process that is gone is taken over with
    a note."""
    import subprocess
    import sys

    from rich.console import Console

    from induce.reproduce import ReproduceOptions, Reproduction

    corpus = make_corpus(tmp_path / "corpora", train=20, valid=4, test=4)
    profile = toy_profile(tmp_path / "profile", models=["palm-rb"], random_init_seeds=0)
    out = tmp_path / "results"
    args = ["reproduce", "--profile", str(profile), "--corpus", str(corpus), "--corpora-dir", str(tmp_path / "corpora"),
            "--out", str(out), "--no-progress"]
    second = []

    def start_another(record):
        if not second:
            second.append(runner.invoke(app, args))

    options = ReproduceOptions(profile=str(profile), corpus=corpus, corpora_dir=tmp_path / "corpora", out=out,
                               progress=False)
    quiet = Console(quiet=True)
    Reproduction(options, console=quiet, on_step=start_another).run()
    assert second[0].exit_code != 0 and f"PID {os.getpid()}" in " ".join(second[0].output.split())
    assert (out / "REPORT.md").is_file() and not (out / "reproduce.lock").exists()

    from induce.reproduce.pipeline import ReproductionLock

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _lock(out, gone.pid)
    notes = []
    with ReproductionLock(out, note=notes.append) as lock:
        assert json.loads((out / "reproduce.lock").read_text())["pid"] == os.getpid() and lock.held
    assert notes == [f"{out}: taking over the lock of a reproduction that is gone (PID {gone.pid})"]
    assert not (out / "reproduce.lock").exists()
