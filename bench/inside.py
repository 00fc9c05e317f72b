"""Speed and memory of the dense-PCFG inside algorithm against torch-struct 0.5, side by side in one run.

At ``B`` sentences of ``T`` words (all of length ``T``), ``--nonterminals`` / ``--preterminals``
(default 30 / 60, Kim et al.'s N-PCFG and C-PCFG) and ``--threads`` (default 1), for each ``T``:

* ``inside+backward``: :func:`induce.kernels.inside` (``--tier``, default torch) and the gradient of
  ``log Z`` with respect to the terms, rules and roots, what a training step needs;
* ``torch-struct``: ``SentCFG((terms, rules, roots), lengths).partition`` and the same backward
  (torch-struct 0.5 from the package index, if installed; skipped with a note otherwise);
* ``inside forward``: ``log Z`` alone under ``torch.no_grad()``;
* ``viterbi``: :func:`induce.kernels.viterbi`, the best tree's score and the tree (max-product
  forward and the walk back down the best tree), what ``--decoder viterbi`` needs: on the compiled
  loops of :mod:`induce.kernels.pcfg.native` where they build (the header line says), and
  ``viterbi, eager`` the same on the torch tier's eager loops (their twin);
* ``marginals``: :func:`induce.kernels.span_marginals`, what MBR decoding needs.

The calls are interleaved (one of each per round, ``--repeats`` rounds after one warm-up round, each round
in its own shuffled order, glibc's heap trimmed after torch-struct's call, untimed) and medians reported,
so load from other processes affects every column alike; the ratios compare the same rounds. Inputs are
PCFG-normalised random scores (``log_softmax`` of normal draws), and the two log partitions are checked to
agree.

Peak memory: a fresh ``python bench/inside.py --probe NAME T`` process per entry builds the inputs,
runs the call once (warm-up), resets its peak resident set (``echo 5 > /proc/self/clear_refs``),
runs it again and reports ``VmHWM`` minus the resident set before that call: the most memory the
call held at once above what was resident, measured the same way for both libraries (PyTorch keeps
no allocation statistics on CPU). The probe runs with ``MALLOC_MMAP_THRESHOLD_=65536``: every
allocation of 64 KiB or more is its own mapping, returned when freed, so the resident set follows the
live tensors (glibc would otherwise keep the warm-up's freed memory and hide the second call's peak).
Both calls clone the inputs as leaves (the rules: 15.5 MiB at the default size), so that clone and
the gradients are in both figures.

    python bench/inside.py --threads 1 --lengths 10 20 30 --repeats 5
    python bench/inside.py --json inside.json
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import induce.kernels as K  # noqa: E402
from induce.kernels.pcfg import native as inside_native  # noqa: E402


def make_inputs(B: int, T: int, NT: int, P: int, seed: int = 0) -> Dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    S = NT + P
    return {
        "terms": torch.randn(B, T, P, generator=gen).log_softmax(-1),
        "rules": torch.randn(B, NT, S * S, generator=gen).log_softmax(-1).view(B, NT, S, S),
        "roots": torch.randn(B, NT, generator=gen).log_softmax(-1),
        "lengths": torch.full((B,), T, dtype=torch.long),
    }


def torch_struct_reason() -> Optional[str]:
    try:
        import torch_struct  # noqa: F401
        from torch_struct import SentCFG  # noqa: F401
    except Exception as error:  # not installed, or not importable with this torch
        return f"{type(error).__name__}: {error}"
    return None


def calls(inp: Dict[str, torch.Tensor], tier: str) -> Dict[str, Callable[[], object]]:
    """Name -> a call that does the measured work once (fresh leaves each time)."""
    lengths = inp["lengths"]

    def leaves():
        return [inp[k].clone().requires_grad_() for k in ("terms", "rules", "roots")]

    def ours():
        t, r, o = leaves()
        K.inside(t, r, o, lengths, backend=tier).sum().backward()

    def forward():
        with torch.no_grad():
            return K.inside(inp["terms"], inp["rules"], inp["roots"], lengths, backend=tier)

    def viterbi():
        return K.viterbi(inp["terms"], inp["rules"], inp["roots"], lengths, backend=tier)

    def viterbi_eager():
        with inside_native.use_native(False):
            return viterbi()

    def marginals():
        return K.span_marginals(lambda s: K.inside(inp["terms"], inp["rules"], inp["roots"], lengths, span_scores=s,
                                                   backend=tier), inp["terms"])

    out = {"inside+backward": ours, "inside forward": forward, "viterbi": viterbi, "viterbi, eager": viterbi_eager,
           "marginals": marginals}
    if torch_struct_reason() is None:
        from torch_struct import SentCFG

        def struct():
            t, r, o = leaves()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # SentCFG's arg_constraints note
                SentCFG((t, r, o), lengths=lengths).partition.sum().backward()

        out["torch-struct"] = struct
    return out


def check_agreement(inp: Dict[str, torch.Tensor], tier: str) -> Optional[float]:
    """Largest |log Z| difference between our tier and torch-struct (None without torch-struct)."""
    if torch_struct_reason() is not None:
        return None
    from torch_struct import SentCFG

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = SentCFG((inp["terms"], inp["rules"], inp["roots"]), lengths=inp["lengths"]).partition
        ours = K.inside(inp["terms"], inp["rules"], inp["roots"], inp["lengths"], backend=tier)
    return float((theirs.detach() - ours).abs().max())


def time_interleaved(fns: Dict[str, Callable], repeats: int) -> Dict[str, float]:
    """Median seconds of each call over ``repeats`` rounds (one warm-up round first), each round in its own
    order (shuffled, seeded by the round), so that a call follows a different one from round to round. No
    call should always run right after torch-struct's, which streams ~4 GB at T = 30 and leaves the caches
    cold. An earlier version rotated a fixed order by one call per round, which keeps every call's
    predecessor: inside + backward followed torch-struct in every round all the same."""
    samples: Dict[str, list] = {name: [] for name in fns}
    for round_ in range(repeats + 1):
        order = list(fns)
        random.Random(round_).shuffle(order)
        for name in order:
            start = time.perf_counter()
            fns[name]()
            if round_:
                samples[name].append(time.perf_counter() - start)
            if name == "torch-struct":
                trim_heap()
    return {name: statistics.median(s) for name, s in samples.items()}


def trim_heap() -> None:
    """glibc's ``malloc_trim(0)`` (nothing where there is none), untimed after torch-struct's call: the heap it
    grew goes back to the system before the next call starts. Without it, whichever call next freed memory
    paid for that trim: Viterbi's median went from 16-18 ms to 68 ms in one run of 7 rounds (20-64 ms of
    system time in the slow calls); inside + backward's median of 114-123 ms in two other runs (61 ms alone)
    was most likely the same. Trimming after every
    call instead makes every call fault its memory in afresh (inside + backward at T = 10: 21 -> 39 ms), which
    no training loop does."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def probe(name: str, T: int, args) -> None:
    """In a fresh process: peak resident memory of one call above the resident set before it (MiB)."""
    torch.set_num_threads(args.threads)
    inp = make_inputs(args.batch, T, args.nonterminals, args.preterminals)
    fn = calls(inp, args.tier)[name]
    fn()  # warm-up: one-time buffers (thread pools, BLAS workspaces) are in the baseline, not the peak
    before = _rss_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM to the current resident set
    fn()
    print(json.dumps({"peak_mib": (_rss_kib("VmHWM") - before) / 1024}))


def peak_memory(name: str, T: int, args) -> Optional[float]:
    command = [sys.executable, __file__, "--probe", name, str(T), "--threads", str(args.threads),
               "--batch", str(args.batch), "--nonterminals", str(args.nonterminals),
               "--preterminals", str(args.preterminals), "--tier", args.tier]
    # every allocation of 64 KiB or more is its own mapping, returned to the system when freed, so the
    # resident set follows the live tensors (glibc's default would keep freed memory after the warm-up)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        print(f"memory probe {name} T={T} failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_mib"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[10, 20, 30], help="sentence lengths T")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--nonterminals", type=int, default=30)
    parser.add_argument("--preterminals", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds after one warm-up round")
    parser.add_argument("--tier", default="torch", choices=["torch", "reference"])
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    parser.add_argument("--probe", nargs=2, metavar=("NAME", "T"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        probe(args.probe[0], int(args.probe[1]), args)
        return 0
    torch.set_num_threads(args.threads)
    reason = torch_struct_reason()
    if reason is not None:
        print(f"torch-struct is not importable ({reason}): its column is skipped "
              "(pip install --no-deps torch-struct==0.5)")
    native = inside_native.unavailable_reason()
    print("viterbi: compiled max-product loops" if native is None else f"viterbi: eager loops only ({native})")
    print(f"B={args.batch}, {args.nonterminals} nonterminals, {args.preterminals} preterminals, "
          f"{args.threads} thread(s), tier {args.tier}, median of {args.repeats}, "
          f"load average {os.getloadavg()[0]:.1f} at start")
    rows = []
    for T in args.lengths:
        inp = make_inputs(args.batch, T, args.nonterminals, args.preterminals)
        diff = check_agreement(inp, args.tier)
        times = time_interleaved(calls(inp, args.tier), args.repeats)
        memory = {} if args.no_memory else {
            name: peak_memory(name, T, args) for name in ("inside+backward", "torch-struct") if name in times}
        row = {"T": T, "seconds": times, "peak_mib": memory, "log_z_max_abs_diff": diff,
               "load_average": os.getloadavg()[0], "viterbi_compiled": native is None}
        if "torch-struct" in times:
            row["speedup"] = times["torch-struct"] / times["inside+backward"]
            if memory.get("inside+backward") and memory.get("torch-struct"):
                row["memory_ratio"] = memory["torch-struct"] / memory["inside+backward"]
        rows.append(row)
        ms = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in times.items())
        print(f"T={T}: {ms}")
        if memory:
            print("       peak " + ", ".join(f"{k} {v:.1f} MiB" for k, v in memory.items() if v is not None))
        if "speedup" in row:
            print(f"       torch-struct / ours: {row['speedup']:.1f}x time"
                  + (f", {row['memory_ratio']:.1f}x peak memory" if "memory_ratio" in row else "")
                  + f"; log Z agree to {diff:.2e}")
        print(f"       viterbi / inside forward {times['viterbi'] / times['inside forward']:.2f}, viterbi / "
              f"inside+backward {times['viterbi'] / times['inside+backward']:.2f}, viterbi eager / viterbi "
              f"{times['viterbi, eager'] / times['viterbi']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
