"""One training step of our neural PCFGs against the released code, on a CPU, interleaved in one process.

For each thread count, model (``npcfg``, ``cpcfg``, ``tnpcfg``, at the sizes of their shipped configs: the
papers'), batch size and sentence length, this times one training step of ours and of every ``--external``
original that implements the model (``bench/originals/{compound-pcfg,tn-pcfg}/bench_entry.py``, prepared by
``bench/originals/prepare.py``; ``bench/ORIGINALS.md`` says what their steps do), on random sentences of
that many words (vocabulary 10,000; 8 batches drawn up front, used in turn).

Our step is the trainer's sentence-level step: ``zero_grad``, the mean over the batch of the model's
``sentence_loss`` (the negative ELBO: ``-log Z`` by :func:`induce.kernels.inside` / ``inside_lowrank``,
plus the KL for ``cpcfg``), ``backward``, ``clip_grad_norm_`` at ``optim.clip`` and Adam with the config's
``optim`` settings (lr 1e-3, betas 0.75 / 0.999, clip 3 for all three).

Protocol: one untimed warm-up step each, then ``--steps`` rounds; each round runs one step of every entry in
its own shuffled order, so that load from other processes falls on all of them alike. An entry whose warm-up
step took longer than ``--long-step`` seconds takes part in the first ``--long-steps`` rounds only (the
originals' slowest steps take minutes). Medians over the timed steps (wall clock; the JSON also has each
entry's median CPU time per step, ``cpu_ms``, less sensitive to other processes on a loaded machine); the
ratio of an original is its median over ours, and the *anchor* is the faster original. After the rounds one
more untimed step per entry measures its **peak memory**: glibc's heap trimmed (``malloc_trim``), the peak
resident set reset (``/proc/self/clear_refs``), the step, then ``VmHWM`` minus the resident set before it: the
most memory the step held at once above the model and optimiser state (PyTorch keeps no allocation statistics
on a CPU). ``--skip NAME:MODEL:BxN`` (shell-style patterns, e.g. ``compound-pcfg:*:16x30``) leaves an entry
out of a cell, said in the table; the JSON (``--json``) is rewritten after every cell, so a long run that
stops keeps what it measured.

    python bench/pcfg_models.py --external compound-pcfg=.originals/compound-pcfg/bench_entry.py \\
        --external tn-pcfg=.originals/tn-pcfg/bench_entry.py --threads 1 2 --json pcfg_steps.json
    python bench/pcfg_models.py --tiny --external ...   # a quick check that every entry runs
    python bench/pcfg_models.py --markdown pcfg_steps.json   # the table of bench/results/training.md

**Profile** (``--profile``): our step alone under :mod:`torch.profiler` (``with_stack``) for
``--profile-steps`` steps after two warm-up steps, at the first batch size, length and thread count
given. Every operator is charged to a part of the step: forward operators to the model line that
runs them (the innermost line of ``induce/models/`` whose text names a part, below), backward operators
to the forward operator that made their autograd node (matched by sequence number), the clipping and
Adam to the optimiser; the parts: *emissions* (the emission network over the vocabulary, its
log-softmax and the word lookup), *inference network* (embedding, bi-LSTM, pooling, ``z`` and the KL),
*rules* (the rule network / TN-PCFG's three factor networks and their softmaxes, ``z`` concatenated),
*roots*, *inside* (the inside pass: :func:`induce.kernels.inside` / ``inside_lowrank``), *optimiser*,
*gradient accumulation* (autograd writing ``.grad``), and *other*. Prints the parts (forward, backward,
share of the profiled step) and the costliest model lines; ``--json`` writes them.

    python bench/pcfg_models.py --profile cpcfg tnpcfg --batches 4 --lengths 20 --threads 1
"""
from __future__ import annotations

import argparse
import fnmatch
import gc
import importlib.util
import json
import linecache
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from torch.overrides import TorchFunctionMode

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # run from a checkout without installing

from induce.config import load_config  # noqa: E402
from induce.models.registry import get_model_class  # noqa: E402


def _script(name: str):
    """``bench/<name>.py`` (or ``bench/originals/<name>.py``) as the module ``bench_<name>``: the benchmark
    scripts are not a package, and a plain ``import models`` would meet compound-pcfg's own ``models.py``."""
    path = BENCH / f"{name}.py"
    if not path.exists():
        path = BENCH / "originals" / f"{name}.py"
    module_name = f"bench_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


bench_models = _script("models")  # ExternalTrainer, StepTimer
bench_inside = _script("inside")  # trim_heap, _rss_kib
entry_common = _script("entry_common")  # VOCAB, RandomSentences: the originals' sentences, drawn alike for ours

MODELS = ("npcfg", "cpcfg", "tnpcfg")
VOCAB = entry_common.VOCAB
#: ``--tiny``: model sizes (config overrides) small enough for a test of this script; the entries' tiny sizes
TINY = {
    "npcfg": dict(nt_states=3, t_states=4, state_dim=8),
    "cpcfg": dict(nt_states=3, t_states=4, state_dim=8, z_dim=4, h_dim=8, w_dim=8),
    "tnpcfg": dict(nt_states=3, t_states=4, rank=4, state_dim=8),
}


class OurStep:
    """Our model at its shipped config (``tiny``: :data:`TINY`), Adam from the config's ``optim``; ``step()`` is the
    trainer's sentence-level step (module docstring). ``.batch``, ``.length`` as the originals' entries."""

    def __init__(self, model: str, batch: int, length: int, tiny: bool = False, sizes: Path | None = None):
        config = load_config(model, config_file=sizes / f"{model}.yaml" if sizes else None)
        cls = get_model_class(model)
        torch.manual_seed(0)
        self.model = cls(VOCAB, cls.Config(**{**config.model, **(TINY[model] if tiny else {})})).train()
        optim = config.optim
        if optim.optimizer != "adam":
            raise SystemExit(f"configs/{model}.yaml: optim.optimizer is {optim.optimizer!r}; this step is Adam's")
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(self.params, lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps,
                                          weight_decay=optim.wdecay)
        self.clip = optim.clip
        self.batch, self.length = batch, length
        self.sentences = entry_common.RandomSentences(batch, length, torch.device("cpu"))

    def step(self, region=None) -> None:
        """One training step; ``region(name)`` (a context manager, e.g. ``torch.profiler.record_function``)
        marks its forward, backward and optimiser phases when given."""
        phase = region or (lambda name: _NoRegion)
        tokens, lengths = self.sentences.next()
        self.optimizer.zero_grad(set_to_none=True)
        with phase("bench:forward"):
            loss = self.model.sentence_loss(tokens, lengths).float().mean()
        with phase("bench:backward"):
            loss.backward()
        with phase("bench:optimiser"):
            if self.clip is not None:
                torch.nn.utils.clip_grad_norm_(self.params, self.clip)
            self.optimizer.step()


class _NoRegionType:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


_NoRegion = _NoRegionType()


class Entry:
    """One implementation in a cell: its trainer, timer and step times (seconds); ``peak_mib`` after
    :func:`peak_step_mib`."""

    def __init__(self, name: str, trainer):
        self.name, self.trainer = name, trainer
        self.timer = bench_models.StepTimer(torch.device("cpu"))
        self.warmup_s: float | None = None
        self.peak_mib: float | None = None
        self.cpu_times: list[float] = []

    def step(self, record: bool) -> float:
        start, cpu = time.perf_counter(), time.process_time()
        if record:
            self.timer.start()
        self.trainer.step()
        if record:
            self.timer.stop()
            self.cpu_times.append(time.process_time() - cpu)
        return time.perf_counter() - start

    @property
    def times(self) -> list[float]:
        return self.timer.seconds()


def peak_step_mib(step) -> float:
    """The most resident memory one call of ``step`` held above the resident set before it, in MiB (module
    docstring): heap trimmed, ``VmHWM`` reset, the call, ``VmHWM`` read."""
    gc.collect()
    bench_inside.trim_heap()
    before = bench_inside._rss_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # VmHWM := the current resident set
    step()
    return (bench_inside._rss_kib("VmHWM") - before) / 1024


def interleave(entries: list[Entry], steps: int, long_step: float, long_steps: int, seed: int = 0) -> None:
    """One warm-up step of each entry, then ``steps`` rounds of one step each, every round in its own shuffled
    order; an entry whose warm-up took longer than ``long_step`` seconds runs in the first ``long_steps``
    rounds only."""
    for entry in entries:
        entry.warmup_s = entry.step(record=False)
    for round_ in range(steps):
        order = list(entries)
        random.Random(seed + round_).shuffle(order)
        for entry in order:
            if round_ < long_steps or entry.warmup_s <= long_step:
                entry.step(record=True)


def parse_externals(specs: list[str], parser: argparse.ArgumentParser) -> dict[str, str]:
    externals = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not Path(path).is_file():
            parser.error(f"--external wants NAME=PATH to an existing file, got {spec!r}")
        externals[name] = path
    return externals


def run_cell(model: str, batch: int, length: int, threads: int, externals: dict[str, str],
             implemented: dict[str, tuple], args) -> dict:
    """Time one cell (module docstring); returns its JSON row. ``implemented``: each external's ``MODELS``."""
    torch.set_num_threads(threads)
    cell = f"{batch}x{length}"
    load_before = os.getloadavg()[0]
    entries = [Entry("ours", OurStep(model, batch, length, tiny=args.tiny, sizes=args.sizes))]
    originals: dict[str, dict] = {}
    for name, path in externals.items():
        if model not in implemented[name]:
            originals[name] = {"skipped": f"{name} has no {model}"}
        elif any(fnmatch.fnmatchcase(f"{name}:{model}:{cell}", pattern) for pattern in args.skip):
            originals[name] = {"skipped": "--skip"}
        else:
            trainer = bench_models.ExternalTrainer(path, "cpu", model=model, batch=batch, length=length,
                                                   tiny=args.tiny)
            entries.append(Entry(name, trainer.inner))  # the original's own object: timed by Entry
    interleave(entries, args.steps, args.long_step, args.long_steps)
    if not args.no_memory:
        for entry in entries:
            entry.peak_mib = peak_step_mib(entry.trainer.step)
    figures = {entry.name: {"ms": 1e3 * statistics.median(entry.times), "steps_ms": [1e3 * t for t in entry.times],
                            "cpu_ms": 1e3 * statistics.median(entry.cpu_times),
                            "warmup_ms": 1e3 * entry.warmup_s, "peak_mib": entry.peak_mib} for entry in entries}
    ours = figures.pop("ours")
    for name, figure in figures.items():
        figure["ratio"] = figure["ms"] / ours["ms"]
        originals[name] = figure
    timed = {name: figure for name, figure in originals.items() if "ms" in figure}
    anchor = min(timed, key=lambda name: timed[name]["ms"]) if timed else None
    del entries
    gc.collect()
    bench_inside.trim_heap()
    return {"model": model, "batch": batch, "length": length, "threads": threads, "ours": ours,
            "originals": {name: originals[name] for name in externals}, "anchor": anchor,
            "anchor_ratio": timed[anchor]["ratio"] if anchor else None,
            "load_before": load_before, "load_after": os.getloadavg()[0]}


def cell_table(rows: list[dict], externals: list[str]) -> Table:
    table = Table(title="one training step (median ms; ratio = original / ours; peak = MiB above the state)")
    columns = ["model", "B x N", "threads", "ours ms", "ours peak"]
    for name in externals:
        columns += [f"{name} ms", "ratio", "peak"]
    columns += ["anchor", "x anchor", "load"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("model", "anchor") else "right")

    def mib(value):
        return "-" if value is None else f"{value:.0f}"

    for row in rows:
        cells = [row["model"], f"{row['batch']} x {row['length']}", str(row["threads"]), f"{row['ours']['ms']:.1f}",
                 mib(row["ours"]["peak_mib"])]
        for name in externals:
            figure = row["originals"][name]
            if "ms" in figure:
                steps = len(figure["steps_ms"])
                cells += [f"{figure['ms']:.0f}" + ("" if steps >= 3 else f" ({steps})"), f"{figure['ratio']:.1f}x",
                          mib(figure["peak_mib"])]
            else:
                cells += [figure["skipped"], "", ""]
        cells += [row["anchor"] or "-", "-" if row["anchor"] is None else f"{row['anchor_ratio']:.1f}x",
                  f"{row['load_before']:.1f}-{row['load_after']:.1f}"]
        table.add_row(*cells)
    return table


def markdown_table(rows: list[dict]) -> str:
    """The rows of one or more ``--json`` files as a Markdown table (what bench/results/training.md shows): per cell the
    medians, each original's ratio to ours and the peak memory of a step (MiB above the model and optimiser
    state), the anchor (the faster original) and the load average around the cell; ``(n)`` after a median
    when it is of fewer than 3 steps."""
    names = list(dict.fromkeys(name for row in rows for name in row["originals"]))
    header = ["model", "B x N", "threads", "ours ms", *(f"{name} ms (ratio)" for name in names), "x anchor",
              "peak MiB: ours / " + " / ".join(names), "load"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def mib(value):
        return "-" if value is None else f"{value:,.0f}"

    for row in rows:
        cells = [row["model"], f"{row['batch']} x {row['length']}", str(row["threads"]), f"{row['ours']['ms']:,.0f}"]
        peaks = [mib(row["ours"]["peak_mib"])]
        for name in names:
            figure = row["originals"].get(name, {"skipped": "not run"})
            if "ms" in figure:
                steps = len(figure["steps_ms"])
                cells.append(f"{figure['ms']:,.0f}{'' if steps >= 3 else f' ({steps})'} ({figure['ratio']:.1f}x)")
                peaks.append(mib(figure["peak_mib"]))
            else:
                cells.append(figure["skipped"])
                peaks.append("-")
        anchor = "-" if row["anchor"] is None else f"**{row['anchor_ratio']:.1f}x** ({row['anchor']})"
        cells += [anchor, " / ".join(peaks), f"{row['load_before']:.1f}-{row['load_after']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_json(path: Path, payload: dict) -> None:
    """``payload`` as JSON at ``path``, atomically (a temporary file in the same folder, then renamed)."""
    path = Path(path)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp",
                                     delete=False, encoding="utf-8") as tmp:
        json.dump(payload, tmp, indent=1)
        tmp.write("\n")
    os.replace(tmp.name, path)


# ------------------------------------------------------------------------------------------------ profile

#: the parts of a step (module docstring), each recognised by the text of a model line that names it; the
#: first that matches wins, tried from the innermost ``induce/models/`` line outwards
PARTS = (
    ("inside", re.compile(r"\binside(_lowrank)?\(")),
    ("emissions", re.compile(r"vocab_mlp|term_mlp|emissions")),
    ("inference network", re.compile(r"self\.encoder|self\.embedding|self\.rnn|self\.params|pad_packed|"
                                     r"pack_padded|states\.max|gaussian_kl|noise|logvar")),
    ("rules", re.compile(r"rule_mlp|parent_mlp|left_mlp|right_mlp|rules\.view|rules\.expand")),
    ("roots", re.compile(r"root_mlp")),
)
MODEL_CODE = f"{os.sep}induce{os.sep}models{os.sep}"
LINE = "line:"  # the profiler ranges of the model lines: "line:PART|FILE:LINE TEXT"


def model_line(frame) -> str:
    """``PART|FILE:LINE TEXT`` of the call made from ``frame`` (PARTS; ``other`` when no model line names a part;
    the file and line are the innermost model line that named the part, else the innermost model line)."""
    innermost = None
    while frame is not None:
        file = frame.f_code.co_filename
        if MODEL_CODE in file:
            text = linecache.getline(file, frame.f_lineno).strip()
            where = f"{Path(file).name}:{frame.f_lineno} {text}"
            innermost = innermost or where
            for part, pattern in PARTS:
                if pattern.search(text):
                    return f"{part}|{where}"
        frame = frame.f_back
    return f"other|{innermost or '(outside the model)'}"


class LineMarks(TorchFunctionMode):
    """Every top-level torch call (functions and tensor methods; those made inside another are not seen)
    runs inside a profiler range named ``line:`` + :func:`model_line` of its caller."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        from torch.profiler import record_function

        with record_function(LINE + model_line(sys._getframe(1))):
            return func(*args, **(kwargs or {}))


def _ancestor(event, prefix: str):
    parent = event.cpu_parent
    while parent is not None and not parent.name.startswith(prefix):
        parent = parent.cpu_parent
    return parent


def _backward(event) -> bool:
    """Whether ``event`` runs in the backward (an autograd node, or an operator inside one)."""
    return event.name.startswith("autograd::engine") or _ancestor(event, "autograd::engine") is not None


def _first_line_below(event):
    for child in event.cpu_children:
        if child.name.startswith(LINE):
            return child
        found = _first_line_below(child)
        if found is not None:
            return found
    return None


def breakdown(events) -> dict:
    """The profiled steps' time (ms, summed over the steps) by part and phase, and by model line (module
    docstring): ``{"parts": {part: {"forward", "backward", "optimiser": ms}}, "lines": {line: ms}, "phases":
    {phase: ms}}``. A forward operator counts under the ``line:`` range it ran in; a backward node under
    the line of the forward operator of its sequence number (a custom autograd Function, whose forward ran
    outside any range, under the first range inside it); what the ranges and nodes leave of a phase is
    ``other`` (the autograd engine between nodes, the bench's own mean)."""
    parts: dict[str, dict[str, float]] = defaultdict(lambda: {"forward": 0.0, "backward": 0.0, "optimiser": 0.0})
    lines: dict[str, float] = defaultdict(float)
    phases: dict[str, float] = defaultdict(float)
    by_sequence: dict[int, tuple[float, str]] = {}  # sequence number -> (start, line) of its forward operator
    forward = backward = 0.0
    for event in events:
        if event.name.startswith("bench:"):
            phases[event.name.removeprefix("bench:")] += event.cpu_time_total / 1e3
        elif event.name.startswith(LINE):
            phase = _ancestor(event, "bench:")
            if _ancestor(event, LINE) is None and phase is not None and phase.name == "bench:forward":
                part, line = event.name.removeprefix(LINE).split("|", 1)
                ms = event.cpu_time_total / 1e3
                parts[part]["forward"] += ms
                lines[line] += ms
                forward += ms
        elif event.sequence_nr >= 0 and not _backward(event):
            # the operators that ran before a node was made carry its number too: its maker started last
            start = event.time_range.start
            if start >= by_sequence.get(event.sequence_nr, (-1.0, ""))[0]:
                mark = _ancestor(event, LINE) or _first_line_below(event)
                if mark is not None:
                    by_sequence[event.sequence_nr] = (start, mark.name.removeprefix(LINE))
    for event in events:
        if event.name.startswith("autograd::engine::evaluate_function") \
                and _ancestor(event, "autograd::engine") is None:
            ms = event.cpu_time_total / 1e3
            backward += ms
            if "AccumulateGrad" in event.name:
                parts["gradient accumulation"]["backward"] += ms
                continue
            unmatched = (0.0, "other|(a node without a forward line)")
            part, line = by_sequence.get(event.sequence_nr, unmatched)[1].split("|", 1)
            parts[part]["backward"] += ms
            lines[line] += ms
    parts["other"]["forward"] += phases.get("forward", 0.0) - forward
    parts["other"]["backward"] += phases.get("backward", 0.0) - backward
    parts["optimiser"]["optimiser"] += phases.get("optimiser", 0.0)
    return {"parts": {k: dict(v) for k, v in parts.items()}, "lines": dict(lines), "phases": dict(phases)}


def profile_model(model: str, batch: int, length: int, threads: int, steps: int, tiny: bool,
                  sizes: Path | None = None) -> dict:
    """Our step of ``model`` under the profiler (module docstring); also its median without the profiler
    (5 steps, after 2 warm-up steps)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.set_num_threads(threads)
    ours = OurStep(model, batch, length, tiny=tiny, sizes=sizes)
    for _ in range(2):
        ours.step()
    plain, cpu = [], []
    for _ in range(5):
        start, cpu_start = time.perf_counter(), time.process_time()
        ours.step()
        plain.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            with LineMarks():
                ours.step(region=record_function)
    result = breakdown(prof.events())
    total = sum(result["phases"].values())
    return {"model": model, "batch": batch, "length": length, "threads": threads, "profiled_steps": steps,
            "unprofiled_ms": 1e3 * statistics.median(plain),
            "unprofiled_cpu_ms": 1e3 * statistics.median(cpu), "profiled_ms_per_step": total / steps, **result}


def profile_tables(profile: dict, lines: int = 8) -> list[Table]:
    steps = profile["profiled_steps"]
    total = sum(profile["phases"].values())
    title = (f"{profile['model']}: B {profile['batch']}, {profile['length']} words, {profile['threads']} thread(s): "
             f"{profile['profiled_ms_per_step']:.0f} ms per profiled step ({profile['unprofiled_ms']:.0f} ms without "
             f"the profiler), mean of {steps}")
    parts = Table(title=title)
    for column in ("part", "forward ms", "backward ms", "optimiser ms", "total ms", "share"):
        parts.add_column(column, justify="left" if column == "part" else "right")
    for part, ms in sorted(profile["parts"].items(), key=lambda item: -sum(item[1].values())):
        every = sum(ms.values())
        parts.add_row(part, *(f"{ms[phase] / steps:.1f}" for phase in ("forward", "backward", "optimiser")),
                      f"{every / steps:.1f}", f"{100 * every / total:.0f}%")
    costly = Table(title="costliest model lines (forward + backward)")
    costly.add_column("line")
    costly.add_column("ms", justify="right")
    for line, ms in sorted(profile["lines"].items(), key=lambda item: -item[1])[:lines]:
        costly.add_row(escape(line[:110]), f"{ms / steps:.1f}")
    return [parts, costly]


# --------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--batches", nargs="+", type=int, help="sentences per batch B (default 4 16)")
    parser.add_argument("--lengths", nargs="+", type=int, help="words per sentence N (default 20 30)")
    parser.add_argument("--threads", nargs="+", type=int, help="torch thread counts (default 1 2)")
    parser.add_argument("--steps", type=int, help="timed rounds after one warm-up step (default 5)")
    parser.add_argument("--long-step", type=float, default=30.0, metavar="SECONDS",
                        help="an entry whose warm-up step took longer runs in --long-steps rounds only (default 30)")
    parser.add_argument("--long-steps", type=int, default=2, help="(default 2)")
    parser.add_argument("--external", action="append", default=[], metavar="NAME=PATH",
                        help="an original's bench_entry.py (bench/ORIGINALS.md); repeatable")
    parser.add_argument("--skip", action="append", default=[], metavar="NAME:MODEL:BxN",
                        help="leave an external out of the cells matching this pattern (shell-style, e.g. "
                             "compound-pcfg:*:16x30); repeatable")
    parser.add_argument("--sizes", type=Path, metavar="DIR",
                        help="our models at the sizes of DIR/<model>.yaml over the shipped config (e.g. "
                             "induce/configs/cpu: the CPU profile's); the originals keep theirs")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory step")
    parser.add_argument("--profile", nargs="+", choices=MODELS, metavar="MODEL",
                        help="profile our step of these models instead (first batch, length and thread count)")
    parser.add_argument("--profile-steps", type=int, default=3, help="profiled steps (default 3)")
    parser.add_argument("--tiny", action="store_true",
                        help="tiny models; by default B 2, 4 words, 1 thread, 1 step (a check that every entry "
                             "runs; its numbers mean nothing)")
    parser.add_argument("--json", type=Path, help="also write the figures here (rewritten after every cell)")
    parser.add_argument("--markdown", nargs="+", type=Path, metavar="JSON",
                        help="print the rows of these --json files as a Markdown table, and nothing else")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown_table([row for path in args.markdown for row in json.loads(path.read_text())["rows"]]))
        return 0
    externals = parse_externals(args.external, parser)
    # each entry says which models its code base has (MODELS; all three when it does not say)
    implemented = {name: tuple(getattr(bench_models.load_entry(path), "MODELS", MODELS))
                   for name, path in externals.items()}
    defaults = dict(batches=[2], lengths=[4], threads=[1], steps=1) if args.tiny else \
        dict(batches=[4, 16], lengths=[20, 30], threads=[1, 2], steps=5)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if min(args.lengths) < 2:
        parser.error("--lengths: a PCFG derives no sentence of fewer than 2 words")
    console = Console(width=220)
    started = {"load_average": os.getloadavg(), "torch": torch.__version__, "cpus": os.cpu_count(),
               "tiny": args.tiny}
    if args.profile:
        profiles = []
        for model in args.profile:
            profiles.append(profile_model(model, args.batches[0], args.lengths[0], args.threads[0],
                                          args.profile_steps, args.tiny, args.sizes))
            for table in profile_tables(profiles[-1]):
                console.print(table)
            if args.json:
                write_json(args.json, {"started": started, "profiles": profiles})
        return 0
    rows = []
    for threads in args.threads:
        for model in args.models:
            for batch in args.batches:
                for length in args.lengths:
                    rows.append(run_cell(model, batch, length, threads, externals, implemented, args))
                    console.print(f"{model} B {batch} N {length} {threads} thread(s): ours "
                                  f"{rows[-1]['ours']['ms']:.1f} ms (CPU {rows[-1]['ours']['cpu_ms']:.1f} ms)"
                                  + "".join(
                                      f", {name} {figure['ms']:.0f} ms ({figure['ratio']:.1f}x)"
                                      for name, figure in rows[-1]["originals"].items() if "ms" in figure))
                    if args.json:
                        write_json(args.json, {"started": started, "finished_load_average": os.getloadavg(),
                                               "args": {k: str(v) if isinstance(v, Path) else v
                                                        for k, v in vars(args).items()}, "rows": rows})
    console.print(f"load average at start {started['load_average']}, at end {os.getloadavg()}; "
                  f"{os.cpu_count()} CPUs; torch {torch.__version__}")
    console.print(cell_table(rows, list(externals)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
