"""Assessing parsers against gold trees with a trained run or a fresh model: the sources of trees a command reads
(``sources``: prediction files, runs, baselines), what ``induce eval``, ``induce compare`` and ``induce
agreement`` do with their options (``run_eval``), the reports over sources (``hub``: conventions table,
agreement, comparison, ensembles), the leaderboard (``leaderboard``) and untrained models (``untrained``).
These drive :mod:`induce.inference` (loading, parsing) and score with the metric core in
:mod:`induce.evaluation`, which sits below inference."""
