"""The same figures on every run: a toy reproduction run twice, the second beside a CPU hog, and again with
``--jobs 2``, gives identical ``results.json`` figures; a failed job is reported with its log; an interrupted
``--jobs`` reproduction continues; a clock budget is flagged.

The fields left out of the comparison (:data:`helpers.RESULTS_TIMING`) measure time or name the invocation: when and how
long (``generated_at``, ``started_at``, ``wall_seconds``, ``pipeline_seconds_so_far``, every ``*_seconds``,
``seconds``, ``tokens_per_s``), the step records and their log (``steps``, ``step_log``: each step's time and
whether it ran or was skipped), the command line (``command``) and ``jobs``; and the output folder's path is
replaced by ``OUT``. Every other field, each score, perplexity, per-epoch and mid-epoch metric, must be equal.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from induce.cli.main import app

from helpers import child_env, make_corpus, results_figures, toy_profile

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")

#: results.json fields that measure time or name the invocation (the module docstring).


def figures(out: Path) -> dict:
    """results.json without its timing fields, the output folder's path written OUT."""
    return results_figures(out)


def reproduce(root: Path, out: str, *extra: str):
    args = ["reproduce", "--profile", str(root / "profile"), "--corpus", str(root / "corpora" / "tiny"),
            "--corpora-dir", str(root / "corpora"), "--out", str(root / out), "--no-progress", *extra]
    return runner.invoke(app, args)


class CpuHog:
    """Two busy processes (the machine's two cores) for as long as the ``with`` block lasts."""

    def __enter__(self):
        self.processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        return self

    def __exit__(self, *exc):
        for process in self.processes:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same toy reproduction three times: quiet, beside a CPU hog, and in two jobs."""
    root = tmp_path_factory.mktemp("same")
    make_corpus(root / "corpora", train=60, valid=12, test=6)
    toy_profile(root / "profile", models=["prpn", "onlstm", "palm"], steps_per_model=25,
                overrides=["data.batch_size=8", "data.eval_batch_size=4", "data.bptt=12", "train.log_interval=5",
                           "train.dev_f1_max_sentences=20", "train.eval_every=10"])
    quiet = reproduce(root, "quiet")
    with CpuHog():
        loaded = reproduce(root, "loaded")
    jobs = reproduce(root, "jobs", "--jobs", "2")
    return root, {"quiet": quiet, "loaded": loaded, "jobs": jobs}


@pytest.mark.slow
def test_the_same_figures_beside_a_cpu_hog(runs):
    root, results = runs
    assert results["quiet"].exit_code == 0, results["quiet"].output
    assert results["loaded"].exit_code == 0, results["loaded"].output
    quiet, loaded = figures(root / "quiet"), figures(root / "loaded")
    assert quiet == loaded
    # the comparison has something to compare: every run trained its 25 steps, evaluated mid-epoch too
    for model in ("prpn", "onlstm", "palm"):
        seed = quiet["models"][model]["seeds"]["1"]
        assert seed["run"]["steps"] == 25 and seed["run"]["stop_reason"] == "max_steps"
        assert any(line.get("mid_epoch") for line in seed["history"])
        assert seed["scores"]["all"]["n_sentences"] > 0
    assert quiet["clock_stopped"] == {} and quiet["step_budgets"] == {"prpn": 25, "onlstm": 25, "palm": 25}
    report = (root / "quiet" / "REPORT.md").read_text()
    assert "25 optimiser steps per model and seed" in report and "Stopped by the clock" not in report


@pytest.mark.slow
def test_two_jobs_give_the_figures_of_one(runs):
    root, results = runs
    result = results["jobs"]
    assert result.exit_code == 0, result.output
    assert figures(root / "jobs") == figures(root / "quiet")
    logs = root / "jobs" / "logs"
    for unit in ("prpn-seed1", "onlstm-seed1", "palm-seed1", "baselines"):
        assert (logs / f"{unit}.log").is_file(), unit
    assert "epoch" in (logs / "onlstm-seed1.log").read_text()  # the run's own output is in its log
    # one line when each job starts and one per step it finished, numbered as the plan numbers them
    assert "started onlstm seed 1 (log " in result.output
    assert "[3/" in result.output and "train onlstm seed 1: ran" in result.output


@pytest.mark.slow
def test_a_failed_job_is_reported_with_its_log(tmp_path):
    make_corpus(tmp_path / "corpora", train=60, valid=12, test=6)
    profile = toy_profile(tmp_path / "profile", models=["onlstm", "palm"], random_init_seeds=0)
    palm = yaml.safe_load((profile / "palm.yaml").read_text())
    palm.setdefault("optim", {})["lr"] = 1.0e30  # diverges at once: its training step fails
    (profile / "palm.yaml").write_text(yaml.safe_dump(palm))
    result = reproduce(tmp_path, "out", "--jobs", "2")
    assert result.exit_code == 1, result.output
    log = tmp_path / "out" / "logs" / "palm-seed1.log"
    assert "train palm seed 1: failed" in result.output and str(log) in result.output
    assert "TrainingDiverged" in log.read_text() and "Traceback" in log.read_text()
    assert "    | " in result.output  # the log's last lines are shown
    statuses = {s["name"]: s["status"] for s in json.loads((tmp_path / "out" / "results.json").read_text())["steps"]}
    assert statuses["train palm seed 1"] == "failed" and statuses["evaluate palm seed 1"] == "failed"
    assert statuses["train onlstm seed 1"] == "ran" and statuses["evaluate onlstm seed 1"] == "ran"
    assert "Failed steps" in (tmp_path / "out" / "REPORT.md").read_text()


def _steps_done(run: Path) -> int:
    """The steps of ``run``'s last checkpoint (its sidecar, replaced whole when the trainer writes it)."""
    return json.loads((run / "last.json").read_text())["trainer"]["steps_total"]


def _interrupt_when(args: list[str], ready) -> str:
    """Start ``args``, send SIGINT once ``ready()`` holds, return the output; the command must exit 130."""
    # SIGINT at its default in the child (an earlier test of this process may have left it ignored, and an ignored
    # SIGINT stays ignored across exec: the command would never see the Ctrl-C)
    parent = subprocess.Popen(args, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while not ready():
            assert parent.poll() is None and time.monotonic() < deadline, parent.stdout.read()
            time.sleep(0.2)
        parent.send_signal(signal.SIGINT)
        output, _ = parent.communicate(timeout=300)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert parent.returncode == 130, output
    return output


@pytest.mark.slow
def test_an_interrupted_jobs_reproduction_continues(tmp_path):
    """Ctrl-C of ``induce reproduce --jobs 2`` while both runs train: each stops at a checkpoint (its status
    ``interrupted``, its lock let go) and the command exits 130; the same command continues both runs from
    those checkpoints (interrupted again once they have gone on)."""
    make_corpus(tmp_path / "corpora", train=60, valid=12, test=6)
    toy_profile(tmp_path / "profile", models=["onlstm", "palm"], random_init_seeds=0, steps_per_model=1_000_000,
                overrides=["data.batch_size=8", "data.eval_batch_size=4", "data.bptt=12",
                           "train.dev_f1_max_sentences=20", "train.checkpoint_every=5"])
    args = [sys.executable, "-m", "induce", "reproduce", "--profile", str(tmp_path / "profile"), "--corpus",
            str(tmp_path / "corpora" / "tiny"), "--corpora-dir", str(tmp_path / "corpora"), "--out",
            str(tmp_path / "out"), "--no-progress", "--jobs", "2"]
    runs = [tmp_path / "out" / "runs" / f"{model}-seed1" for model in ("onlstm", "palm")]
    output = _interrupt_when(args, lambda: all((run / "last.json").is_file() for run in runs))
    assert "interrupted" in output
    stopped_at = {}
    for run in runs:
        assert json.loads((run / "status.json").read_text())["state"] == "interrupted"
        assert not (run / "train.lock").exists()  # the job stopped and let go of its run
        stopped_at[run] = _steps_done(run)
    _interrupt_when(args, lambda: all(_steps_done(run) > stopped_at[run] + 5 for run in runs))
    for run in runs:
        log = (tmp_path / "out" / "logs" / f"{run.name}.log").read_text()
        assert f"continuing the interrupted run {run}" in log, log[-2000:]
        assert not run.with_name(run.name + ".replaced").exists()  # continued, not trained afresh


@pytest.mark.slow
def test_a_clock_budget_is_flagged_in_the_results_and_the_report(tmp_path):
    make_corpus(tmp_path / "corpora", train=60, valid=12, test=6)
    toy_profile(tmp_path / "profile", models=["onlstm"], random_init_seeds=0, steps_per_model=None)
    threads = torch.get_num_threads()
    result = reproduce(tmp_path, "out", "--time-per-model", "2s")
    torch.set_num_threads(threads)
    assert result.exit_code == 0, result.output
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    run = results["models"]["onlstm"]["seeds"]["1"]["run"]
    assert run["stop_reason"] == "time_budget" and run["clock_stopped"]
    note = f"stopped by the clock after {run['steps']:,} steps: these figures depend on the machine's speed"
    assert run["note"] == note and results["clock_stopped"] == {"onlstm seed 1": note}
    report = (tmp_path / "out" / "REPORT.md").read_text()
    assert "**Stopped by the clock.**" in report and note in report
    assert os.path.isfile(tmp_path / "out" / "runs" / "onlstm-seed1" / "status.json")


def test_the_costliest_runs_start_first():
    from induce.reproduce.jobs import plan_units

    names = ["train prpn seed 1", "train prpn seed 2", "train cpcfg seed 1", "train cpcfg seed 2",
             "train onlstm seed 1", "untrained prpn (5 inits)", "baseline right", "evaluate prpn seed 1",
             "evaluate prpn seed 2",
             "evaluate cpcfg seed 1", "evaluate cpcfg seed 2", "evaluate onlstm seed 1"]
    minutes = {"cpcfg": 60.0, "onlstm": 7.0}
    ordered = [unit.name for unit in plan_units(names, cost=lambda model: minutes.get(model, 0.0))]
    assert ordered == ["cpcfg seed 1", "cpcfg seed 2", "onlstm seed 1", "prpn seed 1", "prpn seed 2",
                       "untrained prpn (5 inits)", "baselines"]
    cpcfg = plan_units(names, cost=lambda model: minutes.get(model, 0.0))[0]
    assert cpcfg.steps == ["train cpcfg seed 1", "evaluate cpcfg seed 1"]
    # without costs: the plan's order
    assert [unit.name for unit in plan_units(names)][:3] == ["prpn seed 1", "prpn seed 2", "cpcfg seed 1"]


def test_the_schedule_estimate_by_hand():
    from induce.reproduce.jobs import schedule_minutes

    # two workers: 60 | 30 + 6 + 6 + 6 ... the 6s fill the second worker until it passes the first
    assert schedule_minutes([60, 30, 6, 6, 6, 6, 6], 2) == 60
    assert schedule_minutes([60, 30, 6, 6, 6, 6, 6, 6], 2) == 66  # 30 + 5*6 = 60, the sixth 6 goes to either
    assert schedule_minutes([6, 6, 6, 6, 6, 30, 60], 2) == 78  # the same runs, the longest last: 6 + 6 + 6 + 60
    assert schedule_minutes([5, 5, 5], 1) == 15
    assert schedule_minutes([], 2) == 0


def test_a_profile_with_measured_minutes_says_its_estimate(tmp_path):
    import pydantic

    from induce.reproduce.profiles import Profile

    with pytest.raises(pydantic.ValidationError, match="nosuchmodel"):
        Profile(cpu_minutes={"nosuchmodel": 3.0})
    with pytest.raises(pydantic.ValidationError, match="0 or more"):
        Profile(cpu_minutes={"prpn": -1.0})
    make_corpus(tmp_path / "corpora", train=20, valid=6, test=4)
    toy_profile(tmp_path / "profile", models=["prpn"], steps_per_model=2, cpu_minutes={"prpn": 1.5},
                random_init_seeds=0, overrides=["data.batch_size=4", "data.eval_batch_size=4", "data.bptt=8"])
    result = reproduce(tmp_path, "out")
    assert result.exit_code == 0, result.output
    assert "estimated time: about 2 min" in " ".join(result.output.split())
