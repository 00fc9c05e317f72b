"""A model's learning curve against training CPU-minutes: dev F1 of copies of the model taken along one run.

``train`` trains a profile's model (``--profile``, ``--model``: the config ``induce reproduce`` would build, plus
``key=value`` overrides) in this process into ``OUT/run`` and, every ``--every`` optimiser steps, writes a copy of
the model as ``induce eval`` reads it (``OUT/snaps/step-NNNNNNN/best.*``: the weights the run would select at that
step, ASGD's averages in the ASGD phase) with the training CPU seconds spent so far (the trainer's
``train_cpu_seconds``: the training steps only, evaluations and checkpoint writes left out) in
``OUT/snaps.jsonl``. It stops once ``--cpu-minutes`` of training CPU are spent (or at ``train.max_steps``); the
same command continues a stopped run exactly (``induce train --resume``), with a larger ``--cpu-minutes`` to go on.
``eval`` scores, for each CPU-minute mark, the first copy at or after it (``induce eval --json`` on the ``--corpus``
/ ``--split`` given, ``--max-length`` for WSJ40; ``--steps`` for the copies at given steps instead; with the run's
last monitor-set validation perplexity at or before the copy) into ``OUT/curve.jsonl`` (one ``eval`` of the same
scores at a time per OUT: ``OUT/eval-KEY.lock``; ``train`` holds its run's ``train.lock``); ``table`` prints the
curves as Markdown.

    OMP_NUM_THREADS=1 python bench/learning_curve.py train --out CURVE --profile cpu --model prpn \\
        --corpus CORPORA/ptb-wsj-train2500-valid400 --every 79 --cpu-minutes 60
    OMP_NUM_THREADS=1 python bench/learning_curve.py eval --out CURVE --corpus CORPORA/ptb-wsj --split valid \\
        --max-length 40
    python bench/learning_curve.py table CURVE [CURVE ...]

Where the copies are taken (every ``--every`` steps) and what they hold do not depend on the machine: the run is
the same, bit for bit, as one without the copies. Where a run stops (a CPU budget) and the CPU-minutes of each copy
do: one thread's CPU time varies by ~10-50% between machines and with the load (caches, another process on the
core), so the x-axis is a measurement, not a budget to compare to the digit.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

DEFAULT_MARKS = "1,2,3,4,5,6,8,10,12,15,20,25,30,35,40,45,50,55,60"


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def append_jsonl(path: Path, row: dict) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")


def pick_snapshots(snaps: list[dict], marks: list[float], last: bool = True) -> list[tuple[float, dict]]:
    """``(mark, snapshot)`` for each CPU-minute mark: the first snapshot whose training CPU reaches it; marks
    past the last snapshot are left out, and the last snapshot is scored too (mark = its own minutes) unless
    ``last`` is False (while the run is still going)."""
    ordered = sorted(snaps, key=lambda s: s["step"])
    chosen: list[tuple[float, dict]] = []
    for mark in marks:
        hit = next((s for s in ordered if s["train_cpu_seconds"] / 60 >= mark), None)
        if hit is not None and all(hit is not c for _, c in chosen):
            chosen.append((mark, hit))
    if last and ordered and all(ordered[-1] is not c for _, c in chosen):
        chosen.append((round(ordered[-1]["train_cpu_seconds"] / 60, 2), ordered[-1]))
    return chosen


def pick_steps(snaps: list[dict], steps: list[int]) -> list[tuple[None, dict]]:
    """``(None, snapshot)`` for each step asked for that has a copy: the comparison of two runs at the same steps
    (bf16 beside float32, whose CPU-minutes differ); a step with no copy is left out."""
    by_step = {s["step"]: s for s in snaps}
    return [(None, by_step[step]) for step in steps if step in by_step]


def cmd_train(args: argparse.Namespace, overrides: list[str]) -> None:
    import torch

    from induce.reproduce.profiles import build_run_config, load_profile
    from induce.training import resume, train
    from induce.training.parts import save_best
    from induce.training.trainer import TrainingInterrupted

    out: Path = args.out
    run_dir, snap_dir, index = out / "run", out / "snaps", out / "snaps.jsonl"
    snap_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    budget = args.cpu_minutes * 60 if args.cpu_minutes is not None else None
    stopping = []

    def on_batch(trainer, epoch: int, batch: int) -> None:
        loop = trainer.parts.loop
        cpu = loop.train_cpu_seconds
        if loop.steps_total % args.every == 0:
            name = f"step-{loop.steps_total:07d}"
            save_best(snap_dir / name, trainer.parts, {"steps": loop.steps_total, "train_cpu_seconds": cpu})
            append_jsonl(index, {"name": name, "step": loop.steps_total, "epoch": epoch, "batch": batch,
                                 "tokens": loop.tokens_total, "train_cpu_seconds": round(cpu, 3)})
        if budget is not None and cpu >= budget and not stopping:
            stopping.append(True)
            os.kill(os.getpid(), signal.SIGINT)  # the trainer's own interrupt: `last` is written, resumable

    try:
        if (run_dir / "last.json").is_file():
            resume(run_dir, progress=False, on_batch=on_batch)
        else:
            config = build_run_config(load_profile(args.profile), args.model, [
                f"data.corpus={args.corpus}", "train.device=cpu", f"train.threads={args.threads}", *overrides])
            train(config, run_dir, on_batch=on_batch, progress=False)
    except TrainingInterrupted:
        if not stopping:
            raise
        print(f"stopped after {args.cpu_minutes} training CPU-minutes; the same command with a larger "
              "--cpu-minutes goes on", file=sys.stderr)


def cmd_eval(args: argparse.Namespace) -> None:
    """:func:`score_marks` under a lock of OUT for its scores (``OUT/eval-KEY.lock``, ``KEY`` from ``--corpus``,
    ``--split`` and ``--max-length``): two ``eval`` of the same scores would both score the copies not yet in
    ``curve.jsonl`` and append each row twice, so the second is refused at once (naming the first's PID and host);
    an ``eval`` of other scores runs beside it."""
    import hashlib

    from induce.errors import InduceError
    from induce.training.run_folder import FolderLock

    key = json.dumps([str(args.corpus), args.split, args.max_length])
    lock = FolderLock(args.out, file_name=f"eval-{hashlib.sha256(key.encode()).hexdigest()[:12]}.lock",
                      holder=f"learning-curve eval of {args.corpus} {args.split}"
                      + (f" to {args.max_length} words" if args.max_length is not None else ""),
                      note=lambda message: print(f"note: {message}", file=sys.stderr))
    try:
        lock.acquire()
    except InduceError as err:
        sys.exit(str(err))
    try:
        score_marks(args)
    finally:
        lock.release()


def score_marks(args: argparse.Namespace) -> None:
    out: Path = args.out
    marks = [float(m) for m in args.marks.split(",")]
    curve = out / "curve.jsonl"
    key = {"corpus": str(args.corpus), "split": args.split, "max_length": args.max_length}
    done = {row["name"] for row in read_jsonl(curve) if all(row.get(k) == v for k, v in key.items())}
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    snaps = read_jsonl(out / "snaps.jsonl")
    chosen = (pick_steps(snaps, [int(s) for s in args.steps.split(",")]) if getattr(args, "steps", None)
              else pick_snapshots(snaps, marks, last=not args.marks_only))
    for mark, snap in chosen:
        if snap["name"] in done:
            continue
        folder = out / "snaps" / snap["name"]
        checkpoint = folder / ("best" if (folder / "best.json").is_file() else "last")  # a copy of `last` reads too
        command = [sys.executable, "-m", "induce", "eval", "--checkpoint", str(checkpoint),
                   "--corpus", str(args.corpus), "--split", args.split, "--json", "--device", "cpu"]
        if args.max_length is not None:
            command += ["--max-length", str(args.max_length)]
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            sys.exit(f"{snap['name']}: induce eval failed: {result.stderr.strip().splitlines()[-1:]}")
        scores = json.loads(result.stdout)
        row = {"mark": mark, "name": snap["name"], "step": snap["step"], "epoch": snap["epoch"],
               "train_cpu_minutes": round(snap["train_cpu_seconds"] / 60, 3), **key,
               "sentences": scores["n_sentences"], "sentence_f1": scores["sentence_f1"],
               "corpus_f1": scores["corpus_f1"], "left_split_pct": scores["left_split_pct"],
               "right_split_pct": scores["right_split_pct"], **last_validation(out, snap["step"])}
        append_jsonl(curve, row)
        print(json.dumps(row), flush=True)


def last_validation(out: Path, step: int) -> dict:
    """The run's last validation perplexity on its monitor set at or before ``step`` (``OUT/run/metrics.jsonl``: the
    trainer's evaluation at each epoch's end) and the step it was taken at; empty before the first one."""
    rows = [r for r in read_jsonl(out / "run" / "metrics.jsonl")
            if isinstance(r.get("valid_ppl"), (int, float)) and isinstance(r.get("steps"), int) and r["steps"] <= step]
    if not rows:
        return {}
    last = max(rows, key=lambda r: r["steps"])
    return {"valid_ppl": last["valid_ppl"], "valid_ppl_step": last["steps"]}


def cmd_table(args: argparse.Namespace) -> None:
    for out in args.outs:
        rows = sorted(read_jsonl(Path(out) / "curve.jsonl"), key=lambda r: r["step"])
        print(f"\n{out}\n")
        print("| CPU-min | step | epoch | sentence F1 | corpus F1 | % left / right splits |")
        print("|---:|---:|---:|---:|---:|---|")
        for r in rows:
            print(f"| {r['train_cpu_minutes']:.1f} | {r['step']} | {r['epoch']} | {r['sentence_f1']:.1f} | "
                  f"{r['corpus_f1']:.1f} | {r['left_split_pct']:.0f} / {r['right_split_pct']:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="train, a copy every --every steps (key=value overrides follow)")
    tr.add_argument("--out", type=Path, required=True)
    tr.add_argument("--profile", default="cpu")
    tr.add_argument("--model", required=True)
    tr.add_argument("--corpus", required=True, help="prepared corpus to train on (and monitor)")
    tr.add_argument("--every", type=int, required=True, help="optimiser steps between copies")
    tr.add_argument("--cpu-minutes", type=float, default=None, help="stop after this much training CPU")
    tr.add_argument("--threads", type=int, default=1)
    ev = sub.add_parser("eval", help="score the copy at each CPU-minute mark")
    ev.add_argument("--out", type=Path, required=True)
    ev.add_argument("--corpus", required=True)
    ev.add_argument("--split", default="valid")
    ev.add_argument("--max-length", type=int, default=None)
    ev.add_argument("--marks", default=DEFAULT_MARKS, help="CPU-minutes, comma-separated")
    ev.add_argument("--marks-only", action="store_true", help="not the last copy too (a run still going)")
    ev.add_argument("--steps", default=None, help="the copies at these optimiser steps, comma-separated, instead of "
                    "--marks (two runs compared step for step)")
    ta = sub.add_parser("table", help="Markdown tables of the scored curves")
    ta.add_argument("outs", nargs="+")
    args, rest = parser.parse_known_args()
    if args.command == "train":
        bad = [r for r in rest if "=" not in r or r.startswith("-")]
        if bad:
            parser.error(f"unrecognised arguments: {' '.join(bad)} (overrides are key=value)")
        cmd_train(args, rest)
    elif rest:
        parser.error(f"unrecognised arguments: {' '.join(rest)}")
    elif args.command == "eval":
        cmd_eval(args)
    else:
        cmd_table(args)


if __name__ == "__main__":
    main()
