"""Every Triton kernel variant the project can launch, compiled for an H100 (sm_90) without a GPU.

Triton's CPU interpreter (``TRITON_INTERPRET=1``, what the CPU tests run) accepts kernels that the real
compiler rejects or that an H100 refuses at launch (more shared memory than a block may have). This
check finds them on a CPU: :mod:`induce.devtools.compile_workloads` drives the models of every shipped
config (training in fp32 and bf16 autocast, validation, parsing) and the parse lengths' span counts
through the Triton tier, recording each launch instead of running it
(:mod:`induce.devtools.launch_recorder`); each distinct variant is then compiled with ``triton.compile``
for ``GPUTarget("cuda", 90, 32)`` (Triton's on-disk cache, ``TRITON_CACHE_DIR``, makes a second run
cheap) and its resources read from the cubin with ``cuobjdump -res-usage`` (shipped with Triton):
registers per thread, the stack frame per thread (the local memory register spills use; what Triton
reports as ``n_spills`` on a GPU) and the shared memory Triton asks for at launch.

A variant fails when it does not compile, needs more than :data:`SHARED_LIMIT` bytes of shared memory
per block, or more registers than a block of its warps may hold.

``python3 -m induce.devtools.compile_check`` (``--help``) prints the table; exit status 1 when a variant
fails. It must run in a process where the Triton tier was not imported under ``TRITON_INTERPRET=1``;
the test suite (``tests/test_triton_compile_h100.py``) runs it in a subprocess. Triton 3.6 and 3.9.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Optional, Sequence

from induce.devtools.launch_recorder import TARGET, Variant
from induce.errors import InduceError

#: Shared memory a block may use on an H100 (``cudaDevAttrMaxSharedMemoryPerBlockOptin``: 227 KiB);
#: Triton refuses to launch a kernel that asks for more.
SHARED_LIMIT = 232_448
#: 32-bit registers per SM, the most one block may hold (compute capability 9.0).
REGISTER_FILE = 65_536


_RES_USAGE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


def _restore_keys(pairs) -> dict:
    return {tuple(k): v for k, v in pairs}


def compile_variant(spec: dict) -> dict:
    """Compile one :meth:`Variant.spec` for the H100; ``spec`` plus its resources (or ``error``)."""
    os.environ["TRITON_INTERPRET"] = "0"  # a worker process: never the interpreter
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    result = dict(spec)
    started = time.perf_counter()
    try:
        fn = getattr(importlib.import_module(spec["module"]), spec["kernel"])
        src = ASTSource(fn, spec["signature"], _restore_keys(spec["constants"]), _restore_keys(spec["attrs"]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = triton.compile(src, target=GPUTarget(*TARGET), options=dict(spec["options"]))
        with tempfile.TemporaryDirectory() as folder:
            cubin = Path(folder) / "kernel.cubin"
            cubin.write_bytes(compiled.asm["cubin"])
            usage = subprocess.run([knobs.nvidia.cuobjdump.path, "-res-usage", str(cubin)],
                                   capture_output=True, text=True, check=True).stdout
        found = _RES_USAGE.search(usage)
        if found is None:
            raise RuntimeError(f"cuobjdump -res-usage printed no resource line: {usage.strip()[:200]}")
        registers, stack, static_shared, local = (int(x) for x in found.groups())
        result.update(registers=registers, spill_bytes=stack + local, shared=int(compiled.metadata.shared),
                      static_shared=static_shared, num_warps=int(compiled.metadata.num_warps))
    except Exception as error:  # a kernel that does not compile is a finding, not a crash of the check
        result["error"] = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def registers_fit(registers: int, num_warps: int) -> bool:
    """Whether a block of ``num_warps`` warps at ``registers`` per thread fits the register file
    (registers are allocated per warp in units of 256)."""
    per_warp = -(-registers * 32 // 256) * 256
    return per_warp * num_warps <= REGISTER_FILE


def problems(result: dict) -> list:
    """Why a compiled variant would fail on an H100 (empty when it is fine)."""
    if "error" in result:
        return [f"does not compile: {result['error']}"]
    found = []
    if result["shared"] > SHARED_LIMIT:
        found.append(f"needs {result['shared']:,} B of shared memory per block (> {SHARED_LIMIT:,})")
    if not registers_fit(result["registers"], result["num_warps"]):
        found.append(f"{result['registers']} registers x {result['num_warps']} warps exceed the register file")
    return found


def compile_all(variants: Sequence[Variant], jobs: int = 1,
                progress: Optional[Callable[[int, int], None]] = None) -> list:
    """Compile every variant in ``jobs`` worker processes; results in the order given.

    The longest kernels (by source length, a proxy for compile time) go first, so that two workers
    do not end with one of them compiling the slowest kernel alone.
    """
    specs = [v.spec() for v in variants]
    order = sorted(range(len(specs)), key=lambda i: -_source_length(specs[i]))
    results: list = [None] * len(specs)
    if jobs <= 1:
        for done, i in enumerate(order, 1):
            results[i] = compile_variant(specs[i])
            if progress:
                progress(done, len(specs))
        return results
    import multiprocessing
    from concurrent.futures import as_completed

    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(compile_variant, specs[i]): i for i in order}
        for done, future in enumerate(as_completed(futures), 1):
            results[futures[future]] = future.result()
            if progress:
                progress(done, len(specs))
    return results


def _source_length(spec: dict) -> int:
    import inspect

    kernel = getattr(importlib.import_module(spec["module"]), spec["kernel"])
    return len(inspect.getsource(kernel.fn))


def table(results: Sequence[dict]) -> str:
    """Plain-text table of the compiled variants (one line each, sorted by kernel)."""
    header = ("kernel", "constexprs", "ints /16", "dtypes", "warps", "regs", "spill B", "shared B", "first launched by")
    rows = []
    for r in sorted(results, key=lambda r: (r["kernel"], r["constexprs"], r["dtypes"], r["divisible_by_16"])):
        if "error" in r:
            rows.append((r["kernel"], r["constexprs"], r["divisible_by_16"], r["dtypes"],
                         str(r["options"].get("num_warps", "")), "-", "-", "-", r["seen_in"]))
            continue
        flag = " !" if problems(r) else ""
        rows.append((r["kernel"], r["constexprs"], r["divisible_by_16"], r["dtypes"], str(r["num_warps"]),
                     str(r["registers"]), f"{r['spill_bytes']:,}", f"{r['shared']:,}{flag}", r["seen_in"]))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def summary(results: Sequence[dict]) -> str:
    """One paragraph: variants, failures, spilling variants."""
    failing = [r for r in results if problems(r)]
    spilling = [r for r in results if "error" not in r and r["spill_bytes"]]
    kernels = sorted({r["kernel"] for r in results})
    text = (f"{len(results)} variants of {len(kernels)} kernels compiled for sm_90: {len(failing)} would fail on an "
            f"H100, {len(spilling)} spill")
    if spilling:
        worst = max(spilling, key=lambda r: r["spill_bytes"])
        text += f" (most: {worst['kernel']} {worst['spill_bytes']:,} B/thread)"
    return text


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m induce.devtools.compile_check",
        description="Compile every Triton kernel variant that the shipped configs, bf16 autocast and parsing can "
        "launch for an H100 (sm_90), without a GPU, and print registers, spills (stack bytes per thread) and "
        "shared memory per variant. Exit status 1 when a variant does not compile or exceeds the H100's "
        "per-block limits. Triton's compile cache (TRITON_CACHE_DIR) makes a second run fast.",
    )
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                        help="processes that drive the models and compile (default: the CPU count, at most 8)")
    parser.add_argument("--only", default=None, metavar="REGEX",
                        help="print only the variants launched by a workload matching REGEX, e.g. "
                        r"'^(onlstm|prpn|palm\S*)\.yaml( as \S+)? train' for the paper-size training steps "
                        "(everything is still driven and compiled)")
    parser.add_argument("--json", type=Path, default=None, help="also write the variants and resources to this file")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: give a number of processes >= 1")
    try:
        only = re.compile(args.only) if args.only else None
    except re.error as error:
        parser.error(f"--only {args.only!r}: {error}")
    os.environ["TRITON_INTERPRET"] = "0"  # before anything imports Triton: this check compiles, never interprets
    try:
        return _run(args, only)
    except InduceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _run(args, only) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from induce.devtools.compile_workloads import record

    console = Console(stderr=True, quiet=args.quiet)
    started = time.perf_counter()
    with console.status("driving the shipped configs through the Triton tier (launches recorded, not run)") as status:
        recorder = record(jobs=args.jobs, progress=lambda label: status.update(f"driving {label}"))
    driven = time.perf_counter() - started
    variants = list(recorder.variants.values())
    console.print(f"{recorder.launches:,} launches recorded, {len(variants)} distinct variants ({driven:.0f} s)")
    columns = (TextColumn("compiling for sm_90"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("compile", total=len(variants))
        results = compile_all(variants, jobs=args.jobs,
                              progress=lambda done, total: progress.update(task, completed=done))
    total = time.perf_counter() - started
    shown = [r for r in results if only is None or any(only.search(s) for s in r["sightings"])]
    print(table(shown))
    print()
    print(summary(results))
    for r in results:
        for problem in problems(r):
            print(f"FAIL {r['kernel']} [{r['constexprs']}; {r['dtypes']}] from {r['seen_in']}: {problem}")
    print(f"drive {driven:.1f} s, compile {total - driven:.1f} s ({args.jobs} processes)")
    if args.json is not None:
        args.json.write_text(json.dumps({"target": list(TARGET), "shared_limit": SHARED_LIMIT, "variants": results,
                                         "launches": recorder.launches, "driven": recorder.driven,
                                         "drive_seconds": round(driven, 1), "total_seconds": round(total, 1)},
                                        indent=1, default=str))
    return 1 if any(problems(r) for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
