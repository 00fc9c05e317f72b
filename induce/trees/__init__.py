"""Trees: reading and writing them, their spans, and the decoders that build them from a model's numbers.

* :mod:`.brackets` — bracketed (Penn Treebank style) tree files: reading with line numbers, writing
  one tree per line (with :func:`induce.files.write_output`);
* :mod:`.ptb` — the Penn Treebank's conventions: which leaves are words (the word-tag filter), traces,
  function tags, cleaning a treebank tree;
* :mod:`.nodes` — :class:`~induce.trees.nodes.Node`, the one tree of word positions that the decoders,
  baselines, evaluator and figures share; its spans, the one binary-tree builder, the one ``to_nltk``;
* :mod:`.kinds` — parser kinds (what a model's ``parse_structure`` returns, how it is drawn) and the
  decoders registered by kind;
* :mod:`.decoders` — syntactic distances or span scores -> binary trees (the built-in decoders), and a
  model batch parsed to trees.

**Spans** are ``(start, end)`` word positions with ``end`` *exclusive* (Python's slices): the span
``(0, 2)`` covers the first two words. Every tree and span helper of the package uses this convention.
A model's span *scores* are indexed differently (by span end and length, ``s[t, k]`` = the words
``t-k .. t``); :mod:`.decoders` converts at its boundary.
"""
