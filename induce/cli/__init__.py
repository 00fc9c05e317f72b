"""The `induce` command-line application (thin: parsing options and printing only).

Shared by the commands: the help texts of ``--checkpoint`` and ``--device`` and progress bars on
stderr (:func:`progress_steps`); the default run is :func:`induce.inference.runs.pick_run`, user errors are
reported by :mod:`induce.cli.messages`. This module imports nothing heavy (see :mod:`induce.cli.main`).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from rich.console import Console

from induce.errors import CountMismatchError, InduceError

#: Where the commands look for a run without --checkpoint (see induce.inference.runs.DEFAULT_RUN_DIRS).
LATEST_RUN_HELP = ("the newest finished run under runs/ or results/runs/ (where `make reproduce` puts its runs), "
                   "controls such as palm-rb and diverged runs left out")
CHECKPOINT_HELP = f"Run folder or checkpoint (default: {LATEST_RUN_HELP})."
RUNS_DIR_HELP = "Look for the newest finished run only in this folder (default: runs/ and results/runs/)."
DEVICE_HELP = "auto (CUDA when available, else CPU), cpu, cuda or cuda:N."
PROGRESS_HELP = "Progress bars on stderr (shown only when stderr is a terminal)."
#: The same text as induce.config.DEFAULT_THREADS_TEXT (kept here: the help must not import the config module).
THREADS_HELP = ("torch CPU threads (default 1: on a 2-core machine shared with other work one thread was measured "
                "faster than two and than torch's default; bench/results/training.md, 'Threads').")
TREEBANK_HELP = ("Whose tags the gold trees carry (punctuation, empty elements, ID nodes: see induce preprocess "
                 "--help). Default: what the prepared corpus recorded, else ptb.")
WORD_MATCH_HELP = ("How predicted words are compared with the gold's: normalized (default: the same word, or one of "
                   "the usual rewritings of published files: case, Unicode form, PTB escapes, <unk>, numbers as N / "
                   "N.N / [num] / <num>, no thousands separators), exact (character for character), or position "
                   "(aligned by position, never refused). Words that differ are counted in the output.")


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


def comma_ints(text: Optional[str], option: str, minimum: Optional[int] = None) -> Optional[list[int]]:
    """The integers of an option written ``1,2,3``; ``None`` when ``text`` is empty. An InduceError naming
    ``option`` for anything else, or (with ``minimum``) for a value below it."""
    if text is None or not text.strip():
        return None
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InduceError(f"{option}: expected comma-separated integers, e.g. 1,2,3; got {text!r}") from None
    if minimum is not None and min(values) < minimum:
        raise InduceError(f"{option}: expected integers >= {minimum}, got {text!r}")
    return values


@contextmanager
def default_gold_hint(default: bool, gold: Callable[[], str]) -> Iterator[None]:
    """Inside the block, predictions not one per gold sentence while the gold is the default one (``default``:
    neither --gold nor --corpus given) get the hint that they were aligned to that gold (``gold()`` names
    it) and how to name theirs: a file parsed from WSJ 23 is no mistake of its own."""
    try:
        yield
    except CountMismatchError as err:
        if not default:
            raise
        raise CountMismatchError(f"{err.reason}; with no --gold the predictions are aligned to the default gold, "
                                 f"{gold()}, one tree per sentence: name the treebank they were parsed from with "
                                 "--gold FILE (or its prepared corpus with --corpus DIR)", err.path, err.line) from None
