"""TN-PCFG's low-rank inside algorithm on the CPU: our torch tier against an autograd version, side by side.

Size: TN-PCFG's released config ``tnpcfg_r500_nt250_t500`` (250 nonterminals, 500 preterminals, rank
500), one grammar for the batch (expanded, as their model passes it), B = 16 sentences of ``--lengths``
words (default 10, 20 and 30), one thread unless ``--threads``. Timed: forward, and forward + backward
of ``log Z.sum()``, medians of ``--repeats`` runs after one warm-up.

* ``ours``: :func:`induce.kernels.inside_lowrank`, torch tier (rank-space charts, hand-written outside pass).
* ``autograd``: the same algorithm as TN-PCFG's ``Fastest_TDPCFG`` (per-width stripes of the children's
  rank vectors, ``logsumexp`` over the splits, per-span normaliser, ``H = U^T V`` products), written
  here in plain PyTorch and differentiated by autograd: what a straightforward port gets.
* torch-struct cannot run this size: its CKY takes the dense ``[B, NT, S, S]`` rule tensor (~9 GB per
  16 sentences at S = 750), which is what the low-rank form avoids. Not run.

Memory: the peak of the bytes held by tensors during one forward + backward, from ``torch.profiler``'s
allocation records (each op's own allocations and frees, in time order, summed; the inputs are
excluded, the outputs and everything kept for the backward included). PyTorch keeps no allocator
statistics on the CPU; this sees every CPU tensor allocation, the same way for both.

``gemm ms`` times one ``[B * 435, r] @ [r, 2r]`` product (the forward's products at T = 30 by the
rank route) in the same run: a yardstick for how busy the machine was.

    python bench/inside_lowrank.py --threads 1 --repeats 5
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import induce.kernels as K  # noqa: E402
from induce.kernels.pcfg.lowrank_torch import log_matmul  # noqa: E402


def autograd_inside(terms, roots, head, left, right, lengths):
    """TN-PCFG's ``Fastest_TDPCFG`` algorithm (rank space, per-span normaliser), autograd backward."""
    B, N, _ = terms.shape
    NT, r = head.shape[1:]
    h, v, w = head[0], left[0], right[0]  # one grammar for the batch
    leaf = log_matmul(terms, torch.cat([v[NT:], w[NT:]], -1))  # [B, N, 2r]
    log_h = log_matmul(h.T, torch.cat([v[:NT], w[:NT]], -1))  # [r, 2r]
    h_top = log_h.amax(0, keepdim=True).detach()
    mat = torch.exp(log_h - h_top)
    root_rank = torch.logsumexp(roots[:, :, None] + head, 1)  # [B, r]
    lefts, rights = {1: leaf[..., :r]}, {1: leaf[..., r:]}  # width -> [B, N - width + 1, r]
    log_z = [None] * B
    for width in range(2, N + 1):
        n = N - width + 1
        pairs = (torch.stack([lefts[u][:, :n] for u in range(1, width)], 2)
                 + torch.stack([rights[width - u][:, u:u + n] for u in range(1, width)], 2))
        z = torch.logsumexp(pairs, 2)
        for b, length in enumerate(lengths.tolist()):
            if length == width:
                log_z[b] = torch.logsumexp(z[b, 0] + root_rank[b], -1)
        if width < N:
            top = z.amax(-1, keepdim=True).detach()
            children = torch.log((torch.exp(z - top) @ mat).clamp_min(1e-38)) + top + h_top
            lefts[width], rights[width] = children[..., :r], children[..., r:]
    return torch.stack(log_z)


def ours(terms, roots, head, left, right, lengths):
    return K.inside_lowrank(terms, roots, head, left, right, lengths, backend="torch")


def inputs(B: int, N: int, NT: int, T: int, r: int, seed: int = 0) -> Dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    S = NT + T
    return {
        "terms": torch.randn(B, N, T, generator=gen).log_softmax(-1),
        "roots": torch.randn(1, NT, generator=gen).log_softmax(-1).expand(B, NT),
        "head": torch.randn(1, NT, r, generator=gen).log_softmax(-1).expand(B, NT, r),
        "left": torch.randn(1, S, r, generator=gen).log_softmax(-2).expand(B, S, r),
        "right": torch.randn(1, S, r, generator=gen).log_softmax(-2).expand(B, S, r),
    }


def _leaves(x: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    return {k: v.detach().requires_grad_() for k, v in x.items()}


def peak_mib(call: Callable[[], None]) -> float:
    """Peak bytes held by tensors allocated during ``call`` (module docstring), in MiB."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = sorted((e for e in prof.events() if e.self_cpu_memory_usage), key=lambda e: e.time_range.start)
    held = peak = 0
    for event in events:
        held += event.self_cpu_memory_usage
        peak = max(peak, held)
    return peak / 2**20


def median_ms(call: Callable[[], None], repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", default="10,20,30", help="sentence lengths (comma-separated)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--nonterminals", type=int, default=250)
    parser.add_argument("--preterminals", type=int, default=500)
    parser.add_argument("--rank", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    B, NT, T, r = args.batch, args.nonterminals, args.preterminals, args.rank
    rows = []
    for N in (int(x) for x in args.lengths.split(",")):
        x = inputs(B, N, NT, T, r)
        lengths = torch.full((B,), N)
        for name, fn in (("ours", ours), ("autograd", autograd_inside)):
            def forward(fn=fn, x=x, lengths=lengths):
                with torch.no_grad():
                    fn(**x, lengths=lengths)

            def forward_backward(fn=fn, x=x, lengths=lengths):
                fn(**_leaves(x), lengths=lengths).sum().backward()

            rows.append({"T": N, "impl": name, "fwd_ms": median_ms(forward, args.repeats),
                         "fwd_bwd_ms": median_ms(forward_backward, args.repeats),
                         "peak_mib": peak_mib(forward_backward)})
        a, b = torch.randn(B * 435, r), torch.randn(r, 2 * r)
        rows[-1]["gemm_ms"] = rows[-2]["gemm_ms"] = median_ms(lambda a=a, b=b: a @ b, args.repeats)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"B={B} NT={NT} T={T} r={r} threads={args.threads} repeats={args.repeats} (medians)")
    print(f"{'T':>3} {'impl':>9} {'fwd ms':>8} {'fwd+bwd ms':>11} {'peak MiB':>9} {'ratio fwd+bwd':>14} "
          f"{'ratio MiB':>10} {'gemm ms':>8}")
    for row in rows:
        base = next(o for o in rows if o["T"] == row["T"] and o["impl"] == "autograd")
        print(f"{row['T']:>3} {row['impl']:>9} {row['fwd_ms']:>8.0f} {row['fwd_bwd_ms']:>11.0f} "
              f"{row['peak_mib']:>9.0f} "
              f"{base['fwd_bwd_ms'] / row['fwd_bwd_ms']:>13.2f}x {base['peak_mib'] / row['peak_mib']:>9.2f}x "
              f"{row['gemm_ms']:>8.0f}")


if __name__ == "__main__":
    main()
