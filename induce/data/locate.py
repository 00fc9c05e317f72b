"""Where the treebank is, and the default prepared corpus.

Where the default corpus comes from (:func:`default_corpus`), first found wins: explicit ``--data`` >
the ``INDUCE_DATA`` environment variable > ``corpora/``: raw treebank files there, else the treebank
corpus prepared there earlier, whatever its name (what ``induce preprocess`` and ``make reproduce``
leave behind, used as it is when its sources are nowhere to be found; several: ``ptb-wsj`` when they
are the default names ``ptb-wsj`` and ``ptb-sample``, else an error naming them that asks for
``--corpus``) > NLTK's data path (``nltk.data.path``, where ``python -m nltk.downloader treebank`` puts
``corpora/treebank/combined``) > the synthetic treebank, with a warning. The data roots alone are
:func:`resolve_data_root`; the prepared corpora alone :func:`find_prepared`.

Inside a data root, :func:`find_treebank` recognises, best first:

1. ``ldc``: the LDC Treebank-3 layout ``.../parsed/mrg/wsj/SS/wsj_SSNN.mrg`` (standard
   sections: train 02-21, valid 22, test 23);
2. ``wsj-files``: ``wsj/02-21.mrg`` + ``wsj/22.mrg`` [+ ``wsj/23.mrg``];
3. ``nltk-sample``: the NLTK sample ``wsj_0001.mrg`` .. ``wsj_0199.mrg`` (in
   ``nltk_treebank/``, ``treebank/combined/``, ``corpora/treebank/combined/`` or the root),
   split by file number (:data:`induce.data.preprocess.NLTK_SAMPLE_SPLIT`).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import nltk
from rich.console import Console

from induce.data import preprocess
from induce.data.corpus import PreparedCorpus
from induce.errors import InduceError

ENV_VAR = "INDUCE_DATA"
#: Prepared-corpus names used by :func:`default_corpus`, per source kind.
DEFAULT_NAMES = {"ldc": "ptb-wsj", "wsj-files": "ptb-wsj", "nltk-sample": "ptb-sample", "synthetic": "synthetic"}
HOW_TO_GET_PTB = (
    "To use the Penn Treebank instead: run `python -m nltk.downloader treebank` (free 5% sample), "
    "or pass --data PATH / set INDUCE_DATA=PATH to a folder with the LDC Treebank-3 copy "
    "(parsed/mrg/wsj/SS/*.mrg) or with wsj/02-21.mrg and wsj/22.mrg."
)


@dataclass(frozen=True)
class TreebankSource:
    """A recognised treebank: its kind, the folder it was found in and its files per split."""

    kind: str
    folder: Path
    split_files: dict


def _ldc_wsj_dir(root: Path) -> Optional[Path]:
    candidates = [root, root / "wsj", root / "mrg" / "wsj", root / "parsed" / "mrg" / "wsj"]
    candidates += [root / top / "parsed" / "mrg" / "wsj" for top in ("treebank_3", "TREEBANK_3", "treebank-3")]
    for candidate in candidates:
        if any((candidate / "02").glob("wsj_02*.mrg")):
            return candidate
    return None


def _nltk_sample_dir(root: Path) -> Optional[Path]:
    candidates = [root / "nltk_treebank", root / "treebank" / "combined", root / "corpora" / "treebank" / "combined",
                  root]
    for candidate in candidates:
        # any file of the sample (not only wsj_0001.mrg): a sample with files missing is reported as such
        # (preprocess.nltk_sample_split_files), not taken for no treebank at all
        if any(re.fullmatch(r"wsj_0(0\d\d|1\d\d)\.mrg", path.name) for path in candidate.glob("wsj_0*.mrg")):
            return candidate
    return None


def find_treebank(
    root: Path, sections: Optional[dict] = None
) -> Optional[TreebankSource]:
    """The best treebank under ``root`` (LDC > wsj files > NLTK sample), or None."""
    root = Path(root)
    ldc = _ldc_wsj_dir(root)
    if ldc is not None:
        files = preprocess.ldc_split_files(ldc, sections or preprocess.DEFAULT_SECTIONS)
        if "train" in files:
            return TreebankSource("ldc", ldc, files)
    wsj = root / "wsj"
    if (wsj / "02-21.mrg").is_file():
        files = {"train": [wsj / "02-21.mrg"]}
        for split, file_name in (("valid", "22.mrg"), ("test", "23.mrg")):
            if (wsj / file_name).is_file():
                files[split] = [wsj / file_name]
        return TreebankSource("wsj-files", wsj, files)
    sample = _nltk_sample_dir(root)
    if sample is not None:
        return TreebankSource("nltk-sample", sample, preprocess.nltk_sample_split_files(sample))
    return None


def resolve_data_root(data: Optional[Path], corpora_dir: Path = Path("corpora")) -> Optional[Path]:
    """The data root by precedence: ``data`` > ``$INDUCE_DATA`` > ``corpora_dir`` > NLTK data path.

    An explicit ``data`` or ``INDUCE_DATA`` that does not exist is an error (a typo should
    not silently fall back). ``corpora_dir`` and NLTK's data path count only when a
    treebank is found in them. Returns None when nothing is found.
    """
    if data is not None:
        data = Path(data)
        if not data.is_dir():
            raise InduceError(f"--data {data}: no such folder")
        return data
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        path = Path(env)
        if not path.is_dir():
            raise InduceError(f"{ENV_VAR}={env}: no such folder")
        return path
    if Path(corpora_dir).is_dir() and find_treebank(Path(corpora_dir)) is not None:
        return Path(corpora_dir)
    for entry in nltk.data.path:
        root = Path(entry)
        if (root / "corpora" / "treebank" / "combined" / "wsj_0001.mrg").is_file():
            return root
    return None


#: The default names of prepared Penn Treebank corpora, best first: when these two are the prepared corpora,
#: the full treebank stands for the default (see :func:`find_prepared`).
PREPARED_DEFAULTS = ("ptb-wsj", "ptb-sample")


def prepared_treebanks(folder: Path) -> list[PreparedCorpus]:
    """The prepared corpora in ``folder`` that may stand for the default corpus, by name: a readable
    ``meta.json`` of a corpus with trees, not a subset (``induce reproduce`` cuts those for its own runs)
    and not the synthetic treebank (the fallback of last resort prepares it when nothing else is found)."""
    found = []
    try:
        children = sorted(Path(folder).iterdir())
    except OSError:
        return found
    for child in children:
        if child.name.startswith(".") or not (child / "meta.json").is_file():
            continue
        try:
            corpus = PreparedCorpus(child)
            usable = corpus.has_trees and not corpus.meta.get("subset") and corpus.source_kind != "synthetic"
        except (InduceError, AttributeError):  # AttributeError: a meta.json that is not an object
            continue
        if usable:
            found.append(corpus)
    return found


def find_prepared(corpora_dir: Path = Path("corpora"), also_in: Sequence[Path] = ()) -> Optional[PreparedCorpus]:
    """The treebank corpus prepared under ``corpora_dir`` (else under the first of ``also_in`` that has one)
    that stands for the default corpus (:func:`prepared_treebanks`): the only one, whatever its name, or
    ``ptb-wsj`` when the two are ``ptb-wsj`` and ``ptb-sample`` (the full treebank before its sample); None
    when there is none. Several others are an :class:`InduceError` naming them and asking for ``--corpus``."""
    for folder in dict.fromkeys([Path(corpora_dir), *map(Path, also_in)]):
        found = prepared_treebanks(folder)
        names = [corpus.path.name for corpus in found]
        if len(found) == 1:
            return found[0]
        if found and set(names) <= set(PREPARED_DEFAULTS):
            return found[names.index(PREPARED_DEFAULTS[0])]
        if found:
            raise InduceError(f"{len(found)} prepared corpora in {folder}/ ({', '.join(names)}) and no data root "
                              f"named: choose one with --corpus {folder / names[0]} (or name the treebank with --data "
                              "PATH or INDUCE_DATA)")
    return None


def default_corpus(
    data: Optional[Path] = None,
    corpora_dir: Path = Path("corpora"),
    console: Optional[Console] = None,
    max_vocab: int = preprocess.DEFAULT_MAX_VOCAB,
    also_prepared_in: Sequence[Path] = (),
) -> Path:
    """The prepared default corpus folder, preparing it on first use (cached by source sha256).

    Full WSJ if found, else the NLTK sample, else the synthetic treebank — in which case
    a warning saying so, and how to get the PTB, goes to stderr. A cached corpus whose
    sources changed is rebuilt. Without a data root, the treebank corpus prepared earlier under
    ``corpora_dir``, else under one of ``also_prepared_in``, is used as it is (:func:`find_prepared`).
    """
    return _prepare_found_treebank(data, corpora_dir, None, None, max_vocab, False, console or Console(stderr=True),
                                   also_prepared_in)


def _prepare_found_treebank(
    data: Optional[Path],
    corpora_dir: Path,
    name: Optional[str],
    sections: Optional[dict],
    max_vocab: int,
    force: bool,
    console: Console,
    also_prepared_in: Sequence[Path] = (),
) -> Path:
    custom_sections = sections is not None and sections != preprocess.DEFAULT_SECTIONS
    root = resolve_data_root(data, corpora_dir)
    if name is None and not custom_sections and (root is None or _from_nltk_path(data, root, corpora_dir)):
        # No data root named and no raw treebank in corpora/: a treebank corpus prepared there earlier
        # (by `make reproduce`, or with INDUCE_DATA set then) comes before NLTK's sample and the
        # synthetic fallback, in the order docs/data.md gives.
        prepared = find_prepared(corpora_dir, also_prepared_in)
        if prepared is not None:
            console.print(f"using the treebank corpus prepared in {prepared.path} ({prepared.source_kind}; another: "
                          "--corpus DIR; to prepare the Penn Treebank, pass --data PATH or set INDUCE_DATA)",
                          highlight=False)
            return prepared.path
    source = find_treebank(root, sections) if root is not None else None
    if source is None and data is not None:
        raise InduceError(
            f"--data {data}: no treebank found (expected parsed/mrg/wsj/SS/*.mrg, wsj/02-21.mrg, "
            "or the NLTK sample wsj_0001.mrg..wsj_0199.mrg)"
        )
    if custom_sections and (source is None or source.kind != "ldc"):
        found = f"found {source.kind} in {source.folder}" if source else "found no treebank"
        raise InduceError(f"--sections-* need the LDC layout (parsed/mrg/wsj/SS/wsj_SSNN.mrg); {found}")
    # The default names are caches: rebuild them silently when their sources changed.
    rebuild_stale = name is None and not custom_sections
    if source is None:
        where = f"in {root}" if root is not None else "anywhere (--data, INDUCE_DATA, corpora/, NLTK data path)"
        target = (Path(corpora_dir) / (name or DEFAULT_NAMES["synthetic"])).resolve()
        console.print(
            f"[bold yellow]WARNING:[/] no Penn Treebank found {where}; "
            f"using the SYNTHETIC treebank (a small built-in PCFG), not real English, prepared in {target}. "
            + HOW_TO_GET_PTB,
            highlight=False,
        )
        return preprocess.preprocess_synthetic(
            corpora_dir, name or DEFAULT_NAMES["synthetic"], max_vocab=max_vocab, force=force, console=console,
            rebuild_stale=rebuild_stale,
        )
    console.print(f"Penn Treebank ({source.kind}) found in {source.folder}", highlight=False)
    return preprocess.preprocess_tree_files(
        source.split_files, corpora_dir, name or DEFAULT_NAMES[source.kind], source_kind=source.kind,
        max_vocab=max_vocab, force=force, console=console, rebuild_stale=rebuild_stale,
    )


def _from_nltk_path(data: Optional[Path], root: Path, corpora_dir: Path) -> bool:
    """Whether :func:`resolve_data_root` found ``root`` on NLTK's data path (nothing named, nothing in
    ``corpora_dir``): the last resort before the synthetic treebank."""
    return data is None and not os.environ.get(ENV_VAR, "").strip() and Path(root) != Path(corpora_dir)


def check_corpus_name(name: str) -> None:
    """A corpus name is one plain folder name: not empty, no path separator, not starting with '.'
    (hidden names are the temporary build folders)."""
    if not name or name in (".", "..") or "/" in name or os.sep in name or (os.altsep and os.altsep in name) \
            or name.startswith("."):
        raise InduceError(f"--name {name!r}: give a plain folder name (no '/' or '\\', not starting with '.'); "
                          "use --out-dir to choose where it goes")


def prepare_corpus(
    data: Optional[Path] = None,
    corpora_dir: Path = Path("corpora"),
    name: Optional[str] = None,
    split_files: Optional[dict] = None,
    lm_text: Optional[Path] = None,
    synthetic: bool = False,
    synthetic_sizes: Optional[dict] = None,
    seed: int = 0,
    sections: Optional[dict] = None,
    max_vocab: int = preprocess.DEFAULT_MAX_VOCAB,
    force: bool = False,
    allow_predicted_tags: bool = False,
    console: Optional[Console] = None,
    default: bool = False,
    treebank: Optional[str] = None,
) -> Path:
    """What ``induce preprocess`` does: pick the source from the options, prepare, return the folder.

    At most one of ``split_files`` (explicit ``{split: [files]}``, which must name train files when
    it names any: the vocabulary comes from them), ``lm_text`` (a folder of Mikolov text),
    ``synthetic``; with none, the treebank found under the data root, as :func:`default_corpus`
    (synthetic fallback with a warning), which ``default`` asks for explicitly (then no source may
    be given). ``sections`` (``{split: (section, ...)}``) applies to the LDC layout only.
    ``treebank`` (:mod:`induce.trees.treebanks`; default ``ptb``): whose rules prepare the trees; ``ktb``
    reads the Keyaki Treebank folder ``data`` (or ``data/ktb``; default ``$INDUCE_DATA/ktb``) and splits it
    as Li et al. do (:func:`induce.data.preprocess.preprocess_keyaki`), or prepares the files given.
    """
    from induce.trees.treebanks import get_profile

    profile = get_profile(treebank)
    console = console or Console(stderr=True)
    split_files = {split: files for split, files in (split_files or {}).items() if files}
    if split_files and "train" not in split_files:
        raise InduceError("--valid/--test need --train (the vocabulary is built from the training split)")
    if default and (split_files or lm_text or synthetic):
        raise InduceError("--default takes no source option (--train, --lm-text, --synthetic)")
    if name is not None:
        check_corpus_name(name)
    chosen = [flag for flag, on in (("--train/--valid/--test", bool(split_files)), ("--lm-text", lm_text is not None),
                                    ("--synthetic", synthetic)) if on]
    if len(chosen) > 1:
        raise InduceError(f"choose one source, not {' and '.join(chosen)}")
    if profile.name != "ptb" and (lm_text is not None or synthetic or default):
        raise InduceError(f"--treebank {profile.name} prepares treebank files: drop --lm-text, --synthetic and "
                          "--default")
    if split_files:
        return preprocess.preprocess_tree_files(
            split_files, corpora_dir, name or "custom", source_kind="files", max_vocab=max_vocab, force=force,
            allow_predicted_tags=allow_predicted_tags, console=console, treebank=profile.name,
        )
    if profile.keyaki:
        return preprocess.preprocess_keyaki(_keyaki_folder(data, profile.name), corpora_dir, name or profile.name,
                                            max_vocab, force, console, profile=profile)
    if lm_text is not None:
        return preprocess.preprocess_lm_text(lm_text, corpora_dir, name or "ptb-lm", max_vocab, force, console)
    if synthetic:
        return preprocess.preprocess_synthetic(
            corpora_dir, name or DEFAULT_NAMES["synthetic"], synthetic_sizes, seed, max_vocab, force, console
        )
    return _prepare_found_treebank(data, corpora_dir, name, sections, max_vocab, force, console)


def _keyaki_folder(data: Optional[Path], treebank: str = "ktb") -> Path:
    """The Keyaki Treebank folder of ``--data`` (the folder, or its ``ktb/``), else ``$INDUCE_DATA/ktb``."""
    if data is None:
        root = os.environ.get("INDUCE_DATA")
        if not root:
            raise InduceError(f"--treebank {treebank}: give --data, the Keyaki Treebank folder (with its "
                              "treebank/*.psd)")
        data = Path(root)
    data = Path(data)
    return data / "ktb" if (data / "ktb").is_dir() and not any(data.glob("*.psd")) else data
