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
