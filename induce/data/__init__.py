"""Data pipeline: prepared corpora, data location, Mikolov LM conventions, synthetic treebank.

Main entry points: :class:`induce.data.corpus.PreparedCorpus`,
:func:`induce.data.locate.default_corpus`, :mod:`induce.data.preprocess`.
"""
from induce.data.corpus import PreparedCorpus, Vocab

__all__ = ["PreparedCorpus", "Vocab"]
