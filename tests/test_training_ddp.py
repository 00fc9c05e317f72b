"""`induce train` under torchrun with 2 CPU processes (gloo) vs the same run in one process.

Each process takes half of the batch rows and DDP averages the gradients, so the two runs compute
the same global-batch loss; with dropout off they must end with the same weights up to float
rounding (different summation order). SGD, not Adam: Adam divides by the gradient's running RMS,
which turns rounding noise in near-zero gradient entries into full-size steps.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from rich.console import Console

from induce.config import load_config
from induce.training import load_checkpoint, train

from helpers import REPO, child_env, make_corpus, python_path

NO_DROPOUT = ["model.dropout=0", "model.dropouth=0", "model.dropouti=0", "model.dropoute=0", "model.wdrop=0"]
# PaLM-RB: its span scorer gets no gradient (fixed scores), which DDP must be told about.
MODEL = "palm-rb"
TINY = ["model.emb_size=8", "model.hidden_size=12", "model.rrnn_size=4", "model.attention_size=4",
        "model.max_span_length=4", "data.batch_size=4", "data.bptt=8",
        "data.eval_batch_size=2", "optim.optimizer=sgd", "optim.asgd=never", "optim.lr=1", "train.log_interval=5",
        "train.dev_f1=false", "train.seed=3"]


def torchrun_then_one_process(tmp_path, model: str, corpus, overrides: list) -> tuple:
    """``induce train`` under torchrun (2 CPU processes) into ``tmp_path/ddp`` and the same run in this process
    (one thread) into ``tmp_path/single``; returns torchrun's completed process and the two runs' metrics lines."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "induce.cli.main", "train", "--model", model, "--corpus", str(corpus),
               "--out", str(tmp_path / "ddp"), "--max-epochs", "2", "--device", "cpu", "--no-progress", *overrides]
    done = subprocess.run(command, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = load_config(model, overrides=overrides + [f"data.corpus={corpus}", "train.epochs=2", "train.device=cpu"])
        train(cfg, tmp_path / "single", console=Console(quiet=True), progress=False)
    finally:
        torch.set_num_threads(threads)
    lines = [[json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
             for run in ("ddp", "single")]
    return done, *lines


def assert_same_weights(tmp_path, rtol: float, atol: float) -> None:
    """The torchrun run (2 processes) ended with the one-process run's model weights, within the tolerances."""
    ddp_tensors, ddp_meta = load_checkpoint(tmp_path / "ddp" / "last")
    one_tensors, _ = load_checkpoint(tmp_path / "single" / "last")
    assert ddp_meta["trainer"]["world_size"] == 2
    keys = [k for k in one_tensors if k.startswith("model.")]
    assert keys and set(keys) <= set(ddp_tensors)
    for key in keys:
        torch.testing.assert_close(ddp_tensors[key], one_tensors[key], rtol=rtol, atol=atol)


def test_python_path_extends_the_callers():
    assert python_path(None) == str(REPO)
    assert python_path(os.pathsep.join(["/a", "/b"])).split(os.pathsep) == [str(REPO), "/a", "/b"]


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_two_cpu_processes_match_one_process(tmp_path):
    corpus = make_corpus(tmp_path / "corpora", train=80, valid=10, test=5)
    done, ddp_lines, one_lines = torchrun_then_one_process(tmp_path, MODEL, corpus, TINY + NO_DROPOUT)
    assert "2 processes" in done.stderr
    assert_same_weights(tmp_path, rtol=1e-4, atol=2e-5)
    assert [line["steps"] for line in ddp_lines] == [line["steps"] for line in one_lines]
    # the processes shared the global batch (each read half of the rows), they did not each read it all
    assert [line["train_tokens"] for line in ddp_lines] == [line["train_tokens"] for line in one_lines]
    for a, b in zip(ddp_lines, one_lines):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["valid_loss"] == pytest.approx(b["valid_loss"], rel=1e-5)
    assert one_lines[-1]["train_loss"] < one_lines[0]["train_loss"]  # the runs really trained


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_ctrl_c_under_torchrun_then_resume_is_exact_with_dropout(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) mid-epoch under torchrun with
    2 CPU processes: every process stops at the same step, `last` is written with both processes'
    RNG states and carried rows, and `--resume` (dropout on, a different mask stream per process,
    variable BPTT) ends with the weights of a straight 2-epoch torchrun run, bit for bit."""
    corpus = make_corpus(tmp_path / "corpora", train=300, valid=6, test=2)
    # torchrun starts each worker in its own session: the SIGINT below reaches torchrun alone, which sends
    # SIGINT on to the workers and SIGKILLs those still running after TORCH_ELASTIC_SHUTDOWN_TIMEOUT
    # (30 s by default): on a loaded machine, too short for the next stop check and the checkpoint.
    env = {**child_env(), "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "300"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                "-m", "induce.cli.main", "train", "--no-progress"]
    fresh = ["--model", "onlstm", "--corpus", str(corpus), "--device", "cpu", "--max-epochs", "2",
             "model.emb_size=8", "model.hidden_size=8", "model.chunk_size=4", "data.batch_size=4", "data.bptt=5",
             "data.variable_bptt=true", "data.bptt_std=2", "data.min_bptt=2", "train.dev_f1=false", "train.seed=3",
             "train.checkpoint_every=20"]

    def run(*args):
        done = subprocess.run([*torchrun, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]

    run(*fresh, "--out", str(tmp_path / "straight"))
    stopped = tmp_path / "stopped"
    child = subprocess.Popen([*torchrun, *fresh, "--out", str(stopped)], cwd=REPO, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (stopped / "last.json").is_file():  # the first periodic checkpoint: training is under way
            assert child.poll() is None and time.monotonic() < deadline, "training did not start"
            time.sleep(0.02)
        os.killpg(child.pid, signal.SIGINT)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    assert f"continue with: induce train --resume {stopped} (under torchrun, 2 processes" in err
    status = json.loads((stopped / "status.json").read_text())
    assert status["state"] == "interrupted" and status["world_size"] == 2
    assert status["epoch"] == 1 and status["batch"] > 20  # mid-epoch (~130 batches), after the periodic checkpoint
    _, meta = load_checkpoint(stopped / "last")
    assert (meta["trainer"]["epoch"], meta["trainer"]["batch"]) == (status["epoch"], status["batch"])
    run("--resume", str(stopped))
    a, meta = load_checkpoint(tmp_path / "straight" / "last")
    b, _ = load_checkpoint(stopped / "last")
    assert meta["trainer"]["world_size"] == 2 and meta["config"]["model"]["dropout"] > 0
    keys = [k for k in a if k.startswith(("model.", "optim."))]
    assert keys and [k for k in keys if not torch.equal(a[k], b[k])] == []


PCFG = ["model.nt_states=2", "model.t_states=3", "model.state_dim=8", "data.batch_size=4", "data.eval_batch_size=4",
        "train.seed=3", "train.log_interval=2", "data.max_length=8", "train.dev_f1=false", "optim.optimizer=sgd",
        "optim.lr=0.1", "data.curriculum_start=4", "data.curriculum_step=4"]


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
@pytest.mark.parametrize("model", ["npcfg", "tnpcfg"])
def test_sentence_level_models_under_two_processes_match_one_process(tmp_path, model):
    """The sentence-level objective under torchrun: each process takes every other sentence of a batch, and
    a batch that splits unevenly (epoch 1: 7 sentences of at most 4 words, batches of 4 and 3) still
    gives the whole batch's mean gradient (each process divides its sum by the batch's share)."""
    corpus = make_corpus(tmp_path / "corpora", train=30, valid=5, test=3)
    overrides = PCFG + (["model.rank=4"] if model == "tnpcfg" else [])
    done, ddp_lines, one_lines = torchrun_then_one_process(tmp_path, model, corpus, overrides)
    assert done.stdout.splitlines() == [str(tmp_path / "ddp")]  # the summary once (rank 0), not per process
    assert done.stderr.count("best validation perplexity") == 1
    assert_same_weights(tmp_path, rtol=1e-5, atol=1e-6)
    assert [(a["steps"], a["train_tokens"]) for a in ddp_lines] == [(b["steps"], b["train_tokens"]) for b in one_lines]
    for a, b in zip(ddp_lines, one_lines):
        assert a["valid_loss"] == pytest.approx(b["valid_loss"], rel=1e-6)
