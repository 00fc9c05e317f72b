"""Training and parsing throughput of the models at the papers' sizes (CPU by default).

Training tokens/s: one step = forward + backward + gradient clipping + optimiser step on a random
``[batch, bptt]`` segment (vocabulary 10,000), median over ``--steps`` steps after ``--warmup``.
Parsing sentences/s: :func:`induce.parsing.parse_batch` on the first ``--parse-sentences`` lines of
``ptb.valid.txt`` (``$INDUCE_DATA/ptb_lm``; untrained weights: only the speed is meaningful).

    python bench/models.py --threads 2                       # all models, fp32
    python bench/models.py --threads 2 --bf16 --models palm   # bf16 autocast for the matmuls
    python bench/models.py --threads 2 --models onlstm --external onlstm-original=/tmp/orig_onlstm/bench_entry.py

Each row also gives the step's matrix-product FLOPs per token (FlopCounterMode), the FLOP rate
achieved, and the *ceiling*: the fp32 GEMM rate measured in the same run divided by those FLOPs,
i.e. the tokens/s of a step that did nothing but its matrix products at the machine's GEMM peak.

``--external NAME=PATH`` times someone else's training step in the same run, interleaved with
ours: PATH defines ``make_trainer()`` (see :class:`ExternalTrainer`). That is how the original
implementations are compared (their code is not part of this project: ``bench/ORIGINALS.md``
says how to fetch and patch them). ``*-mm`` entries are our models with the per-step recurrent
products as plain ``torch.mm`` instead of oneDNN-packed weights (``RecurrentProjection``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

from induce.models.awd import RecurrentProjection, WeightDropLSTM
from induce.models.registry import get_model_class
from induce.parsing import parse_batch

VOCAB = 10_000
#: (batch, bptt, optimiser, config overrides) per benchmark entry; sizes from the papers.
SETUPS = {
    "onlstm": (20, 70, "sgd", {}),
    "prpn": (64, 35, "adam", {}),
    "palm": (20, 70, "adam", {}),
    "palm-m10": (20, 70, "adam", {"max_span_length": 10}),
    # the size at which the issue quotes the original PaLM code (3 x 1120, m = 10); the paper's
    # Table 5 says 1020, which is what configs/palm.yaml and the "palm" entries use
    "palm-h1120-m10": (20, 70, "adam", {"hidden_size": 1120, "max_span_length": 10}),
    # the same models with the per-step recurrent products as plain torch.mm (no oneDNN packing)
    "onlstm-mm": (20, 70, "sgd", {}),
    "prpn-mm": (64, 35, "adam", {}),
}


def model_for(entry: str):
    name = "palm" if entry.startswith(("palm-m", "palm-h")) else entry.removesuffix("-mm")
    batch, bptt, optimiser, overrides = SETUPS[entry]
    cls = get_model_class(name)
    return cls(VOCAB, cls.Config(**overrides)), batch, bptt, optimiser


@contextlib.contextmanager
def packing(enabled: bool):
    """``RecurrentProjection.use_packing`` set to ``enabled`` inside, restored after (it is class-wide)."""
    before = RecurrentProjection.use_packing
    RecurrentProjection.use_packing = enabled
    try:
        yield
    finally:
        RecurrentProjection.use_packing = before


class Trainer:
    """One model, its optimiser and carried state; ``step()`` times one training step."""

    def __init__(self, entry: str):
        torch.manual_seed(0)
        self.model, self.batch, self.bptt, optimiser_name = model_for(entry)
        self.model.train()
        if optimiser_name == "sgd":
            self.optimiser = torch.optim.SGD(self.model.parameters(), lr=1.0)
        else:
            self.optimiser = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.state = self.model.init_state(self.batch)
        self.times: list[float] = []
        self.packing = not entry.endswith("-mm")

    def step(self, bf16: bool, record: bool) -> None:
        tokens = torch.randint(0, VOCAB, (self.batch, self.bptt + 1))
        start = time.perf_counter()
        # packing is decided when a RecurrentProjection is made (in the forward); the backward follows it
        with packing(self.packing), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = self.model(tokens[:, :-1], self.state)
            hidden, state = (out.hidden, out.state) if hasattr(out, "hidden") else out
            logits = self.model.logits(hidden)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        self.optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.25)
        self.optimiser.step()
        self.state = detach(state)
        if record:
            self.times.append(time.perf_counter() - start)

    def tokens_per_second(self) -> float:
        return self.batch * self.bptt / statistics.median(self.times)


def flops_per_token(entry: str) -> float:
    """Matrix-product FLOPs of one training step (forward + backward) per token.

    Counted with :class:`torch.utils.flop_counter.FlopCounterMode` (matmul / addmm / bmm /
    convolution and their gradients; elementwise work is not counted). The fused oneDNN LSTM kernel is
    invisible to the counter, so its layers are switched to the time loop for the count: same products.
    """
    from torch.utils.flop_counter import FlopCounterMode

    trainer = Trainer(entry)
    trainer.packing = False  # oneDNN's packed products are invisible to the counter too: plain mm
    for module in trainer.model.modules():
        if isinstance(module, WeightDropLSTM):
            module.fused = False
    counter = FlopCounterMode(display=False)
    with counter:
        trainer.step(bf16=False, record=False)
    return counter.get_total_flops() / (trainer.batch * trainer.bptt)


def gemm_peak(repeats: int = 5) -> float:
    """Measured fp32 GEMM FLOP/s of this machine at the current thread count: the roofline.

    Shape: ON-LSTM's batched input projection of a 20 x 70 segment ([1400, 1550] x [1550, 4830]).
    """
    a, b = torch.randn(1400, 1550), torch.randn(1550, 4830)
    for _ in range(2):
        a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * 1400 * 1550 * 4830 / statistics.median(times)


class ExternalTrainer:
    """Someone else's training step, timed like ours: ``path`` is a Python file defining
    ``make_trainer()`` that returns an object with ``.step()`` (one full training step: forward,
    backward, clipping, optimiser) and ``.batch`` / ``.bptt``. Used to time the original
    implementations side by side (their code is not part of this project; see bench/RESULTS.md)."""

    def __init__(self, path: str):
        import importlib.util
        import sys

        folder = str(Path(path).resolve().parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)  # the original code imports its sibling modules
        spec = importlib.util.spec_from_file_location(f"external_{Path(path).stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self.inner = module.make_trainer()
        self.batch, self.bptt = self.inner.batch, self.inner.bptt
        self.times: list[float] = []

    def step(self, bf16: bool, record: bool) -> None:
        start = time.perf_counter()
        self.inner.step()
        if record:
            self.times.append(time.perf_counter() - start)

    def tokens_per_second(self) -> float:
        return self.batch * self.bptt / statistics.median(self.times)


def train_speeds(entries: list[str], steps: int, warmup: int, bf16: bool,
                 externals: dict[str, str] | None = None) -> dict[str, float]:
    """Median training tokens/s per entry; the entries' steps are interleaved (round robin)."""
    trainers = {entry: Trainer(entry) for entry in entries}
    trainers.update({name: ExternalTrainer(path) for name, path in (externals or {}).items()})
    for step in range(warmup + steps):
        for trainer in trainers.values():
            trainer.step(bf16, record=step >= warmup)
    return {entry: trainer.tokens_per_second() for entry, trainer in trainers.items()}


def detach(state):
    if isinstance(state, torch.Tensor):
        return state.detach()
    if isinstance(state, dict):
        return {k: detach(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(detach(s) for s in state)
    return state


def parse_speed(entry: str, n_sentences: int, bf16: bool) -> float | None:
    if entry.endswith("-mm") or n_sentences == 0:
        return None
    path = Path(os.environ.get("INDUCE_DATA", "../shared/data")) / "ptb_lm" / "ptb.valid.txt"
    if not path.exists():
        return None
    lines = [line.split() for line in path.read_text().splitlines() if line.strip()][:n_sentences]
    vocab: dict[str, int] = {"<eos>": 0}
    ids = [[vocab.setdefault(w, len(vocab) % VOCAB) for w in line] for line in lines]
    model, *_ = model_for(entry)
    parse_batch(model, ids[:8], lines[:8], eos_id=0)  # warm-up
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        parse_batch(model, ids, lines, eos_id=0)
    return len(ids) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--parse-sentences", type=int, default=200)
    parser.add_argument("--bf16", action="store_true", help="torch.autocast(bfloat16) around the forward")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    parser.add_argument("--external", action="append", default=[], metavar="NAME=PATH",
                        help="also time the training step of PATH's make_trainer() (e.g. an original "
                             "implementation), interleaved with ours; repeatable")
    args = parser.parse_args()
    externals = {}
    for spec in args.external:
        name, sep, path = spec.partition("=")
        if not sep or not Path(path).is_file():
            parser.error(f"--external wants NAME=PATH to an existing file, got {spec!r}")
        externals[name] = path
    torch.set_num_threads(args.threads)
    table = Table(title=f"induce models, {args.threads} threads, {'bf16 autocast' if args.bf16 else 'fp32'}")
    columns = ("model", "batch x bptt", "train tokens/s", "MFLOP/token", "GFLOP/s", "% of GEMM peak",
               "ceiling tokens/s", "parse sentences/s")
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    console = Console(width=200)
    load_before = os.getloadavg()
    peak_before = gemm_peak()
    speeds = train_speeds(args.models, args.steps, args.warmup, args.bf16, externals)
    peak = max(peak_before, gemm_peak())  # measured before and after the timed steps
    rows = []
    for entry in args.models:
        batch, bptt, *_ = SETUPS[entry]
        flops = flops_per_token(entry)
        sentences_per_s = parse_speed(entry, args.parse_sentences, args.bf16)
        row = {"model": entry, "batch": batch, "bptt": bptt, "threads": args.threads,
               "train_tokens_per_s": speeds[entry], "flops_per_token": flops,
               "achieved_flops_per_s": speeds[entry] * flops, "gemm_peak_flops_per_s": peak,
               "ceiling_tokens_per_s": peak / flops, "parse_sentences_per_s": sentences_per_s}
        rows.append(row)
        table.add_row(entry, f"{batch} x {bptt}", f"{speeds[entry]:.0f}", f"{flops / 1e6:.0f}",
                      f"{row['achieved_flops_per_s'] / 1e9:.1f}", f"{100 * speeds[entry] * flops / peak:.0f}%",
                      f"{peak / flops:.0f}", "n/a" if sentences_per_s is None else f"{sentences_per_s:.1f}")
    for name, path in externals.items():
        rows.append({"model": name, "external": path, "threads": args.threads, "train_tokens_per_s": speeds[name]})
        table.add_row(f"{name} (external)", "", f"{speeds[name]:.0f}", "-", "-", "-", "-", "n/a")
    console.print(f"load average before/after: {load_before} / {os.getloadavg()}")
    console.print(f"fp32 GEMM peak ([1400,1550] x [1550,4830], median of 5): {peak / 1e9:.1f} GFLOP/s "
                  f"with {args.threads} thread(s); 'ceiling' = that peak / matrix-product FLOPs per token")
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
