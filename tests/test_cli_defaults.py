"""Defaults and folders of the commands: predictions aligned to the default gold say so, `induce reproduce
--out` keeps a user's own files, the CPU-sized commands `induce train` prints run as printed, no `<bool>`
label in `--help`, and `make test DATA=DIR` reads DIR."""
from __future__ import annotations

import shutil
from pathlib import Path

import nltk
import pytest
from typer.testing import CliRunner

from induce.cli.main import app
from induce.data import locate
from induce.data.preprocess import preprocess_tree_files

runner = CliRunner()
CONVENTIONS = Path(__file__).parent / "data" / "conventions"


@pytest.fixture
def in_tmp(monkeypatch, tmp_path):
    """A fresh working folder, no data root named anywhere."""
    monkeypatch.delenv(locate.ENV_VAR, raising=False)
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "no-nltk-data")])
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_predictions_of_another_treebank_without_gold_say_they_were_aligned_to_the_default(in_tmp):
    """`induce ensemble a b` without --gold said only "7 predicted trees but 2 gold trees"."""
    gold = CONVENTIONS / "gold.mrg"
    (in_tmp / "train.mrg").write_text("( (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)) )\n"
                                      "( (S (NP (DT A) (NN dog)) (VP (VBD ran))) )\n")
    preprocess_tree_files({"train": [in_tmp / "train.mrg"], "valid": [in_tmp / "train.mrg"]}, Path("corpora"), "mine")
    sources = [CONVENTIONS / "pred_rb.punct.txt", CONVENTIONS / "pred_lb.punct.txt"]
    hint = ("with no --gold the predictions are aligned to the default gold, corpora/mine/valid.gold.txt, one tree "
            "per sentence: name the treebank they were parsed from with --gold FILE")
    result = runner.invoke(app, ["ensemble", *map(str, sources), "-o", "ens.txt", "--no-progress"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "7 predicted trees but 2 gold trees" in " ".join(result.output.split())
    assert hint in " ".join(result.output.split()), result.output
    scored = runner.invoke(app, ["eval", str(sources[0]), "--no-progress"])
    assert scored.exit_code == 2 and "aligned to the default gold, the valid split of the corpus named above" in \
        " ".join(scored.output.split()), scored.output
    # with the gold named: no hint (the gold was chosen), and with the right one it works
    named = runner.invoke(app, ["ensemble", *map(str, sources), "-o", "ens.txt", "--gold", "train.mrg"])
    assert named.exit_code == 2 and "default gold" not in named.output
    done = runner.invoke(app, ["ensemble", *map(str, sources), "-o", "ens.txt", "--gold", str(gold), "--json"])
    assert done.exit_code == 0, done.output


def test_reproduce_does_not_replace_a_report_of_the_users_own(tmp_path):
    """`induce reproduce --out DIR` replaced DIR/REPORT.md without a word; `induce train --out` refuses a
    folder holding other files, and so does it now, before any work. Its own folders go on."""
    from induce.errors import InduceError
    from induce.reproduce import ReproduceOptions, Reproduction
    from induce.reproduce.pipeline import STEPS_FILE, check_reproduction_folder

    out = tmp_path / "paper"
    out.mkdir()
    (out / "REPORT.md").write_text("# My own notes\n")
    result = runner.invoke(app, ["reproduce", "--profile", "toy", "--out", str(out), "--no-progress"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"--out {out} is not empty and holds no reproduction (REPORT.md)" in " ".join(result.output.split())
    assert (out / "REPORT.md").read_text() == "# My own notes\n" and sorted(p.name for p in out.iterdir()) == [
        "REPORT.md"]
    with pytest.raises(InduceError, match="holds no reproduction"):
        Reproduction(ReproduceOptions(profile="toy", out=out))
    (out / STEPS_FILE).write_text('{"prepare corpus": {"status": "ran"}}')  # a reproduction of ours: continued
    check_reproduction_folder(out)
    for fresh in (tmp_path / "new", tmp_path / "stopped-while-preparing"):
        (fresh / "corpora").mkdir(parents=True)
        check_reproduction_folder(fresh)


def test_every_cpu_sized_command_that_train_prints_runs_as_printed(in_tmp, monkeypatch):
    """The CPU-sized PCFG commands printed `data.curriculum_start=None`, which the override parser refuses.
    Each printed command goes through the command line as typed (shell words, Typer, the config loader and
    its validation) up to the trainer, which is not run."""
    import shlex

    import induce.training
    from induce.models.registry import list_models
    from induce.training.advice import cpu_sized_command

    started = []

    def not_trained(config, run_dir, **kwargs):
        started.append(config)
        from induce.training.trainer import TrainResult

        return TrainResult(run_dir, epochs_done=0, stop_reason="not trained", best_valid_ppl=0.0, best_metric=0.0)

    monkeypatch.setattr(induce.training, "train", not_trained)
    commands = {name: cpu_sized_command(name) for name in list_models()}
    printed = {name: command for name, command in commands.items() if command}
    assert {"cpcfg", "npcfg", "tnpcfg", "palm", "prpn", "onlstm"} <= set(printed)
    for name, command in printed.items():
        words = shlex.split(command)
        assert words[:2] == ["induce", "train"], command
        result = runner.invoke(app, words[1:])
        assert result.exit_code == 0, (command, result.output)
        assert started and started[-1].model_name == name, (command, result.output)
    pcfg = started[list(printed).index("cpcfg")]
    assert pcfg.data.curriculum_start is None and pcfg.data.max_length == 20


def _command_paths(command, path=()):
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _command_paths(sub, (*path, name))


def test_no_flag_shows_a_type_label_in_help():
    """Typer's help table wrote `<bool>` beside every flag (--force, --json, --help ...), as if it took a value."""
    import typer

    paths = list(_command_paths(typer.main.get_command(app)))
    assert ("train",) in paths and ("show", "tree") in paths and len(paths) > 12
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"}, terminal_width=200)
        assert result.exit_code == 0, (path, result.output)
        assert "<bool>" not in result.output and "--help" in result.output, (path, result.output)
    shown = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "200"}, terminal_width=200).output
    assert "<int>" in shown and "--force " in shown  # values keep their labels; flags have none
    assert runner.invoke(app, ["--version"]).output.startswith("induce ")


def test_make_test_passes_data_on_as_induce_data(tmp_path):
    """`make test DATA=DIR` ran pytest without INDUCE_DATA: the real-data tests skipped silently."""
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    if shutil.which("make") is None:
        pytest.skip("no make")
    dry = subprocess.run(["make", "-n", "test", f"DATA={tmp_path}", "PYTHON=python3"], cwd=repo, capture_output=True,
                         text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert f'INDUCE_DATA="{tmp_path}" python3 -m pytest -q -n 2 --dist loadfile' in dry.stdout.splitlines()
    bare = subprocess.run(["make", "-n", "test", "PYTHON=python3"], cwd=repo, capture_output=True, text=True,
                          timeout=60)
    assert "python3 -m pytest -q -n 2 --dist loadfile" in bare.stdout.splitlines()
    one = subprocess.run(["make", "-n", "test", "PYTHON=python3", "PYTEST_WORKERS="], cwd=repo, capture_output=True,
                         text=True, timeout=60)
    assert "python3 -m pytest -q" in [line.strip() for line in one.stdout.splitlines()]


def test_a_corpus_of_one_word_sentences_says_so_to_a_grammar(in_tmp):
    """It said "the train or valid split has no sentence" (the one-word sentences were left out)."""
    (in_tmp / "one.mrg").write_text("".join(f"( (S (NP (NN w{k})) (. .)) )\n" for k in range(6)))
    (in_tmp / "two.mrg").write_text("( (S (NP (DT The) (NN cat)) (VP (VBD sat))) )\n")
    preprocess_tree_files({"train": [in_tmp / "one.mrg"], "valid": [in_tmp / "two.mrg"]}, Path("corpora"), "one")
    result = runner.invoke(app, ["train", "--model", "npcfg", "--corpus", "one", "--out", "run", "--no-progress"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    message = " ".join(result.output.split())
    assert "corpora/one: every sentence of its train split has one word; npcfg learns from sentences of 2 words " \
           "or more" in message, message
    assert not (in_tmp / "run").exists()
