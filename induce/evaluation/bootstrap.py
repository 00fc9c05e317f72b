"""Bootstrap over sentences: confidence intervals of an F1, and the paired test of two systems
(``induce eval --compare A B``).

Each resample draws as many sentences as were scored, with replacement (numpy's ``default_rng(seed)``),
and recomputes the figure from the resampled sentences exactly as the convention computes it: a corpus
figure from the summed counts, a sentence figure as the mean of the per-sentence values.

* **Interval**: the 95% percentile interval by *symmetric ranks*: with the ``R`` resampled values sorted
  and ``k = ceil(0.025 R)``, the ``k``-th smallest and the ``k``-th largest (``R = 1000``: the 25th and the
  976th). No interpolation: with few distinct values an interpolated bound would be a value no resample
  has. Counting ``k`` from both ends makes the interval of ``B - A`` exactly the negated interval of
  ``A - B`` (the nearest-rank percentiles, ranks ``ceil(0.025 R)`` and ``ceil(0.975 R)``, leave one value
  more above the interval than below it, so they are not).
* **Paired test** (Berg-Kirkpatrick et al. 2012): both systems are scored on the *same* resampled
  sentences; ``delta* = F1_A - F1_B`` on each. The one-sided p-value tests the direction of the observed
  difference ``delta``: for ``delta > 0`` the alternative is ``A > B`` and ``p`` is the share of resamples
  with ``delta* >= 2 delta``; for ``delta < 0`` it is ``A < B`` and ``p`` the share with
  ``delta* <= 2 delta``: how often a difference at least as large again arises by chance when the true
  difference is the observed one (ties count against the alternative; the paper's pseudo-code counts
  only ``>``, which differs on ties alone). Equal figures (``delta = 0``, a file compared with itself
  among them) are no evidence either way: ``p = 1``, no alternative. Swapping A and B negates ``delta``
  and its interval exactly and leaves ``p`` as it is.
* ``exhaustive=True`` enumerates all ``n ** n`` resamples (each equally likely) instead of drawing:
  the exact bootstrap distribution, for tests on hand-worked examples (``n <= 7``).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from induce.errors import InduceError

#: Resamples unless the command says otherwise.
DEFAULT_RESAMPLES = 1000
LEVEL = 0.95
#: How the intervals are read off the resamples (what the JSON outputs say).
INTERVAL = "95% percentile bootstrap, symmetric ranks"
METHOD = ("paired bootstrap over sentences (Berg-Kirkpatrick et al. 2012); one-sided p of the observed "
          "direction: the share of resamples whose difference is at least twice the observed one; " + INTERVAL)


def resample_indices(n: int, resamples: int = DEFAULT_RESAMPLES, seed: int = 0, exhaustive: bool = False) -> np.ndarray:
    """``[R, n]`` sentence indices: ``resamples`` seeded draws with replacement, or all ``n ** n``."""
    if n == 0:
        raise InduceError("no sentence to resample: the bootstrap needs at least one scored sentence")
    if exhaustive:
        if n > 7:
            raise ValueError("exhaustive bootstrap: n ** n resamples, only for n <= 7")
        return np.array(list(itertools.product(range(n), repeat=n)), dtype=np.int64)
    if resamples < 1:
        raise InduceError(f"--resamples {resamples}: give a number >= 1")
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def _arrays(sentences) -> dict:
    return {key: np.array([getattr(s, key) for s in sentences], dtype=np.float64)
            for key in ("match", "n_pred", "n_gold", "precision", "recall", "f1")}


def figure_samples(sentences: Sequence, key: str, corpus_formula: str, indices: np.ndarray) -> np.ndarray:
    """``[R]`` values (percent) of figure ``key`` (``corpus_f1``, ``corpus_precision``, ``corpus_recall``,
    ``sentence_f1``, ``sentence_precision``, ``sentence_recall``) on each resample. ``sentences``: records
    with ``match``, ``n_pred``, ``n_gold``, ``precision``, ``recall``, ``f1`` (0-1)."""
    arrays = _arrays(sentences)
    kind, name = key.split("_", 1)
    if kind == "sentence":
        return 100 * arrays[{"f1": "f1", "precision": "precision", "recall": "recall"}[name]][indices].mean(axis=1)
    match, n_pred, n_gold = (arrays[k][indices].sum(axis=1) for k in ("match", "n_pred", "n_gold"))
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(n_pred > 0, match / n_pred, 0.0)
        recall = np.where(n_gold > 0, match / n_gold, 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    if corpus_formula == "li":  # Li et al.: an empty gold scores 100 with an empty prediction, else 0
        empty_gold = n_gold == 0
        f1 = np.where(empty_gold, (n_pred == 0).astype(float), np.where(match == 0, 0.0, f1))
        precision = np.where(empty_gold, f1, precision)
        recall = np.where(empty_gold, f1, recall)
    return 100 * {"f1": f1, "precision": precision, "recall": recall}[name]


def percentile_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The ``level`` interval of ``values`` by symmetric ranks (module docstring): the ``k``-th smallest and
    the ``k``-th largest value, ``k = ceil((1 - level) / 2 * R)`` (at least 1)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    count = len(ordered)
    # round before ceil: 0.025 * 200 is 5.000000000000001 in floating point
    rank = max(math.ceil(round((1 - level) / 2 * count, 9)), 1)
    return float(ordered[rank - 1]), float(ordered[count - rank])


def confidence_interval(sentences: Sequence, key: str, corpus_formula: str = "plain",
                        resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> list:
    """``[low, high]``: the 95% bootstrap interval of figure ``key`` (percent)."""
    indices = resample_indices(len(sentences), resamples, seed)
    return list(percentile_interval(figure_samples(sentences, key, corpus_formula, indices)))


def paired_bootstrap(sentences_a: Sequence, sentences_b: Sequence, key: str = "corpus_f1",
                     corpus_formula: str = "plain", resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                     exhaustive: bool = False) -> dict:
    """The paired bootstrap of ``A - B`` on figure ``key``; ``sentences_a[i]`` and ``sentences_b[i]`` are
    the same sentence. Returns ``delta``, ``low``, ``high`` (the 95% interval of ``delta*``), ``p_value``
    and ``alternative`` (the direction it tests: ``"A > B"``, ``"A < B"``, or None when ``delta`` is 0 and
    ``p_value`` 1), ``resamples``, ``a`` and ``b`` (the two figures on all sentences)."""
    if len(sentences_a) != len(sentences_b):
        raise InduceError(f"the paired bootstrap needs the same sentences: {len(sentences_a)} against "
                          f"{len(sentences_b)}")
    everything = np.arange(len(sentences_a))[None, :]
    a = float(figure_samples(sentences_a, key, corpus_formula, everything)[0])
    b = float(figure_samples(sentences_b, key, corpus_formula, everything)[0])
    delta = a - b
    indices = resample_indices(len(sentences_a), resamples, seed, exhaustive)
    deltas = figure_samples(sentences_a, key, corpus_formula, indices) - figure_samples(sentences_b, key,
                                                                                          corpus_formula, indices)
    tolerance = 1e-9  # float noise must decide neither "equal" nor "at least as large"
    if abs(delta) <= tolerance:
        p_value, alternative = 1.0, None
    elif delta > 0:
        p_value, alternative = float(np.mean(deltas >= 2 * delta - tolerance)), "A > B"
    else:
        p_value, alternative = float(np.mean(deltas <= 2 * delta + tolerance)), "A < B"
    low, high = percentile_interval(deltas)
    return {"a": a, "b": b, "delta": delta, "low": low, "high": high, "p_value": p_value,
            "alternative": alternative, "resamples": len(indices), "figure": key, "method": METHOD}


def result_intervals(result, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict:
    """95% intervals of the corpus and sentence F1 of an :class:`~induce.evaluation.engine.Result`
    (what ``induce eval --json`` carries as ``ci``)."""
    intervals = {key: confidence_interval(result.sentences, key, resamples=resamples, seed=seed)
                 for key in ("corpus_f1", "sentence_f1")}
    return {**intervals, "resamples": resamples, "seed": seed, "interval": INTERVAL}


def mean_interval(sentence_sets: Sequence[Sequence], key: str, corpus_formula: str = "plain",
                  resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> list:
    """``[low, high]``: the 95% bootstrap interval of the mean of figure ``key`` over several runs scored on
    the same sentences (``sentence_sets[r][i]`` is run ``r``'s record of sentence ``i``, records with an
    ``index``): each resample draws sentences once for every run (paired), scores each run on it and
    averages, so that the interval is of the mean over these runs on a new sample of sentences, not of the
    spread between runs. Sentences some run lacks are left out."""
    if not sentence_sets:
        raise InduceError("no run to average: the interval of a mean needs at least one scored run")
    common = set.intersection(*({s.index for s in records} for records in sentence_sets))
    runs = [[s for s in records if s.index in common] for records in sentence_sets]
    for records in runs:
        records.sort(key=lambda s: s.index)
    indices = resample_indices(len(common), resamples, seed)
    means = np.mean([figure_samples(records, key, corpus_formula, indices) for records in runs], axis=0)
    return list(percentile_interval(means))
