"""Which trained run, and what it holds: the default run of the commands, a run's description, its
corpus, and what a run folder without a usable checkpoint holds.

* :func:`latest_run` — the newest *finished* run under ``runs/`` or ``results/runs/`` that may be used
  by default: not a control (``control`` in the model registry, e.g. PaLM-RB), not diverged (a NaN or
  infinite validation loss in its ``best`` sidecar, as runs trained before the trainer stopped on
  them could have), and a parser where one is needed; what it passed over is said when none is left;
* :func:`describe_run` — one line: model, folder, when it finished, its selected epoch's figures;
* :func:`pick_run` — the run a command was given, else :func:`latest_run`, said on the console;
* :func:`run_corpus` — the prepared corpus a run was trained on (``data.corpus`` of its config), for
  evaluating it on its own data by default; a reproduction's *subset* corpus stands for the corpus
  it was cut from (the same sentences, vocabulary and splits; the subset keeps only the first
  sentences of each split);
* :func:`missing_checkpoint_message` — what a run folder without ``best`` holds and how to use it
  (an interrupted run: ``--resume``, or its ``last`` weights); :func:`read_run_sidecar` raises it;
* :func:`run_files` — the files of a run or checkpoint (inputs no output may replace).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

from induce.errors import InduceError
from induce.training.checkpoint import CheckpointError, checkpoint_paths, read_sidecar
from induce.training.run_folder import BEST, CONFIG_FILE, LAST, RUN_FILES, STATUS_FILE, read_status, resume_command

#: Where :func:`latest_run` looks by default: ``induce train``'s default output folder and that of
#: ``make reproduce`` / ``induce reproduce`` (``OUT=results``).
DEFAULT_RUN_DIRS = (Path("runs"), Path("results") / "runs")

PathLike = Union[str, Path]


def _read_json(path: Path) -> Optional[dict]:
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def not_default_reason(run_dir: Path, need_parser: bool = False) -> Optional[str]:
    """Why the finished run ``run_dir`` must not be picked by default (None when it may be): an unreadable
    ``best.json``, a non-finite validation loss (diverged), a control model, or, with ``need_parser``,
    a model that does not parse."""
    from induce.models.registry import get_model_class, is_control

    meta = _read_json(Path(run_dir) / f"{BEST}.json")
    if meta is None:
        return "its best.json is unreadable"
    metrics = meta.get("metrics") if isinstance(meta.get("metrics"), dict) else {}
    for key in ("valid_loss", "valid_ppl"):
        if key in metrics and not _finite(metrics[key]):
            return f"it diverged ({key} {metrics[key]})"
    name = meta.get("model_name")
    if not isinstance(name, str):
        return None
    if is_control(name):
        return f"{name} is a control (see `induce models`)"
    if need_parser:
        try:
            kind = get_model_class(name).parser_kind
        except KeyError:
            return None
        if not kind.parses:
            return f"{name} has no parser"
    return None


def latest_run(runs_dir: Union[PathLike, Sequence[PathLike], None] = None, need_parser: bool = False) -> Path:
    """The most recently finished run folder (``status.json`` says finished and ``best.json`` exists)
    under ``runs_dir`` (one folder or several; default :data:`DEFAULT_RUN_DIRS`) that
    :func:`not_default_reason` lets through; an :class:`InduceError` when there is none (naming the
    runs passed over and why)."""
    if runs_dir is None:
        folders = list(DEFAULT_RUN_DIRS)
    elif isinstance(runs_dir, (str, Path)):
        folders = [Path(runs_dir)]
    else:
        folders = [Path(folder) for folder in runs_dir]
    candidates, passed_over = [], []
    for folder in folders:
        if not folder.is_dir():
            continue
        for child in folder.iterdir():
            status = read_status(child)
            if status.get("state") != "finished" or not (child / f"{BEST}.json").is_file():
                continue
            reason = not_default_reason(child, need_parser)
            if reason is not None:
                passed_over.append(f"{child} ({reason})")
                continue
            candidates.append(((child / STATUS_FILE).stat().st_mtime_ns, str(child), child))
    if not candidates:
        where = " or ".join(f"{folder}/" for folder in folders)
        skipped = ""
        if passed_over:
            skipped = (f"; not used by default: {', '.join(sorted(passed_over)[:4])}"
                       + (", ..." if len(passed_over) > 4 else "") + " (pass --checkpoint to use one anyway)")
        raise InduceError(f"no finished run to use by default under {where}{skipped}; train one "
                          "(`induce train --model NAME`, or `make reproduce`, which writes results/runs/) "
                          "or pass --checkpoint")
    return max(candidates)[2]


def describe_run(path: PathLike) -> str:
    """One line about a run folder or checkpoint: ``FOLDER (MODEL, finished AT; epoch E: valid ppl P, dev
    F1 F)``, with what of it is known (nothing is loaded)."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    _, sidecar = checkpoint_paths(path)
    meta = _read_json(sidecar) or {}
    status = read_status(folder)
    what = []
    if isinstance(meta.get("model_name"), str):
        what.append(meta["model_name"])
    state = status.get("state")
    if state == "finished" and status.get("finished_at"):
        what.append(f"finished {status['finished_at']}")
    elif state:
        what.append(state)
    parts = [", ".join(what)] if what else []
    metrics = meta.get("metrics") if isinstance(meta.get("metrics"), dict) else {}
    figures = []
    if _finite(metrics.get("valid_ppl")):
        figures.append(f"valid ppl {metrics['valid_ppl']:.1f}")
    if _finite(metrics.get("dev_f1")):
        figures.append(f"dev F1 {metrics['dev_f1']:.1f}")
    if figures:
        epoch = f"epoch {metrics['epoch']}: " if "epoch" in metrics else ""
        parts.append(epoch + ", ".join(figures))
    return f"{path} ({'; '.join(parts)})" if parts else str(path)


@dataclass(frozen=True)
class RunCorpus:
    """The prepared corpus a run is evaluated on by default, and how to say so."""

    path: Path
    description: str


def run_corpus(config: dict, run: PathLike, vocab_itos: Optional[list] = None) -> RunCorpus:
    """The prepared corpus of a run's ``config`` (``data.corpus``, resolved by the trainer), for evaluating
    the run on its own data. A subset corpus (``induce reproduce``'s first N training / M dev sentences,
    ``meta.json`` ``subset``) stands for the corpus it was cut from while that is unchanged: its dev split
    is whole there (the subset's is a monitoring sample) and it may have a test split. ``vocab_itos``,
    when given, must be the corpus's vocabulary (else the corpus was rebuilt since the run was trained).
    An :class:`InduceError` says what to pass instead when the corpus is gone or changed."""
    from induce.data.corpus import PreparedCorpus

    spec = (config.get("data") or {}).get("corpus")
    instead = "name the data with --corpus DIR, --gold FILE or --data ROOT"
    if not spec:
        raise InduceError(f"{run}: its config does not record its corpus (data.corpus); {instead}")
    path = Path(spec)
    if not (path / "meta.json").is_file():
        raise InduceError(f"{run}: the corpus it was trained on, {path} (data.corpus), is not there "
                          f"(relative paths are read from the current folder); {instead}")
    corpus = PreparedCorpus(path)
    if vocab_itos is not None and corpus.vocab.itos != list(vocab_itos):
        raise InduceError(f"{run}: the corpus it was trained on, {path}, has another vocabulary now (it was "
                          f"prepared again since); {instead}")
    subset = corpus.meta.get("subset")
    if isinstance(subset, dict) and subset.get("of"):
        source = Path(subset["of"])
        try:
            whole = PreparedCorpus(source)
        except (InduceError, AttributeError):
            whole = None
        if whole is not None and whole.meta.get("fingerprint") == subset.get("of_fingerprint"):
            monitored = subset.get("valid_sentences")
            note = f"; its per-epoch figures are on the first {monitored} dev sentences" if monitored else ""
            return RunCorpus(source, f"{source}, the corpus whose first sentences the run was trained on "
                                     f"({path}{note})")
    return RunCorpus(path, f"{path}, the corpus the run was trained on")


def read_run_sidecar(path: PathLike) -> dict:
    """The checked sidecar of a run folder's ``best`` checkpoint (or of a checkpoint); a run folder
    without one raises :class:`CheckpointError` saying what it holds (:func:`missing_checkpoint_message`)."""
    path = Path(path)
    _, sidecar = checkpoint_paths(path)
    if path.is_dir() and not sidecar.is_file():
        message = missing_checkpoint_message(path)
        if message is not None:
            raise CheckpointError(message)
    return read_sidecar(path)


def run_files(path: PathLike) -> list[Path]:
    """The files of a run folder (:data:`RUN_FILES` that exist) or of a checkpoint (weights and sidecar)."""
    path = Path(path)
    if path.is_dir():
        return [path / name for name in RUN_FILES if (path / name).exists()]
    return [p for p in checkpoint_paths(path) if p.exists()]


def missing_checkpoint_message(folder: Path) -> Optional[str]:
    """Why ``folder`` (a folder without ``best.json``) has no checkpoint to use, what it holds and how to
    use it; None when it is no run folder at all."""
    folder = Path(folder)
    status = read_status(folder)
    has_last = (folder / f"{LAST}.json").is_file() and (folder / f"{LAST}.safetensors").is_file()
    if not status and not has_last and not (folder / CONFIG_FILE).is_file():
        return None
    state = status.get("state", "unknown")
    where = ""
    if status.get("epoch") is not None:
        batch = f", batch {status['batch']}" if status.get("batch") is not None else ""
        where = f" at epoch {status['epoch']}" + batch
    if state == "diverged":
        return (f"{folder}: the run diverged ({status.get('error', 'non-finite loss')}) before any epoch was "
                "selected: it has no best checkpoint; train it again with a smaller learning rate")
    if has_last:
        return (f"{folder}: no best checkpoint yet: the run is {state}{where} and has not completed an epoch's "
                f"evaluation; it holds last.safetensors (its latest weights). Continue it with "
                f"`{resume_command(folder)}`, or use those weights with --checkpoint {folder / LAST}")
    detail = f": {status['error']}" if status.get("error") else ""
    return f"{folder}: no checkpoint in this run folder (state: {state}{detail})"


def pick_run(checkpoint: Optional[PathLike], console, runs_dir: Union[PathLike, Sequence[PathLike], None] = None,
             need_parser: bool = False) -> Path:
    """``checkpoint``, or the newest finished run that may be used by default (under ``runs_dir``, else
    runs/ and results/runs/; :func:`latest_run`), saying on ``console`` (a rich console) which one is
    used: folder, model, when it finished, its selected epoch's figures (:func:`describe_run`).
    ``need_parser``: leave out language models that do not parse."""
    if checkpoint is not None:
        return Path(checkpoint)
    found = latest_run(runs_dir, need_parser=need_parser)
    console.print(f"using the latest finished run: {describe_run(found)}", highlight=False, soft_wrap=True)
    return found
