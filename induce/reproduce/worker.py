"""The child process of ``induce reproduce --jobs N`` (:mod:`induce.reproduce.jobs`): ``python -m
induce.reproduce.worker SPEC`` (a SLURM job calls :func:`run_unit` the same way, :mod:`induce.reproduce.slurm`) runs
one unit's steps of a :class:`~induce.reproduce.pipeline.Reproduction`
rebuilt from the parent's options, prints to its log and writes its step records where the parent reads them.

SIGTERM (the parent's death, or passed on by it) stops a training as SIGINT does: the trainer handles both.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Optional

from rich.console import Console

from .pipeline import ReproduceOptions, Reproduction
from .steps import write_json


def _die_with_parent(parent: int) -> None:
    """SIGTERM to this process when its parent dies (Linux's PR_SET_PDEATHSIG; elsewhere nothing), and an exit
    now if the parent is already gone."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        sys.exit(1)


def run_unit(spec: dict) -> int:
    """The child's work: the unit's steps of a Reproduction rebuilt from ``spec["options"]``; writes the records
    to ``spec["result"]``; returns the exit status (130 after an interrupt)."""
    from induce.config import use_threads

    paths = {"out", "data", "corpus", "corpora_dir", "lm_text"}
    options = ReproduceOptions(**{k: Path(v) if k in paths and v is not None else v
                                  for k, v in spec["options"].items()})
    console = Console(file=sys.stdout, width=120, force_terminal=False, highlight=False)
    records, repro, interrupted = [], None, False
    try:
        repro = Reproduction(options, console=console)
        use_threads(repro.threads)
        repro.prepare()
        actions = dict(repro.plan())
        for name in spec["steps"]:
            console.rule(name, align="left")
            records.append(asdict(repro.perform(name, actions[name], trace=True)))
    except KeyboardInterrupt:
        interrupted = True
        console.print("interrupted")
    except Exception:  # noqa: BLE001 - the parent reports it, with this log
        console.print(traceback.format_exc())
    failed = [[m, s, reason] for (m, s), reason in repro.failed_runs.items()] if repro is not None else []
    unfinished = [[m, s] for m, s in repro.unfinished] if repro is not None else []
    report = {"records": records, "failed_runs": failed, "unfinished": unfinished, "interrupted": interrupted}
    if spec.get("job") is not None:  # a cluster's job: which one, and when it ran (induce.reproduce.slurm)
        import time

        report["job"] = {**spec["job"], "ended_at": time.time()}
    write_json(Path(spec["result"]), report)
    return 130 if interrupted else 0


def main(argv: Optional[list[str]] = None) -> None:
    """``python -m induce.reproduce.jobs SPEC``: run one unit (see :func:`run_unit`)."""
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    if spec.get("parent") is not None:
        _die_with_parent(spec["parent"])
    sys.exit(run_unit(spec))


if __name__ == "__main__":
    main()
