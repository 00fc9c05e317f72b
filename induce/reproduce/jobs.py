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

**Executors.** Where a unit's worker runs is an :class:`Executor`: :class:`LocalExecutor` (``--executor local``,
the default: child processes of this one, ``--jobs`` at a time) or :class:`induce.reproduce.slurm.SlurmExecutor`
(``--executor slurm``: each unit a job of a SLURM cluster). :class:`JobRunner`, the scheduler, is the same for both:
it writes each unit's spec, starts (or submits) its job, looks at the jobs every ``poll_seconds``, shows them and
records what each one reports once it has ended.

**Interruption.** The local children run in their own sessions, so that a Ctrl-C reaches them once, from the
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
class UnitFiles:
    """A unit's files under ``OUT/logs/``: the worker's spec, its log (everything it prints) and its result
    (the step records it reports)."""

    spec: Path
    log: Path
    result: Path

    @classmethod
    def of(cls, folder: Path, unit: Unit) -> UnitFiles:
        return cls(*(folder / f"{unit.slug}{suffix}" for suffix in (".spec.json", ".log", ".result.json")))


class Job:
    """One unit's worker as an :class:`Executor` runs it. ``label`` names it in messages (``job 3``, ``SLURM job
    123``), ``announce`` is the line said when it starts."""

    def __init__(self, unit: Unit, files: UnitFiles, label: str, announce: str):
        self.unit, self.files, self.label, self.announce = unit, files, label, announce
        self.started = time.monotonic()
        #: True for a job that an earlier invocation saw end with every step done: its records are reported as
        #: skipped, nothing runs again.
        self.earlier = False

    def ended(self) -> Optional[str]:
        """None while the job runs (or waits to); once it has ended, how (``exit status 1``, ``FAILED``)."""
        raise NotImplementedError

    def stopped(self) -> bool:
        """Whether it was stopped from outside (cancelled, preempted, out of time): the steps it did not report are
        left for the next invocation (pending), not failed."""
        return False

    def columns(self) -> list[str]:
        """The live table's cells between the unit's name and its latest line."""
        seconds = int(time.monotonic() - self.started)
        return [f"{seconds // 60}:{seconds % 60:02d}"]

    def state(self) -> str:
        """What it is doing now, in a word (a change is said when there is no live table)."""
        return "running"

    def report(self) -> Optional[dict]:
        """The records its worker wrote (``files.result``), or None when it wrote none."""
        try:
            return json.loads(self.files.result.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None


class Executor:
    """Where the units' workers run; :class:`JobRunner` drives it (module docstring)."""

    #: Seconds between two looks at the jobs.
    poll_seconds: float = POLL_SECONDS
    #: Units whose jobs run at once (None: every unit at once, the cluster decides).
    slots: Optional[int] = None
    #: Submit the jobs and return, without waiting for them (``--detach``).
    detach: bool = False

    def worker_spec(self) -> dict:
        """What the worker's spec takes from this executor: ``options`` over the parent's, and ``parent``."""
        raise NotImplementedError

    def launch(self, unit: Unit, files: UnitFiles, spec: dict) -> Job:
        """Start ``unit``'s worker on ``spec`` (written to ``files.spec`` here, unless the unit's job is an earlier
        invocation's that is still known)."""
        raise NotImplementedError

    def refresh(self, jobs: list[Job]) -> None:
        """Look at the running jobs once (before each round of :meth:`Job.ended`)."""

    def interrupt(self, jobs: list[Job]) -> bool:
        """The parent was interrupted (Ctrl-C, SIGTERM): True when the jobs were told to stop (the runner waits for
        them), False when they go on without the parent (it stops waiting)."""
        raise NotImplementedError

    def collected(self, job: Job, complete: bool) -> None:
        """``job``'s records are recorded (``complete``: every step of its unit is done)."""


class _LocalJob(Job):
    def __init__(self, unit: Unit, files: UnitFiles, process: subprocess.Popen):
        super().__init__(unit, files, f"job {process.pid}",
                         f"[dim]started[/] {escape(unit.name)} [dim](log {escape(str(files.log))})[/]")
        self.process = process

    def ended(self) -> Optional[str]:
        code = self.process.poll()
        return None if code is None else f"exit status {code}"


class LocalExecutor(Executor):
    """``--executor local``: each unit a child process of this one, ``jobs`` at a time (``python -m
    induce.reproduce.worker SPEC``, in its own session, its output into its log)."""

    def __init__(self, repro: Any):
        self.repro = repro
        self.slots = repro.jobs

    def worker_spec(self) -> dict:
        return {"options": {"chunk": self.repro.chunk_left()}, "parent": os.getpid()}

    def launch(self, unit: Unit, files: UnitFiles, spec: dict) -> Job:
        files.result.unlink(missing_ok=True)
        files.spec.write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
        with open(files.log, "w", encoding="utf-8") as handle:
            process = subprocess.Popen([sys.executable, "-m", "induce.reproduce.worker", str(files.spec)],
                                       stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=_child_env(self.repro.threads), start_new_session=True)
        return _LocalJob(unit, files, process)

    def interrupt(self, jobs: list[Job]) -> bool:
        """SIGINT to every child (once per Ctrl-C of the parent): each stops at a checkpoint."""
        for job in jobs:
            try:
                os.kill(job.process.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        return True


class JobRunner:
    """Runs the units of a :class:`~induce.reproduce.pipeline.Reproduction` through an :class:`Executor`
    (see the module docstring); :meth:`run` returns when all are done (with ``detach``: once they are submitted),
    or raises KeyboardInterrupt after an interrupt once the jobs have stopped (or, on a cluster, are left
    running)."""

    def __init__(self, repro: Any, units: list[Unit], index_of: dict[str, int], total: int,
                 executor: Optional[Executor] = None):
        self.repro, self.units, self.index_of, self.total = repro, units, index_of, total
        self.executor = executor if executor is not None else LocalExecutor(repro)
        self.folder = Path(repro.out) / LOGS_DIR
        self.console = repro.console
        self.running: list[Job] = []
        self.interrupts = 0
        #: Stop waiting: the jobs go on without this process (an interrupt on a cluster, or ``detach``).
        self.leaving = False
        self.states: dict[int, str] = {}

    # ---------------------------------------------------------------------------------------------- jobs

    def _start(self, unit: Unit) -> Job:
        self.folder.mkdir(parents=True, exist_ok=True)
        files = UnitFiles.of(self.folder, unit)
        extra = self.executor.worker_spec()
        options = asdict(self.repro.options)
        options.update(jobs=1, progress=False, **extra["options"])
        spec = {"options": {k: str(v) if isinstance(v, Path) else v for k, v in options.items()},
                "steps": unit.steps, "result": str(files.result), "parent": extra["parent"]}
        job = self.executor.launch(unit, files, spec)
        self._say(job.announce)
        return job

    def _finish(self, job: Job) -> None:
        """Record the steps the worker reports, in the parent's ``steps.json``; steps it did not report fail with
        its log (it was killed, crashed), or, when it was stopped from outside and said so, are left pending for
        the next invocation."""
        repro = self.repro
        report = job.report() or {"records": [], "failed_runs": [], "unfinished": []}
        done = {record["name"] for record in report["records"]}
        why = job.ended()
        stopped = job.stopped() or (report.get("interrupted") and not self.interrupts)
        for name in job.unit.steps:
            if name in done:
                continue
            if stopped:
                report["records"].append({"name": name, "status": "pending", "seconds": 0.0,
                                          "detail": f"its {job.label} was stopped ({why}) before this step; run the "
                                                    "same command again to continue it"})
            elif not (report.get("interrupted") or self.interrupts):
                report["records"].append({"name": name, "status": "failed", "seconds": 0.0,
                                          "detail": f"its job ended ({why}) before this step"})
        for model, seed, reason in report["failed_runs"]:
            repro.failed_runs.setdefault((model, seed), reason)
        for model, seed in report["unfinished"]:
            repro.unfinished.add((model, seed))
        complete = bool(job.unit.steps) and all(
            entry["status"] in ("ran", "resumed", "skipped") for entry in report["records"]) and done >= set(
            job.unit.steps)
        for entry in report["records"]:
            if job.earlier:
                entry = {**entry, "status": "skipped", "seconds": 0.0,
                         "detail": f"done by {job.label}: {entry['detail']}"}
            elif entry["status"] == "failed":
                entry["detail"] += f" (log: {job.files.log})"
            elif entry["status"] == "pending":
                repro.pending_units.add(job.unit.name)
            self._say_record(repro.add_record(repro.record_type(**entry)), job)
        self.executor.collected(job, complete)

    def _leave(self) -> None:
        """Stop waiting: the steps of the jobs still queued or running are pending, their jobs named in the
        results (the same command collects them)."""
        for job in self.running:
            for name in job.unit.steps:
                record = self.repro.record_type(name, "pending", 0.0, f"its {job.label} is {job.state()}; run "
                                                "the same command again to collect it")
                self._say_record(self.repro.add_record(record), job)
            self.repro.pending_units.add(job.unit.name)
            self.repro.waiting_jobs[job.unit.name] = job.label
        self.running = []

    def _say_record(self, record, job: Job) -> None:
        index = self.index_of.get(record.name, 0)
        where = f"[{index}/{self.total}] {record.name}"
        minutes = f"{record.seconds / 60:.1f} min"
        if record.status == "failed":
            self._say(f"[bold red]{escape(where)}: failed[/] ({minutes}): {escape(record.detail)}")
            tail = _last_lines(job.files.log, 15)
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
            line = (_last_lines(job.files.log, 1) or [""])[0]
            table.add_row(f"[bold]{escape(job.unit.name)}[/]", *(escape(cell) for cell in job.columns()),
                          escape(line[-100:]))
        return table

    def _say_states(self) -> None:
        """Without a live table: a line when a job's state changes (queued, running, requeued)."""
        for job in self.running:
            state = job.state()
            if self.states.get(id(job), state) != state:
                self._say(f"[dim]{escape(job.unit.name)}: {escape(job.label)} {escape(state)}[/]")
            self.states[id(job)] = state

    # ----------------------------------------------------------------------------------------------- run

    def _reap(self) -> None:
        for job in [job for job in self.running if job.ended() is not None]:
            self.running.remove(job)
            self._finish(job)

    def _interrupt(self) -> None:
        """Pass the interrupt on to every running job (once per Ctrl-C of the parent), or stop waiting for them."""
        self.interrupts += 1
        if self.executor.interrupt(self.running):
            if self.interrupts == 1:
                self._say("\n[bold yellow]interrupted:[/] the jobs stop after their batch in progress and write "
                          "their checkpoints (Ctrl-C again to stop them at once)")
        else:
            self.leaving = True
            self._say("\n[bold yellow]interrupted:[/] no longer waiting; the jobs go on (scancel stops them), and "
                      "the same command collects them")

    def _loop(self, pending: list[Unit], live) -> None:
        slots = self.executor.slots
        while pending or self.running:
            try:
                while pending and (slots is None or len(self.running) < slots) and not self.interrupts:
                    self.running.append(self._start(pending.pop(0)))
                if self.interrupts and not self.running:
                    break
                if not self.leaving:
                    self.executor.refresh(self.running)
                    self._reap()
                if self.leaving or (self.executor.detach and not pending):
                    self._leave()
                    break
                if live is not None:
                    live.update(self._table())
                else:
                    self._say_states()
                time.sleep(self.executor.poll_seconds)
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
