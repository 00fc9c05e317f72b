"""``induce reproduce --executor slurm`` on a real SLURM, not a mock: a one-node cluster on this machine
(:mod:`induce.devtools.slurm_cluster`: Debian's slurm-wlm and munge, as root), started once for these tests and
stopped after them, its logs kept (and named) when a test failed. Without root, the programs or submitit the cluster's
tests are skipped with a one-line reason (``.ci/run`` installs the packages).

A toy reproduction through SLURM (submitted with ``--detach``, then collected) gives the figures of ``--executor local
--jobs 2``, and a third invocation submits nothing; a unit whose job is cancelled (``scancel``) is submitted again by
the next invocation and continues from its checkpoint, while a failing unit is reported with its log and the others
finish; a unit whose job reaches its time limit is checkpointed, requeued and finishes; ``induce train`` runs under
``srun`` and torchrun's rendezvous with the DDP path. The options' errors and ``--help`` need no cluster.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from induce.cli.main import app
from induce.devtools.slurm_cluster import SlurmCluster, unavailable

from helpers import REPO, child_env, make_corpus, results_figures, toy_profile

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")

#: Why the cluster's tests cannot run here (None: they can).
REASON = unavailable() or (None if importlib.util.find_spec("submitit") else
                           "submitit is not installed (pip install 'induce[slurm]')")
#: results.json fields that measure time or name the invocation (as tests/test_reproduce_jobs.py leaves out), and
#: the executor's.
TINY = ["data.batch_size=8", "data.eval_batch_size=4", "data.bptt=12", "train.log_interval=5",
        "train.dev_f1_max_sentences=20"]


@pytest.fixture(scope="session")
def slurm(tmp_path_factory, request):
    """A one-node SLURM for the session, its clients pointed at it (``SLURM_CONF``); stopped at the end, its folder
    (configs, state, the daemons' logs) kept and named when a test failed, removed otherwise."""
    if REASON is not None:
        pytest.skip(REASON)
    folder = tmp_path_factory.mktemp("slurm-cluster")
    cluster = SlurmCluster(folder)
    cluster.start()
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    failed = request.session.testsfailed
    try:
        yield cluster
    finally:
        cluster.stop()
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        if request.session.testsfailed > failed:
            print(f"\nthe one-node SLURM's logs: {folder} ({cluster.log_tail(3)})", file=sys.stderr)
        else:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)


def figures(out: Path) -> dict:
    """results.json without its timing fields and the executor, the output folder's path written OUT."""
    return results_figures(out, frozenset({"executor"}))


def reproduce(root: Path, out: str, *extra: str):
    args = ["reproduce", "--profile", str(root / "profile"), "--corpus", str(root / "corpora" / "tiny"),
            "--corpora-dir", str(root / "corpora"), "--out", str(root / out), "--no-progress", *extra]
    return runner.invoke(app, args)


def job_record(out: Path, unit: str) -> dict:
    return json.loads((out / "logs" / f"{unit}.job.json").read_text())


def squeue_state(job_id: str) -> str:
    listed = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%T", f"--jobs={job_id}"],
                            capture_output=True, text=True)
    return listed.stdout.strip() or "GONE"


def wait_for(ready, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


# ------------------------------------------------------------------------------------------- the cluster


@pytest.mark.slow
def test_a_toy_reproduction_through_slurm_gives_the_local_figures(slurm, tmp_path):
    """``--detach`` submits every unit and returns (75); the same command collects them (none submitted again) and
    writes the figures of ``--executor local --jobs 2``; once more, nothing is submitted (every unit done)."""
    make_corpus(tmp_path / "corpora", train=60, valid=12, test=6)
    toy_profile(tmp_path / "profile", models=["prpn", "onlstm", "palm"], steps_per_model=25,
                overrides=[*TINY, "train.eval_every=10"])
    local = reproduce(tmp_path, "local", "--jobs", "2")
    assert local.exit_code == 0, local.output
    detached = reproduce(tmp_path, "slurm", "--executor", "slurm", "--detach")
    assert detached.exit_code == 75, detached.output
    units = ["prpn-seed1", "onlstm-seed1", "palm-seed1", "untrained-prpn", "untrained-onlstm", "untrained-palm",
             "baselines"]
    ids = {unit: job_record(tmp_path / "slurm", unit)["job_id"] for unit in units}
    assert len(set(ids.values())) == len(units)
    assert f"submitted prpn seed 1 as SLURM job {ids['prpn-seed1']}" in detached.output
    waiting = json.loads((tmp_path / "slurm" / "results.json").read_text())["waiting_jobs"]
    assert waiting and set(waiting.values()) <= {f"SLURM job {i}" for i in ids.values()}
    assert "SLURM job(s) queued or running" in detached.output

    collected = reproduce(tmp_path, "slurm", "--executor", "slurm")
    assert collected.exit_code == 0, collected.output
    assert "as SLURM job" not in collected.output  # attached to the jobs, none submitted
    assert {unit: job_record(tmp_path / "slurm", unit)["job_id"] for unit in units} == ids
    assert figures(tmp_path / "slurm") == figures(tmp_path / "local")
    seed = figures(tmp_path / "slurm")["models"]["onlstm"]["seeds"]["1"]
    assert seed["run"]["steps"] == 25 and seed["scores"]["all"]["n_sentences"] > 0  # something to compare
    for unit in units:
        record = job_record(tmp_path / "slurm", unit)
        assert record["collected"] and record["complete"] and record["state"] == "COMPLETED"
        assert record["submitted_at"] <= record["started_at"] <= record["ended_at"] <= record["collected_at"]
    assert "SLURM job" in (tmp_path / "slurm" / "logs" / "onlstm-seed1.log").read_text()

    again = reproduce(tmp_path, "slurm", "--executor", "slurm")
    assert again.exit_code == 0, again.output
    assert f"prpn seed 1: done by SLURM job {ids['prpn-seed1']}" in again.output
    assert "as SLURM job" not in again.output
    assert figures(tmp_path / "slurm") == figures(tmp_path / "local")


@pytest.mark.slow
def test_a_cancelled_job_continues_and_a_failed_one_is_reported(slurm, tmp_path):
    """PaLM diverges at once (its job fails), ON-LSTM's job is cancelled once it has written a checkpoint: the next
    invocation reports PaLM's failure with its log and submits ON-LSTM again, which continues from the checkpoint
    to the end of its budget."""
    make_corpus(tmp_path / "corpora", train=60, valid=12, test=6)
    profile = toy_profile(tmp_path / "profile", models=["onlstm", "palm"], random_init_seeds=0,
                          steps_per_model=150, overrides=[*TINY, "train.checkpoint_every=5"])
    palm = yaml.safe_load((profile / "palm.yaml").read_text())
    palm.setdefault("optim", {})["lr"] = 1.0e30
    (profile / "palm.yaml").write_text(yaml.safe_dump(palm))
    out, run = tmp_path / "out", tmp_path / "out" / "runs" / "onlstm-seed1"
    first = reproduce(tmp_path, "out", "--executor", "slurm", "--detach")
    assert first.exit_code == 75, first.output
    onlstm = job_record(out, "onlstm-seed1")["job_id"]
    wait_for(lambda: (run / "last.json").is_file(), "ON-LSTM's first checkpoint")
    subprocess.run(["scancel", onlstm], check=True)
    wait_for(lambda: squeue_state(onlstm) in ("CANCELLED", "GONE"), "the cancelled job to end")
    assert json.loads((run / "status.json").read_text())["state"] == "interrupted"  # stopped at a checkpoint
    wait_for(lambda: squeue_state(job_record(out, "palm-seed1")["job_id"]) in ("COMPLETED", "GONE"), "PaLM's job")

    second = reproduce(tmp_path, "out", "--executor", "slurm")
    assert second.exit_code == 1, second.output
    log = out / "logs" / "palm-seed1.log"
    assert "train palm seed 1: failed" in second.output and str(log) in second.output
    assert "    | " in second.output and "TrainingDiverged" in log.read_text()  # the log's last lines are shown
    again = job_record(out, "onlstm-seed1")["job_id"]
    assert again != onlstm and f"SLURM job {onlstm} was stopped (CANCELLED)" in second.output
    assert f"continuing the interrupted run {run}" in (out / "logs" / "onlstm-seed1.log").read_text()
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and status["steps"] == 150
    assert not run.with_name(run.name + ".replaced").exists()  # continued, not trained afresh
    statuses = {s["name"]: s["status"] for s in json.loads((out / "results.json").read_text())["steps"]}
    assert statuses["train onlstm seed 1"] == "resumed" and statuses["evaluate onlstm seed 1"] == "ran"
    assert statuses["train palm seed 1"] == "failed" and statuses["evaluate palm seed 1"] == "failed"


@pytest.mark.slow
def test_a_job_at_its_time_limit_is_requeued_and_finishes(slurm, tmp_path):
    """Two minutes per job, the time-limit signal 35 s before (SLURM looks every 30 s and signals up to 30 s early:
    55-85 s into a job), 80 s of training: the first job cannot finish, so it is checkpointed and requeued (the same
    job), and the run ends in the next one, with the training time of one uninterrupted run."""
    make_corpus(tmp_path / "corpora", train=60, valid=12, test=6)
    toy_profile(tmp_path / "profile", models=["onlstm"], random_init_seeds=0, steps_per_model=None,
                slurm={"time": "2m", "signal_before": "35s", "poll": "2s"},
                overrides=[*TINY, "train.checkpoint_every=50"])
    result = reproduce(tmp_path, "out", "--executor", "slurm", "--time-per-model", "80s")
    assert result.exit_code == 0, result.output
    out, run = tmp_path / "out", tmp_path / "out" / "runs" / "onlstm-seed1"
    log = (out / "logs" / "onlstm-seed1.log").read_text()
    job = job_record(out, "onlstm-seed1")["job_id"]
    assert "the worker stopped (exit status 130); requeueing the job" in log, log[-3000:]
    assert f"continuing the interrupted run {run}" in log
    assert log.count(f"SLURM job {job} on") >= 2  # the same job, requeued
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and status["stop_reason"] == "time_budget"
    assert json.loads((run / "reproduce.json").read_text())["train_seconds"] >= 75
    assert job_record(out, "onlstm-seed1")["complete"]


@pytest.mark.slow
def test_induce_train_under_srun_and_torchrun(slurm, tmp_path):
    """One run on several processes of a job: ``srun`` starts torchrun, whose c10d rendezvous (what several nodes
    use) starts two processes of ``induce train``: a DDP run of world size 2."""
    corpus = make_corpus(tmp_path / "corpora", train=40, valid=8, test=4)
    torchrun = (f"{sys.executable} -m torch.distributed.run --nnodes=1 --nproc_per_node=2 --rdzv_backend=c10d "
                f"--rdzv_endpoint=127.0.0.1:0 --rdzv_id=$SLURM_JOB_ID -m induce.cli.main train --model palm-rb "
                f"--corpus {corpus} --out {tmp_path / 'run'} --max-epochs 1 --device cpu --no-progress "
                "model.emb_size=8 model.hidden_size=12 model.rrnn_size=4 model.attention_size=4 "
                "model.max_span_length=4 data.batch_size=4 data.bptt=8 data.eval_batch_size=2 train.dev_f1=false")
    done = subprocess.run(["srun", "--nodes=1", "--ntasks=1", "--cpus-per-task=2", "bash", "-c", torchrun],
                          cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    meta = json.loads((tmp_path / "run" / "last.json").read_text())
    assert meta["trainer"]["world_size"] == 2
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "finished"


# ------------------------------------------------------------------------------------------ no cluster


def test_the_options_of_the_executor_in_help():
    result = runner.invoke(app, ["reproduce", "--help"], terminal_width=200)
    for option in ("--executor", "--detach", "--slurm-partition", "--slurm-account", "--slurm-time", "--slurm-cpus",
                   "--slurm-mem", "--slurm-gpus", "--sbatch"):
        assert option in result.output, option


@pytest.mark.parametrize("extra, message", [
    (["--executor", "kubernetes"], "--executor 'kubernetes': use local"),
    (["--detach"], "--detach: only with --executor slurm"),
    (["--slurm-time", "1h"], "--slurm-time: only with --executor slurm"),
    (["--executor", "slurm", "--jobs", "2"], "--jobs: not with --executor slurm"),
    (["--executor", "slurm", "--chunk", "1h"], "--chunk: not with --executor slurm"),
    (["--executor", "slurm", "--slurm-time", "soon"], "--slurm-time (or the profile's slurm.time): 'soon'"),
    (["--executor", "slurm", "--slurm-mem", "lots"], "--slurm-mem (or the profile's slurm.mem): 'lots'"),
    (["--executor", "slurm", "--sbatch", "qos=high"], "--sbatch (or the profile's slurm.sbatch): 'qos=high'"),
])
def test_the_options_errors_name_the_option(tmp_path, extra, message):
    make_corpus(tmp_path / "corpora", train=20, valid=6, test=4)
    toy_profile(tmp_path / "profile", models=["prpn"])
    result = reproduce(tmp_path, "out", *extra)
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
    assert not (tmp_path / "out" / "logs").exists()  # nothing ran


def test_without_submitit_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit now fails
    make_corpus(tmp_path / "corpora", train=20, valid=6, test=4)
    toy_profile(tmp_path / "profile", models=["prpn"])
    result = reproduce(tmp_path, "out", "--executor", "slurm")
    assert result.exit_code == 2
    assert "--executor slurm needs submitit, which is not installed: pip install 'induce[slurm]'" in " ".join(
        result.output.split())


@pytest.mark.skipif(importlib.util.find_spec("submitit") is None, reason="submitit is not installed")
def test_without_slurm_commands_the_error_says_where_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, squeue or srun
    make_corpus(tmp_path / "corpora", train=20, valid=6, test=4)
    toy_profile(tmp_path / "profile", models=["prpn"])
    result = reproduce(tmp_path, "out", "--executor", "slurm")
    assert result.exit_code == 2
    assert "sbatch, squeue, srun not found (SLURM's commands): run induce reproduce on a machine of the cluster" in (
        " ".join(result.output.split()))


def test_a_profile_asks_for_its_jobs_resources(tmp_path):
    """The profile's slurm section, the --slurm-* options over it, become the jobs' sbatch parameters."""
    from induce.reproduce.profiles import load_profile
    from induce.reproduce.slurm import sbatch_parameters

    toy_profile(tmp_path / "profile", models=["prpn"], slurm={"time": "90m", "gpus": 2, "sbatch": ["--qos=high"]})
    settings = load_profile(tmp_path / "profile").slurm
    assert settings.time_minutes() == 90 and settings.gpus == 2 and settings.cpus is None
    assert sbatch_parameters(["--qos=high", "--exclusive", "--constraint=a100&nvlink"]) == {
        "qos": "high", "exclusive": True, "constraint": "a100&nvlink"}
    (tmp_path / "profile" / "profile.yaml").write_text(yaml.safe_dump({"slurm": {"walltime": "1h"}}))
    from induce.errors import InduceError

    with pytest.raises(InduceError, match="slurm.walltime: unknown key"):
        load_profile(tmp_path / "profile")


def _runner_on_a_queue(tmp_path, detach: bool, interrupt_on: int = 0):
    """JobRunner over a stand-in executor whose jobs never start; ``interrupt_on``: the look at the jobs that
    a Ctrl-C interrupts."""
    from types import SimpleNamespace

    from rich.console import Console

    from induce.reproduce.jobs import Executor, Job, JobRunner, Unit
    from induce.reproduce.pipeline import ReproduceOptions, StepRecord

    class Queue(Executor):
        poll_seconds = 0.0
        looks = 0

        def worker_spec(self):
            return {"options": {}, "parent": None}

        def launch(self, unit, files, spec):
            job = Job(unit, files, f"SLURM job {100 + len(unit.name)}", "submitted")
            job.ended, job.state = (lambda: None), (lambda: "PENDING")  # queued for good
            return job

        def refresh(self, jobs):
            self.looks += 1
            if self.looks == interrupt_on:
                raise KeyboardInterrupt

        def interrupt(self, jobs):
            return False

    records = []
    repro = SimpleNamespace(out=tmp_path, console=Console(quiet=True), options=ReproduceOptions(),
                            record_type=StepRecord, add_record=lambda r: records.append(r) or r, pending_units=set(),
                            waiting_jobs={}, failed_runs={}, unfinished=set())
    executor = Queue()
    executor.detach = detach
    units = [Unit("prpn seed 1", "prpn-seed1", ["train prpn seed 1", "evaluate prpn seed 1"]),
             Unit("baselines", "baselines", ["baseline right"])]
    return JobRunner(repro, units, {}, 5, executor), repro, records


def test_detach_leaves_the_queued_jobs_pending(tmp_path):
    runner, repro, records = _runner_on_a_queue(tmp_path, detach=True)
    runner.run()  # returns once submitted
    assert [(r.name, r.status) for r in records] == [("train prpn seed 1", "pending"),
                                                     ("evaluate prpn seed 1", "pending"), ("baseline right", "pending")]
    assert "its SLURM job 111 is PENDING; run the same command again to collect it" in records[0].detail
    assert repro.waiting_jobs == {"prpn seed 1": "SLURM job 111", "baselines": "SLURM job 109"}
    assert repro.pending_units == {"prpn seed 1", "baselines"}


def test_ctrl_c_stops_the_waiting_not_the_jobs(tmp_path):
    runner, repro, records = _runner_on_a_queue(tmp_path, detach=False, interrupt_on=3)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    assert runner.executor.looks == 3 and runner.leaving
    assert {r.status for r in records} == {"pending"} and len(records) == 3
    assert set(repro.waiting_jobs) == {"prpn seed 1", "baselines"}
