"""``induce reproduce``: the whole pipeline from treebank to report, resumable step by step.

Steps (each is skipped when its outputs are up to date, so a re-run after an interruption goes on
where it stopped):

1. **prepare** — the default prepared corpus (:func:`induce.data.locate.default_corpus`, a cache
   keyed by the sources' sha256) or ``--corpus``; profiles with ``train_sentences`` /
   ``monitor_sentences`` train on a *subset corpus* (the first N training sentences, the first M
   dev sentences for per-epoch monitoring, the full vocabulary) derived from it
   (:func:`subset_corpus`). The final evaluation always uses the full evaluation split.
2. **train** each model of the profile for each seed into ``OUT/runs/<model>-seed<seed>/`` with
   :func:`induce.training.train`; skipped when the run finished with the same resolved config
   (``reproduce.json`` in the run folder records it) and its ``best`` checkpoint verifies (hashes;
   a damaged one is trained again); an interrupted run is continued with
   :func:`induce.training.resume` and the rest of its time budget (from scratch when its ``last``
   checkpoint is damaged); a run that diverged with the same config is a failed step at once.
3. **untrained** — ``random_init_seeds`` untrained models of each kind parse WSJ40 sentences of the final
   split (PaLM Table 4's first row; :mod:`induce.assess.untrained`, as ``induce eval --untrained``);
   ``OUT/eval/init-<model>.<split>.json``.
4. **baselines** — left, right, balanced, random trees on each evaluated split;
   ``OUT/eval/baseline-<kind>.<split>.json``.
5. **evaluate** each run's ``best`` checkpoint on each evaluated split: LM perplexity of the split, and its
   trees (parsed once) scored on all sentences, WSJ10 and WSJ40 (and, on the final split, on the untrained
   models' sentences); ``OUT/eval/<model>-seed<seed>.<split>.json`` (+ ``.trees.txt``, over every
   token, punctuation attached: what any ``induce eval --convention`` reads),
   skipped while it was made from the run's current ``best`` checkpoint (its sha256, verified).
   The report shows a run's figures only when this file was made from the current checkpoint and
   neither its training nor its evaluation failed in this invocation (:meth:`Reproduction.current_evaluation`);
   a failed run's row is empty and the failure is listed with its reason.

**Splits** (``--split``, :func:`induce.reproduce.steps.evaluation_splits`): with ``auto`` (the default) the
final figures are on the test split when the corpus has one (WSJ section 23), else on dev (WSJ 22), and the
report says which. Every model is selected on dev only: its ``best`` checkpoint is chosen while it trains by the
monitor criterion on the training corpus's ``valid`` split (a subset of dev in the small profiles); the test
split is read by the evaluation step alone. Dev is evaluated too, so that the report shows each model's dev
figures beside its test figures.

**Earlier runs in the folder**: ``induce reproduce --models X`` trains and evaluates X; the report keeps every
other run of ``OUT/runs/`` whose evaluation is current (:func:`induce.reproduce.results.collect_results`).

6. **report** — ``OUT/REPORT.md``, ``OUT/results.json`` and ``OUT/figures/*.png``
   (:mod:`induce.report`); always rebuilt (seconds).

Profiles are folders ``induce/configs/<profile>/`` holding ``profile.yaml`` (:class:`Profile`) and, where
the profile changes a model, ``<model>.yaml`` layered over ``induce/configs/<model>.yaml``
(:mod:`induce.reproduce.profiles`).

**Chunks** (``--chunk`` / the profile's ``chunk``): the training of one invocation stops after that
much wall-clock time, each run at a resumable checkpoint; the steps not reached are *pending*, the
report shows what is done, and the same command run again continues (``induce reproduce`` exits with
status 75 until everything is done). The papers' recipes (profile ``paper``) run this way.

**One at a time**: a reproduction holds ``OUT/reproduce.lock`` while it runs (:class:`ReproductionLock`), so a
second one into the same ``--out`` is refused at once, naming the first's PID and host.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from rich.console import Console
from rich.markup import escape

from induce.config import DEFAULT_THREADS, use_threads
from induce.errors import InduceError, InputError
from induce.files import check_output_folder, now, os_error_reason, output_set
from induce.training.run_folder import FolderLock

from .jobs import LOGS_DIR, JobRunner, plan_units, schedule_minutes
from .profiles import Profile, build_run_config, load_profile, resolve_profile_name
from .results import collect_results, read_json
from .steps import PipelineSteps, write_json

#: Written into each run folder: the config this pipeline asked for, and training seconds used so far.
STEPS_FILE = "steps.json"
#: ``--split``: auto (test when the corpus has it, else valid), valid (dev) or test.
SPLITS = ("auto", "valid", "test")
#: ``--executor``: where the units run (:mod:`induce.reproduce.jobs`).
EXECUTORS = ("local", "slurm")
#: Held in ``--out`` while a reproduction runs (:class:`ReproductionLock`).
LOCK_FILE = "reproduce.lock"


class ReproductionLock(FolderLock):
    """``OUT/reproduce.lock`` held while ``induce reproduce`` writes into its ``--out`` folder: a second
    reproduction into the same folder is refused at once (the mechanism of a run folder's ``train.lock``:
    :class:`~induce.training.run_folder.FolderLock`; a lock whose process is gone is taken over with a note). The
    jobs of ``--jobs N`` work under their parent's lock."""

    file_name = LOCK_FILE
    holder = "reproduction"


@dataclass
class ReproduceOptions:
    """What ``induce reproduce`` was asked (CLI options; None = the profile's value)."""

    profile: str = "auto"
    out: Path = Path("results")
    data: Optional[Path] = None
    corpus: Optional[Path] = None
    corpora_dir: Path = Path("corpora")
    seeds: Optional[list[int]] = None
    models: Optional[list[str]] = None
    split: str = "auto"  # the final figures' split (induce.reproduce.steps.evaluation_splits)
    time_per_model: Optional[float] = None  # seconds (the clock); replaces the profile's step budgets
    steps_per_model: Optional[int] = None  # optimiser steps; replaces the profile's clock budgets
    chunk: Optional[float] = None  # seconds of training per invocation (None: the profile's)
    lm_text: Optional[Path] = None  # folder with Mikolov's ptb.valid.txt (None: <data root>/ptb_lm if there)
    device: Optional[str] = None
    threads: Optional[int] = None
    jobs: Optional[int] = None  # runs at once, each in its own process (None: the profile's)
    progress: bool = True
    executor: str = "local"  # where the units run: local (child processes) or slurm (induce.reproduce.slurm)
    detach: bool = False  # slurm: submit the jobs and return; the same command collects them
    slurm: dict = field(default_factory=dict)  # --slurm-* options: keys of the profile's slurm section
    command: str = ""


@dataclass
class StepRecord:
    name: str
    status: str  # ran, resumed, paused, skipped, pending, failed
    seconds: float
    detail: str = ""


class Reproduction(PipelineSteps):
    """Runs the pipeline for :class:`ReproduceOptions`; :meth:`run` returns the results dict
    (what ``results.json`` holds). This class is the plan: which steps, in which order, their
    records and chunks; what each step does is :class:`~induce.reproduce.steps.PipelineSteps`."""

    #: What :meth:`add_record` takes (a job's records are rebuilt as these).
    record_type = StepRecord

    def __init__(self, options: ReproduceOptions, console: Optional[Console] = None,
                 on_step: Optional[Callable[[StepRecord], None]] = None):
        self.options = options
        self.console = console or Console(stderr=True)
        self.on_step = on_step
        self.profile = load_profile(resolve_profile_name(options.profile))
        if options.seeds:
            self.profile.seeds = list(options.seeds)
        if options.models:
            try:
                models = Profile._known_models(list(options.models))
            except ValueError as err:  # an unknown model, or one that does not parse
                raise InduceError(f"--models {','.join(options.models)}: {err}") from None
            self.profile = self.profile.model_copy(update={"models": models})
        if options.split not in SPLITS:
            raise InduceError(f"--split {options.split!r}: use auto (test when the corpus has it, else valid), "
                              "valid (dev) or test")
        self.out = Path(options.out)
        check_output_folder(self.out, "--out")  # before hours of training, not when the report is written
        check_reproduction_folder(self.out)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(f"--out: cannot create the output folder: {os_error_reason(err)}", self.out) from None
        self.steps: list[StepRecord] = []
        #: Training seconds (the clock) and optimiser steps per model and seed (None: no such budget). A budget given
        #: on the command line replaces the profile's of both kinds.
        given = options.time_per_model is not None or options.steps_per_model is not None
        self.budgets = {model: options.time_per_model if given else self.profile.time_budget(model)
                        for model in self.profile.models}
        self.step_budgets = {model: options.steps_per_model if given else self.profile.step_budget(model)
                             for model in self.profile.models}
        #: torch CPU threads of every run and evaluation (each job's, with several jobs).
        self.threads = options.threads or self.profile.threads or DEFAULT_THREADS
        self.jobs = options.jobs or self.profile.jobs
        self.chunk = options.chunk if options.chunk is not None else self.profile.chunk_seconds()
        self._check_executor()
        self.started = time.monotonic()
        #: (model, seed) of the runs whose training the chunk's end left unfinished.
        self.unfinished: set = set()
        #: (model, seed) -> why its training or evaluation failed in this invocation (no figures reported).
        self.failed_runs: dict = {}
        #: Units (their names) left pending by this invocation (a job stopped, or still on the cluster).
        self.pending_units: set = set()
        #: Unit -> its cluster job (``SLURM job N``) still queued or running when this invocation returned.
        self.waiting_jobs: dict = {}
        # Config errors show up now, before any work; the full configs are built once the corpus is known.
        self.model_sections = {model: build_run_config(self.profile, model, []).model for model in self.profile.models}
        self.device = options.device or self.profile.device
        self.eval_device = self._eval_device(self.device)

    # ---------------------------------------------------------------------------------------- utils

    def _check_executor(self) -> None:
        """``--executor`` and the options that go with it. On a cluster a job's time limit takes the chunk's place
        (each job is checkpointed and requeued at its limit) and the cluster decides how many run at once."""
        options = self.options
        if options.executor not in EXECUTORS:
            raise InduceError(f"--executor {options.executor!r}: use local (child processes of this machine) or "
                              "slurm (jobs of a SLURM cluster)")
        if options.executor != "slurm":
            if options.detach:
                raise InduceError("--detach: only with --executor slurm (the jobs then run without this process)")
            if options.slurm:
                raise InduceError(f"{_slurm_flag(next(iter(options.slurm)))}: only with --executor slurm")
            return
        if options.jobs is not None:
            raise InduceError("--jobs: not with --executor slurm (every unit is a job; the cluster decides how many "
                              "run at once)")
        if options.chunk is not None:
            raise InduceError("--chunk: not with --executor slurm (a job that reaches its time limit, --slurm-time, "
                              "is checkpointed and requeued)")
        self.chunk = None
        import pydantic

        from .profiles import SlurmSettings

        settings = {**self.profile.slurm.model_dump(), **options.slurm}
        settings["sbatch"] = [*self.profile.slurm.sbatch, *options.slurm.get("sbatch", [])]
        try:
            self.slurm = SlurmSettings(**settings)
        except pydantic.ValidationError as err:
            problem = err.errors()[0]
            key = str(problem["loc"][0]) if problem["loc"] else next(iter(options.slurm), "time")
            raise InduceError(f"{_slurm_flag(key)} (or the profile's slurm.{key}): "
                              f"{problem['msg'].removeprefix('Value error, ')}") from None

    @staticmethod
    def _eval_device(device: str) -> str:
        import torch

        if device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return device

    def _log(self, message: str) -> None:
        self.console.print(message, highlight=False, soft_wrap=True)

    def perform(self, name: str, action: Callable[[], tuple[str, str]], fatal: bool = False,
                trace: bool = False) -> StepRecord:
        """Run ``action`` (returns ``(status, detail)``), time it and log it; exceptions other than
        interruptions are a failed record and the pipeline goes on (unless ``fatal``; ``trace``: the
        traceback is logged too, as a job's log does)."""
        started = time.monotonic()
        try:
            status, detail = action()
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as err:  # noqa: BLE001 - one failed model must not lose the others
            if fatal:
                raise
            status, detail = "failed", f"{type(err).__name__}: {err}"
            if trace:
                import traceback

                self._log(escape(traceback.format_exc()))
            self._log(f"[bold red]failed:[/] {escape(detail)}")
        record = StepRecord(name, status, round(time.monotonic() - started, 2), detail)
        if status == "skipped":
            self._log(f"[dim]up to date, skipped ({escape(detail)})[/]")
        elif status in ("pending", "paused"):
            self._log(f"[yellow]{status}:[/] {escape(detail)}")
        return record

    def _step(self, name: str, index: int, total: int, action: Callable[[], tuple[str, str]],
              fatal: bool = False) -> StepRecord:
        """:meth:`perform` under a heading, recorded in ``steps.json``."""
        self.console.rule(f"[bold][{index}/{total}] {name}", align="left")
        return self.add_record(self.perform(name, action, fatal))

    def add_record(self, record: StepRecord) -> StepRecord:
        """Record a step done (here or by a job): in :attr:`steps`, ``steps.json`` and ``on_step``."""
        self.steps.append(record)
        self._record_step(record)
        if self.on_step is not None:
            self.on_step(record)
        return record

    def _record_step(self, record: StepRecord) -> None:
        path = self.out / STEPS_FILE
        log = read_json(path)
        entry = log.get(record.name, {})
        entry.update(status=record.status, checked_at=now(), detail=record.detail)
        if record.status != "skipped":
            entry.update(seconds=record.seconds, ran_at=now())
        log[record.name] = entry
        write_json(path, log)

    # ------------------------------------------------------------------------------------- prepare

    # --------------------------------------------------------------------------------------- train

    def run_dir(self, model: str, seed: int) -> Path:
        return self.out / "runs" / f"{model}-seed{seed}"

    def chunk_left(self) -> Optional[float]:
        """Seconds left in this invocation's chunk (None: no chunk)."""
        return None if self.chunk is None else self.chunk - (time.monotonic() - self.started)

    # ------------------------------------------------------------------------------------ evaluate


    # -------------------------------------------------------------------------------------- run all

    def plan(self) -> list[tuple[str, Callable[[], tuple[str, str]]]]:
        from induce.evaluation import BASELINES

        steps: list = []
        for model in self.profile.models:
            for seed in self.profile.seeds:
                steps.append((f"train {model} seed {seed}", lambda m=model, s=seed: self._run_step(self.train, m, s)))
        if self.profile.random_init_seeds:
            for model in self.init_models():
                steps.append((f"untrained {model} ({self.profile.random_init_seeds} inits)",
                              lambda m=model: self.random_init(m)))
        for kind in BASELINES:
            steps.append((f"baseline {kind}", lambda b=kind: self.baseline(b)))
        for model in self.profile.models:
            for seed in self.profile.seeds:
                steps.append((f"evaluate {model} seed {seed}",
                              lambda m=model, s=seed: self._run_step(self.evaluate_run, m, s)))
        return steps

    def _executor(self):
        """The executor of the units (:mod:`induce.reproduce.jobs`), or None when they run in this process."""
        if self.options.executor == "slurm":
            from .slurm import SlurmExecutor

            return SlurmExecutor(self)
        if self.jobs > 1:
            from .jobs import LocalExecutor

            return LocalExecutor(self)
        return None

    def _run_step(self, action: Callable[[str, int], tuple[str, str]], model: str, seed: int) -> tuple[str, str]:
        """``action(model, seed)``; a failure is remembered (:attr:`failed_runs`: no figures reported)."""
        try:
            return action(model, seed)
        except Exception as err:
            self.failed_runs.setdefault((model, seed), f"{type(err).__name__}: {err}")
            raise

    def _say_estimate(self) -> None:
        """The profile's time on an idle machine with a core per job, from its measured ``cpu_minutes`` (when
        they cover every model): the runs' minutes, costliest first, over ``jobs`` workers."""
        minutes = self.profile.cpu_minutes
        if not minutes or any(m not in minutes for m in self.profile.models):
            return
        runs = sorted((minutes[m] for m in self.profile.models for _ in self.profile.seeds), reverse=True)
        wall = schedule_minutes(runs, self.jobs)
        self._log(f"estimated time: about {wall:.0f} min on an idle machine with {self.jobs} free "
                  f"core{'s' if self.jobs > 1 else ''} ({sum(runs):.0f} CPU-minutes of training and evaluation, "
                  "from the profile's cpu_minutes); a busy machine takes longer and gives the same figures")

    def run(self) -> dict:
        """Every step, then the report, under ``OUT``'s :class:`ReproductionLock`."""
        def note(message: str) -> None:
            self._log(f"[yellow]note:[/] {escape(message)}")

        with ReproductionLock(self.out, note=note):
            return self._run_steps()

    def _run_steps(self) -> dict:
        import torch

        from induce.report.drawing import make_figures
        from induce.report.markdown import write_results

        started_wall, started = now(), time.monotonic()
        self.started = started
        old_threads = torch.get_num_threads()
        use_threads(self.threads)
        try:
            self._log(f"profile [bold]{self.profile.name}[/]: {self.profile.description}"
                      + (f"; training stops after {self.chunk / 60:.0f} min (chunk), run again to continue"
                         if self.chunk is not None else "")
                      + f"; {self.threads} thread{'s' if self.threads > 1 else ''}"
                      + (f", each unit a SLURM job (each job's output: {self.out / LOGS_DIR}/)"
                         if self.options.executor == "slurm" else
                         f", {self.jobs} jobs at once (each job's output: {self.out / LOGS_DIR}/)"
                         if self.jobs > 1 else ""))
            steps = self.plan()
            total = len(steps) + 2
            executor = self._executor()
            if self.options.executor == "local":  # a cluster's queue decides when its jobs run
                self._say_estimate()
            self._step("prepare corpus", 1, total, self.prepare, fatal=True)
            if executor is not None:
                index_of = {name: index for index, (name, _) in enumerate(steps, start=2)}
                units = plan_units([name for name, _ in steps], cost=lambda m: self.profile.cpu_minutes.get(m, 0.0))
                JobRunner(self, units, index_of, total, executor).run()
            else:
                for index, (name, action) in enumerate(steps, start=2):
                    self._step(name, index, total, action)
            self.console.rule(f"[bold][{total}/{total}] report", align="left")
            report_started = time.monotonic()
            results = collect_results(self, started_wall, time.monotonic() - started)
            results["incomplete"] = sorted({f"{m} seed {s}" for m, s in self.unfinished} | self.pending_units)
            results["executor"] = self.options.executor
            results["waiting_jobs"] = dict(sorted(self.waiting_jobs.items()))
            results["chunk_s"] = self.chunk
            if self.mikolov is not None:  # the final split's
                results["mikolov"] = {k: v for k, v in self.mikolov.items() if k not in ("sentences", "key")}
            with output_set() as report:  # figures, results.json and REPORT.md: all of them or none
                figures = make_figures(results, self.out, self, report)
                results["figures"] = figures
                results["wall_seconds"] = round(time.monotonic() - started, 1)
                record = StepRecord("report", "ran", round(time.monotonic() - report_started, 2), str(self.out))
                self.steps.append(record)
                self._record_step(record)
                results["steps"] = [asdict(step) for step in self.steps]
                results["step_log"] = read_json(self.out / STEPS_FILE)
                write_results(results, self.out, report)
            return results
        finally:
            torch.set_num_threads(old_threads)


def _slurm_flag(key: str) -> str:
    """The option of ``induce reproduce`` that sets the profile's ``slurm.KEY``."""
    return "--sbatch" if key == "sbatch" else f"--slurm-{key.replace('_', '-')}"


def check_reproduction_folder(out: Path) -> None:
    """Refuse an existing ``--out`` folder that holds files and no reproduction (its ``REPORT.md``,
    ``results.json`` and ``figures/`` would be replaced), as ``induce train --out`` refuses a folder that is
    not a run. A reproduction's folder (``steps.json``: written once its first step is done) is continued;
    a folder holding only ``corpora/`` (a reproduction stopped while preparing them) is one too, and so is one
    holding a reproduction's lock (:class:`ReproductionLock` says whether it is in use)."""
    out = Path(out)
    if not out.is_dir() or read_json(out / STEPS_FILE):
        return
    others = sorted(path.name for path in out.iterdir() if path.name not in ("corpora", LOCK_FILE))
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise InduceError(f"--out {out} is not empty and holds no reproduction ({shown}): its REPORT.md, "
                          "results.json and figures/ would be replaced; choose another --out (a new or empty "
                          "folder, or a reproduction's, which is continued)")


def check_out_folder(out: Path, corpus: Optional[Path] = None, data: Optional[Path] = None,
                     lm_text: Optional[Path] = None, corpora_dir: Optional[Path] = None) -> None:
    """Refuse an output folder that would replace an input: the same folder as ``--corpus``, ``--data`` or
    ``--lm-text``, or one inside a prepared corpus (``--corpus`` or any under ``corpora_dir``), which a
    rebuild replaces as a whole, results and all (:func:`induce.files.check_not_input`); and a folder of
    other files (:func:`check_reproduction_folder`)."""
    from induce.files import check_not_input

    check_not_input(out, {"--corpus": corpus, "the data root --data": data, "--lm-text": lm_text}, "--out")
    prepared = [corpus] if corpus is not None else []
    if corpora_dir is not None and Path(corpora_dir).is_dir():
        prepared += sorted(folder for folder in Path(corpora_dir).iterdir() if (folder / "meta.json").is_file())
    check_not_input(out, {"the prepared corpus": prepared}, "--out", within=True)
    check_reproduction_folder(out)


def reproduce(options: ReproduceOptions, console: Optional[Console] = None, **kwargs) -> dict:
    """Run the pipeline (see the module docstring); returns the results dict."""
    return Reproduction(options, console=console, **kwargs).run()
