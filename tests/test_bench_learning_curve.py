"""bench/learning_curve.py: copies of a model along one run, with the training CPU spent, scored at CPU-minute marks.
The copies must not change the run, and each must hold the weights the run had at its step."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from helpers import make_corpus, script_module

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def curve():
    with script_module(REPO / "bench" / "learning_curve.py", "bench_learning_curve") as module:
        yield module


def snap(step: int, cpu: float) -> dict:
    return {"name": f"step-{step:07d}", "step": step, "epoch": 1, "train_cpu_seconds": cpu}


def test_each_mark_takes_the_first_copy_that_reaches_it_and_the_last_copy_is_always_scored(curve):
    snaps = [snap(30, 200.0), snap(10, 50.0), snap(20, 130.0), snap(40, 250.0)]  # out of order on purpose
    picked = curve.pick_snapshots(snaps, [1, 2, 3, 10])
    assert [(mark, s["step"]) for mark, s in picked] == [(1, 20), (3, 30), (4.17, 40)]
    # mark 2 (120 s) is reached first by step 20, already taken for mark 1; mark 10 is past the end
    assert curve.pick_snapshots([], [1]) == []
    assert [s["step"] for _, s in curve.pick_snapshots(snaps, [1, 2, 3, 10], last=False)] == [20, 30]


def train_args(out: Path, corpus: Path, **extra) -> argparse.Namespace:
    values = {"out": out, "profile": "toy", "model": "prpn", "corpus": str(corpus), "every": 5,
              "cpu_minutes": None, "threads": 1}
    values.update(extra)
    return argparse.Namespace(**values)


OVERRIDES = ["train.max_steps=20", "train.dev_f1=false", "train.seed=3", "data.batch_size=4"]


def eval_args(out: Path, corpus: Path) -> argparse.Namespace:
    return argparse.Namespace(out=out, corpus=str(corpus), split="valid", max_length=None, marks="0", marks_only=False)


def model_tensors(path: Path) -> dict:
    return {k: v for k, v in load_file(str(path)).items() if k.startswith("model.")}



def test_steps_pick_the_copies_at_exactly_those_steps_whatever_their_cpu_minutes(curve):
    snaps = [{"step": 10, "train_cpu_seconds": 30}, {"step": 20, "train_cpu_seconds": 70},
             {"step": 30, "train_cpu_seconds": 200}]
    assert [(m, s["step"]) for m, s in curve.pick_steps(snaps, [30, 15, 10])] == [(None, 30), (None, 10)]


def test_each_scored_copy_carries_the_last_validation_perplexity_before_it(curve, tmp_path):
    (tmp_path / "run").mkdir()
    rows = [{"epoch": 1, "steps": 10, "valid_ppl": 300.0}, {"epoch": 2, "steps": 20, "valid_ppl": 200.0},
            {"epoch": 2, "steps": 25, "train_loss": 5.0}]  # a row without a validation
    (tmp_path / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert curve.last_validation(tmp_path, 9) == {}
    assert curve.last_validation(tmp_path, 19) == {"valid_ppl": 300.0, "valid_ppl_step": 10}
    assert curve.last_validation(tmp_path, 30) == {"valid_ppl": 200.0, "valid_ppl_step": 20}

def test_copies_hold_the_run_s_weights_and_do_not_change_the_run(curve, tmp_path):
    from induce.reproduce.profiles import build_run_config, load_profile
    from induce.training import train

    corpus = make_corpus(tmp_path / "corpora", train=60, valid=8, test=4)
    out = tmp_path / "curve"
    curve.cmd_train(train_args(out, corpus), OVERRIDES)
    rows = [json.loads(line) for line in (out / "snaps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [5, 10, 15, 20]
    cpu = [r["train_cpu_seconds"] for r in rows]
    assert all(c > 0 for c in cpu) and cpu == sorted(cpu)
    # the last copy is the run's final weights (no ASGD here, so `best` of the copy is the raw weights)
    last = model_tensors(out / "run" / "last.safetensors")
    copy = model_tensors(out / "snaps" / "step-0000020" / "best.safetensors")
    assert last.keys() == copy.keys() and all((last[k] == copy[k]).all() for k in last)
    # the same config trained without copies ends with the same weights, bit for bit
    config = build_run_config(load_profile("toy"), "prpn", [
        f"data.corpus={corpus}", "train.device=cpu", "train.threads=1", *OVERRIDES])
    train(config, tmp_path / "plain", progress=False)
    plain = model_tensors(tmp_path / "plain" / "last.safetensors")
    assert all((plain[k] == last[k]).all() for k in last)
    # scoring: the first copy at or after each mark, and the last one, with induce eval's figures
    curve.cmd_eval(eval_args(out, corpus))
    scored = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert [r["step"] for r in scored] == [5, 20]
    assert all(0 <= r["sentence_f1"] <= 100 and r["sentences"] > 0 for r in scored)
    # run again: nothing scored twice
    curve.cmd_eval(eval_args(out, corpus))
    assert len((out / "curve.jsonl").read_text().splitlines()) == 2


def test_a_cpu_budget_stops_the_run_resumably_and_the_same_command_goes_on(curve, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "corpora", train=60, valid=8, test=4)
    out = tmp_path / "curve"
    curve.cmd_train(train_args(out, corpus, cpu_minutes=1e-6), OVERRIDES)
    assert "stopped after" in capsys.readouterr().err
    status = json.loads((out / "run" / "status.json").read_text())
    assert status["stop_reason"] == "interrupted"
    first = json.loads((out / "run" / "last.json").read_text())["trainer"]["steps_total"]
    assert first == 1  # the budget is checked after each step
    curve.cmd_train(train_args(out, corpus), OVERRIDES)  # no budget: on to train.max_steps
    assert json.loads((out / "run" / "last.json").read_text())["trainer"]["steps_total"] == 20
    steps = [json.loads(line)["step"] for line in (out / "snaps.jsonl").read_text().splitlines()]
    assert steps == [5, 10, 15, 20]


def test_a_second_eval_of_the_same_scores_is_refused_at_once_and_a_dead_ones_lock_taken_over(curve, tmp_path,
                                                                                               capsys):
    """Two ``eval`` of the same scores into one OUT would append every row twice: while a live process holds the
    lock the second exits at once naming its PID and host; an ``eval`` of other scores is not held up, and a lock
    left by a process that is gone is taken over with a note. (No copies yet: an eval that runs scores nothing.)"""
    import socket
    import subprocess
    import sys

    out = tmp_path / "curve"
    out.mkdir()
    held = []  # the lock files while an eval scores
    original = curve.score_marks
    curve.score_marks = lambda args: held.extend(p.name for p in out.glob("*.lock"))
    try:
        curve.cmd_eval(eval_args(out, "corpora/tiny"))
    finally:
        curve.score_marks = original
    (name,) = held
    assert not (out / name).exists()  # released at the end

    def lock(pid):
        (out / name).write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "started_at": "now"}))

    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock(holder.pid)
        with pytest.raises(SystemExit) as refused:
            curve.cmd_eval(eval_args(out, "corpora/tiny"))
        assert f"is in use: another learning-curve eval of corpora/tiny valid (PID {holder.pid} on host " \
               f"{socket.gethostname()}" in str(refused.value.code)
        other = argparse.Namespace(**{**vars(eval_args(out, "corpora/tiny")), "max_length": 40})
        curve.cmd_eval(other)  # other scores: another lock
    finally:
        holder.kill()
        holder.wait()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lock(gone.pid)
    capsys.readouterr()
    curve.cmd_eval(eval_args(out, "corpora/tiny"))
    assert f"taking over the lock of a learning-curve eval of corpora/tiny valid that is gone (PID {gone.pid})" in \
        capsys.readouterr().err
    assert list(out.iterdir()) == []
