"""Speed and memory of the kernels of :mod:`induce.kernels`, tier against tier, in one run.

For every kernel, size and tier: median forward time and median forward+backward time over
``--repeats`` runs (after one warm-up), memory, and the ratios to the torch tier measured in the
same run. Span representations and span attention also get the baseline PaLM calls
"computationally daunting" ("per-span"): every span ``[t-k, t]`` encoded by its own rational-RNN
pass over its tokens (both directions), then the torch tier's scoring and softmax.

Memory: on CUDA the peak allocated during forward+backward (``torch.cuda.max_memory_allocated``
above what the inputs hold); on CPU, where PyTorch keeps no allocation statistics, the bytes of the
tensors the forward pass keeps for the backward pass plus its outputs ("kept"), counted with
``torch.autograd.graph.saved_tensors_hooks`` (each storage once). On CUDA the scans and cumax also
report their compulsory bytes moved (every input read and every output written once) and the
achieved GB/s; ``--peak-gbps`` turns those into a fraction of the device's bandwidth.

Sizes: ``paper`` is PaLM's B=20, T=70, m=20, D=400 (A=400, PRPN window 15, cumax over D; the
ON-LSTM cell step is always one step of a 1150-unit layer in chunks of 10, batch B);
``palm-released`` is the span attention of the authors' released PaLM (D=200 per direction, A=100);
``long1024`` (B=2) and ``long4096`` (B=1) are long contexts with the batch reduced to keep the CPU
run short; the reference tier and the per-span baseline are skipped at ``long4096`` (Python loops:
minutes per call), and their forward+backward is skipped at ``long1024``. Those two are timed
``--slow-repeats`` times (default 3), the fast tiers ``--repeats`` times (default 5). On CUDA a
timed sample is 10 back-to-back calls between CUDA events (launch overhead hidden behind the GPU's
work, as in a training loop); on CPU it is one call timed with the wall clock.
The Triton tier runs only on CUDA (on CPU it would run in Triton's interpreter, which says nothing
about speed).

    python bench/kernels.py --threads 1,2 --repeats 5
    python bench/kernels.py --threads 2 --sizes paper --json > kernels.json
    python bench/kernels.py --device cuda --peak-gbps 3350       # on a GPU (H100 SXM: 3.35 TB/s)
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional

import torch
from rich.console import Console
from rich.table import Table

import induce.kernels as K
from induce.kernels.recurrent.torch_impl import attend_over_spans
from induce.kernels.testing import onlstm_cell_inputs, random_scan_inputs, span_attention_inputs

SIZES = {  # name: (B, T, D, A, m, window)
    "paper": (20, 70, 400, 400, 20, 15),
    "long1024": (2, 1024, 400, 400, 20, 15),
    "long4096": (1, 4096, 400, 400, 20, 15),
    # The span attention of PaLM as released (Noahs-ARK/PaLM train.sh): rational RNN 200 per
    # direction (context 400), scoring MLP 100; m = 20 as in the paper's PTB runs.
    "palm-released": (20, 70, 200, 100, 20, 15),
    # GPU-sized: fills the chip and puts every tensor (105 MB) well past the L2 cache, so the
    # scans and cumax measure memory bandwidth, not cache bandwidth.
    "gpu-large": (64, 1024, 400, 400, 20, 15),
}
SKIP = {  # (size, tier) -> what is skipped: "all" or "backward"
    ("long4096", "reference"): "all",
    ("long4096", "per-span"): "all",
    ("long1024", "per-span"): "backward",
    ("long1024", "reference"): "backward",
    ("gpu-large", "reference"): "all",
    ("gpu-large", "per-span"): "all",
}
SLOW_TIERS = ("reference", "per-span")  # timed --slow-repeats times (Python loops, seconds per call)


# ----------------------------------------------------------------------------------- baseline
def per_span_representations(u: torch.Tensor, log_f: torch.Tensor, max_len: int, reverse: bool) -> torch.Tensor:
    """``[B, T, m, D]``: every span ``[t-k, t]`` encoded by its own rational-RNN pass over its tokens.

    The method PaLM calls computationally daunting (one RNN run per span), vectorised over B and D
    only; same convention as :func:`induce.kernels.span_representations`.
    """
    B, T, D = u.shape
    rows = []
    for t in range(T):
        spans = []
        for k in range(max_len):
            state = torch.zeros_like(u[:, 0])
            if t - k >= 0:
                for j in (range(t, t - k - 1, -1) if reverse else range(t - k, t + 1)):
                    state = log_f[:, j].exp() * state + u[:, j]
            spans.append(state)
        rows.append(torch.stack(spans, dim=1))
    return torch.stack(rows, dim=1)


def per_span_attention(u_fwd, logf_fwd, u_bwd, logf_bwd, query, w_span, v, max_len):
    """Span attention with per-span RNN passes for the representations and the torch tier's scoring."""
    fwd = per_span_representations(u_fwd, logf_fwd, max_len, reverse=False)
    bwd = per_span_representations(u_bwd, logf_bwd, max_len, reverse=True)
    return attend_over_spans(fwd, bwd, query, w_span, v)


# ---------------------------------------------------------------------------------- measuring
def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _kept_bytes(fn: Callable, inputs: List[torch.Tensor]) -> int:
    """Bytes saved for backward plus output bytes (each storage once, inputs excluded)."""
    seen = {t.untyped_storage().data_ptr() for t in inputs}
    total = 0

    def count(t: torch.Tensor) -> None:
        nonlocal total
        ptr = t.untyped_storage().data_ptr()
        if ptr not in seen:
            seen.add(ptr)
            total += t.untyped_storage().nbytes()

    def pack(t: torch.Tensor):
        count(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        outs = fn()
    for out in outs if isinstance(outs, tuple) else (outs,):
        count(out)
    return total


def _loss(outs) -> torch.Tensor:
    outs = outs if isinstance(outs, tuple) else (outs,)
    return sum(torch.where(torch.isfinite(o), o, torch.zeros_like(o)).sum() for o in outs)


#: On CUDA each timed sample is this many back-to-back calls between two CUDA events (see _median_seconds).
CUDA_CALLS_PER_SAMPLE = 10


def _median_seconds(call: Callable[[], None], repeats: int, device: str) -> float:
    """Median seconds of one ``call()`` over ``repeats`` samples.

    CPU: wall clock around one call. CUDA: CUDA events around :data:`CUDA_CALLS_PER_SAMPLE`
    back-to-back calls, divided by their number: the host queues the next launches while the GPU
    runs, so a kernel's time is not inflated by the Python and launch overhead in front of it (a
    ~0.1 ms kernel timed alone with a host clock would carry ~0.06 ms of overhead). Where the host
    is the bottleneck (many tiny launches), the figure is the host's pace, as in real use.
    """
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(CUDA_CALLS_PER_SAMPLE):
                call()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / CUDA_CALLS_PER_SAMPLE)
        else:
            start_s = time.perf_counter()
            call()
            times.append(time.perf_counter() - start_s)
    return statistics.median(times)


def measure(fn: Callable, inputs: List[torch.Tensor], repeats: int, device: str, backward: bool) -> Dict[str, float]:
    """Median forward (and forward+backward) seconds, and memory (see the module docstring)."""
    leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in inputs]
    result: Dict[str, float] = {}

    def forward():
        return fn(*leaves)

    def forward_backward():
        outs = fn(*leaves)
        torch.autograd.grad(_loss(outs), [t for t in leaves if t.requires_grad], allow_unused=True)

    def no_grad_forward():
        with torch.no_grad():
            forward()

    no_grad_forward()  # warm-up (compilation of Triton kernels, allocator)
    result["fwd_s"] = _median_seconds(no_grad_forward, repeats, device)
    if backward:
        forward_backward()
        result["fwd_bwd_s"] = _median_seconds(forward_backward, repeats, device)
    if device == "cuda":
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        (forward_backward if backward else forward)()
        _sync(device)
        result["peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
    elif backward:
        result["kept_mib"] = _kept_bytes(forward, leaves) / 2**20
    return result


# ------------------------------------------------------------------------------------- cases
def cases(size: str, device: str):
    """``(kernel, {tier: (fn, inputs)}, compulsory bytes fwd, fwd+bwd)`` for one size."""
    B, T, D, A, m, window = SIZES[size]
    gen = torch.Generator().manual_seed(0)
    to = lambda d: {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in d.items()}  # noqa: E731
    tiers = ["reference", "torch"] + (["triton"] if device == "cuda" and K.triton_unavailable_reason() is None else [])
    n = B * T * D * 4

    x = torch.randn(B, T, D, generator=gen).to(device)
    yield "cumax", {tier: (lambda x, tier=tier: K.cumax(x, backend=tier), [x]) for tier in tiers}, 2 * n, 5 * n

    # One ON-LSTM cell step at the paper's layer size (H = 1150, chunks of 10) for the size's batch:
    # the kernel is per time step, so T does not enter.
    chunks, chunk = 115, 10
    cell = to(onlstm_cell_inputs(B, chunks, chunk, seed=2))
    G, H = cell["gates"].shape[1], chunks * chunk
    yield "onlstm_cell", {
        tier: (lambda g, c, tier=tier: K.onlstm_cell(g, c, chunks, backend=tier), [cell["gates"], cell["c"]])
        for tier in tiers
    }, 4 * B * (G + 3 * H + chunks), 4 * B * (3 * G + 7 * H + 2 * chunks)

    d = torch.rand(B, T, generator=gen).to(device)
    d_next = torch.rand(B, T, generator=gen).to(device)
    yield "stick_breaking_gates", {
        tier: (lambda d, dn, tier=tier: K.stick_breaking_gates(d, window, d_next=dn, backend=tier), [d, d_next])
        for tier in tiers
    }, None, None

    scan = to(random_scan_inputs(B, T, D, generator=gen))
    yield "linear_scan", {
        tier: (lambda lf, u, tier=tier: K.linear_scan(lf, u, backend=tier), [scan["log_f"], scan["u"]])
        for tier in tiers
    }, 3 * n, 8 * n

    att = to(span_attention_inputs(B, T, D, A, seed=1))
    c_fwd = K.linear_scan(scan["log_f"], scan["u"], backend="torch")
    entries = {
        tier: (lambda c, lf, tier=tier: K.span_representations(c, lf, m, backend=tier), [c_fwd, scan["log_f"]])
        for tier in tiers
    }
    entries["per-span"] = (lambda u, lf: per_span_representations(u, lf, m, False), [scan["u"], scan["log_f"]])
    yield "span_representations", entries, None, None

    names = ["query", "c_fwd", "logf_fwd", "c_bwd", "logf_bwd", "w_span", "v"]
    entries = {
        tier: (lambda *xs, tier=tier: K.span_attention(*xs, m, backend=tier), [att[k] for k in names])
        for tier in tiers
    }
    # the inputs u of the scans, recovered from c (u_t = c_t - f_t c_prev)
    zero = torch.zeros_like(att["c_fwd"][:, :1])
    u_fwd = att["c_fwd"] - att["logf_fwd"].exp() * torch.cat([zero, att["c_fwd"][:, :-1]], 1)
    u_bwd = att["c_bwd"] - att["logf_bwd"].exp() * torch.cat([att["c_bwd"][:, 1:], zero], 1)
    entries["per-span"] = (
        lambda uf, lff, ub, lfb, q, w, v: per_span_attention(uf, lff, ub, lfb, q, w, v, m),
        [u_fwd, att["logf_fwd"], u_bwd, att["logf_bwd"], att["query"], att["w_span"], att["v"]],
    )
    yield "span_attention", entries, None, None


def matmul_flops(fn: Callable, inputs: List[torch.Tensor], backward: bool) -> float:
    """Matrix-product FLOPs of one forward (and backward) call, counted by FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in inputs]
    counter = FlopCounterMode(display=False)
    with counter:
        outs = fn(*leaves)
        if backward:
            torch.autograd.grad(_loss(outs), [t for t in leaves if t.requires_grad], allow_unused=True)
    return float(counter.get_total_flops())


def measure_gemm_flops(repeats: int = 5) -> float:
    """fp32 GEMM FLOP/s at the current thread count (the roofline of the scoring MLP on a CPU):
    ``[28000, 800] x [800, 400]``, the scoring product of span attention at the paper size."""
    a, b = torch.randn(28000, 800), torch.randn(800, 400)
    a @ b
    return 2 * 28000 * 800 * 400 / _median_seconds(lambda: a @ b, repeats, "cpu")


def measure_copy_gbps(device: str, n_bytes: int = 2 * 2**30, repeats: int = 20) -> float:
    """Achieved device-to-device copy bandwidth (bytes read + bytes written per second), in GB/s.

    The practical ceiling the scans and cumax are compared with (datasheet figures are higher).
    """
    src = torch.rand(n_bytes // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        times.append(time.perf_counter() - start)
    return 2 * n_bytes / statistics.median(times) / 1e9


def run(
    sizes: List[str],
    threads: List[int],
    repeats: int,
    slow_repeats: int,
    device: str,
    peak_gbps: Optional[float],
    console: Optional[Console],
    only: Optional[List[str]] = None,
    only_tiers: Optional[List[str]] = None,
) -> List[dict]:
    rows = []
    for n_threads in threads:
        torch.set_num_threads(n_threads)
        gemm_flops = measure_gemm_flops() if device == "cpu" else None
        if console is not None and gemm_flops:
            console.log(f"fp32 GEMM peak, {n_threads} thread(s): {gemm_flops / 1e9:.1f} GFLOP/s")
        for size in sizes:
            for kernel, entries, bytes_fwd, bytes_fwd_bwd in cases(size, device):
                if only is not None and kernel not in only:
                    continue
                measured = {}
                for tier, (fn, inputs) in entries.items():
                    skip = SKIP.get((size, tier))
                    if skip == "all" or (only_tiers is not None and tier not in only_tiers):
                        continue
                    if console is not None:
                        console.log(f"{kernel} {size} {tier} threads={n_threads}")
                    n = slow_repeats if tier in SLOW_TIERS else repeats
                    measured[tier] = measure(fn, inputs, n, device, backward=skip != "backward")
                    measured[tier]["repeats"] = n
                for tier, result in measured.items():
                    row = dict(kernel=kernel, size=size, tier=tier, threads=n_threads, device=device, **result)
                    row["shape"] = dict(zip(("B", "T", "D", "A", "m", "window"), SIZES[size]))
                    row["skipped"] = SKIP.get((size, tier))
                    if gemm_flops and kernel == "span_attention" and tier != "reference":
                        # The GEMM floor: matrix products alone at the machine's measured GEMM rate.
                        fn, inputs = entries[tier]
                        row["gemm_flops_per_s"] = gemm_flops
                        for key, backward in (("fwd", False), ("fwd_bwd", True)):
                            if f"{key}_s" in result:
                                row[f"matmul_flops_{key}"] = matmul_flops(fn, inputs, backward)
                                row[f"gemm_floor_{key}_s"] = row[f"matmul_flops_{key}"] / gemm_flops
                    for key in ("fwd_s", "fwd_bwd_s"):
                        if "torch" in measured and key in result and key in measured["torch"]:
                            row[f"{key}_over_torch"] = result[key] / measured["torch"][key]
                    if device == "cuda" and bytes_fwd is not None:
                        row["gbps_fwd"] = bytes_fwd / result["fwd_s"] / 1e9
                        if "fwd_bwd_s" in result:
                            row["gbps_fwd_bwd"] = bytes_fwd_bwd / result["fwd_bwd_s"] / 1e9
                        if peak_gbps:
                            row["bandwidth_fraction_fwd"] = row["gbps_fwd"] / peak_gbps
                    rows.append(row)
    return rows


def render(rows: List[dict], console: Console) -> None:
    table = Table(title="induce.kernels: median seconds (ratio = time / torch tier, same run)")
    columns = ("kernel", "size", "threads", "tier", "fwd ms", "fwd ratio", "fwd+bwd ms", "fwd+bwd ratio", "memory MiB",
               "GB/s", "GEMM floor fwd / fwd+bwd ms")
    for column in columns:
        table.add_column(column, justify="left" if column in ("kernel", "size", "tier") else "right")
    fmt = lambda x, f: "-" if x is None else format(x, f)  # noqa: E731
    for r in rows:
        memory = r.get("peak_mib", r.get("kept_mib"))
        table.add_row(
            r["kernel"], r["size"], str(r["threads"]), r["tier"],
            fmt(r["fwd_s"] * 1e3, ".2f"), fmt(r.get("fwd_s_over_torch"), ".2f"),
            fmt(r["fwd_bwd_s"] * 1e3 if "fwd_bwd_s" in r else None, ".2f"), fmt(r.get("fwd_bwd_s_over_torch"), ".2f"),
            fmt(memory, ".1f"), fmt(r.get("gbps_fwd"), ".0f"),
            "-" if "gemm_floor_fwd_s" not in r else
            f"{r['gemm_floor_fwd_s'] * 1e3:.0f} / {fmt(r.get('gemm_floor_fwd_bwd_s', 0) * 1e3, '.0f')}",
        )
    console.print(table)
    kind = "peak allocated (CUDA)" if any("peak_mib" in r for r in rows) else "kept for backward + outputs (CPU)"
    console.print(f"memory: {kind}; threads: torch.set_num_threads; device: {rows[0]['device'] if rows else '-'}")
    if any("gemm_floor_fwd_s" in r for r in rows):
        console.print("GEMM floor: the tier's matrix-product FLOPs (FlopCounterMode) / the fp32 GEMM rate measured "
                      "in this run at that thread count: no implementation of the same products can be faster.")


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="paper,long1024,long4096", help=f"comma list of {', '.join(SIZES)}")
    parser.add_argument("--kernels", default=None, help="comma list of kernels to run (default: all)")
    parser.add_argument("--tiers", default=None,
                        help="comma list of tiers to run (reference, torch, triton, per-span; default: all)")
    parser.add_argument("--threads", default="1,2", help="comma list of torch thread counts")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per entry (median reported)")
    parser.add_argument("--slow-repeats", type=int, default=3, help=f"timed runs for {', '.join(SLOW_TIERS)}")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument("--peak-gbps", type=float, default=None, help="device memory bandwidth, for the fraction")
    parser.add_argument("--measure-peak", action="store_true",
                        help="measure a large device-to-device copy first and use it as --peak-gbps")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of the table")
    parser.add_argument("--save", default=None, help="also write the JSON rows to this file")
    args = parser.parse_args(argv)
    sizes = [s for s in args.sizes.split(",") if s]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        parser.error(f"unknown size(s) {unknown}; choose from {list(SIZES)}")
    threads = [int(n) for n in args.threads.split(",") if n]
    console = Console(stderr=True)
    only = args.kernels.split(",") if args.kernels else None
    if args.measure_peak:
        args.peak_gbps = measure_copy_gbps(args.device)
        console.print(f"measured copy bandwidth (read + write): {args.peak_gbps:.0f} GB/s")
    only_tiers = args.tiers.split(",") if args.tiers else None
    rows = run(sizes, threads, args.repeats, args.slow_repeats, args.device, args.peak_gbps, console, only, only_tiers)
    if args.save:
        with open(args.save, "w") as handle:
            json.dump({"peak_gbps": args.peak_gbps, "rows": rows} if args.measure_peak else rows, handle, indent=1)
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
    else:
        render(rows, Console(width=220))


if __name__ == "__main__":
    main()
