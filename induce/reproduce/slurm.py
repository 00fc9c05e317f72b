"""``induce reproduce --executor slurm``: each unit of the reproduction (:func:`induce.reproduce.jobs.plan_units`:
a (model, seed) run with its evaluation, a model's untrained versions, the baselines) a job of a SLURM cluster,
submitted through submitit; the parent (:class:`~induce.reproduce.jobs.JobRunner`, as with ``--jobs``) prepares the
corpus, waits for the jobs and writes the report.

**A unit's job** runs the worker of ``--jobs`` (``python -m induce.reproduce.worker SPEC``) on the unit's spec in
``OUT/logs/`` (:func:`run_in_job`), its output appended to ``OUT/logs/<unit>.log``; it asks for the profile's
``slurm`` section (:class:`~induce.reproduce.profiles.SlurmSettings`: time, CPUs, memory, GPUs, partition,
account, other sbatch options; ``--slurm-*`` replace single keys). submitit's own files (the batch script,
pickles, its log) are in ``OUT/logs/slurm/``. ``OUT/logs/<unit>.job.json`` records the unit's job: its id, when
it was submitted, a digest of what it computes (:meth:`SlurmExecutor.digest`), and, once collected, whether every
step was done and when the job started and ended.

**Time limits become requeues.** SLURM signals a job ``signal_before`` its time limit (sbatch ``--signal``,
submitit's preemption signal, USR2): the job's process passes it on to the worker as SIGTERM, so that the training
in progress stops after its batch and writes its checkpoint, as on Ctrl-C (the trainer's SIGTERM handling), and
then submitit's checkpointing requeues the job (:meth:`UnitJob.checkpoint`: the same unit on the same spec), which
continues the run from that checkpoint. So a profile whose runs take days (``paper``) runs to its end in jobs of a
few hours each, with the figures of one go (a resumed run is exact). An evaluation cut short by the signal starts
again in the requeued job.

**Stopped jobs.** A job cancelled (``scancel``: SIGTERM, then SIGKILL after the cluster's KillWait) or
preempted stops its training at a checkpoint the same way (a step other than training stops at once); its steps
are left pending, and the next invocation submits the unit again, which continues from that checkpoint. A unit
whose job failed is reported (its log's path and last lines) and the others go on; the next invocation submits it
again, as the local executor retries a failed step.

**Detach and collect.** With ``--detach`` the parent submits the jobs and returns (exit status 75: not finished);
the same command later collects them: a unit whose job is still queued or running is waited for (with ``--detach``:
left) and never submitted twice, one whose job ended is collected (its records, reported as they were), one whose
job ended with every step done and whose digest and evaluations are still current is not submitted again (its
steps are reported as skipped), any other is submitted. Ctrl-C of a waiting parent stops the waiting, not the jobs.

The parent looks at its jobs with one ``squeue`` call every ``slurm.poll`` (5 s); a job that ``squeue`` no longer
knows has ended (its state from ``sacct`` where the cluster keeps accounts).
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from rich.markup import escape

from induce.config import parse_duration
from induce.errors import InduceError
from induce.files import now

from .jobs import LOGS_DIR, Executor, Job, Unit, UnitFiles
from .results import read_json
from .steps import write_json

#: States of a job that will still run, or runs (squeue's names); any other means it has ended.
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_FED",
                           "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED",
                           "SPECIAL_EXIT", "RESV_DEL_HOLD"})
#: Ended states of a job stopped from outside (its steps are left for the next invocation, not failed).
STOPPED_STATES = frozenset({"CANCELLED", "PREEMPTED", "TIMEOUT", "NODE_FAIL", "DEADLINE", "BOOT_FAIL"})
#: A unit's job record, beside its log in ``OUT/logs/``.
JOB_SUFFIX = ".job.json"
#: Options of a spec that change nothing a unit computes: left out of its digest.
VOLATILE_OPTIONS = ("command", "progress", "detach", "executor", "slurm", "jobs", "chunk")
#: The programs of SLURM the parent calls.
CLIENTS = ("sbatch", "squeue", "srun")


def submitit_module():
    """submitit, or a one-line error naming the extra that installs it."""
    try:
        import submitit
    except ImportError:
        raise InduceError("--executor slurm needs submitit, which is not installed: pip install 'induce[slurm]'"
                          ) from None
    return submitit


def sbatch_parameters(options: list[str]) -> dict:
    """Other sbatch options as submitit's ``additional_parameters``: ``--qos=high`` -> ``{"qos": "high"}``,
    ``--exclusive`` -> ``{"exclusive": True}``."""
    out: dict = {}
    for option in options:
        key, sep, value = option[2:].partition("=")
        out[key] = value if sep else True
    return out


class _SlurmJob(Job):
    """A unit's SLURM job as the parent sees it: its id, and its state from the last ``squeue``."""

    def __init__(self, unit: Unit, files: UnitFiles, job_id: str, record: Path, announce: str,
                 state: str = "PENDING"):
        super().__init__(unit, files, f"SLURM job {job_id}", announce)
        self.job_id, self.record = job_id, record
        self.slurm_state, self.reason = state, ""

    def ended(self) -> Optional[str]:
        return None if self.slurm_state in ACTIVE_STATES else self.slurm_state

    def stopped(self) -> bool:
        return self.slurm_state in STOPPED_STATES

    def state(self) -> str:
        waiting = self.slurm_state == "PENDING" and self.reason not in ("", "None")
        return self.slurm_state + (f" ({self.reason})" if waiting else "")

    def columns(self) -> list[str]:
        return [self.job_id, self.state()]

    def report(self) -> Optional[dict]:
        """The records of this job's worker (a result file that another job wrote is not this one's)."""
        report = super().report()
        return report if report is not None and (report.get("job") or {}).get("id") == self.job_id else None


class SlurmExecutor(Executor):
    """``--executor slurm`` (module docstring): every unit submitted at once, as a job of its own."""

    def __init__(self, repro: Any):
        self.submitit = submitit_module()
        missing = [name for name in CLIENTS if shutil.which(name) is None]
        if missing:
            raise InduceError(f"--executor slurm: {', '.join(missing)} not found (SLURM's commands): run induce "
                              "reproduce on a machine of the cluster, such as its login node")
        self.repro = repro
        self.settings = repro.slurm
        self.folder = Path(repro.out).absolute() / LOGS_DIR / "slurm"
        self.poll_seconds = parse_duration(self.settings.poll)
        self.detach = repro.options.detach
        self.executor = self.submitit.SlurmExecutor(folder=self.folder, max_num_timeout=self.settings.max_requeues)
        self.executor.update_parameters(**self.parameters())

    def parameters(self) -> dict:
        """submitit's parameters of every job: the profile's ``slurm`` section, and the job's environment (this
        induce first on the path, the profile's threads)."""
        settings, threads = self.settings, self.repro.threads
        root = shlex.quote(str(Path(__file__).resolve().parents[2]))  # the folder that holds this induce
        params: dict = {
            "time": settings.time_minutes(), "cpus_per_task": settings.cpus or threads, "nodes": 1,
            "ntasks_per_node": 1, "signal_delay_s": int(parse_duration(settings.signal_before)),
            "stderr_to_stdout": True,
            "setup": [f"export PYTHONPATH={root}${{PYTHONPATH:+:$PYTHONPATH}}", f"export OMP_NUM_THREADS={threads}",
                      f"export MKL_NUM_THREADS={threads}"],
        }
        for key, value in (("partition", settings.partition), ("account", settings.account), ("mem", settings.mem),
                           ("gpus_per_node", settings.gpus or None)):
            if value is not None:
                params[key] = value
        if settings.sbatch:
            params["additional_parameters"] = sbatch_parameters(settings.sbatch)
        return params

    def worker_spec(self) -> dict:
        return {"options": {"chunk": None, "executor": "local", "detach": False, "slurm": {}}, "parent": None}

    # ------------------------------------------------------------------------------------------ launch

    def digest(self, unit: Unit, spec: dict) -> str:
        """What the unit computes, hashed: the options that matter, its steps, the run configs of its models, the
        profile and the evaluated corpus."""
        repro = self.repro
        configs = {}
        for name in unit.steps:
            verb, _, what = name.partition(" ")
            if verb in ("train", "evaluate"):
                model, _, seed = what.partition(" seed ")
                configs[what] = repro.configs[model][int(seed)].to_dict()
            elif verb == "untrained":
                model = what.split(" (")[0]
                configs[name] = repro.configs[model][repro.profile.seeds[0]].to_dict()
        payload = {"options": {k: v for k, v in spec["options"].items() if k not in VOLATILE_OPTIONS},
                   "steps": unit.steps, "configs": configs, "corpus": repro._corpus_key(),
                   "profile": repro.profile.model_dump(mode="json", exclude={"folder", "base_folders", "slurm"})}
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()

    def _current(self, unit: Unit) -> bool:
        """Whether the files of a unit done earlier are still there and current (a run's evaluations)."""
        repro = self.repro
        for name in unit.steps:
            verb, _, what = name.partition(" ")
            if verb == "evaluate":
                model, _, seed = what.partition(" seed ")
                if not all(repro.current_evaluation(model, int(seed), split) for split in repro.eval_splits):
                    return False
        return True

    def launch(self, unit: Unit, files: UnitFiles, spec: dict) -> Job:
        """The unit's job: an earlier invocation's that is still queued or running, or that ended and is not
        collected yet (unless it was stopped: then the unit is submitted again); none when an earlier job did every
        step of it and what it computes has not changed; else a new one."""
        record_path = files.spec.with_name(unit.slug + JOB_SUFFIX)
        record = read_json(record_path)
        job_id = record.get("job_id")
        digest = self.digest(unit, spec)
        note = ""
        if job_id and not record.get("collected"):  # an earlier invocation's job: never submitted twice
            job = _SlurmJob(unit, files, job_id, record_path,
                            f"[dim]{escape(unit.name)}: SLURM job {job_id}, submitted {record.get('submitted', '')}, "
                            f"collected once it ends (log {escape(str(files.log))})[/]")
            self.refresh([job])
            if job.ended() is None or not (job.stopped() or (job.report() or {}).get("interrupted")):
                return job
            note = f"; SLURM job {job_id} was stopped ({job.ended()}), this one continues from its checkpoint"
        elif job_id and record.get("complete") and record.get("digest") == digest and self._current(unit):
            job = _SlurmJob(unit, files, job_id, record_path, "", state=record.get("state", "COMPLETED"))
            if job.report() is not None:
                job.earlier = True
                job.announce = f"[dim]{escape(unit.name)}: done by SLURM job {job_id}[/]"
                return job
        return self._submit(unit, files, spec, digest, record_path, note)

    def _submit(self, unit: Unit, files: UnitFiles, spec: dict, digest: str, record_path: Path,
                note: str = "") -> Job:
        files.result.unlink(missing_ok=True)
        files.spec.write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
        files.log.touch()  # appended to by each job of the unit (a header line names the job)
        self.executor.update_parameters(job_name=f"induce-{unit.slug}")
        submitted = time.time()
        from submitit.core.utils import FailedSubmissionError, UncompletedJobError

        errors = (UncompletedJobError, FailedSubmissionError, OSError)
        try:
            job = self.executor.submit(UnitJob(str(files.spec.absolute()), str(files.log.absolute())))
        except errors as err:
            reason = " ".join(str(err).split()) or type(err).__name__
            raise InduceError(f"sbatch refused the job of {unit.name}: {reason} (check the profile's slurm section "
                              "and the --slurm-* options)") from None
        write_json(record_path, {"job_id": job.job_id, "unit": unit.name, "digest": digest, "submitted": now(),
                                 "submitted_at": submitted, "log": str(files.log), "collected": False})
        return _SlurmJob(unit, files, job.job_id, record_path,
                         f"[dim]submitted[/] {escape(unit.name)} [dim]as SLURM job {job.job_id} "
                         f"(log {escape(str(files.log))}{escape(note)})[/]")

    # ------------------------------------------------------------------------------------------- watch

    def refresh(self, jobs: list[Job]) -> None:
        """One ``squeue`` for every job not yet ended; a job it no longer knows has ended (:meth:`_final_state`).
        No answer (the controller busy or restarting) changes nothing: the next look asks again."""
        waiting = [job for job in jobs if isinstance(job, _SlurmJob) and job.ended() is None]
        if not waiting:
            return
        try:
            listed = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%i|%T|%r",
                                     f"--jobs={','.join(job.job_id for job in waiting)}"],
                                    capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return
        if listed.returncode != 0 and "Invalid job id" not in listed.stderr:
            return
        seen = {}
        for line in listed.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3:
                seen[parts[0]] = (parts[1], parts[2])
        for job in waiting:
            job.slurm_state, job.reason = seen.get(job.job_id) or (self._final_state(job.job_id), "")

    @staticmethod
    def _final_state(job_id: str) -> str:
        """The state of a job that squeue no longer lists: sacct's, where the cluster keeps accounts, else ENDED."""
        if shutil.which("sacct") is not None:
            try:
                done = subprocess.run(["sacct", "--noheader", "--allocations", "--parsable2", "--format=State",
                                       f"--jobs={job_id}"], capture_output=True, text=True, timeout=60)
                words = done.stdout.split()
                if done.returncode == 0 and words:
                    return words[0]
            except (OSError, subprocess.SubprocessError):
                pass
        return "ENDED"

    def interrupt(self, jobs: list[Job]) -> bool:
        return False  # the jobs are the cluster's: Ctrl-C stops the waiting (scancel stops them)

    def collected(self, job: Job, complete: bool) -> None:
        """The job record says the job is collected, whether its unit is done, and when it ran (from its report:
        the overhead of a job is the time from submission to its start and from its end to its collection)."""
        if job.earlier or not isinstance(job, _SlurmJob):
            return
        record = read_json(job.record)
        ran = (job.report() or {}).get("job") or {}
        record.update(collected=True, complete=complete, state=job.slurm_state, collected_at=time.time(),
                      started_at=ran.get("started_at"), ended_at=ran.get("ended_at"), host=ran.get("host"))
        write_json(job.record, record)


# ------------------------------------------------------------------------------------------------ in the job


class UnitJob:
    """What a unit's SLURM job runs (submitit pickles it): :func:`run_in_job` on the unit's spec and log.
    :meth:`checkpoint` is submitit's checkpointing hook: the job requeued goes on with the same unit."""

    def __init__(self, spec: str, log: str):
        self.spec, self.log = spec, log

    def __call__(self) -> int:
        return run_in_job(self.spec, self.log)

    def checkpoint(self, *args, **kwargs):
        """The submission to requeue (called by submitit once the worker has stopped at a checkpoint): the same
        unit, whose training continues from that checkpoint."""
        return submitit_module().helpers.DelayedSubmission(UnitJob(self.spec, self.log))


class _TimeLimit:
    """In a unit's job, SLURM's time-limit signal (submitit's preemption signal, USR2, which reaches every process
    of the job): the worker ignores it (:func:`_ignore_in_worker`) and is sent SIGTERM instead, once, which stops
    its training after the batch in progress with a checkpoint (a step other than training stops at once, and starts
    again in the requeued job); :meth:`requeue` then hands over to submitit's checkpointing."""

    def __init__(self, worker: subprocess.Popen):
        submitit = submitit_module()
        self.signum = getattr(signal, "SIG" + submitit.JobEnvironment.USR_SIG)
        self.submitit_handler = signal.getsignal(self.signum)
        self.worker = worker
        self.signalled = False
        signal.signal(self.signum, self._on_limit)

    def _on_limit(self, signum, frame) -> None:
        if self.signalled:
            return
        self.signalled = True
        print(f"== {now()}: the job's time limit is near (or it is preempted): stopping at a checkpoint", flush=True)
        if self.worker.poll() is None:
            self.worker.send_signal(signal.SIGTERM)

    def requeue(self) -> None:
        """submitit's checkpointing: :meth:`UnitJob.checkpoint`, ``scontrol requeue``, exit (or an error once the
        job has reached its time limit ``max_requeues`` times). The requeue sends SIGTERM to every process of the
        job, ``scontrol`` itself too when it has not exited yet: that is the requeue done, not an error."""
        signal.signal(self.signum, signal.SIG_IGN)
        if not callable(self.submitit_handler):
            return
        try:
            self.submitit_handler(self.signum, None)
        except subprocess.CalledProcessError as err:
            if err.returncode != -signal.SIGTERM:
                raise
            print(f"== {now()}: requeued", flush=True)


def _ignore_in_worker() -> None:
    """In the worker's process before exec: the time-limit signal ignored (an ignored signal stays ignored across
    exec); its job's process passes it on as SIGTERM."""
    signal.signal(getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")), signal.SIG_IGN)


def _output_to(log: str) -> None:
    """This process's stdout and stderr (submitit's log lines, and the worker's output, which inherits them)
    appended to the unit's log."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def run_in_job(spec_path: str, log: str) -> int:
    """A unit's job: the worker of ``--jobs`` (``python -m induce.reproduce.worker SPEC``) on the unit's spec, told
    which job runs it (its result names the job) and that it is this process's child (it stops when this one
    dies); its output in the unit's log; the job requeued through submitit when the time-limit signal stopped the
    worker (:class:`_TimeLimit`). SIGTERM (scancel, preemption) reaches the worker from SLURM itself, and stops it
    at a checkpoint too; submitit's handler here lets this process wait for it. Returns the worker's exit status."""
    env = submitit_module().JobEnvironment()
    _output_to(log)
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    spec.update(job={"id": env.job_id, "host": env.hostname, "started_at": time.time()}, parent=os.getpid())
    write_json(Path(spec_path), spec)
    print(f"== {now()}: SLURM job {env.job_id} on {env.hostname}", flush=True)
    worker = subprocess.Popen([sys.executable, "-m", "induce.reproduce.worker", spec_path], stdin=subprocess.DEVNULL,
                              preexec_fn=_ignore_in_worker)
    limit = _TimeLimit(worker)
    status = worker.wait()
    if limit.signalled and status != 0:
        print(f"== {now()}: the worker stopped (exit status {status}); requeueing the job", flush=True)
        limit.requeue()
    return status
