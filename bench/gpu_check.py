"""``make gpu-check``: the first GPU session in one command.

    python3 -u bench/gpu_check.py --wheels .whl --data .data --originals .originals --out OUT   # one H100
    python3 -u bench/gpu_check.py --dry-run                                   # CPU: does every step start?

(``make gpu-check WHEELS=.whl DATA=.data ORIGINALS=.originals OUT=DIR`` and ``make gpu-check DRY=1`` run
the same.) The steps run in this order, each as a child process whose output is streamed to the terminal
and to ``OUT/gpu-check.log``, each with its start, end, duration and status printed and a time limit (1.5x
its budget, and never past the whole run's 9 minutes):

==============  ======  ===========================================================================
step            budget  what
==============  ======  ===========================================================================
preflight        20 s   wheels installed (``--wheels``: ``pip install --no-index --no-deps --target``,
                        put on PYTHONPATH), every import, CUDA, the data and ``--originals`` checked;
                        refuses in seconds (exit 2) when something is missing
prepare-corpus   40 s   ``induce preprocess`` of the data root, and one subset per model for the epochs
bench-onlstm     65 s   ``bench/models.py --device cuda``: our step (eager and ``+graphs``) against the
bench-prpn       75 s   original implementation (``--external``, from ``--originals``), interleaved, our
bench-palm       60 s   step's costliest operators (``--profile-ops``) and 2 whole ``induce train`` epochs,
                        epoch 1 included (``--epochs``)
kernel-tests     60 s   the Triton, ON-LSTM cell, batching and LSTM-weight tests and the PCFG inside ops'
                        Triton tiers (dense, low-rank, simple), on CUDA
capture-tests    35 s   ``tests/test_training_graphs.py``: CUDA-graph capture of the three models
cudnn-weights    10 s   a paper-size WeightDropLSTM step raises no "RNN module weights" warning
pcfg-train       45 s   ``induce train`` of the SN-PCFG and TN-PCFG at their papers' sizes for
                        ``PCFG_STEPS`` steps, then their dev evaluation: seconds per step, from the
                        runs' ``metrics.jsonl`` (``pcfg_gpu.json``)
compile-test    120 s   ``tests/test_triton_compile_h100.py`` (every Triton kernel variant for sm_90);
                        last, since CI runs it on a CPU as well (over 90 s on the H200's CPUs)
==============  ======  ===========================================================================

The step benchmarks and the kernel tests come first, so that a run cut short by the whole run's limit
loses what matters least. The budgets (530 s in all) are the times of the first run on a GPU (one
H200, bench/results/gpu.md "`make gpu-check` on an H200") with a little room; the compile check's is a guess.
Without ``--originals`` the benchmarks run without the originals and the summary records them as skipped,
with the reason.

OUT (default ``gpu-check/``) receives at most five files, none in a sub-folder, each far below 16 MiB (the
log is capped), so that it comes back whole from a remote machine: ``summary.json`` (every step's command,
status, seconds, budget and note, a failed step's output tail, versions and device), ``gpu-check.log``
(everything printed), ``gpu_training.json`` (the rows of ``bench/gpu_training.json``: copy it there to
record them), ``bench_models.json`` (the rows ``bench/models.py --json`` wrote for the three models) and
``pcfg_gpu.json`` (the PCFG runs' steps, tokens/s and seconds per step).
Scratch (prepared corpus, run folders, Triton cache, installed wheels) goes to ``--work`` (default: a
temporary folder, removed at the end).

``--dry-run`` (CPU, runs in the tests): every step in a seconds-long form -- the pytest steps collect
their tests (imports and fixtures resolve; the suite runs them anyway), the benchmarks run the tiny models
(``--tiny``, one step, one epoch of a subset of a few sentences) and the originals at their tiny sizes
(``INDUCE_BENCH_TINY=1``), and the corpus is prepared from a few trees of the data root's dev file. A step
that cannot start fails the dry run (its steps are stopped at 5 minutes each, not at the H100 budgets).
Exit status: 0 when every step is ok or skipped, 1 when one failed or ran out of time, 2 when the preflight
refused, 130 on Ctrl-C.

Standard library only, so that a missing package is reported by the preflight rather than by a traceback.
"""
from __future__ import annotations

import argparse
import codecs
import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS = str(Path(__file__).resolve().parent / "gpu_check_tasks.py")  # small tasks run in child processes
TIME_LIMIT = 540.0  # seconds: the whole run, on one H100
LIMIT_FACTOR = 1.5  # a step is stopped at this multiple of its budget
PREFLIGHT_BUDGET = 20.0
DRY_STEP_LIMIT, DRY_TIME_LIMIT = 300.0, 1800.0  # a dry run checks that steps start, on any (loaded) CPU
LOG_CAP = 12 * 2**20  # bytes of log kept (what comes back from a remote machine: < 16 MiB a file)
SUMMARY, LOG, TRAINING_JSON, BENCH_JSON, PCFG_JSON = ("summary.json", "gpu-check.log", "gpu_training.json",
                                                     "bench_models.json", "pcfg_gpu.json")

#: modules every step needs (the device image lacks nltk and pydantic: they come as wheels)
REQUIRED_MODULES = ("torch", "triton", "numpy", "rich", "typer", "yaml", "safetensors", "nltk", "pydantic", "pytest",
                    "hypothesis")
PROJECT_MODULES = ("induce.config", "induce.data.locate", "induce.training.trainer",
                   "induce.kernels.recurrent.triton_impl", "induce.cli.main")
COMPILE_TEST = "tests/test_triton_compile_h100.py"
KERNEL_TESTS = ("tests/test_kernels_triton.py", "tests/test_onlstm_cell.py", "tests/test_batching.py",
                "tests/test_weight_drop_lstm.py", "tests/test_inside_triton.py", "tests/test_inside_lowrank_triton.py",
                "tests/test_inside_simple_triton.py")
CAPTURE_TESTS = ("tests/test_training_graphs.py",)


@dataclass(frozen=True)
class Benchmark:
    entry: str  # bench/models.py entry
    original: str  # folder under --originals
    budget: float
    sentences: int  # training sentences of the epoch-timing subset: ~10 s an epoch at the quoted H100 speed


BENCHMARKS = (
    Benchmark("onlstm", "onlstm", 65, 2000),  # ~44k tokens; H200: 59 s for the step bench + 2 epochs
    Benchmark("prpn", "prpn", 75, 6000),  # ~130k tokens; H200: 67 s
    Benchmark("palm-h1120-m10", "palm", 60, 15000),  # ~330k tokens (the original's size); H200: 53 s
)
STEP_NAMES = ("prepare-corpus", *(f"bench-{b.original}" for b in BENCHMARKS), "kernel-tests", "capture-tests",
              "cudnn-weights", "pcfg-train", "compile-test")  # after the preflight, in order (see plan())
PCFG_MODELS = ("snpcfg", "tnpcfg")  # trained at their shipped (paper) sizes in pcfg-train
PCFG_STEPS = 40  # optimiser steps of each PCFG run (train.max_steps)
MONITOR_SENTENCES = 200  # validation sentences of the subsets
DRY_SENTENCES, DRY_MONITOR = 24, 6


@dataclass
class Step:
    name: str
    budget: float  # seconds on one H100 (an estimate)
    what: str
    commands: list = field(default_factory=list)  # run one after the other; the step fails at the first failure
    env: dict = field(default_factory=dict)
    missing: str | None = None  # why the step cannot run at all (e.g. a test file that is not there)
    skip: str | None = None  # why the step is skipped
    bench: Benchmark | None = None
    result: dict = field(default_factory=dict)


@dataclass
class Paths:
    out: Path
    work: Path
    data: Path | None
    originals: Path | None
    site: Path | None = None

    @property
    def corpora(self) -> Path:
        return self.work / "corpora"


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def pytest_step(name: str, budget: float, what: str, files: tuple, dry: bool) -> Step:
    missing = [f for f in files if not (REPO / f).is_file()]
    command = python("-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", *files)
    if dry:
        command.append("--collect-only")
    return Step(name, budget, what, [command], missing=f"{', '.join(missing)}: missing" if missing else None)


def subset_name(sentences: int, monitor: int) -> str:
    return f"gpu-check-train{sentences}-valid{monitor}"  # the name induce.reproduce.subset gives it


def plan(paths: Paths, dry: bool) -> list[Step]:
    """The steps after the preflight, with their commands (nothing is run here)."""
    sizes = sorted({DRY_SENTENCES} if dry else {b.sentences for b in BENCHMARKS})
    monitor = DRY_MONITOR if dry else MONITOR_SENTENCES
    data, commands = paths.data, []
    if dry:
        data = paths.work / "dry-data"
        commands.append(python(TASKS, "dry-data", str(paths.data), str(data), str(DRY_SENTENCES), str(DRY_MONITOR)))
    commands += [
        python("-m", "induce.cli.main", "preprocess", "--data", str(data), "--out-dir", str(paths.corpora),
               "--name", "gpu-check"),
        python(TASKS, "subsets", str(paths.corpora / "gpu-check"), str(paths.corpora), ",".join(map(str, sizes)),
               str(monitor)),
    ]
    steps = [Step("prepare-corpus", 40, "induce preprocess + epoch subsets", commands)]
    for bench in BENCHMARKS:
        sentences = DRY_SENTENCES if dry else bench.sentences
        command = python("bench/models.py", "--models", bench.entry, "--cuda-graphs",
                         "--corpus", str(paths.corpora / subset_name(sentences, monitor)),
                         "--train-override", "train.dev_f1=false",
                         "--json", str(paths.work / f"bench-{bench.entry}.json"),
                         "--training-json", str(paths.out / TRAINING_JSON), "--profile-ops", "1" if dry else "3")
        if dry:
            command += ["--device", "cpu", "--tiny", "--threads", "1", "--steps", "1", "--warmup", "1",
                        "--parse-sentences", "0", "--epochs", "1", "--train-override", "data.batch_size=2",
                        "--train-override", "data.bptt=6", "--train-override", "data.eval_batch_size=2"]
        else:
            command += ["--device", "cuda", "--steps", "20", "--warmup", "5", "--epochs", "2"]
        step = Step(f"bench-{bench.original}", bench.budget, f"{bench.entry}: step vs original, 2 epochs",
                    [command], bench=bench, env={"INDUCE_BENCH_TINY": "1"} if dry else {})
        entry = paths.originals / bench.original / "bench_entry.py" if paths.originals else None
        if entry is not None and entry.is_file():
            command += ["--external", f"{bench.entry}-original={entry}"]
        else:
            step.result["original"] = ("not given (ORIGINALS=DIR; bench/originals/prepare.py writes it)"
                                       if entry is None else f"{entry} is missing (bench/originals/prepare.py "
                                       f"--{bench.original} CHECKOUT writes it)")
        steps.append(step)
    steps.append(pytest_step("kernel-tests", 60, "Triton / cell / batching / LSTM weights", KERNEL_TESTS, dry))
    steps.append(pytest_step("capture-tests", 35, "CUDA-graph capture, three models", CAPTURE_TESTS, dry))
    sizes_args = ("cpu", "8", "16", "2", "5") if dry else ("cuda", "400", "1150", "20", "70")
    steps.append(Step("cudnn-weights", 10, "no cuDNN weight-copy warning", [
        python("-W", "error:RNN module weights:UserWarning", TASKS, "cudnn-weights", *sizes_args)]))
    steps.append(pcfg_step(paths, dry, monitor))
    steps.append(pytest_step("compile-test", 120, "Triton kernels compiled for sm_90", (COMPILE_TEST,), dry))
    return steps


def pcfg_step(paths: Paths, dry: bool, monitor: int) -> Step:
    """``induce train`` of each of PCFG_MODELS for PCFG_STEPS steps (its shipped config: the paper's size; the
    toy config on a dry run), then the figures of the runs into OUT/pcfg_gpu.json."""
    sentences = DRY_SENTENCES if dry else BENCHMARKS[0].sentences
    commands, runs = [], []
    for model in PCFG_MODELS:
        run = paths.work / "runs" / model  # named after the model: run-figures reads the name from it
        toy = ["--config", str(REPO / "induce" / "configs" / "toy" / f"{model}.yaml")] if dry else []
        commands.append(python("-m", "induce.cli.main", "train", "--model", model, *toy, "--out", str(run),
                               "--corpus", str(paths.corpora / subset_name(sentences, monitor)),
                               "--device", "cpu" if dry else "cuda", f"train.max_steps={1 if dry else PCFG_STEPS}"))
        runs.append(str(run))
    commands.append(python(TASKS, "run-figures", str(paths.out / PCFG_JSON), *runs))
    return Step("pcfg-train", 45, f"{' and '.join(PCFG_MODELS)} at paper size: {PCFG_STEPS} steps + dev", commands)


class Output:
    """Everything printed goes to the terminal (flushed at once) and to the log, which is capped at LOG_CAP."""

    def __init__(self, log: Path):
        self.log = open(log, "w", encoding="utf-8", errors="replace")
        self.logged = 0

    def write(self, text: str) -> None:
        try:
            sys.stdout.write(text)
        except UnicodeEncodeError:  # a terminal that cannot show rich's box drawing
            sys.stdout.write(text.encode("ascii", "replace").decode("ascii"))
        sys.stdout.flush()
        if self.logged < LOG_CAP:
            size = len(text.encode("utf-8", "replace"))
            if self.logged + size >= LOG_CAP:
                text = text[: (LOG_CAP - self.logged) // 4] + "\n[gpu-check: log capped; the terminal has the rest]\n"
                size = LOG_CAP
            self.log.write(text)
            self.log.flush()
            self.logged += size

    def say(self, text: str) -> None:
        self.write(f"[gpu-check {time.strftime('%H:%M:%S')}] {text}\n")

    def close(self) -> None:
        self.log.close()


def run_command(command: list, env: dict, limit: float, out: Output) -> tuple[int | None, str]:
    """Run ``command`` in the repository, its output streamed to ``out``; ``(exit status or None when stopped
    at ``limit`` seconds, the last 4,000 characters of its output)``."""
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    tail: list[str] = []
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span two reads

    def pump():
        while chunk := os.read(process.stdout.fileno(), 65536):
            text = decoder.decode(chunk)
            out.write(text)
            tail.append(text)
            if len(tail) > 64:
                del tail[:32]

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        status = process.wait(timeout=max(limit, 1.0))
    except subprocess.TimeoutExpired:
        status = None
    finally:
        if process.poll() is None:  # timed out, or Ctrl-C: stop the whole process group
            for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
                try:
                    os.killpg(process.pid, sig)
                    process.wait(timeout=grace)
                    break
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    continue
        reader.join(timeout=5)
        process.stdout.close()
    return status, "".join(tail)[-4000:]


def child_env(paths: Paths, extra: dict) -> dict:
    env = dict(os.environ)
    path = [str(paths.site)] if paths.site else []
    path += [str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env.update(PYTHONPATH=os.pathsep.join(path), PYTHONUNBUFFERED="1", MPLBACKEND="Agg",
               TRITON_CACHE_DIR=str(paths.work / "triton-cache"))
    if paths.data is not None:
        env["INDUCE_DATA"] = str(paths.data)
    env.update(extra)
    return env


# ------------------------------------------------------------------------------------------------ preflight


def install_wheels(wheels: Path, site: Path, out: Output) -> str | None:
    """Install every wheel of ``wheels`` into ``site`` (no index, no dependencies); why not, or None."""
    if not wheels.is_dir():
        return f"WHEELS={wheels}: no such folder"
    files = sorted(str(p) for p in wheels.glob("*.whl"))
    if not files:
        return f"WHEELS={wheels}: no .whl files in it"
    out.say(f"installing {len(files)} wheels from {wheels} into {site}")
    done = subprocess.run(python("-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                                 "--no-cache-dir", "--upgrade", "--target", str(site), *files),
                          capture_output=True, text=True)
    if done.returncode != 0:
        return f"pip install --target {site} of WHEELS={wheels} failed: {(done.stderr or done.stdout).strip()[-800:]}"
    return None


def preflight(paths: Paths, wheels: Path | None, dry: bool, out: Output) -> tuple[list[str], dict]:
    problems = []
    if paths.originals is not None and not paths.originals.is_dir():
        problems.append(f"ORIGINALS={paths.originals}: no such folder (bench/originals/prepare.py writes it)")
    if wheels is not None:
        paths.site = paths.work / "site"
        problem = install_wheels(wheels, paths.site, out)
        if problem:
            return problems + [problem], {}
    spec = {"modules": list(REQUIRED_MODULES + PROJECT_MODULES), "cuda": not dry,
            "data": str(paths.data) if paths.data else None, "site": str(paths.site) if paths.site else None}
    try:
        done = subprocess.run(python(TASKS, "preflight", json.dumps(spec)), cwd=REPO,
                              env=child_env(paths, {}), capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return problems + [f"the preflight probe ({sys.executable}) did not finish in 120 s"], {}
    lines = [line for line in done.stdout.splitlines() if line.startswith("GPU_CHECK_PROBE ")]
    if not lines:
        return problems + [f"the preflight probe failed ({sys.executable}): {(done.stderr or done.stdout)[-800:]}"], {}
    report = json.loads(lines[-1].removeprefix("GPU_CHECK_PROBE "))
    return problems + report["problems"], report["info"]


# ------------------------------------------------------------------------------------------------- results


def pytest_note(text: str) -> str:
    counts = re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|tests? collected)", text)
    return ", ".join(f"{n} {what}" for n, what in counts[-6:])


def bench_note(step: Step, paths: Paths) -> str:
    """Our tokens/s, the graphed and original ones, and the epochs, from the files bench/models.py wrote."""
    entry, parts = step.bench.entry, []
    rows = read_json(paths.work / f"bench-{entry}.json") or []
    speeds = {row["model"]: row.get("train_tokens_per_s") for row in rows}
    training = {row["model"]: row for row in read_json(paths.out / TRAINING_JSON) or []}
    if speeds.get(entry):
        parts.append(f"ours {speeds[entry]:,.0f} tok/s")
    if speeds.get(f"{entry}+graphs"):
        parts.append(f"+graphs {speeds[f'{entry}+graphs'] / speeds[entry]:.2f}x")
    original = speeds.get(f"{entry}-original")
    if original:
        parts.append(f"original {original:,.0f} (ours {speeds[entry] / original:.2f}x)")
    row = training.get(entry, {})
    if row.get("induce_train_tok_s"):
        parts.append(f"train epoch 1 {row['induce_train_epoch1_tok_s']:,.0f}, "
                     f"last {row['induce_train_tok_s']:,.0f} tok/s")
    if row.get("gpu_mem_gib"):
        parts.append(f"{row['gpu_mem_gib']} GiB")
    if rows:
        merged = [r for r in read_json(paths.out / BENCH_JSON) or [] if r.get("model") not in speeds] + rows
        write_json(paths.out / BENCH_JSON, merged)
    return "; ".join(parts)


def children_cpu() -> float:
    """CPU seconds (user + system) of the child processes that have ended so far, theirs included."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_json(path: Path, data) -> None:
    """Atomically (a temporary file renamed over it): a run stopped half-way never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def run_step(step: Step, paths: Paths, deadline: float, out: Output, dry: bool = False) -> None:
    result = step.result
    result.update(name=step.name, what=step.what, budget_s=step.budget, seconds=0.0,
                  commands=[shlex.join(c) for c in step.commands])
    left = deadline - time.monotonic()
    if step.missing or step.skip or left < 1:
        why = step.missing or step.skip or "out of time (the whole run's limit was reached)"
        result.update(status="failed" if step.missing else "skipped" if step.skip else "not run", note=why)
        out.say(f"{step.name}: {result['status'].upper()}: {why}")
        return
    limit = min(DRY_STEP_LIMIT if dry else step.budget * LIMIT_FACTOR, left)
    env = child_env(paths, step.env)
    start, cpu = time.monotonic(), children_cpu()
    text, status = "", 0
    for command in step.commands:
        out.say(f"START {step.name} (budget {step.budget:.0f} s, stopped at {limit:.0f} s): {shlex.join(command)}")
        status, tail = run_command(command, env, limit - (time.monotonic() - start), out)
        text += tail
        if status != 0:
            break
    result["seconds"] = round(time.monotonic() - start, 1)
    result["cpu_s"] = round(children_cpu() - cpu, 1)
    result["status"] = "ok" if status == 0 else "timeout" if status is None else "failed"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    note = lines[-1][:160] if lines else ""  # e.g. the cuDNN probe's verdict, the last subset prepared
    if step.name.endswith(("-test", "-tests")):
        note = pytest_note(text)
        skipped = re.findall(r"^SKIPPED .*$", text, flags=re.MULTILINE)
        if skipped:  # on a GPU machine a skipped CUDA test is news: its reason goes into summary.json
            result["skipped"] = skipped[:10]
    if step.bench is not None:
        note = ("tiny models on CPU, numbers mean nothing: " if dry else "") + bench_note(step, paths)
    if status is None:
        note = f"stopped at {limit:.0f} s" + (f"; {note}" if note else "")
    elif status != 0:
        note = f"exit status {status}" + (f"; {note}" if note else "")
        result["output_tail"] = text[-4000:]
    result["note"] = note
    out.say(f"END {step.name}: {result['status'].upper()} in {result['seconds']:.1f} s" + (f": {note}" if note else ""))


def summary_table(results: list[dict], info: dict, elapsed: float, limit: float, paths: Paths) -> str:
    head = ", ".join(f"{k} {info[k]}" for k in ("device", "torch", "triton", "data") if info.get(k))
    lines = [f"gpu-check summary ({head or 'no device information'}): {elapsed / 60:.1f} of {limit / 60:.1f} min",
             f"{'step':<15}{'status':<9}{'time':>8}{'budget':>8}  note"]
    for r in results:
        lines.append(f"{r['name']:<15}{r['status']:<9}{r['seconds']:>7.1f}s{r['budget_s']:>7.0f}s  {r.get('note', '')}")
    files = sorted(p.name for p in paths.out.iterdir() if p.is_file())
    lines.append(f"files in {paths.out}: {', '.join(files)}")
    if (paths.out / TRAINING_JSON).is_file() and info.get("cuda_available"):
        lines.append(f"to record the GPU rows: cp {paths.out / TRAINING_JSON} bench/gpu_training.json")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="CPU: check that every step starts (seconds each)")
    parser.add_argument("--out", type=Path, default=REPO / "gpu-check", help="results folder (default: gpu-check/)")
    parser.add_argument("--wheels", type=Path, help="folder of wheels to install first (no network needed)")
    parser.add_argument("--data", type=Path, help="data root with the treebank (default: $INDUCE_DATA)")
    parser.add_argument("--originals", type=Path, help="folder written by bench/originals/prepare.py")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temporary one, removed at the end)")
    parser.add_argument("--only", help="run only these steps (comma-separated names) after the preflight; the "
                                       "bench steps need prepare-corpus")
    parser.add_argument("--time-limit", type=float,
                        help=f"seconds for the whole run (default {TIME_LIMIT:.0f}; dry run {DRY_TIME_LIMIT:.0f})")
    args = parser.parse_args(argv)
    args.time_limit = args.time_limit or (DRY_TIME_LIMIT if args.dry_run else TIME_LIMIT)
    unknown = set(args.only.split(",")) - set(STEP_NAMES) if args.only else set()
    if unknown:
        parser.error(f"--only {args.only}: no step {', '.join(sorted(unknown))} (steps: {', '.join(STEP_NAMES)})")
    begin, deadline, cpu = time.monotonic(), time.monotonic() + args.time_limit, children_cpu()
    data = args.data or (Path(os.environ["INDUCE_DATA"]) if os.environ.get("INDUCE_DATA") else None)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in (SUMMARY, LOG, TRAINING_JSON, BENCH_JSON, PCFG_JSON):
        (args.out / name).unlink(missing_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    paths = Paths(args.out.resolve(), work.resolve(), data.resolve() if data else None,
                  args.originals.resolve() if args.originals else None)
    out = Output(paths.out / LOG)
    results: list[dict] = []
    info: dict = {}

    def save(status: str) -> None:
        write_json(paths.out / SUMMARY, {"status": status, "dry_run": args.dry_run, "info": info,
                                         "seconds": round(time.monotonic() - begin, 1), "time_limit_s": args.time_limit,
                                         "steps": results})

    code = 0
    try:
        out.say(f"{'DRY RUN (CPU)' if args.dry_run else 'GPU check'}: results in {paths.out}, scratch in {paths.work}")
        if data is None:
            problems = ["no data root: give DATA=DIR (--data) or set INDUCE_DATA"]
        else:
            problems, info = preflight(paths, args.wheels, args.dry_run, out)
        pre = {"name": "preflight", "what": "wheels, imports, CUDA, data", "budget_s": PREFLIGHT_BUDGET,
               "seconds": round(time.monotonic() - begin, 1), "cpu_s": round(children_cpu() - cpu, 1),
               "status": "failed" if problems else "ok",
               "note": "; ".join(problems) or ", ".join(f"{k} {v}" for k, v in info.items() if v is not None)}
        results.append(pre)
        if problems:
            for problem in problems:
                out.say(f"cannot start: {problem}")
            code = 2
        else:
            out.say(f"preflight ok: {pre['note']}")
            steps = plan(paths, args.dry_run)
            for step in steps if args.only else []:
                step.skip = None if step.name in args.only.split(",") else "not in --only"
            for step in steps:
                save("running")
                run_step(step, paths, deadline, out, args.dry_run)
                results.append(step.result)
                original = step.result.pop("original", None)
                if original and step.result["status"] not in ("skipped", "not run"):
                    results.append({"name": f"{step.bench.original}-orig", "what": "original implementation",
                                    "budget_s": 0, "seconds": 0.0, "status": "skipped", "note": original})
            code = 0 if all(r["status"] in ("ok", "skipped") for r in results) else 1
        save("done" if code == 0 else "failed" if code == 1 else "refused")
    except KeyboardInterrupt:
        save("interrupted")
        out.say("interrupted")
        code = 130
    finally:
        out.write(summary_table(results, info, time.monotonic() - begin, args.time_limit, paths))
        out.close()
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
