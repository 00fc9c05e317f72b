"""The training step in bf16 autocast against float32 (``train.amp``), for each model as a profile builds it.

For each model of ``--models``, ``--rounds`` rounds, each training the profile's config (``--profile``; the
corpus ``--corpus``, seed 1, one thread) once in float32 and once with ``train.amp=true``, alternating which goes
first, in this one process: ``--warmup`` optimiser steps, then the training CPU seconds of the next ``--steps``
(the trainer's own ``train_cpu_seconds``: the steps only, no evaluation). Prints one row per model: the median
CPU seconds a step in each precision, their ratio (float32 / bf16: above 1, bf16 is faster), the spread over
the rounds, and the precision the run reported (``status.json``'s ``precision``: on a processor without a bf16
matrix unit the amp run trains in float32, and the table says so).

    OMP_NUM_THREADS=1 python bench/precision.py --profile cpu --corpus CORPORA/ptb-wsj-valid400 \\
        --models prpn onlstm palm npcfg cpcfg tnpcfg snpcfg --rounds 3 --json bench/precision_cpu.json

CPU time is used (not wall time) so that another process on the machine moves the figures less; a shared
core's caches still do, so read the ratios of one run side by side, not across machines.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path


def step_seconds(profile: str, model: str, corpus: str, amp: bool, warmup: int, steps: int) -> tuple[float, dict]:
    """Training CPU seconds a step (median-free: the mean over ``steps`` after ``warmup``) and the precision the
    run recorded."""
    from rich.console import Console

    from induce.reproduce.profiles import build_run_config, load_profile
    from induce.training import train
    from induce.training.run_folder import read_status

    marks: dict[int, float] = {}

    def on_batch(trainer, epoch: int, batch: int) -> None:
        loop = trainer.parts.loop
        if loop.steps_total in (warmup, warmup + steps):
            marks[loop.steps_total] = loop.train_cpu_seconds

    config = build_run_config(load_profile(profile), model, [], {
        "data.corpus": corpus, "train.seed": 1, "train.device": "cpu", "train.threads": 1, "train.amp": amp,
        "train.max_steps": warmup + steps, "train.dev_f1": False, "train.checkpoint_every": None,
        "train.eval_every": None})
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        train(config, run, console=Console(quiet=True), progress=False, on_batch=on_batch)
        precision = read_status(run).get("precision", {})
    return (marks[warmup + steps] - marks[warmup]) / steps, precision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--corpus", required=True, help="prepared corpus the runs train on")
    parser.add_argument("--models", nargs="+", default=["prpn", "onlstm", "palm", "npcfg", "cpcfg", "tnpcfg",
                                                       "snpcfg"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    import torch

    from induce.training.precision import cpu_bf16_unit, resolve_precision

    torch.set_num_threads(1)
    caps = torch.cpu.get_capabilities()
    unit = cpu_bf16_unit(caps)
    print(f"processor: {caps.get('cpu_name', '?')}; bf16 matrix unit: {unit or 'none'}; "
          f"train.amp=true here: {resolve_precision(True, 'cpu').reason}; one thread")
    rows = []
    print("| model | fp32 CPU-s/step | bf16 CPU-s/step | fp32 / bf16 (median, min-max) | bf16 run's precision |")
    print("|---|---:|---:|---|---|")
    for model in args.models:
        times: dict[bool, list[float]] = {False: [], True: []}
        ratios, precision = [], {}
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            got = {}
            for amp in order:
                got[amp], reported = step_seconds(args.profile, model, args.corpus, amp, args.warmup, args.steps)
                times[amp].append(got[amp])
                if amp:
                    precision = reported
            ratios.append(got[False] / got[True])
        row = {"model": model, "profile": args.profile, "fp32_cpu_s_per_step": statistics.median(times[False]),
               "bf16_cpu_s_per_step": statistics.median(times[True]), "ratio_median": statistics.median(ratios),
               "ratio_min": min(ratios), "ratio_max": max(ratios), "rounds": args.rounds, "steps": args.steps,
               "precision": precision, "unit": unit, "processor": caps.get("cpu_name")}
        rows.append(row)
        print(f"| {model} | {row['fp32_cpu_s_per_step']:.3f} | {row['bf16_cpu_s_per_step']:.3f} | "
              f"{row['ratio_median']:.2f} ({row['ratio_min']:.2f}-{row['ratio_max']:.2f}) | "
              f"{precision.get('dtype')} ({precision.get('unit')}) |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
