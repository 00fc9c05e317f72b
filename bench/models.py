"""Training and parsing throughput of the models at the papers' sizes (CPU by default).

Training tokens/s: one step = forward + backward + gradient clipping + optimiser step on a random
``[batch, bptt]`` segment (vocabulary 10,000), median over ``--steps`` steps after ``--warmup``.
Parsing sentences/s: :func:`induce.trees.decoders.parse_batch` on the first ``--parse-sentences`` lines of
``ptb.valid.txt`` (``$INDUCE_DATA/ptb_lm``; untrained weights: only the speed is meaningful).

    python bench/models.py --threads 2                       # all models, fp32
    python bench/models.py --threads 2 --bf16 --models palm   # bf16 autocast for the matmuls
    python bench/models.py --threads 2 --models onlstm --external onlstm-original=/tmp/orig_onlstm/bench_entry.py

Each row also gives the step's matrix-product FLOPs per token (FlopCounterMode), the FLOP rate
achieved, and the *ceiling*: the fp32 GEMM rate measured in the same run divided by those FLOPs,
i.e. the tokens/s of a step that did nothing but its matrix products at the machine's GEMM peak.

GPU (``--device cuda``): every step is timed with CUDA events (recorded around the step on the
current stream, read after one synchronisation at the end, so the timing adds no host sync), steps of
all entries interleaved, warm-up steps excluded (they also compile the Triton kernels). It also
times whole ``induce train`` epochs (``--epochs``, epoch 1 included, in a fresh process with an empty
Triton cache, so epoch 1 pays every compilation) and writes one row per model to
``--training-json`` (default ``bench/gpu_training.json`` on CUDA): ``model``, ``ours_tok_s``,
``original_tok_s`` (the ``--external`` named ``<model>-original``, else null), ``induce_train_epoch1_tok_s``,
``induce_train_tok_s`` (the last epoch), ``gpu_mem_gib`` (peak allocated during our step), ``device``;
rows of models not in this run are kept, so the models can be measured one run at a time.

    python bench/models.py --device cuda --models onlstm prpn palm --steps 20 --warmup 5 \
        --external onlstm-original=/tmp/orig_onlstm/bench_entry.py --epochs 2

``--device cpu --tiny`` runs the same code paths with tiny models (used by the tests; its numbers
mean nothing and are refused for ``bench/gpu_training.json``).

``--cuda-graphs`` also times each model's step through ``train.cuda_graphs``'s
:class:`induce.training.graphs.StaticSteps` (entry ``MODEL+graphs``, same model, optimiser and loss,
interleaved with the eager step; captured in a CUDA graph after its warm-up on CUDA, eager elsewhere):

    python bench/models.py --device cuda --models onlstm prpn palm --steps 20 --warmup 5 --cuda-graphs --epochs 0

**Kernel launches per training step** (a second table; ``launches_torch`` / ``launches_triton`` in
``--json``; ``--no-launches`` skips it): each model with the torch tier and with the Triton tier, and
each ``--external``, counted at dispatch by :mod:`induce.devtools.launches` — every aten operator that
launches a kernel (not views, allocations, scalar reads) plus every Triton kernel launch, forward,
backward and optimiser, on the step after one uncounted step, on a fresh trainer. On a GPU the step
runs as usual. On a CPU the same counting follows the choices made on CUDA (``as_on_cuda``: foreach
optimisers, no oneDNN packing, one-chunk LSTM weights) and the Triton kernels are counted at their
launcher without running (the interpreter would take hours at these sizes; the tests check on a small
step that running them gives the same count), so the CPU figure is the GPU's up to what the counter's
docstring lists (cuDNN's LSTM and multi-tensor operators launch more than one kernel). The count does
not depend on the widths, only on the segment length and the layers: ``--tiny`` counts (4 x 8) are
not the papers' (20 x 70).

``--external NAME=PATH`` times someone else's training step in the same run, interleaved with
ours: PATH defines ``make_trainer()`` (see :class:`ExternalTrainer`; on CUDA it is called as
``make_trainer(device="cuda")`` when it takes a ``device`` argument). That is how the original
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

from induce.devtools.launches import LaunchCount, as_on_cuda, count_launches
from induce.kernels import triton_unavailable_reason, use_backend
from induce.models.common.awd import RecurrentProjection, WeightDropLSTM
from induce.models.registry import get_model_class
from induce.training.graphs import WARMUP_STEPS
from induce.training.state import detach_state
from induce.trees.decoders import parse_batch

VOCAB = 10_000
#: (batch, bptt, optimiser, config overrides) per benchmark entry; sizes from the papers.
SETUPS = {
    "onlstm": (20, 70, "sgd", {}),
    "prpn": (64, 35, "adam", {}),
    "palm": (20, 70, "adam", {}),
    "palm-m10": (20, 70, "adam", {"max_span_length": 10}),
    # the size at which the issue quotes the original PaLM code (3 x 1120, m = 10); the paper's
    # Table 5 says 1020, which is what induce/configs/palm.yaml and the "palm" entries use
    "palm-h1120-m10": (20, 70, "adam", {"hidden_size": 1120, "max_span_length": 10}),
    # the same models with the per-step recurrent products as plain torch.mm (no oneDNN packing)
    "onlstm-mm": (20, 70, "sgd", {}),
    "prpn-mm": (64, 35, "adam", {}),
    # PRPN with AWD-LSTM's regularisation instead of the released code's (locked masks, DropConnect on the
    # key matrices): the model cost of the figures measured before the fidelity fixes (bench/results/training.md)
    "prpn-locked": (64, 35, "adam", {"dropout_masks": "locked", "key_dropout": 0.0, "wdrop": 0.5}),
}


#: ``--tiny``: model sizes (and batch x bptt) small enough for a CPU test of the benchmark itself
TINY = {
    "onlstm": dict(emb_size=16, hidden_size=16, chunk_size=4),
    "prpn": dict(emb_size=16, hidden_size=16, n_slots=4, n_lookback=2),
    "palm": dict(emb_size=16, hidden_size=16, rrnn_size=6, attention_size=8, max_span_length=4),
}
TINY_BATCH, TINY_BPTT = 4, 8
_tiny = False  # set by --tiny


def model_name(entry: str) -> str:
    return "palm" if entry.startswith(("palm-m", "palm-h")) else entry.removesuffix("-mm").removesuffix("-locked")


def model_for(entry: str):
    name = model_name(entry)
    batch, bptt, optimiser, overrides = SETUPS[entry]
    if _tiny:
        batch, bptt, overrides = TINY_BATCH, TINY_BPTT, TINY[name]
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


class StepTimer:
    """Step times: ``perf_counter`` on CPU; on CUDA a pair of events per step, read in :meth:`seconds`."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.times: list = []
        self._start = None

    def start(self) -> None:
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._start = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.times.append((self._start, end))
        else:
            self.times.append(time.perf_counter() - self._start)

    def seconds(self) -> list[float]:
        if not self.cuda:
            return list(self.times)
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / 1000.0 for start, end in self.times]


class Trainer:
    """One model, its optimiser and carried state; ``step()`` times one training step."""

    def __init__(self, entry: str, device: str = "cpu"):
        torch.manual_seed(0)
        self.device = torch.device(device)
        self.model, self.batch, self.bptt, optimiser_name = model_for(entry)
        self.model.to(self.device).train()
        if optimiser_name == "sgd":
            self.optimiser = torch.optim.SGD(self.model.parameters(), lr=1.0)
        else:
            self.optimiser = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.state = self.model.init_state(self.batch, self.device)
        self.timer = StepTimer(self.device)
        self.packing = not entry.endswith("-mm")
        self.peak_bytes = 0  # CUDA: the most memory allocated during one of this model's steps

    @property
    def times(self) -> list:
        return self.timer.times

    def step(self, bf16: bool, record: bool) -> None:
        tokens = torch.randint(0, VOCAB, (self.batch, self.bptt + 1), device=self.device)
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        if record:
            self.timer.start()
        # packing is decided when a RecurrentProjection is made (in the forward); the backward follows it
        with packing(self.packing), torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16):
            out = self.model(tokens[:, :-1], self.state)
            hidden, state = (out.hidden, out.state) if hasattr(out, "hidden") else out
            logits = self.model.logits(hidden)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        self.optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.25)
        self.optimiser.step()
        self.state = detach_state(state)
        if record:
            self.timer.stop()
        if cuda:
            self.peak_bytes = max(self.peak_bytes, torch.cuda.max_memory_allocated(self.device))

    def tokens_per_second(self) -> float:
        return self.batch * self.bptt / statistics.median(self.timer.seconds())


class GraphedTrainer(Trainer):
    """``--cuda-graphs``: the same model, optimiser and loss (cross-entropy, clipping at 0.25), each step
    through :class:`induce.training.graphs.StaticSteps` (one static shape: captured once on CUDA)."""

    def step(self, bf16: bool, record: bool) -> None:
        from induce.training.graphs import StaticSteps
        from induce.training.lm import LMLoss

        if not hasattr(self, "graphs"):
            self.graphs = StaticSteps(LMLoss(self.model, 0.0, 0.0), self.model, 0.25, self.device,
                                      autocast=bf16 and self.device.type == "cuda", note=print)
            self.params = list(self.model.parameters())
        tokens = torch.randint(0, VOCAB, (self.batch, self.bptt + 1), device=self.device)
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        if record:
            self.timer.start()
        with packing(self.packing):
            _, _, self.state = self.graphs.step(self.optimiser, self.params, tokens[:, :-1], tokens[:, 1:], self.state)
        if record:
            self.timer.stop()
        if cuda:  # the capture's pool included (its memory stays allocated between replays)
            self.peak_bytes = max(self.peak_bytes, torch.cuda.max_memory_allocated(self.device))


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


def gemm_peak(repeats: int = 5, device: str = "cpu") -> float:
    """Measured fp32 GEMM FLOP/s of this machine (CPU: at the current thread count): the roofline.

    Shape: ON-LSTM's batched input projection of a 20 x 70 segment ([1400, 1550] x [1550, 4830]).
    """
    a, b = torch.randn(1400, 1550, device=device), torch.randn(1550, 4830, device=device)
    for _ in range(2):
        a @ b
    timer = StepTimer(torch.device(device))
    for _ in range(repeats):
        timer.start()
        a @ b
        timer.stop()
    return 2 * 1400 * 1550 * 4830 / statistics.median(timer.seconds())


def load_entry(path: str):
    """The Python file at ``path`` run as a module, its folder first on ``sys.path`` (the original code
    imports its sibling modules)."""
    import importlib.util
    import sys

    folder = str(Path(path).resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"external_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ExternalTrainer:
    """Someone else's training step, timed like ours: ``path`` is a Python file defining
    ``make_trainer()`` that returns an object with ``.step()`` (one full training step: forward,
    backward, clipping, optimiser) and ``.batch`` / ``.bptt``. Used to time the original
    implementations side by side (their code is not part of this project; see bench/results/training.md).
    ``options`` go to ``make_trainer`` as keywords (``bench/pcfg_models.py``'s entries take the model, the
    batch and the sentence length, and have ``.length`` where these have ``.bptt``)."""

    def __init__(self, path: str, device: str = "cpu", **options):
        import inspect

        module = load_entry(path)
        takes_device = "device" in inspect.signature(module.make_trainer).parameters
        if device != "cpu" and not takes_device:
            raise SystemExit(f"{path}: make_trainer() takes no device argument; it cannot be timed on {device}")
        self.inner = module.make_trainer(device=device, **options) if takes_device else module.make_trainer(**options)
        self.batch, self.bptt = self.inner.batch, getattr(self.inner, "bptt", None)
        self.timer = StepTimer(torch.device(device))

    @property
    def times(self) -> list:
        return self.timer.times

    def step(self, bf16: bool, record: bool) -> None:
        if record:
            self.timer.start()
        self.inner.step()
        if record:
            self.timer.stop()

    def tokens_per_second(self) -> float:
        return self.batch * self.bptt / statistics.median(self.timer.seconds())


def train_speeds(entries: list[str], steps: int, warmup: int, bf16: bool,
                 externals: dict[str, str] | None = None, device: str = "cpu",
                 cuda_graphs: bool = False) -> dict[str, Trainer]:
    """The trainers after ``warmup`` untimed and ``steps`` timed steps each, interleaved (round robin);
    ``.tokens_per_second()`` is the median over the timed steps. ``cuda_graphs``: also ``ENTRY+graphs``."""
    trainers = {entry: Trainer(entry, device) for entry in entries}
    if cuda_graphs:
        trainers.update({f"{entry}+graphs": GraphedTrainer(entry, device) for entry in entries})
    trainers.update({name: ExternalTrainer(path, device) for name, path in (externals or {}).items()})
    for step in range(warmup + steps):
        for trainer in trainers.values():
            trainer.step(bf16, record=step >= warmup)
    return trainers


def op_profile(trainer: Trainer, steps: int, bf16: bool, top: int = 12) -> list[dict]:
    """Where one of our eager training steps spends its time: ``steps`` more steps under ``torch.profiler``,
    the ``top`` operators by self time on the device (on a CPU, self CPU time), per step, in ms."""
    from torch.profiler import ProfilerActivity, profile

    cuda = trainer.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            trainer.step(bf16, record=False)
        if cuda:
            torch.cuda.synchronize(trainer.device)
    field = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, field), reverse=True)[:top]
    return [{"op": e.key, "calls_per_step": e.count / steps, "self_ms_per_step": getattr(e, field) / 1000 / steps}
            for e in events]


#: Kernel tiers whose launches are counted (the reference tier is the tests' ground truth, not a training path).
TIERS = ("torch", "triton")


@contextlib.contextmanager
def _triton_tier_on_cpu():
    """``TRITON_INTERPRET=1`` inside, so that the triton tier accepts CPU tensors; its kernels are only
    counted there, never run (see :func:`step_launches`). The variable is restored after."""
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before


def step_launches(make_trainer, tier: str | None, device: str, uncounted: int = 1) -> LaunchCount:
    """Kernel launches of one training step (:mod:`induce.devtools.launches`: aten operators that launch
    a kernel + Triton launches, counted at dispatch).

    A fresh trainer from ``make_trainer()`` takes ``uncounted`` steps (lazy state: the optimiser's
    moments, PaLM's first span memory), then the counted one, with kernel tier ``tier`` (None: an
    external's own code). On a GPU the step runs as usual. On a CPU it follows the choices made on
    CUDA (:func:`~induce.devtools.launches.as_on_cuda`) and Triton kernels are counted without running
    (the interpreter would take hours at the papers' sizes); their outputs, and so the weights, are
    garbage, which is why the trainer is a fresh one, used for nothing else.
    """
    cpu = not device.startswith("cuda")
    with contextlib.ExitStack() as stack:
        if cpu:
            stack.enter_context(as_on_cuda())
            stack.enter_context(_triton_tier_on_cpu())
        if tier is not None:
            stack.enter_context(use_backend(tier))
        trainer = make_trainer()
        if isinstance(trainer, Trainer):
            trainer.packing = False  # the step sets packing itself; on CUDA there is none
        for _ in range(uncounted):
            with count_launches(run_triton=not cpu):
                trainer.step(bf16=False, record=False)
        with count_launches(run_triton=not cpu) as count:
            trainer.step(bf16=False, record=False)
    return count


def launch_counts(entries: list[str], externals: dict[str, str], device: str) -> dict[str, dict]:
    """``{entry: {tier: launches or None}}`` for our entries (None: the tier cannot run here) and
    ``{name: {"own": launches}}`` for the externals."""
    counts: dict[str, dict] = {}
    triton_missing = triton_unavailable_reason()
    for entry in entries:
        counts[entry] = {
            tier: None if tier == "triton" and triton_missing else
            step_launches(lambda entry=entry: Trainer(entry, device), tier, device).total
            for tier in TIERS
        }
    for name, path in externals.items():
        counts[name] = {"own": step_launches(lambda path=path: ExternalTrainer(path, device), None, device).total}
    return counts


def launch_table(counts: dict[str, dict], entries: list[str], device: str) -> Table:
    """The launches per training step as a table (one row per entry, then the externals)."""
    how = "on the GPU" if device.startswith("cuda") else "on CPU as on CUDA, Triton kernels counted, not run"
    table = Table(title=f"kernel launches per training step (counted at dispatch, {how})")
    for column in ("model", "batch x bptt", "torch tier", "triton tier", "torch / triton"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for name, tiers in counts.items():
        if name in entries:
            batch, bptt = (TINY_BATCH, TINY_BPTT) if _tiny else SETUPS[name][:2]
            torch_n, triton_n = tiers["torch"], tiers["triton"]
            table.add_row(name, f"{batch} x {bptt}", f"{torch_n:,}", "n/a" if triton_n is None else f"{triton_n:,}",
                          "-" if not triton_n else f"{torch_n / triton_n:.1f}x")
        else:
            table.add_row(f"{name} (external)", "", f"{tiers['own']:,} (its own code)", "", "")
    return table


def induce_train_speeds(model: str, epochs: int, device: str, corpus: str | None, overrides: list[str],
                        workdir: Path, threads: int) -> tuple[float, float]:
    """``(epoch 1 tokens/s, last epoch tokens/s)`` of ``induce train --model MODEL`` run for ``epochs``.

    A separate process with an empty Triton cache (``TRITON_CACHE_DIR``), so epoch 1 pays for every
    kernel compilation; figures from the run's ``metrics.jsonl`` (training time only, no evaluation).
    """
    import subprocess
    import sys

    run_dir = workdir / f"run-{model}"
    command = [sys.executable, "-m", "induce.cli.main", "train", "--model", model, "--device", device,
               "--max-epochs", str(epochs), "--out", str(run_dir), "--no-progress", *overrides]
    if corpus:
        command += ["--corpus", corpus]
    env = dict(os.environ, TRITON_CACHE_DIR=str(workdir / "triton-cache"), OMP_NUM_THREADS=str(threads))
    done = subprocess.run(command, cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"induce train --model {model} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    epochs_done = [row for row in rows if not row.get("partial")]
    return epochs_done[0]["tokens_per_s"], epochs_done[-1]["tokens_per_s"]


def device_name(device: str, threads: int) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({threads} threads)"


def training_rows(entries: list[str], trainers: dict, externals: dict[str, str], epochs: dict[str, tuple],
                  device: str, threads: int) -> list[dict]:
    """Rows of ``bench/gpu_training.json``: one per model entry (schema in the module docstring)."""
    rows = []
    for entry in entries:
        original = f"{entry}-original"
        epoch1, steady = epochs.get(entry, (None, None))
        peak = trainers[entry].peak_bytes
        rows.append({
            "model": entry,
            "ours_tok_s": round(trainers[entry].tokens_per_second(), 1),
            "original_tok_s": round(trainers[original].tokens_per_second(), 1) if original in externals else None,
            "induce_train_epoch1_tok_s": epoch1,
            "induce_train_tok_s": steady,
            "gpu_mem_gib": round(peak / 2**30, 3) if device.startswith("cuda") else None,
            "device": device_name(device, threads),
        })
    return rows


def parse_speed(entry: str, n_sentences: int, bf16: bool) -> float | None:
    if entry.endswith("-mm") or n_sentences == 0:
        return None
    path = Path(os.environ.get("INDUCE_DATA", "data")) / "ptb_lm" / "ptb.valid.txt"
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


GPU_JSON = Path(__file__).resolve().parent / "gpu_training.json"


def main(argv: list[str] | None = None) -> None:
    """The benchmark script: parse the arguments, time the steps, print the table, write the JSON files.

    Long because it is one sequence of short steps that all read the parsed arguments and the rows made so
    far; split, each piece would take most of them as parameters."""
    global _tiny
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--parse-sentences", type=int, default=200)
    parser.add_argument("--bf16", action="store_true", help="torch.autocast(bfloat16) around the forward")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    parser.add_argument("--external", action="append", default=[], metavar="NAME=PATH",
                        help="also time the training step of PATH's make_trainer() (e.g. an original "
                             "implementation), interleaved with ours; repeatable")
    parser.add_argument("--epochs", type=int, default=None,
                        help="also time this many whole `induce train` epochs per model (default: 2 on CUDA, "
                             "0 on CPU)")
    parser.add_argument("--corpus", help="corpus of the `induce train` runs (default: the default corpus)")
    parser.add_argument("--train-override", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for the `induce train` runs; repeatable")
    parser.add_argument("--training-json", type=Path,
                        help="write the per-model training rows here (default on CUDA: bench/gpu_training.json)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="also time each model's step through train.cuda_graphs (MODEL+graphs rows)")
    parser.add_argument("--no-launches", dest="launches", action="store_false",
                        help="skip counting the kernel launches per training step (each model and tier, and "
                             "the externals; a few extra steps per model, ~2 minutes on CPU at the papers' sizes)")
    parser.add_argument("--tiny", action="store_true", help="tiny models (tests of this script; numbers mean nothing)")
    parser.add_argument("--profile-ops", type=int, default=0, metavar="STEPS",
                        help="after the timing, profile this many more eager steps of each of our models and print "
                             "its costliest operators (self time on the device, or the CPU); the rows get top_ops")
    args = parser.parse_args(argv)
    _tiny = args.tiny
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device is available")
    externals = {}
    for spec in args.external:
        name, sep, path = spec.partition("=")
        if not sep or not Path(path).is_file():
            parser.error(f"--external wants NAME=PATH to an existing file, got {spec!r}")
        externals[name] = path
    training_json = args.training_json or (GPU_JSON if cuda else None)
    if training_json is not None and not cuda and training_json.resolve() == GPU_JSON:
        parser.error("bench/gpu_training.json holds GPU figures: give --training-json another path for a CPU run")
    epochs = args.epochs if args.epochs is not None else (2 if cuda else 0)
    torch.set_num_threads(args.threads)
    where = args.device if cuda else f"{args.threads} threads"
    table = Table(title=f"induce models, {where}, {'bf16 autocast' if args.bf16 else 'fp32'}")
    columns = ("model", "batch x bptt", "train tokens/s", "MFLOP/token", "GFLOP/s", "% of GEMM peak",
               "ceiling tokens/s", "parse sentences/s")
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    console = Console(width=200)
    load_before = os.getloadavg()
    roofline = not args.tiny
    peak_before = gemm_peak(device=args.device) if roofline else None
    if args.cuda_graphs and args.warmup <= WARMUP_STEPS:
        args.warmup = WARMUP_STEPS + 2  # the graphed step is captured after its own warm-up: time replays only
    trainers = train_speeds(args.models, args.steps, args.warmup, args.bf16, externals, args.device, args.cuda_graphs)
    speeds = {name: trainer.tokens_per_second() for name, trainer in trainers.items()}
    peak = max(peak_before, gemm_peak(device=args.device)) if roofline else None  # before and after the steps
    launches = launch_counts(args.models, externals, args.device) if args.launches else {}
    top_ops = {entry: op_profile(trainers[entry], args.profile_ops, args.bf16) for entry in args.models} \
        if args.profile_ops else {}
    rows = []
    for entry in args.models:
        batch, bptt, *_ = SETUPS[entry]
        if args.tiny:
            batch, bptt = TINY_BATCH, TINY_BPTT
        flops = flops_per_token(entry) if roofline else None
        sentences_per_s = None if cuda else parse_speed(entry, args.parse_sentences, args.bf16)
        row = {"model": entry, "batch": batch, "bptt": bptt, "threads": args.threads, "device": args.device,
               "train_tokens_per_s": speeds[entry], "flops_per_token": flops,
               "achieved_flops_per_s": flops and speeds[entry] * flops, "gemm_peak_flops_per_s": peak,
               "ceiling_tokens_per_s": flops and peak / flops, "parse_sentences_per_s": sentences_per_s}
        if launches:
            row.update({f"launches_{tier}": launches[entry][tier] for tier in TIERS})
        if top_ops:
            row["top_ops"] = top_ops[entry]
        rows.append(row)
        dash = lambda value, text: "-" if value is None else text  # noqa: E731
        table.add_row(entry, f"{batch} x {bptt}", f"{speeds[entry]:.0f}", dash(flops, f"{(flops or 0) / 1e6:.0f}"),
                      dash(flops, f"{(row['achieved_flops_per_s'] or 0) / 1e9:.1f}"),
                      dash(flops, f"{100 * speeds[entry] * (flops or 0) / (peak or 1):.0f}%"),
                      dash(flops, f"{(peak or 0) / (flops or 1):.0f}"),
                      "n/a" if sentences_per_s is None else f"{sentences_per_s:.1f}")
    for entry in args.models if args.cuda_graphs else []:
        name = f"{entry}+graphs"
        ratio = speeds[name] / speeds[entry]
        rows.append({"model": name, "threads": args.threads, "device": args.device, "train_tokens_per_s": speeds[name],
                     "ratio_to_eager": ratio,
                     "gpu_mem_gib": round(trainers[name].peak_bytes / 2**30, 3) if cuda else None})
        table.add_row(name, "", f"{speeds[name]:.0f} ({ratio:.2f}x eager)", "-", "-", "-", "-", "n/a")
    for name, path in externals.items():
        rows.append({"model": name, "external": path, "threads": args.threads, "device": args.device,
                     "train_tokens_per_s": speeds[name], **({"launches": launches[name]["own"]} if launches else {})})
        table.add_row(f"{name} (external)", "", f"{speeds[name]:.0f}", "-", "-", "-", "-", "n/a")
    console.print(f"load average before/after: {load_before} / {os.getloadavg()}")
    if roofline:
        console.print(f"fp32 GEMM peak ([1400,1550] x [1550,4830], median of 5): {peak / 1e9:.1f} GFLOP/s "
                      f"on {where}; 'ceiling' = that peak / matrix-product FLOPs per token")
    console.print(table)
    if launches:
        console.print(launch_table(launches, args.models, args.device))
    for entry, ops in top_ops.items():
        where_ms = "device" if cuda else "CPU"
        ops_table = Table(title=f"{entry}: costliest operators of one eager training step ({where_ms} self ms, "
                                f"mean of {args.profile_ops} steps)")
        for column in ("operator", "calls", "self ms"):
            ops_table.add_column(column, justify="left" if column == "operator" else "right")
        for op in ops:
            ops_table.add_row(op["op"][:70], f"{op['calls_per_step']:.0f}", f"{op['self_ms_per_step']:.2f}")
        console.print(ops_table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if training_json is not None:
        import tempfile

        epoch_speeds = {}
        if epochs:
            overrides = list(args.train_override)
            with tempfile.TemporaryDirectory(prefix="induce-bench-") as tmp:
                for entry in args.models:
                    model = model_name(entry)
                    extra = [] if entry == model else [f"model.{k}={v}" for k, v in SETUPS[entry][3].items()]
                    if args.tiny:
                        extra = [f"model.{k}={v}" for k, v in TINY[model].items()]
                    epoch_speeds[entry] = induce_train_speeds(model, epochs, args.device, args.corpus,
                                                              extra + overrides, Path(tmp), args.threads)
        training = training_rows(args.models, trainers, externals, epoch_speeds, args.device, args.threads)
        # rows of models not run this time are kept (one model per run fits a device's time limit)
        kept = json.loads(training_json.read_text()) if training_json.exists() else []
        training = [row for row in kept if row.get("model") not in args.models] + training
        training_json.write_text(json.dumps(training, indent=1) + "\n")
        console.print(f"wrote {training_json}")


if __name__ == "__main__":
    main()
