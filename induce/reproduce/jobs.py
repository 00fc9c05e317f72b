"""``induce reproduce --jobs N``: the pipeline's independent units in N processes at once, each with the
profile's threads, so that a 2-core machine trains two models at a time.

**Units** (:func:`plan_units`): each (model, seed) run (its training, then its evaluation), each model's
untrained models, and the baselines (one unit). A unit runs in a child process, ``python -m
induce.reproduce.worker SPEC`` (SPEC: a JSON file in ``OUT/logs/``), which rebuilds the
:class:`~induce.reproduce.pipeline.Reproduction` from the same options, reads the corpora the parent prepared,
runs the unit's steps, writes everything it prints to ``OUT/logs/<unit>.log`` and its step records to
``OUT/logs/<unit>.result.json``. The parent records the steps in ``steps.json`` (it alone writes it), shows
which units run (a live table with each one's latest line on a terminal; a line at each start and end
otherwise) and writes the report. A unit that fails is reported with its log (its path and its last lines);
the others go on.

**The same figures as one job.** Every unit starts from its own files and seeds (a run from ``train.seed``,
the untrained models from their init seeds) with the same thread count, whatever else ran in its process
before; so ``--jobs 2`` writes the figures ``--jobs 1`` writes (``tests/test_reproduce_jobs.py``).

**Interruption.** The children run in their own sessions, so that a Ctrl-C reaches them once, from the
parent: SIGINT (or SIGTERM) of the parent is passed on to each running child (its training stops after the
batch in progress and writes its checkpoint), the parent waits for them, records what they finished and
stops; a second Ctrl-C stops them at once. A child whose parent dies gets SIGTERM (Linux), which stops its
training the same way. The same command continues where they stopped, as with one job.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from rich.markup import escape

#: Where the units' specs, logs and results go, under the output folder.
LOGS_DIR = "logs"
#: Seconds between two looks at the children (and refreshes of the live table).
POLL_SECONDS = 0.5


@dataclass
class Unit:
    """Steps that run one after the other in one child process: ``steps`` are names of the plan's steps."""

    name: str
    slug: str
    steps: list[str] = field(default_factory=list)


def plan_units(step_names: list[str], cost: Optional[Callable[[str], float]] = None) -> list[Unit]:
    """The plan's steps (after ``prepare``) grouped into units: ``train M seed S`` with ``evaluate M seed S``,
    each ``untrained ...`` alone, every ``baseline ...`` in one; the runs first, then the others in the plan's
    order.

    ``cost(model)`` (e.g. the profile's estimated CPU-minutes of one run) orders the runs, the costliest first
    (equal costs in the plan's order): with N jobs, starting the longest runs first keeps the last one from
    starting after the others are done (the longest-first rule). The order changes no figure: every run starts
    from its own files and seeds."""
    runs: dict[str, Unit] = {}
    others: list[Unit] = []
    baselines = Unit("baselines", "baselines")
    for name in step_names:
        verb, _, what = name.partition(" ")
        if verb in ("train", "evaluate"):
            unit = runs.setdefault(what, Unit(what, what.replace(" seed ", "-seed").replace(" ", "-")))
            unit.steps.append(name)
        elif verb == "baseline":
            baselines.steps.append(name)
        else:
            slug = name.split(" (")[0].replace(" ", "-")
            others.append(Unit(name, slug, [name]))
    ordered = list(runs.values())
    if cost is not None:
        ordered.sort(key=lambda unit: -cost(unit.name.split(" seed ")[0]))
    return ordered + others + ([baselines] if baselines.steps else [])


def schedule_minutes(costs: list[float], jobs: int) -> float:
    """Minutes until the last of ``costs`` (minutes each) ends, started in this order on ``jobs`` workers, each
    as soon as one is free: the wall time a plan takes on an idle machine with a core per job."""
    free = [0.0] * max(1, jobs)
    for minutes in costs:
        free.sort()
        free[0] += minutes
    return max(free)


def _child_env(threads: int) -> dict[str, str]:
    """The child's environment: this induce first on its path (the child runs the parent's code), and the
    thread count for the libraries that read it at start-up."""
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds this induce package
    paths = [root, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads)}


@dataclass
class _Running:
    unit: Unit
    process: subprocess.Popen
    log: Path
    result: Path
    started: float


class JobRunner:
    """Runs the units of a :class:`~induce.reproduce.pipeline.Reproduction` in ``jobs`` child processes
    (see the module docstring); :meth:`run` returns when all are done, or raises KeyboardInterrupt after an
    interrupt once the children have stopped."""

    def __init__(self, repro: Any, units: list[Unit], index_of: dict[str, int], total: int):
        self.repro, self.units, self.index_of, self.total = repro, units, index_of, total
        self.folder = Path(repro.out) / LOGS_DIR
        self.console = repro.console
        self.running: list[_Running] = []
        self.interrupts = 0

    # ------------------------------------------------------------------------------------------ children

    def _start(self, unit: Unit) -> _Running:
        self.folder.mkdir(parents=True, exist_ok=True)
        spec_path, log, result = (self.folder / f"{unit.slug}{suffix}" for suffix in (".spec.json", ".log",
                                                                                      ".result.json"))
        result.unlink(missing_ok=True)
        options = asdict(self.repro.options)
        options.update(jobs=1, progress=False, chunk=self.repro.chunk_left())
        spec = {"options": {k: str(v) if isinstance(v, Path) else v for k, v in options.items()},
                "steps": unit.steps, "result": str(result), "parent": os.getpid()}
        spec_path.write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
        with open(log, "w", encoding="utf-8") as handle:
            process = subprocess.Popen([sys.executable, "-m", "induce.reproduce.worker", str(spec_path)],
                                       stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=_child_env(self.repro.threads), start_new_session=True)
        self._say(f"[dim]started[/] {escape(unit.name)} [dim](log {escape(str(log))})[/]")
        return _Running(unit, process, log, result, time.monotonic())

    def _finish(self, job: _Running) -> None:
        """Record the steps the child reports, in the parent's ``steps.json``; a child that reported nothing
        (killed, crashed) fails its unit's steps with its log."""
        repro = self.repro
        try:
            report = json.loads(job.result.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            report = {"records": [], "failed_runs": [], "unfinished": []}
        done = {record["name"] for record in report["records"]}
        code = job.process.returncode
        for name in job.unit.steps:
            if name not in done and not (report.get("interrupted") or self.interrupts):
                report["records"].append({"name": name, "status": "failed", "seconds": 0.0,
                                          "detail": f"its job ended (exit status {code}) before this step"})
        for model, seed, reason in report["failed_runs"]:
            repro.failed_runs.setdefault((model, seed), reason)
        for model, seed in report["unfinished"]:
            repro.unfinished.add((model, seed))
        for entry in report["records"]:
            if entry["status"] == "failed":
                entry["detail"] += f" (log: {job.log})"
            self._say_record(repro.add_record(repro.record_type(**entry)), job)

    def _say_record(self, record, job: _Running) -> None:
        index = self.index_of.get(record.name, 0)
        where = f"[{index}/{self.total}] {record.name}"
        minutes = f"{record.seconds / 60:.1f} min"
        if record.status == "failed":
            self._say(f"[bold red]{escape(where)}: failed[/] ({minutes}): {escape(record.detail)}")
            tail = _last_lines(job.log, 15)
            if tail:
                self._say("[dim]" + escape("\n".join(f"    | {line}" for line in tail)) + "[/]")
        else:
            self._say(f"[bold]{escape(where)}[/]: {record.status} ({minutes}) {escape(record.detail)}")

    # ------------------------------------------------------------------------------------------- display

    def _say(self, message: str) -> None:
        self.console.print(message, highlight=False, soft_wrap=True)

    def _table(self):
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        for job in self.running:
            seconds = int(time.monotonic() - job.started)
            line = (_last_lines(job.log, 1) or [""])[0]
            table.add_row(f"[bold]{escape(job.unit.name)}[/]", f"{seconds // 60}:{seconds % 60:02d}",
                          escape(line[-100:]))
        return table

    # ----------------------------------------------------------------------------------------------- run

    def _reap(self) -> None:
        for job in [job for job in self.running if job.process.poll() is not None]:
            self.running.remove(job)
            self._finish(job)

    def _interrupt(self) -> None:
        """Pass the interrupt on to every running child (once per Ctrl-C of the parent)."""
        self.interrupts += 1
        if self.interrupts == 1:
            self._say("\n[bold yellow]interrupted:[/] the jobs stop after their batch in progress and write their "
                      "checkpoints (Ctrl-C again to stop them at once)")
        for job in self.running:
            try:
                os.kill(job.process.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def _loop(self, pending: list[Unit], live) -> None:
        while pending or self.running:
            try:
                while pending and len(self.running) < self.repro.jobs and not self.interrupts:
                    self.running.append(self._start(pending.pop(0)))
                if self.interrupts and not self.running:
                    break
                time.sleep(POLL_SECONDS)
                self._reap()
                if live is not None:
                    live.update(self._table())
            except KeyboardInterrupt:
                self._interrupt()

    def run(self) -> None:
        pending = list(self.units)
        live = None
        if self.repro.options.progress and self.console.is_terminal:
            from rich.live import Live

            live = Live(self._table(), console=self.console, transient=True, refresh_per_second=2)
        term = signal.getsignal(signal.SIGTERM)
        on_main = _on_main_thread()
        if on_main:  # SIGTERM too is passed on, as SIGINT
            signal.signal(signal.SIGTERM, lambda signum, frame: self._interrupt())
        try:
            if live is not None:
                with live:
                    self._loop(pending, live)
            else:
                self._loop(pending, None)
        finally:
            if on_main:
                signal.signal(signal.SIGTERM, term)
        if self.interrupts:
            raise KeyboardInterrupt


def _on_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _last_lines(path: Path, count: int) -> list[str]:
    """The last ``count`` non-empty lines of a log (its last 8 KB)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 8192))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line.rstrip() for line in text.splitlines() if line.strip()][-count:]
