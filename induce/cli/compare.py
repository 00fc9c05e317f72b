"""`induce compare A B` (the paired bootstrap of two sources) and `induce agreement A B [C ...]` (their pairwise
F1 matrix): thin commands over :func:`induce.assess.run_eval.run_compare` and
:func:`induce.assess.run_eval.run_agreement`, with the options of `induce eval` (:mod:`induce.cli.evaluate`)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from induce.cli.evaluate import (
    batch_size_option,
    corpus_option,
    data_option,
    decoder_option,
    device_option,
    gold_option,
    gold_variants_option,
    json_option,
    max_length_option,
    pred_format_option,
    progress_option,
    resamples_option,
    run_command,
    seed_option,
    split_option,
    threads_option,
    treebank_option,
    word_match_option,
    wsj10_option,
    wsj40_option,
)

SOURCES_HELP = "Prediction files (any format of induce eval's --pred-format) or run folders (parsed, every token)."


def _convention():
    return typer.Option("induce", "--convention", metavar="NAME", help="Whose tokens, sentences and figure (a "
                        "convention name of induce eval; default: induce).")


def _common(gold, corpus, data, split, treebank, wsj10, wsj40, max_length, pred_format, batch_size, decoder, device,
            word_match, threads) -> dict:
    from induce.assess.run_eval import GoldChoice, ParseChoice, eval_convention
    from induce.config import use_threads

    use_threads(threads)
    return {"gold": GoldChoice(gold, corpus, data, split, treebank),
            "max_length": eval_convention(wsj10, wsj40, max_length)[0].max_length, "pred_format": pred_format,
            "parse": ParseChoice(batch_size, decoder, device), "word_match": word_match}


def compare_command(
    sources: list[Path] = typer.Argument(..., help=SOURCES_HELP),
    gold: Optional[Path] = gold_option(), corpus: Optional[Path] = corpus_option(),
    data: Optional[Path] = data_option(), split: str = split_option(), treebank: Optional[str] = treebank_option(),
    convention: str = _convention(), gold_variants: list[str] = gold_variants_option(),
    wsj10: bool = wsj10_option(), wsj40: bool = wsj40_option(), max_length: Optional[int] = max_length_option(),
    resamples: int = resamples_option(), seed: int = seed_option(), pred_format: str = pred_format_option(),
    batch_size: int = batch_size_option(), decoder: Optional[str] = decoder_option(), device: str = device_option(),
    word_match: str = word_match_option(), threads: Optional[int] = threads_option(), as_json: bool = json_option(),
    progress: bool = progress_option(),
) -> None:
    """Paired bootstrap over sentences of two sources A B (prediction files or run folders): the difference
    A - B of the convention's first figure, its 95% interval and a one-sided p-value.

    Example: `induce compare a.txt b.txt --gold 22.mrg`.
    """
    options = _common(gold, corpus, data, split, treebank, wsj10, wsj40, max_length, pred_format, batch_size,
                      decoder, device, word_match, threads)
    run_command("compare", sources, convention, as_json, progress, Console(stderr=True), variants=gold_variants,
                resamples=resamples, seed=seed, **options)


def agreement_command(
    sources: list[Path] = typer.Argument(..., help=SOURCES_HELP),
    gold: Optional[Path] = gold_option(), corpus: Optional[Path] = corpus_option(),
    data: Optional[Path] = data_option(), split: str = split_option(), treebank: Optional[str] = treebank_option(),
    convention: str = _convention(),
    wsj10: bool = wsj10_option(), wsj40: bool = wsj40_option(), max_length: Optional[int] = max_length_option(),
    pred_format: str = pred_format_option(), batch_size: int = batch_size_option(),
    decoder: Optional[str] = decoder_option(), device: str = device_option(), word_match: str = word_match_option(),
    threads: Optional[int] = threads_option(), as_json: bool = json_option(), progress: bool = progress_option(),
) -> None:
    """Pairwise F1 between two sources or more (prediction files or run folders; e.g. seeds of one model:
    self-F1), as a matrix, on the gold sentences.

    Example: `induce agreement runs/palm-seed1 runs/palm-seed2 runs/palm-seed3 --gold 22.mrg`.
    """
    options = _common(gold, corpus, data, split, treebank, wsj10, wsj40, max_length, pred_format, batch_size,
                      decoder, device, word_match, threads)
    run_command("agreement", sources, convention, as_json, progress, Console(stderr=True), **options)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_command)
    app.command("agreement")(agreement_command)
