"""Read access to a prepared corpus folder (the output of ``induce preprocess``).

Layout of ``corpora/<name>/`` (see ``corpora/README.md``)::

    meta.json            counts per split, source files + sha256, conventions, vocab size, version
    vocab.json           {"itos": [...], "unk": "<unk>", "eos": "<eos>"}
    <split>.orig.txt     original trees, one per line (traces, function tags kept)    [treebank corpora]
    <split>.gold.txt     clean_tree(keep_punct=True): no traces / function tags       [treebank corpora]
    <split>.nopunct.txt  clean_tree(keep_punct=False): word-tag filter applied        [treebank corpora]
    <split>.txt          LM text, one sentence per line; line i = tree i

``split`` is one of ``train``, ``valid``, ``test``; a split is absent when its source was.
Line ``i`` of every file of a split is the same sentence, and the tokens of line ``i`` of
``<split>.txt`` are the (normalised) leaves of line ``i`` of ``<split>.nopunct.txt``.
"""
from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import nltk

from induce.errors import InduceError, InputError
from induce.files import os_error_reason
from induce.trees.brackets import read_trees

SPLITS = ("train", "valid", "test")
UNK = "<unk>"
EOS = "<eos>"
META_FILE = "meta.json"
VOCAB_FILE = "vocab.json"


class Vocab:
    """Word <-> id mapping. ``itos[0] == "<eos>"``, ``itos[1] == "<unk>"``, then words by frequency."""

    def __init__(self, itos: Sequence[str], unk: str = UNK, eos: str = EOS):
        self.itos: list[str] = list(itos)
        self.stoi: dict[str, int] = {word: index for index, word in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise InduceError("vocabulary has duplicate entries")
        if unk not in self.stoi or eos not in self.stoi:
            raise InduceError(f"vocabulary lacks {unk!r} or {eos!r}")
        self.unk_id: int = self.stoi[unk]
        self.eos_id: int = self.stoi[eos]

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, words: Iterable[str], add_eos: bool = False) -> list[int]:
        """Ids of ``words`` (unknown words -> ``unk_id``); ``add_eos`` appends ``eos_id``."""
        ids = [self.stoi.get(word, self.unk_id) for word in words]
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.itos[index] for index in ids]

    def to_json(self) -> dict:
        return {"eos": self.itos[self.eos_id], "itos": self.itos, "unk": self.itos[self.unk_id]}

    @classmethod
    def from_json(cls, obj: dict) -> Vocab:
        return cls(obj["itos"], unk=obj.get("unk", UNK), eos=obj.get("eos", EOS))


class PreparedCorpus:
    """A prepared corpus folder. Files are read lazily and cached on the object."""

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)
        meta_path = self.path / META_FILE
        if not meta_path.is_file():
            raise InduceError(
                f"{self.path}: not a prepared corpus (no {META_FILE}); run `induce preprocess` first"
            )
        try:
            self.meta: dict = json.loads(meta_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise InputError(f"corrupt {META_FILE}: {err}", meta_path) from None
        self.name: str = self.meta.get("name", self.path.name)
        self._cache: dict[tuple[str, str], list] = {}

    def __repr__(self) -> str:
        return f"PreparedCorpus({str(self.path)!r}, splits={self.splits})"

    @cached_property
    def vocab(self) -> Vocab:
        """The vocabulary of ``vocab.json``; a missing or damaged file, or one whose size is not the
        ``vocab_size`` of ``meta.json``, is an :class:`InputError` saying how to rebuild the corpus."""
        path = self.path / VOCAB_FILE
        rebuild = self._rebuild_hint()
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"missing: the corpus has no {VOCAB_FILE}; {rebuild}", path) from None
        except OSError as err:
            raise InputError(f"cannot read: {os_error_reason(err)}", path) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise InputError(f"corrupt {VOCAB_FILE} ({err}); {rebuild}", path) from None
        itos = obj.get("itos") if isinstance(obj, dict) else None
        if not isinstance(itos, list) or not all(isinstance(word, str) for word in itos):
            raise InputError(f"corrupt {VOCAB_FILE}: expected an object whose \"itos\" is a list of words; {rebuild}",
                             path)
        try:
            vocab = Vocab.from_json(obj)
        except InduceError as err:
            raise InputError(f"corrupt {VOCAB_FILE}: {err}; {rebuild}", path) from None
        expected = self.meta.get("vocab_size")
        if isinstance(expected, int) and expected != len(vocab):
            raise InputError(f"{len(vocab)} words, but {META_FILE} says {expected}: the file was changed or cut "
                             f"short; {rebuild}", path)
        return vocab

    def _rebuild_hint(self) -> str:
        return "rebuild the corpus (`induce preprocess --force` with the options that made it)"

    @property
    def splits(self) -> list[str]:
        """The splits present, in the order train, valid, test."""
        return [split for split in SPLITS if (self.path / f"{split}.txt").is_file()]

    @property
    def source_kind(self) -> Optional[str]:
        """What the corpus was made from (``ldc``, ``wsj-files``, ``nltk-sample``, ``synthetic``, ``files``,
        ``lm-text``...), as ``meta.json`` records it."""
        source = self.meta.get("source")
        return source.get("kind") if isinstance(source, dict) else None

    @property
    def has_trees(self) -> bool:
        return bool(self.meta.get("has_trees")) and all(
            (self.path / f"{split}.gold.txt").is_file() for split in self.splits
        )

    def _file(self, split: str, suffix: str) -> Path:
        if split not in SPLITS:
            raise InduceError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        path = self.path / f"{split}{suffix}"
        if not path.is_file():
            present = ", ".join(self.splits) or "none"
            raise InduceError(f"{self.path}: split {split!r} has no {path.name} (splits present: {present})")
        return path

    def lm_sentences(self, split: str) -> list[list[str]]:
        """Normalised LM tokens per sentence (``<unk>`` substituted, no ``<eos>``).

        The counts are checked against ``meta.json`` (``lm_sentences``, ``lm_tokens`` of the split):
        a file cut short (a full disk, an interrupted copy) or edited is an :class:`InputError`
        rather than a model silently trained on part of the data.
        """
        key = (split, ".txt")
        if key not in self._cache:
            path = self._file(split, ".txt")
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as err:
                raise InputError(f"cannot read: {os_error_reason(err)}", path) from None
            except UnicodeDecodeError as err:
                raise InputError(f"not valid UTF-8 (file offset {err.start}); {self._rebuild_hint()}", path) from None
            sentences = [line.split() for line in text.splitlines()]
            self._check_counts(path, split, len(sentences), sum(len(s) for s in sentences))
            self._cache[key] = sentences
        return self._cache[key]

    def _check_counts(self, path: Path, split: str, n_sentences: int, n_tokens: int) -> None:
        expected = self.meta.get("splits", {}).get(split, {})
        want_sentences, want_tokens = expected.get("lm_sentences"), expected.get("lm_tokens")
        if (want_sentences, want_tokens) == (None, None):
            return  # a corpus written without the counts: nothing to compare with
        if (want_sentences is not None and n_sentences != want_sentences) or (
                want_tokens is not None and n_tokens != want_tokens):
            said = ", ".join(f"{n:,} {what}" for n, what in ((want_sentences, "sentences"), (want_tokens, "tokens"))
                             if n is not None)
            raise InputError(f"{n_sentences:,} sentences, {n_tokens:,} tokens, but {META_FILE} says {said}: the "
                             f"file was cut short or changed; {self._rebuild_hint()}", path)

    def _trees(self, split: str, suffix: str) -> list[nltk.Tree]:
        key = (split, suffix)
        if key not in self._cache:
            self._cache[key] = [located.tree for located in read_trees(self._file(split, suffix))]
        return self._cache[key]

    @property
    def treebank(self) -> str:
        """The treebank profile the corpus was prepared with (``meta.json``; :mod:`induce.trees.treebanks`)."""
        return (self.meta.get("treebank") or {}).get("name", "ptb")

    def gold_trees(self, split: str) -> list[nltk.Tree]:
        """Cleaned gold trees (no traces / function tags), punctuation kept, root label ``ROOT``; each says
        which treebank's tags it carries when that is not the PTB's (:func:`induce.trees.treebanks.mark`),
        so that whoever evaluates against them finds its words."""
        trees = self._trees(split, ".gold.txt")
        if self.treebank != "ptb":
            from induce.trees.treebanks import mark

            for tree in trees:
                mark(tree, self.treebank)
        return trees

    def nopunct_trees(self, split: str) -> list[nltk.Tree]:
        """Gold trees after the word-tag filter; leaves are the original (un-normalised) words."""
        return self._trees(split, ".nopunct.txt")

    def orig_trees(self, split: str) -> list[nltk.Tree]:
        """The original trees (traces, function tags, empty root label ``''``)."""
        return self._trees(split, ".orig.txt")
