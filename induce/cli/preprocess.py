"""`induce preprocess`: prepare a corpus folder (trees, gold trees, LM text, vocabulary).

All logic is in :mod:`induce.data` (:func:`induce.data.locate.prepare_corpus`).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

# The option defaults of induce.data.preprocess (DEFAULT_MAX_VOCAB, DEFAULT_SECTIONS), written out so that
# `induce --help` does not import nltk; tests/test_cli_main.py checks that they agree.
DEFAULT_MAX_VOCAB = 10000
DEFAULT_SECTIONS = {"train": tuple(range(2, 22)), "valid": (22,), "test": (23,)}


def _sections_text(sections: tuple[int, ...]) -> str:
    return f"{sections[0]:02d}-{sections[-1]:02d}" if len(sections) > 1 else f"{sections[0]:02d}"


def preprocess_command(
    data: Optional[Path] = typer.Option(
        None, "--data", help="Data root (LDC Treebank-3, wsj/02-21.mrg + wsj/22.mrg, or the NLTK sample). "
        "Default: $INDUCE_DATA, then corpora/, then NLTK's data path, else the synthetic treebank."
    ),
    name: Optional[str] = typer.Option(
        None, "--name", help="Output corpus name (default: ptb-wsj, ptb-sample, synthetic, ptb-lm, custom, or for "
        "a Keyaki folder the --treebank's name: ktb, ktb-2020)."
    ),
    out_dir: Path = typer.Option(Path("corpora"), "--out-dir", help="Where prepared corpora go."),
    max_vocab: int = typer.Option(
        DEFAULT_MAX_VOCAB, "--max-vocab", help="Vocabulary size INCLUDING <unk> and <eos> (10000 = Mikolov's)."
    ),
    sections_train: str = typer.Option(_sections_text(DEFAULT_SECTIONS["train"]), "--sections-train",
                                       help="WSJ sections for train (LDC layout only)."),
    sections_valid: str = typer.Option(_sections_text(DEFAULT_SECTIONS["valid"]), "--sections-valid",
                                       help="WSJ sections for valid (LDC layout only)."),
    sections_test: str = typer.Option(_sections_text(DEFAULT_SECTIONS["test"]), "--sections-test",
                                      help="WSJ sections for test (LDC layout only)."),
    train: Optional[list[Path]] = typer.Option(None, "--train", help="Training tree file(s) (one tree per line or "
                                                                     ".mrg)."),
    valid: Optional[list[Path]] = typer.Option(None, "--valid", help="Validation tree file(s)."),
    test: Optional[list[Path]] = typer.Option(None, "--test", help="Test tree file(s)."),
    lm_text: Optional[Path] = typer.Option(
        None, "--lm-text", help="Folder with Mikolov text ptb.train.txt, ptb.valid.txt [, ptb.test.txt] (no trees)."
    ),
    synthetic: bool = typer.Option(False, "--synthetic", help="Sample a treebank from the built-in PCFG."),
    seed: int = typer.Option(0, "--seed", help="Seed of --synthetic."),
    synthetic_train: int = typer.Option(2000, "--synthetic-train", help="Sentences in the synthetic train split."),
    synthetic_valid: int = typer.Option(200, "--synthetic-valid", help="Sentences in the synthetic valid split."),
    synthetic_test: int = typer.Option(200, "--synthetic-test", help="Sentences in the synthetic test split."),
    default: bool = typer.Option(
        False, "--default", help="Prepare the default corpus (what commands use without --corpus); same as no source "
                                 "option."
    ),
    allow_predicted_tags: bool = typer.Option(
        False, "--allow-predicted-tags", help="Accept *.auto.* files (predicted POS tags decide punctuation: not "
                                              "recommended)."
    ),
    treebank: str = typer.Option(
        "ptb", "--treebank", metavar="ptb|ktb|ktb-2020",
        help="Whose rules prepare the trees (punctuation tags, empty elements, ID nodes, function tags, unary "
        "chains, the split), recorded in meta.json. ptb: the Penn Treebank (WSJ sections; another tag set is "
        "refused). ktb: the Keyaki Treebank as Li et al. (2020) prepare and split it (--data: its folder; "
        "random.seed(0) 80/10/10), or the --train/--valid/--test files given. ktb-2020: the same as their script "
        "prepared it at the paper's time (empty elements kept as words, QUOT not punctuation)."),
    force: bool = typer.Option(False, "--force", help="Rebuild even if the output exists."),
) -> None:
    """Prepare a corpus: original/gold/no-punctuation trees and Mikolov-style LM text per split."""
    from induce.data.locate import prepare_corpus
    from induce.data.preprocess import parse_sections

    console = Console(stderr=True)
    started = time.perf_counter()
    folder = prepare_corpus(
        data=data,
        corpora_dir=out_dir,
        name=name,
        split_files={"train": train, "valid": valid, "test": test},
        lm_text=lm_text,
        synthetic=synthetic,
        synthetic_sizes={"train": synthetic_train, "valid": synthetic_valid, "test": synthetic_test},
        seed=seed,
        sections={"train": parse_sections(sections_train), "valid": parse_sections(sections_valid),
                  "test": parse_sections(sections_test)},
        max_vocab=max_vocab,
        force=force,
        allow_predicted_tags=allow_predicted_tags,
        console=console,
        default=default,
        treebank=treebank,
    )
    _print_corpus(folder, console)
    console.print(f"{folder} ready ({time.perf_counter() - started:.1f} s)", highlight=False)
    typer.echo(str(folder))


def _print_corpus(folder: Path, console: Console) -> None:
    """A table of the prepared corpus in ``folder``: per split, trees, trees dropped, LM tokens, % <unk>."""
    from induce.data.corpus import PreparedCorpus

    corpus = PreparedCorpus(folder)
    table = Table(title=f"{corpus.name} ({corpus.meta.get('kind')}, vocab {corpus.meta.get('vocab_size')})")
    for column in ("split", "trees", "dropped", "LM tokens", "<unk> %"):
        table.add_column(column, justify="right")
    for split in corpus.splits:
        counts = corpus.meta.get("splits", {}).get(split, {})
        tokens = counts.get("lm_tokens", 0)
        unk = 100.0 * counts.get("lm_unk_tokens", 0) / tokens if tokens else 0.0
        table.add_row(split, str(counts.get("trees", "-")), str(counts.get("dropped_no_words", "-")), str(tokens),
                      f"{unk:.2f}")
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add ``induce preprocess`` to the app."""
    app.command("preprocess")(preprocess_command)
