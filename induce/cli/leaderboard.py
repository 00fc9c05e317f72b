"""`induce leaderboard`: score every prediction file or run folder under some folders against one gold, under
one or more conventions, grouped by model, and write Markdown, JSON and a figure
(logic: :mod:`induce.assess.leaderboard`)."""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import typer
from rich.console import Console
from rich.table import Table

from induce.cli import DEVICE_HELP, PROGRESS_HELP, TREEBANK_HELP, WORD_MATCH_HELP, default_gold_hint, progress_steps


def leaderboard_command(
    sources: Optional[list[Path]] = typer.Argument(
        None, help="Folders searched for prediction files (--pattern) and run folders, or files and run folders "
        "themselves. A file's model is the folder above its run folder (experiments/DIORA/seed35/test.txt: model "
        "DIORA, run seed35), or its folder when that holds several files; a run's is the model it trained."),
    gold: Optional[Path] = typer.Option(None, "--gold", help="Gold treebank file; default: the --split of the "
                                        "default prepared corpus (see --data)."),
    corpus: Optional[Path] = typer.Option(None, "--corpus", help="A prepared corpus folder (its --split is the gold)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Data root for the default corpus."),
    split: str = typer.Option("valid", "--split", help="Split of the prepared corpus: valid (dev) or test."),
    conventions: list[str] = typer.Option([], "--convention", metavar="NAME", help="A convention of induce eval "
                                          "(repeatable); default: induce and kim2019."),
    manifest: Optional[Path] = typer.Option(None, "--manifest", help="YAML mapping each model name to its prediction "
                                            "files or run folders (paths or globs relative to the manifest)."),
    pattern: str = typer.Option("*.txt", "--pattern", help="Which files in the folders are predictions (a glob on the "
                                "file name, e.g. test.txt)."),
    pred_format: str = typer.Option("auto", "--pred-format", help="Format of the prediction files (see induce eval)."),
    word_match: str = typer.Option("normalized", "--word-match", metavar="normalized|exact|position",
                                   help=WORD_MATCH_HELP),
    treebank: Optional[str] = typer.Option(None, "--treebank", metavar="ptb|ktb|ktb-2020", help=TREEBANK_HELP),
    out: Path = typer.Option(Path("leaderboard"), "-o", "--out", help="Folder to write leaderboard.md, "
                             "leaderboard.json and leaderboard.png into; refused while another leaderboard writes "
                             "into it (OUT/leaderboard.lock)."),
    figure: Optional[str] = typer.Option(None, "--figure", metavar="corpus_f1|sentence_f1|...", help="The figure "
                                         "to rank by under every convention (default: each convention's headline "
                                         "figure, the first its script prints)."),
    flag_above: float = typer.Option(1.0, "--flag-above", help="Flag a file whose figures under two conventions "
                                     "differ by more than this many points."),
    ensembles: bool = typer.Option(True, "--ensembles/--no-ensembles", help="Ensemble each model's runs, and all "
                                   "models' runs (one vote per model)."),
    resamples: int = typer.Option(1000, "--resamples", min=1, help="Bootstrap resamples of the intervals."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
    batch_size: int = typer.Option(64, "--batch-size", help="Sentences per forward pass when parsing with a run."),
    device: str = typer.Option("auto", "--device", help="With a run: " + DEVICE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the leaderboard as one JSON object."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help=PROGRESS_HELP),
) -> None:
    """A leaderboard of runs: every run's F1 under each convention with its bootstrap interval, each model's
    mean, sd, min and max over its runs with an interval of the mean, the ensemble of its runs and one across
    models, and a flag where two conventions differ by more than a point on a file.

    Example (MANGA-UOFA/ED4UCP's published outputs): `induce leaderboard experiments --gold experiments/Gold/test.txt
    --pattern test.txt`.
    """
    from induce.assess.leaderboard import build_leaderboard, write_leaderboard
    from induce.assess.sources import default_eval_corpus
    from induce.errors import InduceError
    sources = list(sources or [])
    if not sources and manifest is None:
        raise InduceError("give folders (or files) of predictions, or --manifest")
    console = Console(stderr=True)
    default_gold = gold is None and corpus is None
    if default_gold:
        corpus = default_eval_corpus(None, data, console)
    with _locked_output(out, console), progress_steps(console, progress) as steps, \
            default_gold_hint(default_gold, lambda: f"{corpus}/{split}"):
        board = build_leaderboard(sources, gold=gold, corpus=corpus, split=split, conventions=conventions,
                                  manifest=manifest, pattern=pattern, pred_format=pred_format,
                                  word_match=word_match, resamples=resamples, seed=seed, flag_above=flag_above,
                                  ensembles=ensembles, batch_size=batch_size, device=device, steps=steps,
                                  figure=figure, treebank=treebank)
        written = write_leaderboard(board, out, [*sources, *([gold] if gold else [])])
    for note in board["notes"]:
        console.print(note, highlight=False, soft_wrap=True)
    if as_json:
        typer.echo(json.dumps(board, sort_keys=True))
    else:
        _print(board, Console())
    console.print("wrote " + ", ".join(map(str, written)), highlight=False, soft_wrap=True)


@contextmanager
def _locked_output(out: Path, console: Console) -> Iterator[None]:
    """``out`` held by this leaderboard: two leaderboards into one folder would mix their files, so a second one
    is refused at once (a lock whose process is gone is taken over); the folders made for the lock alone go
    again when nothing was written into them."""
    from induce.training.run_folder import FolderLock

    made = [folder for folder in (out, *out.absolute().parents) if not folder.exists()]  # deepest first
    lock = FolderLock(out, file_name="leaderboard.lock", holder="leaderboard",
                      note=lambda message: console.print(f"note: {message}", highlight=False, soft_wrap=True))
    try:
        with lock:
            yield
    finally:
        for folder in made:
            if not folder.is_dir() or any(folder.iterdir()):
                break
            folder.rmdir()


def _print(board: dict, console: Console) -> None:
    """The models' table (one column group per convention), the ensemble across models and the flags."""
    table = Table(title=f"leaderboard against {board['gold']}")
    table.add_column("model")
    table.add_column("runs", justify="right")
    for c in board["conventions"]:
        table.add_column(f"{c['name']} {c['label']}\nmean ± sd [CI]", justify="right")
        table.add_column("min – max", justify="right")
        table.add_column("ensemble", justify="right")
    for row in board["models"]:
        cells = [row["model"], str(len(row["runs"]))]
        for c in board["conventions"]:
            s, d = row["by_convention"][c["name"]], c["digits"]
            sd = "" if s["sd"] is None else f" ± {s['sd']:.{d}f}"
            ensemble = "-" if s["ensemble"] is None else f"{s['ensemble']:.{d}f}"
            cells += [f"{s['mean']:.{d}f}{sd} [{s['ci_mean'][0]:.{d}f}, {s['ci_mean'][1]:.{d}f}]",
                      f"{s['min']:.{d}f} – {s['max']:.{d}f}", ensemble]
        table.add_row(*cells)
    console.print(table)
    if board["across_models"]:
        values = ", ".join(f"{name} {value:.2f}" for name, value in board["across_models"]["by_convention"].items())
        console.print(f"ensemble across models ({board['across_models']['members']} runs, one vote per model): "
                      f"{values}", highlight=False, soft_wrap=True)
    for flag in board["flags"]:
        (a, b), (x, y) = flag["conventions"], flag["figures"]
        console.print(f"flag: {flag['model']} / {flag['run']}: {a} {x:.2f} vs {b} {y:.2f} ({flag['difference']:+.2f} "
                      f"points)", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("leaderboard")(leaderboard_command)
