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

``--ops`` adds, per model and precision, one profiled pass of ``--steps`` steps (``torch.profiler``, counting
FLOPs): the share of the ops' time spent in matrix products (``aten::mm``/``addmm``/``bmm``/``baddbmm``/``addmv``),
in oneDNN's fused recurrent layer (``aten::mkldnn_rnn_layer``, float32 only) and in autocast's casts
(``aten::copy_``) -- the profiler times ops by the wall clock, so on a loaded machine read these shares as rough --
and the matrix products' exact FLOPs a step over the step's CPU seconds (the timing rounds' median where they ran)
as a % of this thread's GEMM peak in that precision (a [1024]^3 product measured in the same process).

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
    marks: dict[int, float] = {}

    def on_batch(trainer, epoch: int, batch: int) -> None:
        loop = trainer.parts.loop
        if loop.steps_total in (warmup, warmup + steps):
            marks[loop.steps_total] = loop.train_cpu_seconds

    precision = run_once(profile, model, corpus, amp, warmup, steps, on_batch)
    return (marks[warmup + steps] - marks[warmup]) / steps, precision


def run_once(profile: str, model: str, corpus: str, amp: bool, warmup: int, steps: int, on_batch) -> dict:
    """Train ``model`` as ``profile`` builds it for ``warmup + steps`` steps (seed 1, one thread, no evaluation),
    calling ``on_batch(trainer, epoch, batch)`` after each; the precision the run recorded."""
    from rich.console import Console

    from induce.reproduce.profiles import build_run_config, load_profile
    from induce.training import train
    from induce.training.run_folder import read_status

    config = build_run_config(load_profile(profile), model, list(OVERRIDES), {
        "data.corpus": corpus, "train.seed": 1, "train.device": "cpu", "train.threads": 1, "train.amp": amp,
        "train.max_steps": warmup + steps, "train.dev_f1": False, "train.checkpoint_every": None,
        "train.eval_every": None})
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        train(config, run, console=Console(quiet=True), progress=False, on_batch=on_batch)
        return read_status(run).get("precision", {})


#: ``--set KEY=VALUE`` overrides over every run's profile config (e.g. ``data.batch_size=64``).
OVERRIDES: list[str] = []
MATRIX_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addmv", "aten::mv")
FUSED_RNN_OPS = ("aten::mkldnn_rnn_layer", "aten::mkldnn_rnn_layer_backward")
CAST_OPS = ("aten::copy_",)


def gemm_peak(dtype, n: int = 1024, seconds: float = 0.5, rounds: int = 3) -> float:
    """FLOP/s of one thread multiplying two ``[n, n]`` matrices of ``dtype`` (median of ``rounds``)."""
    import time

    import torch

    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    rates = []
    for _ in range(rounds):
        count, start = 0, time.process_time()
        while time.process_time() - start < seconds:
            torch.mm(a, b)
            count += 1
        rates.append(2 * n ** 3 * count / (time.process_time() - start))
    return statistics.median(rates)


def op_shares(profile: str, model: str, corpus: str, amp: bool, warmup: int, steps: int) -> dict:
    """One profiled pass: the CPU seconds a step (profiler on), the shares of the ops' self CPU time in matrix
    products, the fused recurrent layer and casts, and the matrix products' FLOPs a step."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    prof = torch_profile(activities=[ProfilerActivity.CPU], with_flops=True)
    marks: dict[int, float] = {}

    def on_batch(trainer, epoch: int, batch: int) -> None:
        loop = trainer.parts.loop
        if loop.steps_total == warmup:
            prof.start()
        if loop.steps_total in (warmup, warmup + steps):
            marks[loop.steps_total] = loop.train_cpu_seconds
        if loop.steps_total == warmup + steps:
            prof.stop()

    run_once(profile, model, corpus, amp, warmup, steps, on_batch)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) or 1.0

    def share(names) -> float:
        return sum(e.self_cpu_time_total for e in events if e.key in names) / total

    flops = sum(e.flops or 0 for e in events if e.key in MATRIX_OPS)
    return {"cpu_s_per_step_profiled": (marks[warmup + steps] - marks[warmup]) / steps,
            "matrix_share": share(MATRIX_OPS), "fused_rnn_share": share(FUSED_RNN_OPS), "cast_share": share(CAST_OPS),
            "matrix_flops_per_step": flops / steps}


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
    parser.add_argument("--ops", action="store_true",
                        help="also profile one pass per precision: matrix-product share and % of the GEMM peak")
    parser.add_argument("--timing-from", type=Path,
                        help="with --ops: take the timing rows from this earlier --json file instead of timing again")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every run (repeatable), e.g. data.batch_size=64")
    args = parser.parse_args()
    OVERRIDES[:] = args.set
    import torch

    from induce.training.precision import cpu_bf16_unit, resolve_precision

    torch.set_num_threads(1)
    caps = torch.cpu.get_capabilities()
    unit = cpu_bf16_unit(caps)
    print(f"processor: {caps.get('cpu_name', '?')}; bf16 matrix unit: {unit or 'none'}; "
          f"train.amp=true here: {resolve_precision(True, 'cpu').reason}; one thread")
    if args.timing_from:
        rows = json.loads(args.timing_from.read_text(encoding="utf-8"))
    else:
        rows = timing_rows(args, unit, caps.get("cpu_name"))
    if args.ops:
        rows = ops_rows(args, rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


def ops_rows(args, rows: list) -> list:
    """``rows`` (one per model of ``args.models``) with each precision's profiled shares, printed as a table."""
    import torch

    peaks = {"fp32": gemm_peak(torch.float32), "bf16": gemm_peak(torch.bfloat16)}
    print(f"GEMM peak, one thread, [1024]^3: fp32 {peaks['fp32'] / 1e9:.0f} / bf16 {peaks['bf16'] / 1e9:.0f} GFLOP/s")
    print("| model | precision | CPU-s/step | matrix products | fused LSTM (oneDNN) | casts | "
          "matrix GFLOP/step | matrix FLOP/s of the step, % of GEMM peak |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    by_model = {row["model"]: row for row in rows}
    out = []
    for model in args.models:
        row = dict(by_model.get(model, {"model": model, "profile": args.profile}))
        row["peaks_flop_s"] = peaks
        for name, amp in (("fp32", False), ("bf16", True)):
            got = op_shares(args.profile, model, args.corpus, amp, args.warmup, args.steps)
            step_s = row.get(f"{name}_cpu_s_per_step", got["cpu_s_per_step_profiled"])
            got["step_pct_peak"] = 100 * got["matrix_flops_per_step"] / step_s / peaks[name]
            row[f"ops_{name}"] = got
            print(f"| {model} | {name} | {step_s:.3f} | {100 * got['matrix_share']:.0f}% | "
                  f"{100 * got['fused_rnn_share']:.0f}% | {100 * got['cast_share']:.0f}% | "
                  f"{got['matrix_flops_per_step'] / 1e9:.2f} | {got['step_pct_peak']:.1f}% |", flush=True)
        out.append(row)
    return out


def timing_rows(args, unit, processor) -> list:
    """The alternated fp32 / bf16 timing rounds of each model of ``args.models``, printed as a table."""
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
        row = {"model": model, "profile": args.profile, "overrides": list(args.set),
               "fp32_cpu_s_per_step": statistics.median(times[False]),
               "bf16_cpu_s_per_step": statistics.median(times[True]), "ratio_median": statistics.median(ratios),
               "ratio_min": min(ratios), "ratio_max": max(ratios), "rounds": args.rounds, "steps": args.steps,
               "precision": precision, "unit": unit, "processor": processor}
        rows.append(row)
        print(f"| {model} | {row['fp32_cpu_s_per_step']:.3f} | {row['bf16_cpu_s_per_step']:.3f} | "
              f"{row['ratio_median']:.2f} ({row['ratio_min']:.2f}-{row['ratio_max']:.2f}) | "
              f"{precision.get('dtype')} ({precision.get('unit')}) |", flush=True)
    return rows


if __name__ == "__main__":
    main()
