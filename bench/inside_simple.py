"""The simple PCFG's inside pass on the CPU, forward + backward: ours against the authors' released code.

Sizes: ``T = 2 NT`` preterminals (the released configs' ratio) at ``--parents`` nonterminals, one grammar for
the batch (SN-PCFG), B = ``--batch`` sentences of ``--length`` words, one thread unless ``--threads``. Timed:
forward and backward of ``log Z.sum()`` with every input a leaf (terms, roots, left, right), medians of
``--repeats`` rounds after a warm-up round, the implementations interleaved in a shuffled order per round
(``bench/inside.py``'s ``time_interleaved``). Both wall and CPU seconds of the process are recorded; the
table shows CPU seconds (the machine is shared: wall time counts the neighbours' load).

* ``ours``: :func:`induce.kernels.inside_simple`, torch tier (the rank-space pass with the parents as the rank,
  hand-written outside pass).
* ``released``: ``SimplePCFG_Triton._inside`` of sustcsonglin/TN-PCFG (``parser/pcfgs/simple_pcfg.py`` and its
  Triton kernels ``parser/triton/fn.py``), imported from the checkout given as ``--released`` (not part of
  this project, not redistributed). Its kernels are Triton's, so on a CPU it runs in Triton's interpreter
  (``TRITON_INTERPRET=1``, set here before Triton is imported): the only way the released code runs without
  a GPU. Its inputs are what its model passes: the children's probabilities ``[S, NT]`` split into nonterminal
  and preterminal rows, the log emissions and log roots.
* ``port``: the released algorithm written here in plain PyTorch (the per-span normaliser, ``logsumexp`` over
  the splits, ``+ 1e-9`` before each ``log``, the ``[n, NT] @ [NT, 2 NT]`` products) and differentiated by
  autograd: what a straightforward CPU port of the released code gets.

The three values of ``log Z`` are compared in the same run (the largest difference is printed).
``gemm ms`` times one ``[B * N, NT] @ [NT, 2 NT]`` product in the same run: a yardstick of how busy the
machine was.

    git clone https://github.com/sustcsonglin/TN-PCFG ../orig/TN-PCFG     # tested at fa519b5
    nice -n 10 python bench/inside_simple.py --released ../orig/TN-PCFG --threads 1 --repeats 5
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports Triton: the released kernels on a CPU

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import induce.kernels as K  # noqa: E402


def inputs(B: int, N: int, NT: int, T: int, seed: int = 0) -> Dict[str, torch.Tensor]:
    """One grammar for the batch (log space): ``terms [B, N, T]``, ``roots [1, NT]``, ``left``, ``right [S, NT]``."""
    gen = torch.Generator().manual_seed(seed)
    S = NT + T
    return {
        "terms": torch.randn(B, N, T, generator=gen).log_softmax(-1),
        "roots": torch.randn(1, NT, generator=gen).log_softmax(-1),
        "left": torch.randn(S, NT, generator=gen).log_softmax(-2),
        "right": torch.randn(S, NT, generator=gen).log_softmax(-2),
    }


def ours(terms, roots, left, right):
    B = terms.shape[0]
    lengths = torch.full((B,), terms.shape[1])
    return K.inside_simple(terms, roots.expand(B, -1), left.expand(B, -1, -1), right.expand(B, -1, -1), lengths,
                           backend="torch")


def port(terms, roots, left, right):
    """The released ``SimplePCFG_Triton._inside`` algorithm in plain PyTorch (module docstring); autograd backward.
    Every sentence has the padded length (as the released pass assumes: it reads ``log Z`` at the last width)."""
    B, N, _ = terms.shape
    NT = roots.shape[-1]
    leaf_mat = torch.cat([left[NT:], right[NT:]], -1).exp()  # [T, 2 NT]
    mat = torch.cat([left[:NT], right[:NT]], -1).exp()  # [NT, 2 NT]
    top = terms.amax(-1, keepdim=True).detach()
    leaf = ((terms - top).exp() @ leaf_mat + 1e-9).log() + top
    lefts, rights = {1: leaf[..., :NT]}, {1: leaf[..., NT:]}
    for width in range(2, N + 1):
        n = N - width + 1
        pairs = torch.stack([lefts[u][:, :n] + rights[width - u][:, u:u + n] for u in range(1, width)], 2)
        z = torch.logsumexp(pairs, 2)  # [B, n, NT]
        if width < N:
            top = z.amax(-1, keepdim=True).detach()
            children = ((z - top).exp() @ mat + 1e-9).log() + top
            lefts[width], rights[width] = children[..., :NT], children[..., NT:]
    return torch.logsumexp(z[:, 0] + roots, -1)


def released_inside(checkout: Path) -> Callable:
    """The released pass as a function of our inputs (module docstring). Imports ``parser.pcfgs.simple_pcfg``
    from ``checkout`` (its ``parser`` package first on the path)."""
    sys.path.insert(0, str(checkout))
    module = importlib.import_module("parser.pcfgs.simple_pcfg")
    pcfg = module.SimplePCFG_Triton()

    def run(terms, roots, left, right):
        B, N, _ = terms.shape
        NT = roots.shape[-1]
        rules = {"unary": terms, "root": roots.expand(B, NT), "left_m": left[:NT].exp(), "left_p": left[NT:].exp(),
                 "right_m": right[:NT].exp(), "right_p": right[NT:].exp()}
        return pcfg._inside(rules, torch.full((B,), N))["partition"]

    return run


def time_interleaved(fns: Dict[str, Callable], repeats: int) -> Dict[str, Dict[str, float]]:
    """Median wall and CPU seconds of each call over ``repeats`` rounds after a warm-up round, each round in its
    own (seeded) shuffled order, so that no call always follows the same one."""
    samples: Dict[str, Dict[str, list]] = {name: {"wall": [], "cpu": []} for name in fns}
    for round_ in range(repeats + 1):
        order = list(fns)
        random.Random(round_).shuffle(order)
        for name in order:
            wall, cpu = time.perf_counter(), time.process_time()
            fns[name]()
            if round_:
                samples[name]["wall"].append(time.perf_counter() - wall)
                samples[name]["cpu"].append(time.process_time() - cpu)
    return {name: {k: statistics.median(v) for k, v in s.items()} for name, s in samples.items()}


def forward_backward(fn: Callable, x: Dict[str, torch.Tensor]) -> Callable[[], None]:
    def call() -> None:
        leaves = {k: v.detach().requires_grad_() for k, v in x.items()}
        fn(**leaves).sum().backward()

    return call


def measure(impls: Dict[str, Callable], B: int, N: int, NT: int, repeats: int) -> List[dict]:
    x = inputs(B, N, NT, 2 * NT)
    with torch.no_grad():
        values = {name: fn(**x) for name, fn in impls.items()}
    difference = max(float((v - values["ours"]).abs().max()) for v in values.values())
    times = time_interleaved({name: forward_backward(fn, x) for name, fn in impls.items()}, repeats)
    a, b = torch.randn(B * N, NT), torch.randn(NT, 2 * NT)
    gemm = time_interleaved({"gemm": lambda: a @ b}, repeats)["gemm"]["wall"]
    return [{"NT": NT, "T": 2 * NT, "B": B, "N": N, "impl": name, "fwd_bwd_cpu_s": t["cpu"],
             "fwd_bwd_wall_s": t["wall"], "log_z_max_difference": difference, "gemm_ms": 1000 * gemm}
            for name, t in times.items()]


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--released", type=Path, default=None,
                        help="a checkout of sustcsonglin/TN-PCFG (without it: ours and the port only)")
    parser.add_argument("--parents", default="64,256,1024", help="nonterminal counts NT (comma-separated; T = 2 NT)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    impls = {"ours": ours, "port": port}
    if args.released is not None:
        impls["released"] = released_inside(args.released)
    rows = []
    for NT in (int(x) for x in args.parents.split(",")):
        rows += measure(impls, args.batch, args.length, NT, args.repeats)
        print(f"NT={NT} done", file=sys.stderr)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"B={args.batch} N={args.length} T=2NT threads={args.threads} repeats={args.repeats} "
          f"(medians, CPU seconds of forward + backward)")
    print(f"{'NT':>5} {'impl':>9} {'fwd+bwd s':>10} {'wall s':>8} {'ours faster':>12} {'|dlogZ|':>9} {'gemm ms':>8}")
    for row in rows:
        mine = next(o for o in rows if o["NT"] == row["NT"] and o["impl"] == "ours")
        print(f"{row['NT']:>5} {row['impl']:>9} {row['fwd_bwd_cpu_s']:>10.3f} {row['fwd_bwd_wall_s']:>8.3f} "
              f"{row['fwd_bwd_cpu_s'] / mine['fwd_bwd_cpu_s']:>11.1f}x {row['log_z_max_difference']:>9.1e} "
              f"{row['gemm_ms']:>8.1f}")


if __name__ == "__main__":
    main()
