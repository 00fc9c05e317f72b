"""Assessing parsers against gold trees with a trained run or a fresh model: what ``induce eval`` does with
its options (``run_eval``), its conventions / agreement / comparison / ensemble commands (``hub``) and
untrained models (``untrained``). These drive :mod:`induce.inference` (loading, parsing, scoring) and use the
metric core in :mod:`induce.evaluation`, which sits below inference."""
