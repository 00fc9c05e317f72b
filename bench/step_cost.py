"""CPU seconds of one training step and of one evaluation of each model of a ``induce reproduce`` profile, at
the profile's sizes, on its training corpus: what the profile's step budgets (``steps_per_model``) are
calibrated from.

Each model's run is built as the profile builds it (:func:`induce.reproduce.profiles.build_run_config`: the
profile's model configs and overrides, ``data.corpus`` the given prepared corpus) and stepped as the trainer
steps it (:class:`induce.training.trainer.Trainer`'s own step); each step is timed in **process CPU seconds**
(``time.process_time``: every thread of this process, not the wall clock, so that a machine loaded by other
work still gives the figure of an idle one) and in wall seconds. With several ``--threads`` counts each count
has its own run (same seed) and their steps are interleaved, so that the load is the same for all. The
evaluation is the trainer's (validation loss on the monitor sentences, dev F1 on ``train.dev_f1_max_sentences``
of them), timed after the steps.

The budget column: optimiser steps that fill ``--target`` of one core (CPU seconds, the evaluations at each
epoch's end included): ``target / (step + evaluation / steps per epoch)``.

    python bench/step_cost.py --profile cpu --corpus CORPUS --threads 1 --steps 15 --warmup 3 --evals 3
    python bench/step_cost.py --profile cpu --corpus CORPUS --threads 1,2 --models onlstm --steps 15 --evals 2

``CORPUS``: the profile's training corpus (the subset corpus ``induce reproduce`` prepares, e.g.
``corpora/ptb-wsj-train2500-valid400``). ``--json FILE`` also writes the rows.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console


def build_trainer(profile, model: str, corpus: str, threads: int, folder: Path):
    """A :class:`~induce.training.trainer.Trainer` of the profile's run of ``model`` with its parts built
    (no folder written): ``trainer._step`` and ``trainer._evaluate`` are the trainer's own."""
    from induce.config import use_threads
    from induce.reproduce.profiles import build_run_config
    from induce.training import ddp
    from induce.training.setup import build_run
    from induce.training.trainer import Trainer

    use_threads(threads)
    config = build_run_config(profile, model, [f"data.corpus={corpus}", "train.device=cpu",
                                               f"train.threads={threads}"])
    quiet = Console(quiet=True)
    trainer = Trainer(config, folder / f"{model}-{threads}", console=quiet, progress=False)
    trainer.ctx = ddp.init_distributed("cpu")
    trainer.parts = build_run(trainer.config, trainer.ctx, corpora_dir=Path(corpus).parent, console=quiet,
                              log=lambda message: None, run_dir=trainer.run_dir)
    trainer.config = trainer.parts.config
    trainer.parts.model.train()
    return trainer


def timed_step(trainer, threads: int) -> tuple[float, float, int]:
    """One optimiser step: ``(CPU seconds, wall seconds, tokens)``; the next epoch starts when one ends."""
    from induce.config import use_threads

    use_threads(threads)
    loop, objective = trainer.parts.loop, trainer.parts.objective
    cpu, wall = time.process_time(), time.monotonic()
    batch = objective.next_batch(loop)
    if batch is None:
        loop.next_epoch()
        batch = objective.next_batch(loop)
    loop.epoch_loss_sum += trainer._step(batch)
    float(loop.epoch_loss_sum)  # the step's work is done (a host sync; free on a CPU)
    loop.batch += 1
    loop.steps_total += 1
    return time.process_time() - cpu, time.monotonic() - wall, batch.tokens


def timed_evaluation(trainer, threads: int) -> tuple[float, float]:
    from induce.config import use_threads

    use_threads(threads)
    cpu, wall = time.process_time(), time.monotonic()
    trainer._evaluate()
    trainer.parts.model.train()
    return time.process_time() - cpu, time.monotonic() - wall


def measure(profile, model: str, corpus: str, thread_counts: list[int], steps: int, warmup: int, evals: int,
            target: float, folder: Path) -> list[dict]:
    trainers = {t: build_trainer(profile, model, corpus, t, folder) for t in thread_counts}
    samples: dict = {t: [] for t in thread_counts}
    for index in range(warmup + steps):
        for t in thread_counts:
            sample = timed_step(trainers[t], t)
            warm = " (warm-up)" if index < warmup else ""
            print(f"  {model}, {t} thread{'s' if t > 1 else ''}, step {index + 1}{warm}: {sample[0]:.3f} CPU s, "
                  f"{sample[1]:.3f} wall s, load {os.getloadavg()[0]:.1f}", flush=True)
            if index >= warmup:
                samples[t].append(sample)
    evaluations: dict = {t: [] for t in thread_counts}
    for _ in range(evals):
        for t in thread_counts:
            evaluations[t].append(timed_evaluation(trainers[t], t))
    rows = []
    for t in thread_counts:
        trainer = trainers[t]
        per_epoch = trainer.parts.objective.batches_per_epoch(1)
        cpu = statistics.median(s[0] for s in samples[t])
        wall = statistics.median(s[1] for s in samples[t])
        tokens = statistics.median(s[2] for s in samples[t])
        eval_cpu = statistics.median(e[0] for e in evaluations[t]) if evaluations[t] else 0.0
        eval_wall = statistics.median(e[1] for e in evaluations[t]) if evaluations[t] else 0.0
        rows.append({
            "model": model, "threads": t, "step_cpu_s": round(cpu, 4), "step_wall_s": round(wall, 4),
            "step_cpu_s_all": [round(s[0], 4) for s in samples[t]], "tokens_per_step": tokens,
            "eval_cpu_s": round(eval_cpu, 2), "eval_wall_s": round(eval_wall, 2),
            "eval_cpu_s_all": [round(e[0], 3) for e in evaluations[t]], "steps_per_epoch": per_epoch,
            "budget_steps": int(target / (cpu + eval_cpu / per_epoch)),
            "params": sum(p.numel() for p in trainer.parts.model.parameters()),
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--corpus", required=True, help="the profile's training corpus (a prepared corpus folder)")
    parser.add_argument("--models", nargs="+", default=None, help="default: the profile's")
    parser.add_argument("--threads", default="1", help="comma-separated thread counts, interleaved")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--evals", type=int, default=3)
    parser.add_argument("--target", default="6m", help="CPU time per model the budget column fills (e.g. 6m)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from induce.config import parse_duration
    from induce.reproduce.profiles import load_profile

    profile = load_profile(args.profile)
    thread_counts = [int(t) for t in args.threads.split(",")]
    target = parse_duration(args.target)
    rows = []
    print(f"load average before: {os.getloadavg()}", flush=True)
    print("| model | params | threads | step CPU s (median) | step wall s | tokens/step | eval CPU s | eval wall s "
          f"| steps/epoch | steps in {args.target} CPU |", flush=True)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models or profile.models:
            for row in measure(profile, model, args.corpus, thread_counts, args.steps, args.warmup, args.evals,
                               target, Path(folder)):
                rows.append(row)
                print(f"| {row['model']} | {row['params']:,} | {row['threads']} | {row['step_cpu_s']:.3f} | "
                      f"{row['step_wall_s']:.3f} | {row['tokens_per_step']:,} | {row['eval_cpu_s']:.1f} | "
                      f"{row['eval_wall_s']:.1f} | {row['steps_per_epoch']} | {row['budget_steps']:,} |", flush=True)
    print(f"load average after: {os.getloadavg()}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
