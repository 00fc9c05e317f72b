"""`induce leaderboard`: prediction files found in folders (or named by a manifest) and run folders, grouped by
model, scored under several conventions, summarised per model, ensembled, flagged, written as Markdown, JSON
and a figure. The fixtures are tests/data/conventions' predictions, whose figures under kim2019 and li2020 are
the original scripts' (tests/data/conventions/README.md)."""
from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from induce.cli.main import app

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "conventions"
KIM = {"model": 81.08, "rb": 32.43, "lb": 27.03}  # kim2019 corpus F1 (compare_trees.py)
LI = {"model": 84.21, "rb": 31.58, "lb": 26.32}  # li2020 micro F1 (evaluate.py)


def invoke(*args):
    return runner.invoke(app, [*map(str, args), "--no-progress"])


def _layout(root: Path) -> Path:
    """exp/{model/s1,model/s2,branching/right,branching/left,gold}/test.txt, and a file the pattern skips."""
    exp = root / "exp"
    for rel, name in (("model/s1", "pred_model.punct.txt"), ("model/s2", "pred_model.punct.diora.jsonl"),
                      ("branching/right", "pred_rb.punct.txt"), ("branching/left", "pred_lb.punct.txt"),
                      ("gold", "gold.mrg")):
        (exp / rel).mkdir(parents=True)
        shutil.copy(DATA / name, exp / rel / "test.txt")
    (exp / "model" / "s1" / "notes.txt").write_text("not a prediction\n")
    return exp


def _board(tmp_path, *options):
    exp = _layout(tmp_path)
    out = tmp_path / "board"
    result = invoke("leaderboard", exp, "--gold", exp / "gold" / "test.txt", "--pattern", "test.txt",
                    "--convention", "kim2019", "--convention", "li2020", "-o", out, "--resamples", "50", "--json",
                    *options)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), out, result


def test_models_runs_and_their_summaries(tmp_path):
    board, out, result = _board(tmp_path)
    runs = {(r["model"], r["run"]): r for r in board["runs"]}
    assert set(runs) == {("model", "s1"), ("model", "s2"), ("branching", "right"), ("branching", "left")}
    figure = {key: {c: round(r["by_convention"][c]["figure"], 2) for c in ("kim2019", "li2020")}
              for key, r in runs.items()}
    assert figure[("branching", "right")] == {"kim2019": KIM["rb"], "li2020": LI["rb"]}
    assert figure[("branching", "left")] == {"kim2019": KIM["lb"], "li2020": LI["lb"]}
    assert figure[("model", "s1")] == figure[("model", "s2")] == {"kim2019": KIM["model"], "li2020": LI["model"]}
    models = {row["model"]: row["by_convention"] for row in board["models"]}
    assert [row["model"] for row in board["models"]] == ["model", "branching"]  # best first
    branching = models["branching"]["kim2019"]
    values = [runs[("branching", run)]["by_convention"]["kim2019"]["figure"] for run in ("right", "left")]
    assert branching["mean"] == pytest.approx(statistics.fmean(values))
    assert branching["sd"] == pytest.approx(statistics.stdev(values))
    assert (branching["min"], branching["max"]) == (min(values), max(values))
    low, high = branching["ci_mean"]
    assert low <= branching["mean"] <= high and high - low > 0
    assert models["model"]["kim2019"]["sd"] == 0
    # two identical runs ensemble to themselves
    assert models["model"]["kim2019"]["ensemble"] == pytest.approx(models["model"]["kim2019"]["mean"])
    assert set(board["across_models"]["by_convention"]) == {"kim2019", "li2020"}
    for row in board["runs"]:
        lo, hi = row["by_convention"]["kim2019"]["ci"]
        assert lo <= row["by_convention"]["kim2019"]["figure"] <= hi
    assert board["conventions"][0]["label"] == "corpus F1" and board["conventions"][1]["label"] == "micro F1"


def test_flags_where_conventions_differ_by_more_than_a_point(tmp_path):
    board, out, result = _board(tmp_path)
    flagged = {(f["model"], f["run"]): round(f["difference"], 2) for f in board["flags"]}
    assert flagged == {("model", "s1"): round(KIM["model"] - LI["model"], 2),
                       ("model", "s2"): round(KIM["model"] - LI["model"], 2)}  # rb, lb: under a point apart
    board, _, _ = _board(tmp_path / "again", "--flag-above", "5")
    assert board["flags"] == []


def test_markdown_json_and_figure_are_written(tmp_path):
    board, out, result = _board(tmp_path)
    text = (out / "leaderboard.md").read_text()
    assert "## Models" in text and "| model | 2 |" in text and "## Flags" in text and "⚑" in text
    assert json.loads((out / "leaderboard.json").read_text())["models"] == board["models"]
    assert (out / "leaderboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in result.stderr


def test_a_manifest_names_the_models(tmp_path):
    exp = _layout(tmp_path)
    manifest = tmp_path / "models.yaml"
    manifest.write_text("ours: [exp/model/*/test.txt]\nright: exp/branching/right/test.txt\n")
    result = invoke("leaderboard", "--manifest", manifest, "--gold", exp / "gold" / "test.txt", "-o",
                    tmp_path / "out", "--resamples", "20", "--json", "--convention", "kim2019", "--no-ensembles")
    assert result.exit_code == 0, result.output
    board = json.loads(result.stdout)
    assert {(r["model"], r["run"]) for r in board["runs"]} == {("ours", "s1"), ("ours", "s2"), ("right", "right")}
    assert board["across_models"] is None and board["models"][0]["by_convention"]["kim2019"]["ensemble"] is None
    manifest.write_text("ours: [exp/nothing/*.txt]\n")
    result = invoke("leaderboard", "--manifest", manifest, "--gold", exp / "gold" / "test.txt", "-o", tmp_path / "o2")
    assert result.exit_code == 2 and "model 'ours': exp/nothing/*.txt matches no file" in result.output


def test_a_run_folder_is_parsed_as_its_model(tmp_path):
    from helpers import train_tiny_run

    run = train_tiny_run(tmp_path)
    gold = tmp_path / "corpora" / "tiny" / "valid.gold.txt"
    shutil.copytree(run, tmp_path / "runs" / "tiny-2")
    result = invoke("leaderboard", tmp_path / "runs", "--gold", gold, "-o", tmp_path / "out", "--resamples", "20",
                    "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    board = json.loads(result.stdout)
    assert {(r["model"], r["kind"]) for r in board["runs"]} == {("tiny-lstm", "run")}
    assert len(board["runs"]) == 2 and board["models"][0]["by_convention"]["induce"]["sd"] == 0


def test_user_errors(tmp_path):
    exp = _layout(tmp_path)
    gold = exp / "gold" / "test.txt"
    result = invoke("leaderboard", "--gold", gold)
    assert result.exit_code == 2 and "give folders (or files) of predictions, or --manifest" in result.output
    result = invoke("leaderboard", exp, "--gold", gold, "--pattern", "*.jsonl", "-o", tmp_path / "o")
    assert result.exit_code == 2 and "no prediction file (*.jsonl) or run folder found" in result.output
    result = invoke("leaderboard", exp, "--gold", gold, "--pattern", "test.txt", "--figure", "f1", "-o", tmp_path / "o")
    assert result.exit_code == 2 and "--figure f1: choose one of corpus_f1, sentence_f1" in result.output
    result = invoke("leaderboard", exp / "missing", "--gold", gold)
    assert result.exit_code == 2 and "no such file or folder" in result.output


def test_a_file_given_twice_is_one_run(tmp_path):
    """One file under several paths (``a/../a/x``, a symbolic link, a hard link), or given together with a
    folder that holds it, is one run: counted once, with a note naming both paths, never ``x (2)``."""
    import os

    exp = _layout(tmp_path)
    gold = exp / "gold" / "test.txt"
    right = exp / "branching" / "right" / "test.txt"
    (tmp_path / "link.txt").symlink_to(right)
    os.link(right, tmp_path / "hard.txt")
    again = exp / "branching" / ".." / "branching" / "right" / "test.txt"
    result = invoke("leaderboard", right, again, tmp_path / "link.txt", tmp_path / "hard.txt", "--gold", gold,
                    "-o", tmp_path / "one", "--resamples", "20", "--json", "--convention", "kim2019")
    assert result.exit_code == 0, result.output
    board = json.loads(result.stdout)
    assert [(r["model"], r["run"]) for r in board["runs"]] == [("branching", "right")]
    assert board["models"][0]["by_convention"]["kim2019"]["sd"] is None
    for other in (again, tmp_path / "link.txt", tmp_path / "hard.txt"):
        assert f"{other} is the same file as {right}: counted once" in result.stderr
    # a folder given with one of its own files: the file is one of the folder's runs, not one more
    result = invoke("leaderboard", exp, again, "--gold", gold, "--pattern", "test.txt", "-o", tmp_path / "two",
                    "--resamples", "20", "--json", "--convention", "kim2019")
    assert result.exit_code == 0, result.output
    board = json.loads(result.stdout)
    assert sorted((r["model"], r["run"]) for r in board["runs"]) == [
        ("branching", "left"), ("branching", "right"), ("model", "s1"), ("model", "s2")]
    assert {row["model"]: len(row["runs"]) for row in board["models"]} == {"model": 2, "branching": 2}
    assert f"{again} is the same file as {right}: counted once" in result.stderr
    assert board["across_models"]["members"] == 4
    # a link inside a folder searched back to a folder above it: searched once, not once per turn of the loop
    (exp / "model" / "s1" / "up").symlink_to("..")
    result = invoke("leaderboard", exp, "--gold", gold, "--pattern", "test.txt", "-o", tmp_path / "three",
                    "--resamples", "20", "--json", "--convention", "kim2019")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["runs"]) == 4
    assert f"{exp / 'model' / 's1' / 'up'} is the same folder as {exp / 'model'}: searched once" in result.stderr


def test_a_manifest_names_a_file_once_per_model(tmp_path):
    """A manifest naming one file twice for a model counts it once; naming it for two models is refused (a
    run belongs to one model), and so is a file the manifest and a folder given give to different models."""
    exp = _layout(tmp_path)
    gold = exp / "gold" / "test.txt"
    manifest = tmp_path / "models.yaml"
    manifest.write_text("ours: [exp/model/*/test.txt, exp/model/../model/s1/test.txt]\n")
    result = invoke("leaderboard", "--manifest", manifest, "--gold", gold, "-o", tmp_path / "out", "--resamples",
                    "20", "--json", "--convention", "kim2019", "--no-ensembles")
    assert result.exit_code == 0, result.output
    assert sorted(r["run"] for r in json.loads(result.stdout)["runs"]) == ["s1", "s2"]
    assert "is the same file as" in result.stderr and "counted once" in result.stderr
    manifest.write_text("ours: [exp/model/s1/test.txt]\ntheirs: [exp/model/../model/s1/test.txt]\n")
    result = invoke("leaderboard", "--manifest", manifest, "--gold", gold, "-o", tmp_path / "o2")
    assert result.exit_code == 2 and "a run of model 'ours'" in result.output, result.output
    manifest.write_text("ours: [exp/model/s1/test.txt]\n")
    result = invoke("leaderboard", exp / "model", "--manifest", manifest, "--gold", gold, "--pattern", "test.txt",
                    "-o", tmp_path / "o3")
    assert result.exit_code == 2 and "a run of model 'ours'" in result.output, result.output
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()


def _fail_on_png(monkeypatch):
    """Make the figure's write fail half-way with a full disk (the Markdown and JSON are written before it)."""
    import errno

    from matplotlib.figure import Figure

    def full_disk(self, handle, **kwargs):
        handle.write(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)


def test_the_three_files_are_written_all_or_none(tmp_path, monkeypatch):
    """A failure while the figure is written (a full disk) leaves the old leaderboard.md, .json and .png as they
    were, and no new or temporary file; into a new folder, nothing at all."""
    pytest.importorskip("matplotlib")
    _, out, _ = _board(tmp_path)
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    assert sorted(before) == ["leaderboard.json", "leaderboard.md", "leaderboard.png"]
    _fail_on_png(monkeypatch)
    exp = tmp_path / "exp"
    args = [exp, "--gold", exp / "gold" / "test.txt", "--pattern", "test.txt", "--convention", "kim2019",
            "--resamples", "20"]
    result = invoke("leaderboard", *args, "-o", out)
    assert result.exit_code == 2 and "no space left on the device" in result.output, result.output
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before
    result = invoke("leaderboard", *args, "-o", tmp_path / "new" / "board")
    assert result.exit_code == 2 and "no space left on the device" in result.output, result.output
    assert not (tmp_path / "new").exists()


def test_a_manifest_reads_names_and_paths_as_written(tmp_path):
    """The manifest is read as the configs are (decimal numbers, YAML 1.2 words): a model named `on` was the key
    True, and a path `010` the number 8, under YAML 1.1."""
    exp = _layout(tmp_path)
    shutil.copy(exp / "branching" / "right" / "test.txt", tmp_path / "010")
    manifest = tmp_path / "models.yaml"
    manifest.write_text("on: [exp/model/*/test.txt]\nno: 010\n")
    result = invoke("leaderboard", "--manifest", manifest, "--gold", exp / "gold" / "test.txt", "-o",
                    tmp_path / "out", "--resamples", "20", "--json", "--convention", "kim2019", "--no-ensembles")
    assert result.exit_code == 0, result.output
    board = json.loads(result.stdout)
    assert sorted((r["model"], Path(r["path"]).name if r["model"] == "no" else r["run"]) for r in board["runs"]) == [
        ("no", "010"), ("on", "s1"), ("on", "s2")]
def test_a_second_leaderboard_into_a_busy_folder_is_refused_and_a_dead_ones_lock_taken_over(tmp_path):
    """A live leaderboard's lock in ``-o`` (a process of this host): refused at once with one line naming its PID
    and host, nothing written; a lock left by a process that is gone is taken over with a note, and the board
    written and the lock removed."""
    import socket
    import subprocess
    import sys

    exp = _layout(tmp_path)
    out = tmp_path / "board"
    out.mkdir()
    args = ["leaderboard", exp, "--gold", exp / "gold" / "test.txt", "--pattern", "test.txt", "-o", out,
            "--resamples", "20"]

    def lock(pid):
        (out / "leaderboard.lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname(),
                                                          "started_at": "2026-01-01T00:00:00+00:00"}))

    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock(holder.pid)
        result = invoke(*args)
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_code != 0
    assert f"is in use: another leaderboard (PID {holder.pid} on host {socket.gethostname()}" in \
        " ".join(result.output.split())
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert [p.name for p in out.iterdir()] == ["leaderboard.lock"]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lock(gone.pid)
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert f"taking over the lock of a leaderboard that is gone (PID {gone.pid})" in " ".join(result.stderr.split())
    assert sorted(p.name for p in out.iterdir()) == ["leaderboard.json", "leaderboard.md", "leaderboard.png"]
