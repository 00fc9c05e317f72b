"""The run folder: concurrent trainings are refused (lock with the PID; a dead owner's lock is taken
over with a note), finished runs and foreign folders are not overwritten without --force, and SIGINT
(a real signal to a real `induce train` process) leaves a resumable, interrupted run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from induce.cli.main import app
from induce.config import load_config
from induce.training.run_folder import LOCK_FILE, RunFolderError, RunLock
from induce.training.trainer import read_status, resume, train

from helpers import STANDIN, child_env, make_corpus

QUIET = Console(quiet=True)
runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")
TINY = ["data.batch_size=4", "data.eval_batch_size=3", "data.bptt=8", "optim.asgd=never", "train.epochs=1",
        "train.log_interval=4", "train.device=cpu", "train.dev_f1=false"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpora"), train=40, valid=6, test=2)


def tiny(corpus, *extra):
    return load_config(STANDIN, overrides=[f"data.corpus={corpus}", *TINY, *extra])


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def write_lock(run_dir: Path, pid: int, host: str | None = None) -> None:
    import socket

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / LOCK_FILE).write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(),
                                                 "started_at": "2026-01-01T00:00:00+00:00"}))


def test_a_second_training_into_a_busy_folder_is_refused(tmp_path, corpus):
    run = tmp_path / "run"
    refused = []

    def second_training(trainer, epoch, batch):
        if batch == 1:
            with pytest.raises(RunFolderError) as err:
                train(tiny(corpus), run, console=QUIET, progress=False, force=True)
            refused.append(str(err.value))
            with pytest.raises(RunFolderError):
                resume(run, console=QUIET, progress=False)

    train(tiny(corpus), run, console=QUIET, progress=False, on_batch=second_training)
    assert refused and f"PID {os.getpid()}" in refused[0] and f"induce train --resume {run}" in refused[0]
    assert read_status(run)["state"] == "finished"
    assert not (run / LOCK_FILE).exists()  # released at the end


def test_a_live_lock_is_refused_and_a_dead_ones_is_taken_over(tmp_path, corpus):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_lock(tmp_path / "busy", sleeper.pid)
        with pytest.raises(RunFolderError, match=f"PID {sleeper.pid}.*wait for it to end or stop it"):
            train(tiny(corpus), tmp_path / "busy", console=QUIET, progress=False)
    finally:
        sleeper.kill()
        sleeper.wait()
    write_lock(tmp_path / "other-host", 1, host="elsewhere.invalid")
    with pytest.raises(RunFolderError, match="host elsewhere.invalid"):
        RunLock(tmp_path / "other-host").acquire()
    # kill -9 leaves the lock behind: the next run takes it over and says so
    stale = tmp_path / "stale"
    write_lock(stale, dead_pid())
    notes = []
    with RunLock(stale, note=notes.append) as lock:
        assert json.loads((stale / LOCK_FILE).read_text())["pid"] == os.getpid() and lock.held
    assert notes and "taking over the lock" in notes[0] and not (stale / LOCK_FILE).exists()


def test_finished_runs_are_not_overwritten_without_force(tmp_path, corpus):
    run = tmp_path / "run"
    train(tiny(corpus), run, console=QUIET, progress=False)
    first = (run / "best.safetensors").read_bytes()
    with pytest.raises(RunFolderError, match=r"already holds a run \(state: finished\).*--resume.*--force"):
        train(tiny(corpus, "train.seed=9"), run, console=QUIET, progress=False)
    assert (run / "best.safetensors").read_bytes() == first
    train(tiny(corpus, "train.seed=9"), run, console=QUIET, progress=False, force=True)
    assert (run / "best.safetensors").read_bytes() != first
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1  # the old run's lines are gone


def test_cli_refuses_finished_runs_and_foreign_folders(tmp_path, corpus, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["train", "--model", STANDIN, "--corpus", str(corpus), "--no-progress", "--device", "cpu",
            *[a for a in TINY if not a.startswith("train.device")]]
    assert runner.invoke(app, [*args, "--out", "runs/a"]).exit_code == 0
    result = runner.invoke(app, [*args, "--out", "runs/a"])
    assert result.exit_code == 2
    assert "runs/a already holds a run (state: finished)" in result.output
    assert "induce train --resume runs/a --max-epochs N" in result.output and "--force" in result.output
    assert runner.invoke(app, [*args, "--out", "runs/a", "--force"]).exit_code == 0
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "thesis.tex").write_text("precious")
    result = runner.invoke(app, [*args, "--out", "notes"])
    assert result.exit_code == 2 and "not empty and is not a run folder (thesis.tex)" in result.output
    result = runner.invoke(app, [*args, "--out", "notes", "--force"])
    assert result.exit_code == 0 and (notes / "thesis.tex").read_text() == "precious"
    (tmp_path / "file").write_text("x")
    result = runner.invoke(app, [*args, "--out", "file"])
    assert result.exit_code == 2 and "file: a file, not a run folder" in result.output
    result = runner.invoke(app, ["train", "--resume", "runs/a", "--force"])
    assert result.exit_code == 2 and "--force does not apply" in result.output


@pytest.mark.slow
def test_sigint_writes_a_checkpoint_and_prints_the_resume_command(tmp_path, corpus):
    run = tmp_path / "run"
    env = child_env()
    command = [sys.executable, "-m", "induce.cli.main", "train", "--model", "onlstm", "--corpus", str(corpus),
               "--out", str(run), "--device", "cpu", "--no-progress", "--max-epochs", "1000",
               "model.emb_size=8", "model.hidden_size=8", "model.chunk_size=4", "data.batch_size=2",
               "data.bptt=4", "train.dev_f1=false", "train.log_interval=1000"]
    child = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (run / "last.json").is_file():  # the end of epoch 1: training is under way
            assert child.poll() is None and time.monotonic() < deadline, "training did not start"
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 130, err[-2000:]
    assert f"continue with: induce train --resume {run}" in err
    status = read_status(run)
    assert status["state"] == "interrupted" and status["stop_reason"] == "interrupted"
    assert not (run / LOCK_FILE).exists()
    _, meta = __import__("induce.training", fromlist=["load_checkpoint"]).load_checkpoint(run / "last")
    assert (meta["trainer"]["epoch"], meta["trainer"]["batch"]) == (status["epoch"], status["batch"])
    # the printed command continues the run (here to the end of the interrupted epoch)
    done = subprocess.run([sys.executable, "-m", "induce.cli.main", "train", "--resume", str(run), "--no-progress",
                           "--max-epochs", str(status["epoch"])], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert read_status(run)["state"] == "finished"
    assert len((run / "metrics.jsonl").read_text().splitlines()) == status["epoch"]


@pytest.mark.slow
def test_kill_9_mid_epoch_then_resume_equals_an_uninterrupted_run(tmp_path, corpus):
    """A real process killed with SIGKILL after a mid-epoch checkpoint: the stale lock is taken over
    and the resumed run (another process) ends with the weights of an uninterrupted run, bit for bit."""
    import torch

    from induce.training import load_checkpoint

    run = tmp_path / "killed"
    overrides = ["model.emb_size=8", "model.hidden_size=8", "model.chunk_size=4", "data.batch_size=2",
                 "data.bptt=5", "data.variable_bptt=true", "data.bptt_std=2", "data.min_bptt=2",
                 "train.dev_f1=false", "train.checkpoint_every=3", "train.log_interval=1000", "train.seed=4"]
    env = child_env()
    base = [sys.executable, "-m", "induce.cli.main", "train", "--no-progress"]
    child = subprocess.Popen([*base, "--model", "onlstm", "--corpus", str(corpus), "--out", str(run), "--device",
                              "cpu", "--max-epochs", "2", *overrides], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (run / "last.json").is_file():  # the first mid-epoch checkpoint (epoch 1, batch 3)
            assert child.poll() is None and time.monotonic() < deadline, "training did not start"
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        child.kill()
    _, meta = load_checkpoint(run / "last")
    assert meta["trainer"]["epoch"] == 1 and meta["trainer"]["batch"] > 0  # mid-epoch
    assert read_status(run)["state"] == "running" and (run / LOCK_FILE).is_file()
    done = subprocess.run([*base, "--resume", str(run)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "taking over the lock of a training that is gone" in done.stderr
    straight = tmp_path / "straight"
    cfg = load_config("onlstm", overrides=[*overrides, f"data.corpus={corpus}", "train.epochs=2", "train.device=cpu"])
    train(cfg, straight, console=QUIET, progress=False)
    a, _ = load_checkpoint(straight / "last")
    b, _ = load_checkpoint(run / "last")
    keys = [k for k in a if k.startswith(("model.", "optim."))]
    assert keys and all(torch.equal(a[k], b[k]) for k in keys)


def test_resume_command_is_quoted_for_the_shell():
    from induce.training.run_folder import resume_command

    assert resume_command(Path("runs/a")) == "induce train --resume runs/a"
    assert resume_command(Path("my runs/it's")) == "induce train --resume 'my runs/it'\"'\"'s'"
