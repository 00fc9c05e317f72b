"""Build prepared corpora (``corpora/<name>/``) from treebank files, Mikolov LM text or the synthetic PCFG.

Every builder goes through :func:`_prepare`: it computes a *fingerprint* of the inputs
(sha256 of every source file, options, :data:`FORMAT_VERSION`), reuses an existing
output whose ``meta.json`` has the same fingerprint, and otherwise writes the corpus into
a temporary folder beside the target and renames it into place at the end, so that a
failure never leaves a half-written corpus. Output is deterministic: sorted JSON keys,
no timestamps, ``\\n`` newlines.

Per tree (see ``corpora/README.md``): ``orig`` = as read; ``gold`` =
``clean_tree(tree, keep_punct=True)``; ``nopunct`` = ``clean_tree(tree, keep_punct=False)``
(word-tag filter); LM tokens = Mikolov normalisation of the ``nopunct`` leaves
(:mod:`induce.data.mikolov`). Trees with no word left after the filter (only
punctuation / traces) are dropped from every file of the split and counted in
``meta.json`` (``dropped_no_words``), so line ``i`` is the same sentence in all files.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import nltk
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from induce.data import mikolov, synthetic
from induce.data.corpus import META_FILE, SPLITS, UNK, VOCAB_FILE, Vocab
from induce.errors import InduceError, InputError
from induce.files import (
    check_not_input,
    check_output_folder,
    distinct_paths,
    honour_umask,
    os_error_message,
    process_alive,
    repeat_note,
    sha256_file,
)
from induce.trees.brackets import read_trees, tree_to_line
from induce.trees.ptb import TRACE_TAG, TagCensus, clean_tree
from induce.trees.treebanks import (
    KEYAKI_RECIPE,
    KTB,
    PTB,
    TreebankProfile,
    get_profile,
    is_null_word,
    keyaki_tree,
    li_normalize_word,
    tag_refusal,
)

#: Bumped when the output format or a convention changes (invalidates cached corpora).
FORMAT_VERSION = 1
DEFAULT_MAX_VOCAB = 10000
#: Standard WSJ parsing splits (sections).
DEFAULT_SECTIONS = {"train": tuple(range(2, 22)), "valid": (22,), "test": (23,)}
#: Deterministic file-level split of the NLTK sample (wsj_0001..wsj_0199), by file number:
#: contiguous documents, as with WSJ sections. Gives 3,396 / 273 / 245 trees.
NLTK_SAMPLE_SPLIT = {"train": range(1, 160), "valid": range(160, 180), "test": range(180, 200)}

CONVENTIONS = {
    "orig": "trees as read (NLTK tree I/O), one per line; traces, function tags, empty root label kept",
    "gold": "induce.trees.ptb.clean_tree(keep_punct=True): -NONE- leaves, emptied constituents and function tags "
    "removed; punctuation kept; empty root label -> ROOT",
    "nopunct": "induce.trees.ptb.clean_tree(keep_punct=False): also every leaf whose POS tag is not in "
    "induce.trees.ptb.WORD_TAGS (word-tag filter of Kim et al. 2019)",
    "lm_text": "Mikolov: nopunct leaves, lower-cased, numbers and % -> N (induce.data.mikolov.NUMBER), "
    "<unk> outside the vocabulary; one sentence per line, no <eos> written",
    "vocab": "most frequent training tokens, ties alphabetical; max_vocab counts <eos> and <unk>",
    "dropped": "trees with no word after the word-tag filter are dropped from all files of the split",
}

#: What differs in a corpus prepared with ``--treebank ktb`` (:mod:`induce.trees.treebanks`, :mod:`induce.data.keyaki`).
KTB_CONVENTIONS = {
    **CONVENTIONS,
    "gold": "induce.trees.treebanks.keyaki_tree(keep_punct=True, collapse=False): ID/META/LS/LST subtrees and empty "
    "elements removed, labels cut at - _ =, POS tags and punctuation kept, unary chains NOT collapsed (the evaluator "
    "removes punctuation by tag first; Li et al.'s conventions collapse after it); empty root -> its only child",
    "nopunct": "induce.trees.treebanks.keyaki_tree(keep_punct=False): Li et al.'s no-punctuation tree (PU -LRB- -RRB- "
    "CODE QUOT also removed, then unary chains collapsed into their top node, the root included)",
    "lm_text": "Li et al.'s normalisation of the nopunct leaves: lower-cased, numbers -> [num] "
    "(induce.trees.treebanks.li_normalize_word), <unk> outside the vocabulary",
    "dropped": "trees with no word left without punctuation are left out before the split (Li et al.), and counted",
}

LogFn = Callable[[str], None]


def _stderr_console() -> Console:
    return Console(stderr=True)


def _logger(console: Optional[Console]) -> LogFn:
    """Log lines to ``console`` as plain text (paths may hold brackets; no markup), or nowhere."""
    if console is None:
        return lambda message: None
    return lambda message: console.print(message, markup=False, highlight=False, soft_wrap=True)


def _file_record(path: Path) -> dict:
    return {"bytes": path.stat().st_size, "path": str(path), "sha256": sha256_file(path)}


def _dump_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


@contextlib.contextmanager
def _progress(console: Optional[Console]) -> Iterator[Progress]:
    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console or _stderr_console(),
        transient=True,
        disable=console is None,
    )
    with progress:
        yield progress


# ----------------------------------------------------------------------------- sources


def ldc_split_files(wsj_dir: Path, sections: dict[str, Sequence[int]]) -> dict[str, list[Path]]:
    """``{split: [wsj_SSNN.mrg, ...]}`` from an LDC ``parsed/mrg/wsj`` folder (sorted, per section).

    A split whose sections are all missing is left out (e.g. section 23 not provided);
    a split with some sections missing is an error.
    """
    files: dict[str, list[Path]] = {}
    for split, wanted in sections.items():
        found, missing = [], []
        for section in wanted:
            section_files = sorted((wsj_dir / f"{section:02d}").glob("wsj_*.mrg"))
            (found.extend(section_files) if section_files else missing.append(f"{section:02d}"))
        if found and missing:
            raise InduceError(f"{wsj_dir}: split {split!r} lacks section(s) {', '.join(missing)}")
        if found:
            files[split] = found
    return files


def nltk_sample_split_files(folder: Path) -> dict[str, list[Path]]:
    """The NLTK sample's files by :data:`NLTK_SAMPLE_SPLIT` (file number). A sample with a file
    missing (an interrupted download or copy) is an :class:`InputError` naming the missing files:
    its splits would silently hold fewer sentences than everyone else's."""
    by_number = {}
    for path in folder.glob("wsj_*.mrg"):
        match = re.fullmatch(r"wsj_(\d{4})\.mrg", path.name)
        if match:
            by_number[int(match.group(1))] = path
    expected = [n for numbers in NLTK_SAMPLE_SPLIT.values() for n in numbers]
    missing = [f"wsj_{n:04d}.mrg" for n in expected if n not in by_number]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise InputError(f"the NLTK treebank sample is incomplete: {len(missing)} of its {len(expected)} files are "
                         f"missing ({shown}); get it again (`python -m nltk.downloader treebank`) or point --data "
                         "or INDUCE_DATA at a complete copy", folder)
    return {split: [by_number[n] for n in numbers] for split, numbers in NLTK_SAMPLE_SPLIT.items()}


def parse_sections(text: str) -> tuple[int, ...]:
    """``"02-21"`` -> (2, ..., 21); ``"22"`` -> (22,); ``"0,1,5-7"`` -> (0, 1, 5, 6, 7)."""
    sections: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d{1,2})(?:-(\d{1,2}))?", part)
        if not match:
            raise InduceError(f"bad section list {text!r}: expected e.g. 02-21 or 22 or 0,1,5-7")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) else low
        if high < low or high > 24:
            raise InduceError(f"bad section range {part!r} (sections are 00-24)")
        sections.extend(range(low, high + 1))
    return tuple(sections)


def check_tags_are_gold(path: Path, allow_predicted: bool = False) -> None:
    """Refuse files whose POS tags are predicted (``*.auto.*``, e.g. ``22.auto.clean``).

    Predicted tags would decide what is punctuation under the word-tag filter, which
    must use gold tags. This can only be detected by name; see ``corpora/README.md``.
    """
    if re.search(r"(^|[._-])auto([._-]|$)", path.name) and not allow_predicted:
        raise InputError(
            "this file looks like it has PREDICTED POS tags ('auto' in its name); the word-tag filter needs "
            "gold tags. Use the .mrg trees instead, or pass --allow-predicted-tags to use it anyway",
            path,
        )


def check_ptb_tags(path: Path, trees: Sequence[nltk.Tree]) -> None:
    """Refuse a file whose trees are not tagged with the Penn Treebank's tag set (another treebank, e.g.
    the Keyaki Treebank's ``P``, ``N``, ``AX``): the word-tag filter would keep only the few words whose
    tags happen to be PTB word tags (Keyaki's ``VB``, ``MD``) and silently drop the rest
    (:func:`induce.trees.treebanks.tag_refusal`). An :class:`InputError` naming the file and what would be lost."""
    census = TagCensus()
    for tree in trees:
        census.add(tree)
    refusal = tag_refusal(census)
    if refusal is not None:
        raise InputError(f"{refusal} (induce preprocess reads Penn Treebank trees unless --treebank names another "
                         "treebank)", path)


def check_tags(path: Path, trees: Sequence[nltk.Tree], profile: TreebankProfile) -> None:
    """Refuse a file whose trees are not of ``profile``'s treebank: for the PTB, :func:`check_ptb_tags`; for the
    Keyaki Treebank, POS tags that are not Keyaki's and a tree without its ``ID`` node, as
    :func:`induce.data.keyaki.check_keyaki` refuses them."""
    if profile.name == PTB.name:
        check_ptb_tags(path, trees)
        return
    from induce.data.keyaki import check_keyaki_tags, has_id_node

    check_keyaki_tags(path, trees, profile)
    for number, tree in enumerate(trees):
        if not has_id_node(tree):
            raise InputError(f"tree {number + 1} is not a Keyaki Treebank tree: no (ID ...) node (--treebank ktb "
                             "reads the treebank's .psd files as released)", path)


# ----------------------------------------------------------------------------- building


@dataclass
class _SplitData:
    orig: list[str] = field(default_factory=list)
    gold: list[str] = field(default_factory=list)
    nopunct: list[str] = field(default_factory=list)
    tokens: list[list[str]] = field(default_factory=list)
    read: int = 0
    dropped: int = 0
    gold_words: int = 0
    traces: int = 0


def _process_trees(trees: Sequence[nltk.Tree], progress: Progress, label: str,
                   profile: TreebankProfile = PTB, nopunct_of: Optional[dict[int, nltk.Tree]] = None) -> _SplitData:
    """The files of one split under ``profile``'s rules (:data:`CONVENTIONS`, :data:`KTB_CONVENTIONS`).
    ``nopunct_of``: the trees without punctuation already made from some of ``trees``, by ``id`` of the tree
    read (the Keyaki split makes them to choose its sentences), taken instead of making them again."""
    data = _SplitData(read=len(trees))
    task = progress.add_task(f"cleaning {label}", total=len(trees))
    ktb = profile.keyaki
    known = nopunct_of or {}
    for index, tree in enumerate(trees):
        if id(tree) in known:
            nopunct = known[id(tree)]
        elif ktb:
            nopunct = keyaki_tree(tree, keep_punct=False, profile=profile)
        else:
            nopunct = clean_tree(tree, keep_punct=False)
        if nopunct is None:
            data.dropped += 1
            continue
        gold = profile.gold_tree(tree) if ktb else clean_tree(tree, keep_punct=True)
        data.orig.append(tree_to_line(tree))
        data.gold.append(tree_to_line(gold))
        data.nopunct.append(tree_to_line(nopunct))
        normalize = li_normalize_word if ktb else mikolov.normalize_word
        data.tokens.append([normalize(word) for word in nopunct.leaves()])
        data.gold_words += len(gold.leaves())
        data.traces += sum(1 for word, tag in tree.pos()
                           if (profile.drop_null_words and is_null_word(word) if ktb else tag == TRACE_TAG))
        if index % 1000 == 0:
            progress.update(task, completed=index)
    progress.update(task, completed=len(trees))
    return data


def _write_lines(path: Path, lines: Sequence[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8", newline="\n")


def _write_lm_corpus(folder: Path, split_tokens: dict[str, list[list[str]]], max_vocab: int) -> tuple[Vocab, dict]:
    """Write ``vocab.json`` and ``<split>.txt``; returns the vocab and per-split LM counts."""
    if "train" not in split_tokens:
        raise InduceError("a corpus needs a train split (the vocabulary is built from it)")
    try:
        vocab = mikolov.build_vocab(split_tokens["train"], max_vocab)
    except ValueError as err:  # e.g. a --max-vocab too small to hold <eos>, <unk> and a word
        raise InduceError(f"--max-vocab {max_vocab}: {err}") from None
    (folder / VOCAB_FILE).write_text(_dump_json(vocab.to_json()), encoding="utf-8", newline="\n")
    counts = {}
    for split, sentences in split_tokens.items():
        mapped = [mikolov.apply_vocab(sentence, vocab) for sentence in sentences]
        _write_lines(folder / f"{split}.txt", [" ".join(sentence) for sentence in mapped])
        counts[split] = {
            "lm_sentences": len(mapped),
            "lm_tokens": sum(len(s) for s in mapped),
            "lm_unk_tokens": sum(token == UNK for s in mapped for token in s),
        }
    return vocab, counts


#: Inside a temporary build folder: ``"<host> <pid>"`` of the process building it (removed before the
#: rename), so that a later run can tell the leftovers of a killed run (``kill -9``) from a live build.
OWNER_FILE = ".induce-build-owner"
_TMP_MARK, _OLD_MARK = ".tmp-", ".old-"


def _owner_text() -> str:
    return f"{socket.gethostname()} {os.getpid()}"


def _make_build_dir(parent: Path, name: str, mark: str) -> Path:
    """``parent/.NAME.tmp-XXXX`` (or ``.old-``), marked with :data:`OWNER_FILE`, mode as under the umask."""
    folder = Path(tempfile.mkdtemp(prefix=f".{name}{mark}", dir=parent))
    honour_umask(folder, directory=True)  # mkdtemp makes it 0700; a corpus is as readable as any folder
    (folder / OWNER_FILE).write_text(_owner_text() + "\n", encoding="utf-8")
    return folder


def remove_stale_build_dirs(parent: Path, log: LogFn) -> list[Path]:
    """Remove the temporary build folders under ``parent`` that a killed run left behind.

    Only folders named ``.NAME.tmp-*`` / ``.NAME.old-*`` holding an :data:`OWNER_FILE` that names
    this host and a process that no longer exists are removed (each is logged). Returns them.
    """
    removed = []
    host = socket.gethostname()
    try:
        candidates = sorted(p for p in parent.iterdir()
                            if p.name.startswith(".") and (_TMP_MARK in p.name or _OLD_MARK in p.name))
    except OSError:
        return removed
    for folder in candidates:
        try:
            owner_host, pid = (folder / OWNER_FILE).read_text(encoding="utf-8").split()
            pid = int(pid)
        except (OSError, ValueError):
            continue  # not ours, or being created right now
        if owner_host != host or process_alive(pid):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(folder)
            log(f"removed {folder}: temporary folder of an interrupted preprocess run (process {pid} is gone)")
    return removed


def _check_out_dir(parent: Path) -> None:
    """Refuse an output folder that is a file, lies under a file, or cannot be written (before any work)."""
    check_output_folder(parent, "--out-dir", "the corpora folder")


def _check_not_replacing_inputs(target: Path, inputs: list[Path]) -> None:
    """Refuse to build ``target`` when an input file lies in it: a rebuild replaces the folder as a whole
    (the old one is removed), so the source would be lost (:func:`induce.files.check_not_input`)."""
    check_not_input(target, {"the input": inputs}, "the output corpus folder (--out-dir/--name)", holding=True)


def _prepare(
    target: Path,
    fingerprint: dict,
    build: Callable[[Path], dict],
    force: bool,
    log: LogFn,
    rebuild_stale: bool = False,
) -> Path:
    """Reuse ``target`` if its fingerprint matches, else build it atomically with ``build(tmp_dir) -> meta``.

    An existing ``target`` built from other inputs is an error unless ``force`` or
    ``rebuild_stale``; a non-empty folder that is not a prepared corpus is never replaced.
    Temporary folders of killed runs beside ``target`` are removed first
    (:func:`remove_stale_build_dirs`). File-system failures (permissions, a file where a folder
    should be, a full disk) are raised as :class:`InduceError` naming the path.
    """
    _check_out_dir(target.parent)
    try:
        return _prepare_in(target, fingerprint, build, force, log, rebuild_stale)
    except OSError as err:
        raise InduceError(f"cannot write the corpus {target}: {os_error_message(err)}") from None


def _prepare_in(target, fingerprint, build, force, log, rebuild_stale) -> Path:
    meta_path = target / META_FILE
    fingerprint_hash = hashlib.sha256(_dump_json(fingerprint).encode("utf-8")).hexdigest()
    if target.exists() and not target.is_dir():
        raise InputError("exists and is a file, not a prepared corpus folder; not replacing it", target)
    if target.parent.is_dir():
        remove_stale_build_dirs(target.parent, log)
    if target.exists():
        try:
            old = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = None
        if old is None and any(target.iterdir()):
            raise InduceError(f"{target} exists and is not a prepared corpus (no valid {META_FILE}); not replacing it")
        if not force and old is not None and old.get("fingerprint") == fingerprint_hash:
            log(f"{target}: up to date (same sources and options), reusing it")
            return target
        if not (force or rebuild_stale or old is None):
            raise InduceError(
                f"{target} exists but was built from other sources or options; pass --force to rebuild it"
                " or --name to choose another name"
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _make_build_dir(target.parent, target.name, _TMP_MARK)
    try:
        meta = build(tmp)
        meta["fingerprint"] = fingerprint_hash
        meta["format_version"] = FORMAT_VERSION
        meta["name"] = target.name
        (tmp / META_FILE).write_text(_dump_json(meta), encoding="utf-8", newline="\n")
        (tmp / OWNER_FILE).unlink()
        if target.exists() and not any(target.iterdir()):
            target.rmdir()
        if target.exists():
            old_dir = _make_build_dir(target.parent, target.name, _OLD_MARK)
            target.rename(old_dir / "corpus")
            tmp.rename(target)
            shutil.rmtree(old_dir, ignore_errors=True)
        else:
            tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _tree_corpus_builder(
    split_trees: Callable[[Progress], dict[str, list[nltk.Tree]]],
    source: dict,
    max_vocab: int,
    console: Optional[Console],
    profile: TreebankProfile = PTB,
    nopunct_of: Optional[dict[int, nltk.Tree]] = None,
) -> Callable[[Path], dict]:
    def build(folder: Path) -> dict:
        with _progress(console) as progress:
            trees = split_trees(progress)
            splits = {}
            for split in SPLITS:
                if split not in trees:
                    continue
                data = _process_trees(trees[split], progress, split, profile, nopunct_of)
                if not data.orig:
                    files = [record["path"] for record in source.get("files", {}).get(split, [])]
                    where = f" ({', '.join(files)})" if files else ""
                    raise InduceError(
                        f"split {split!r} is empty{where}: no tree has a word after the word-tag filter"
                    )
                for suffix, lines in (("orig", data.orig), ("gold", data.gold), ("nopunct", data.nopunct)):
                    _write_lines(folder / f"{split}.{suffix}.txt", lines)
                splits[split] = data
        vocab, lm_counts = _write_lm_corpus(folder, {s: d.tokens for s, d in splits.items()}, max_vocab)
        return {
            "conventions": KTB_CONVENTIONS if profile.keyaki else CONVENTIONS,
            "treebank": profile.describe(),
            "has_trees": True,
            "kind": "treebank",
            "source": source,
            "splits": {
                split: {
                    "trees_read": data.read,
                    "trees": len(data.orig),
                    "dropped_no_words": data.dropped,
                    "gold_words": data.gold_words,
                    "trace_leaves": data.traces,
                    **lm_counts[split],
                }
                for split, data in splits.items()
            },
            "vocab_size": len(vocab),
            "max_vocab": max_vocab,
        }

    return build


def _read_split_files(split_files: dict[str, list[Path]], progress: Progress,
                      profile: TreebankProfile = PTB) -> dict[str, list[nltk.Tree]]:
    trees: dict[str, list[nltk.Tree]] = {}
    for split, files in split_files.items():
        total = sum(path.stat().st_size for path in files)
        task = progress.add_task(f"reading {split}", total=total)
        done_bytes = 0
        split_trees: list[nltk.Tree] = []
        for path in files:
            size = path.stat().st_size

            def report(done: int, count: int, base=done_bytes, size=size, task=task) -> None:
                progress.update(task, completed=base + (size * done // max(count, 1)))

            file_trees = [located.tree for located in read_trees(path, progress=report)]
            check_tags(path, file_trees, profile)
            split_trees.extend(file_trees)
            done_bytes += size
        trees[split] = split_trees
    return trees


def _distinct_files(split: str, files, log: LogFn) -> list[Path]:
    """The files of one split, each once (under any path or link: its trees would be in the split twice); a
    line says which repeat was left out. (One file in two splits is kept: training on the dev trees is a
    choice some experiments make.)"""
    kept, repeats = distinct_paths([Path(p) for p in files])
    for repeat, first in repeats:
        log(f"{split} split: {repeat_note(repeat, first)}")
    return kept


def preprocess_tree_files(
    split_files: dict[str, list[Path]],
    out_dir: Path,
    name: str,
    source_kind: str = "files",
    max_vocab: int = DEFAULT_MAX_VOCAB,
    force: bool = False,
    allow_predicted_tags: bool = False,
    console: Optional[Console] = None,
    extra_source: Optional[dict] = None,
    rebuild_stale: bool = False,
    treebank: Optional[str] = None,
) -> Path:
    """Prepare ``out_dir/name`` from ``{split: [tree files]}`` (LDC, NLTK sample or explicit files), each
    tree prepared by the rules of ``treebank`` (:mod:`induce.trees.treebanks`; default ``ptb``)."""
    log = _logger(console)
    profile = get_profile(treebank)
    if "train" not in split_files:
        raise InduceError("no training trees: a train split is required")
    for split, files in split_files.items():
        if split not in SPLITS:
            raise InduceError(f"unknown split {split!r}")
        if not files:
            raise InduceError(f"split {split!r} has no input files")
        for path in files:
            if not Path(path).is_file():
                raise InputError("no such file", path)
            check_tags_are_gold(Path(path), allow_predicted_tags)
    split_files = {split: _distinct_files(split, split_files[split], log) for split in SPLITS if split in split_files}
    _check_not_replacing_inputs(Path(out_dir) / name, [p for files in split_files.values() for p in files])
    records = {split: [_file_record(path) for path in files] for split, files in split_files.items()}
    source = {"kind": source_kind, "files": records, **(extra_source or {})}
    fingerprint = {
        "format_version": FORMAT_VERSION,
        "kind": source_kind,
        "max_vocab": max_vocab,
        "sha256": {split: [r["sha256"] for r in recs] for split, recs in records.items()},
        **({} if profile.name == PTB.name else {"treebank": profile.name}),
        **({"keyaki_recipe": KEYAKI_RECIPE} if profile.keyaki else {}),
    }
    build = _tree_corpus_builder(lambda progress: _read_split_files(split_files, progress, profile), source, max_vocab,
                                 console, profile)
    return _prepare(Path(out_dir) / name, fingerprint, build, force, log, rebuild_stale)


def preprocess_synthetic(
    out_dir: Path,
    name: str = "synthetic",
    sizes: Optional[dict[str, int]] = None,
    seed: int = 0,
    max_vocab: int = DEFAULT_MAX_VOCAB,
    force: bool = False,
    console: Optional[Console] = None,
    rebuild_stale: bool = False,
) -> Path:
    """Prepare a corpus sampled from :mod:`induce.data.synthetic` (true trees known)."""
    log = _logger(console)
    sizes = dict(sizes or {"train": 2000, "valid": 200, "test": 200})
    for split, size in sizes.items():
        if size <= 0:
            raise InduceError(f"synthetic split {split!r} must have at least one sentence (got {size})")
    source = {"kind": "synthetic", "grammar_sha256": synthetic.grammar_sha256(), "seed": seed, "sizes": sizes}
    fingerprint = {"format_version": FORMAT_VERSION, "max_vocab": max_vocab, **source}
    build = _tree_corpus_builder(lambda progress: synthetic.sample_treebank(sizes, seed), source, max_vocab, console)
    return _prepare(Path(out_dir) / name, fingerprint, build, force, log, rebuild_stale)


def preprocess_lm_text(
    lm_dir: Path,
    out_dir: Path,
    name: str = "ptb-lm",
    max_vocab: int = DEFAULT_MAX_VOCAB,
    force: bool = False,
    console: Optional[Console] = None,
) -> Path:
    """Prepare an LM-only corpus from Mikolov text (``ptb.train.txt``, ``ptb.valid.txt`` [, ``ptb.test.txt``]).

    Tokens are taken as they are (already normalised); only ``<unk>`` outside the
    vocabulary is applied, so with ``max_vocab=10000`` Mikolov's files come out unchanged
    up to whitespace (no leading/trailing space).
    """
    log = _logger(console)
    lm_dir = Path(lm_dir)
    files = {split: lm_dir / f"ptb.{split}.txt" for split in SPLITS if (lm_dir / f"ptb.{split}.txt").is_file()}
    if "train" not in files:
        raise InputError("no ptb.train.txt here (expected ptb.train.txt, ptb.valid.txt [, ptb.test.txt])", lm_dir)
    _check_not_replacing_inputs(Path(out_dir) / name, list(files.values()))
    records = {split: [_file_record(path)] for split, path in files.items()}
    source = {"kind": "lm-text", "files": records}
    fingerprint = {
        "format_version": FORMAT_VERSION,
        "kind": "lm-text",
        "max_vocab": max_vocab,
        "sha256": {split: [r[0]["sha256"]] for split, r in records.items()},
    }

    def build(folder: Path) -> dict:
        split_tokens = {}
        for split, path in files.items():
            sentences = mikolov.read_lm_text(path)
            if not any(sentences):
                raise InputError("no text (the split is empty)", path)
            split_tokens[split] = sentences
        vocab, lm_counts = _write_lm_corpus(folder, split_tokens, max_vocab)
        return {
            "conventions": {"lm_text": "taken as is from Mikolov's files", "vocab": CONVENTIONS["vocab"]},
            "has_trees": False,
            "kind": "lm",
            "source": source,
            "splits": lm_counts,
            "vocab_size": len(vocab),
            "max_vocab": max_vocab,
        }

    return _prepare(Path(out_dir) / name, fingerprint, build, force, log)


def preprocess_keyaki(
    folder: Path,
    out_dir: Path,
    name: str = "ktb",
    max_vocab: int = DEFAULT_MAX_VOCAB,
    force: bool = False,
    console: Optional[Console] = None,
    profile: TreebankProfile = KTB,
) -> Path:
    """Prepare ``out_dir/name`` from a Keyaki Treebank folder (its ``treebank/*.psd``) split as Li et al.
    split it (:mod:`induce.data.keyaki`) under ``profile`` (``ktb`` or ``ktb-2020``); ``meta.json`` records the
    split's counts under ``source.split``."""
    from induce.data import keyaki

    log = _logger(console)
    files = keyaki.treebank_files(Path(folder))
    _check_not_replacing_inputs(Path(out_dir) / name, files)
    records = [_file_record(path) for path in files]
    fingerprint = {"format_version": FORMAT_VERSION, "kind": "keyaki", "max_vocab": max_vocab,
                   "sha256": [record["sha256"] for record in records], "treebank": profile.name,
                   "keyaki_recipe": KEYAKI_RECIPE}
    source = {"kind": "keyaki", "files": {"all": records}}

    nopunct_of: dict[int, nltk.Tree] = {}

    def split(progress: Progress) -> dict[str, list[nltk.Tree]]:
        task = progress.add_task("reading the Keyaki Treebank", total=len(files))
        trees, record = keyaki.split_trees(Path(folder), lambda done, total: progress.update(task, completed=done),
                                           profile=profile, nopunct_of=nopunct_of)
        source["split"] = record
        return trees

    build = _tree_corpus_builder(split, source, max_vocab, console, profile, nopunct_of)
    return _prepare(Path(out_dir) / name, fingerprint, build, force, log)
