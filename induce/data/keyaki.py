"""The Keyaki Treebank read and split as Li et al. (2020) do (i-lijun/UnsupConstParseEval ``afa5176``
``preprocess.py``, ``KTBHelper``), for ``induce preprocess --treebank ktb``.

* **Reading** (``keyaki_treebank_iterator``): the ``.psd`` files of the treebank folder in name order; in
  each, the lines up to a line that is exactly ``"\\n"`` make one tree. A file's last tree, which no blank
  line follows, is never read: the files of Keyaki 1.1 all end with ``)\\n``, so each file's last tree is
  left out, as in Li et al.'s data (counted in the manifest, ``last_trees_left_out``). A file whose brackets
  do not balance (a download cut short in a tree, a stray ``)``), with text outside its trees, or whose POS tags
  are not Keyaki's is refused, naming it and the line: Li et al.'s reader would silently leave a cut tree out
  as a last tree, and the split would shift.
* **Split** (``train_test_split``): the positions of the trees with a word left after punctuation removal
  (:func:`induce.trees.treebanks.keyaki_tree`), shuffled after Python's ``random.seed(0)``; ``n = int(0.1 *
  count)``; the first ``n`` shuffled positions are what they call ``test``, the next ``n`` their ``dev``
  (the function returns ``train, test, dev`` into ``self.train, self.dev, self.test``: the names are
  swapped once, which this follows), the rest ``train``; each split keeps the treebank's order.
* **Sentences** of a split: those positions, prepared with punctuation (``gold``) and without
  (``nopunct``). Li et al. then keep the train and dev sentences of at most 10 or 40 tokens (their
  ``len10`` / ``len40`` data; test keeps every length); the prepared corpus keeps every length and records
  how many sentences of each split those limits keep (``li_len10``, ``li_len40``: words without punctuation).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import nltk

from induce.errors import InputError
from induce.files import os_error_reason
from induce.trees.brackets import bracket_spans, start_lines_of, tree_from_text
from induce.trees.treebanks import KTB, TreebankProfile, keyaki_tree, tag_census, tag_refusal

#: The seed and shares of Li et al.'s split.
SPLIT_SEED = 0
HELD_OUT_SHARE = 0.1


@dataclass
class KeyakiBlocks:
    """The trees of a Keyaki folder as Li et al. read them: ``trees[i]`` (with ``(path, line)`` in
    ``where[i]``), and the trees left out because no blank line follows them (``left_out``, per file; the
    trees themselves in ``unread``, each ``(tree, path, line)``, to be checked as the others are)."""

    trees: list = field(default_factory=list)
    where: list = field(default_factory=list)
    files: list = field(default_factory=list)
    left_out: int = 0
    unread: list = field(default_factory=list)


def treebank_files(folder: Path) -> list[Path]:
    """The ``.psd`` files of a Keyaki folder (the folder itself, or its ``treebank/``) in name order."""
    folder = Path(folder)
    if (folder / "treebank").is_dir() and not any(folder.glob("*.psd")):
        folder = folder / "treebank"
    files = sorted(path for path in folder.iterdir() if path.name.endswith(".psd")) if folder.is_dir() else []
    if not files:
        raise InputError("no Keyaki Treebank .psd files here (expected the treebank's treebank/*.psd)", folder)
    return files


def read_blocks(files: list[Path], progress: Optional[Callable[[int, int], None]] = None) -> KeyakiBlocks:
    """Every tree that Li et al.'s reader reads from ``files`` (module docstring), in order. A file whose
    brackets do not balance (cut short in a tree, a ``)`` too many) or with text outside its trees is refused
    first, naming the line (:func:`induce.trees.brackets.bracket_spans`): Li et al.'s reader would leave a cut
    last tree out as it leaves every file's last tree out, and the split would shift with nothing said."""
    blocks = KeyakiBlocks(files=list(files))
    for number, path in enumerate(files):
        try:
            data = path.read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            reason = os_error_reason(err) if isinstance(err, OSError) else "not valid UTF-8"
            raise InputError(f"cannot read: {reason}", path) from None
        spans = bracket_spans(data, str(path))
        current, start = "", None
        lines = [line + "\n" for line in text.split("\n")]  # as Python iterates a text file: at "\n" only
        lines[-1] = lines[-1][:-1]
        for line_number, line in enumerate(lines, start=1):
            if line == "\n" and current:
                blocks.trees.append(tree_from_text(current, str(path), start))
                blocks.where.append((str(path), start))
                current, start = "", None
            else:
                current += line
                if start is None and line.strip():
                    start = line_number
        if current.strip():
            blocks.left_out += 1
            for (begin, end), line in zip(spans, start_lines_of(data, spans)):
                if line >= start:
                    blocks.unread.append((tree_from_text(data[begin:end].decode("utf-8"), str(path), line),
                                          str(path), line))
        if progress is not None:
            progress(number + 1, len(files))
    return blocks


def check_keyaki(blocks: KeyakiBlocks, profile: TreebankProfile = KTB) -> None:
    """Refuse files whose trees are not the Keyaki Treebank's: a file whose POS tags are not Keyaki's
    (:func:`check_keyaki_tags`, its last tree included), and a tree without the ``ID`` node that each of its
    trees carries."""
    by_file: dict[str, list] = {str(path): [] for path in blocks.files}
    for tree, (path, _) in zip(blocks.trees, blocks.where):
        by_file[path].append(tree)
    for tree, path, _ in blocks.unread:
        by_file[path].append(tree)
    for path, trees in by_file.items():
        check_keyaki_tags(path, trees, profile)
    for tree, (path, line) in zip(blocks.trees, blocks.where):
        if not has_id_node(tree):
            raise InputError("not a Keyaki Treebank tree: no (ID ...) node (--treebank ktb reads the treebank's "
                             "treebank/*.psd files as released)", path, line)


def has_id_node(tree: nltk.Tree) -> bool:
    """Whether some node of ``tree`` is labelled ``ID`` (walked without recursion)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if node.label() == "ID":
            return True
        stack.extend(child for child in node if isinstance(child, nltk.Tree))
    return False


def check_keyaki_tags(path, trees: list[nltk.Tree], profile: TreebankProfile = KTB) -> None:
    """Refuse a file of ``trees`` whose POS tags are not the Keyaki Treebank's (Penn Treebank trees named
    ``.psd``, say): an :class:`InputError` naming ``path``, the tags its trees carry instead and whether any has
    the ``ID`` node of a Keyaki tree (:func:`induce.trees.treebanks.tag_refusal`)."""
    census = tag_census(profile)
    for tree in trees:
        census.add(tree)
    reason = tag_refusal(census)
    if reason is not None:
        ids = "" if any(has_id_node(tree) for tree in trees) else ", and there is no (ID ...) node in any tree"
        raise InputError(f"no tree here looks like a Keyaki Treebank tree: {reason}{ids} (--treebank "
                         f"{profile.name} reads the treebank's treebank/*.psd files as released)", path)


def li_split(kept: list[int]) -> dict[str, list[int]]:
    """``{"train", "valid", "test"}``: positions (ascending) of Li et al.'s split of the positions ``kept``
    (module docstring)."""
    indices = list(kept)
    count = int(len(indices) * HELD_OUT_SHARE)
    random.Random(SPLIT_SEED).shuffle(indices)
    first, second = set(indices[:count]), set(indices[count:2 * count])
    rest = set(indices[2 * count:])
    return {"train": sorted(rest), "valid": sorted(second), "test": sorted(first)}


def split_trees(folder: Path, progress=None, profile: TreebankProfile = KTB,
                nopunct_of: Optional[dict[int, nltk.Tree]] = None) -> tuple[dict[str, list[nltk.Tree]], dict]:
    """``({split: [raw trees]}, record)``: Li et al.'s split of the Keyaki folder under ``profile`` (which
    trees keep a word, hence what is shuffled), and what the manifest records of it (files and their hashes
    are recorded by the caller). The trees without punctuation it makes to choose them go into ``nopunct_of``
    (by ``id`` of the tree read) when given, so that the corpus's files need not make them again."""
    files = treebank_files(folder)
    blocks = read_blocks(files, progress)
    check_keyaki(blocks, profile)
    lengths = {}
    for i, tree in enumerate(blocks.trees):
        nopunct = keyaki_tree(tree, keep_punct=False, profile=profile)
        if nopunct is not None:
            lengths[i] = len(nopunct.leaves())
            if nopunct_of is not None:
                nopunct_of[id(tree)] = nopunct
    kept = sorted(lengths)
    positions = li_split(kept)
    record = {
        "recipe": f"Li et al. 2020: {profile.reference}",
        "files": len(files), "trees_read": len(blocks.trees), "last_trees_left_out": blocks.left_out,
        "no_word_without_punctuation": len(blocks.trees) - len(kept), "seed": SPLIT_SEED,
        "shuffled": len(kept), "held_out_each": int(len(kept) * HELD_OUT_SHARE),
        "test": "the first 10% of the shuffled positions (their train_test_split's 'dev', returned as test)",
        "valid": "the next 10% (their 'test', returned as dev)", "train": "the rest",
        "profile": profile.name,
        "li_len10": {split: sum(lengths[i] <= 10 for i in chosen) for split, chosen in positions.items()},
        "li_len40": {split: sum(lengths[i] <= 40 for i in chosen) for split, chosen in positions.items()},
    }
    return {split: [blocks.trees[i] for i in positions[split]] for split in ("train", "valid", "test")}, record
