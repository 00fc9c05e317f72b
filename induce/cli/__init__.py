"""The `induce` command-line application (thin: parsing options and printing only).

Shared by the commands: the help texts of ``--checkpoint`` and ``--device``, finding the default
run (:func:`pick_run`) and progress bars on stderr (:func:`progress_steps`). This module imports
nothing heavy (see :mod:`induce.cli.main`).
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from rich.console import Console

#: Where the commands look for a run without --checkpoint (see induce.runs.DEFAULT_RUN_DIRS).
LATEST_RUN_HELP = ("the newest finished run under runs/ or results/runs/ (where `make reproduce` puts its runs), "
                   "controls such as palm-rb and diverged runs left out")
CHECKPOINT_HELP = f"Run folder or checkpoint (default: {LATEST_RUN_HELP})."
RUNS_DIR_HELP = "Look for the newest finished run only in this folder (default: runs/ and results/runs/)."
DEVICE_HELP = "auto (CUDA when available, else CPU), cpu, cuda or cuda:N."
PROGRESS_HELP = "Progress bars on stderr (shown only when stderr is a terminal)."


def pick_run(checkpoint: Optional[Path], console: Console, runs_dir: Optional[Path] = None,
             need_parser: bool = False) -> Path:
    """``checkpoint``, or the newest finished run that may be used by default (under ``runs_dir``, else
    runs/ and results/runs/; :func:`induce.runs.latest_run`), saying on ``console`` which one is used:
    folder, model, when it finished, its selected epoch's figures. ``need_parser``: leave out language
    models that do not parse."""
    if checkpoint is not None:
        return checkpoint
    from induce.runs import describe_run, latest_run

    found = latest_run(runs_dir, need_parser=need_parser)
    console.print(f"using the latest finished run: {describe_run(found)}", highlight=False, soft_wrap=True)
    return found


class ProgressSteps:
    """Rich progress bars on ``console`` (stderr), drawn only when ``enabled`` and it is a terminal;
    they disappear when stopped. :meth:`bar` hands out one ``(done, total)`` callback per bar."""

    def __init__(self, console: Console, enabled: bool = True):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=True, disable=not (enabled and console.is_terminal),
        )
        self._progress.start()

    def bar(self, description: str) -> Callable[[int, int], None]:
        task = self._progress.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            self._progress.update(task, completed=done, total=total)

        return update

    def stop(self) -> None:
        self._progress.stop()


@contextmanager
def progress_steps(console: Console, enabled: bool = True) -> Iterator[ProgressSteps]:
    """:class:`ProgressSteps` for the duration of a ``with`` block."""
    steps = ProgressSteps(console, enabled)
    try:
        yield steps
    finally:
        steps.stop()
