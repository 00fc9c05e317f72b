"""Sentences the report says about its results, generated from the results dict (never written by
hand): the questions a reader asks of such tables, each answered only as far as the figures support it.

* :func:`headline` — which learned unsupervised parser parses best, against the best trivial baseline
  (controls, e.g. PaLM-RB, and models trained with gold trees, e.g. PaLM-S, are named apart);
* :func:`below_baselines` — a model whose F1 is below a trivial baseline, or below its own untrained
  initialisation on the same sentences, with its branching (:func:`branching_direction`) next to the
  paper's finding (PaLM Table 4) or the gold trees';
* :func:`seed_outliers` — a seed whose F1 or perplexity is far from the other seeds' (the variance
  then comes from one odd init), with the mean without it;
* :func:`falling_curves` — a run whose dev F1 on the monitor set peaked early and then fell (peak and last
  evaluation), with the checkpoint the figures come from;
* :func:`selection_gaps` — a run whose selected checkpoint parses the monitor set far below its best
  evaluation, while the curve did not fall (the selection criterion and parsing disagree).

Every function takes the results dict of :func:`induce.reproduce.collect_results` (the fields it
reads are named in its docstring) and returns a list of Markdown sentences (empty: nothing to say).
"""
from __future__ import annotations

import math
import statistics
from typing import Optional

from induce.report.names import display, results_split_label

#: F1 points by which a model must fall short of a baseline to be called "below" it.
BELOW_MARGIN = 0.5
#: A seed is an outlier when its distance to the median of all seeds exceeds both this many points
#: (F1) and OUTLIER_RATIO times the largest distance of any other seed to that median.
OUTLIER_MIN_F1 = 5.0
OUTLIER_RATIO = 3.0
#: The same for perplexity, relative: distance / median.
OUTLIER_MIN_PPL_SHARE = 0.15
#: Dev F1 points between the peak and the last epoch for a curve to count as falling.
FALL_MIN = 2.0
#: The trivial baselines, in the order they are named.
BASELINE_ORDER = ("left", "random", "balanced", "right")
#: A tree set is called mostly left- (right-) branching when that direction makes at least DIRECTION_MIN_PCT
#: of its splits (of spans longer than 2 words) and at least DIRECTION_RATIO times the other direction's.
DIRECTION_MIN_PCT = 40.0
DIRECTION_RATIO = 2.0


def stat_mean(stat) -> Optional[float]:
    """A summary's figure: the mean of a ``{"mean", "std", "n"}`` statistic or the plain value; None unless finite."""
    if isinstance(stat, dict):
        stat = stat.get("mean")
    if isinstance(stat, (int, float)) and math.isfinite(stat):
        return float(stat)
    return None


def join_words(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _baseline_f1(results: dict, kind: str, subset: str) -> Optional[float]:
    try:
        return float(results["baselines"][kind]["scores"][subset]["sentence_f1"])
    except (KeyError, TypeError):
        return None


def branching_direction(left: float, right: float) -> Optional[str]:
    """``"left"`` / ``"right"`` when that direction makes at least :data:`DIRECTION_MIN_PCT` % of the splits and
    :data:`DIRECTION_RATIO` times the other's, else None (no dominant direction: 43% left / 31% right is not
    "left-branching")."""
    for name, ours, other in (("left", left, right), ("right", right, left)):
        if ours >= DIRECTION_MIN_PCT and ours >= DIRECTION_RATIO * other:
            return name
    return None


def direction_text(direction: Optional[str]) -> str:
    return f"mostly {direction}-branching" if direction else "no dominant direction"


def _traits(results: dict, model: str) -> dict:
    return results["models"][model].get("traits") or {}


def headline(results: dict, subset: str = "wsj40") -> list[str]:
    """Best learned unsupervised parser by mean sentence F1 on ``subset`` against the best trivial baseline; the
    controls (``traits.control``: trees that do not depend on what the model learns), the models trained with
    gold trees (``traits.supervised``) and those with a diverged seed are named apart, never as the best parser.
    Reads ``models_order``, ``models[m].summary.sentence_f1_<subset>``, ``.traits``, ``.diverged_seeds``,
    ``baselines``, ``split``, ``corpus``."""
    scored = [(m, stat_mean(results["models"][m]["summary"].get(f"sentence_f1_{subset}")))
              for m in results["models_order"]]
    scored = [(m, f1) for m, f1 in scored if f1 is not None]
    def diverged(model):
        return bool(results["models"][model].get("diverged_seeds"))

    learned = [(m, f1) for m, f1 in scored if not (_traits(results, m).get("control")
                                                    or _traits(results, m).get("supervised") or diverged(m))]
    apart = [(m, f1) for m, f1 in scored if (m, f1) not in learned]
    base = [(k, _baseline_f1(results, k, subset)) for k in BASELINE_ORDER]
    base = [(k, f1) for k, f1 in base if f1 is not None]
    if not scored or not base:
        return []
    label = subset.upper() if subset.startswith("wsj") else subset
    where = results_split_label(results)
    kind, kind_f1 = max(base, key=lambda item: item[1])
    if learned:
        best, best_f1 = max(learned, key=lambda item: item[1])
        relation = ("above" if best_f1 > kind_f1 + BELOW_MARGIN else "below" if best_f1 < kind_f1 - BELOW_MARGIN
                    else "level with")
        sentence = (f"The best learned unsupervised parser here is {display(best)} at {best_f1:.1f} {label} F1 on "
                    f"{where}, {relation} the best trivial baseline, {display(kind)} trees ({kind_f1:.1f}).")
    else:
        sentence = f"No learned unsupervised parser has {label} figures on {where} here."
    if apart:
        def why(model):
            if diverged(model):
                return "a seed diverged: its figures mean nothing"
            return ("a control: its trees do not depend on what it learns" if _traits(results, model).get("control")
                    else "trained with gold trees")

        sentence += (" Not counted as learned unsupervised parsers: "
                     + "; ".join(f"{display(m)} at {f1:.1f} ({why(m)})" for m, f1 in apart) + ".")
    return [sentence]


def below_baselines(results: dict, subset: str = "wsj40") -> list[str]:
    """Models whose mean sentence F1 on ``subset`` is below a trivial baseline's (the same sentences), or, on
    WSJ40, below their untrained initialisation's on the untrained models' own sentences (``random_init[m]``
    against ``summary.init_sentences_sentence_f1``: never two different sets of sentences); each with its % left /
    right splits on WSJ40, their direction (:func:`branching_direction`) and what PaLM Table 4
    (``published.table4``) or the gold trees show. Reads ``models[m].summary``, ``baselines``, ``random_init``,
    ``gold.wsj40``, ``published``."""
    out = []
    table4 = (results.get("published") or {}).get("table4") or {}
    gold = (results.get("gold") or {}).get("wsj40")
    for model in results["models_order"]:
        summary = results["models"][model]["summary"]
        f1 = stat_mean(summary.get(f"sentence_f1_{subset}"))
        if f1 is None:
            continue
        below = []
        for kind in BASELINE_ORDER:
            base = _baseline_f1(results, kind, subset)
            if base is not None and f1 < base - BELOW_MARGIN:
                below.append(f"{display(kind)} ({base:.1f})")
        init = (results.get("random_init") or {}).get(model)
        init_f1 = stat_mean(init.get("sentence_f1")) if init and subset == "wsj40" else None
        same_f1 = stat_mean(summary.get("init_sentences_sentence_f1"))
        below_init = init_f1 is not None and same_f1 is not None and same_f1 < init_f1 - BELOW_MARGIN
        if not below and not below_init:
            continue
        label = subset.upper() if subset.startswith("wsj") else subset
        parts = []
        if below:
            parts.append(f"below {join_words(below)}")
        sentence = f"**{display(model)} at {f1:.1f} {label} F1 is {' and '.join(parts)}.**" if below else ""
        if below_init:
            sentence += ((" " if sentence else "") + f"**On the {init['n_sentences']:,} sentences its untrained "
                         f"initialisation parses, {display(model)} scores {same_f1:.1f} {label} F1, below that "
                         f"initialisation ({init_f1:.1f}, mean of {init['n_models']} inits).**")
        left, right = stat_mean(summary.get("left_split_pct_wsj40")), stat_mean(summary.get("right_split_pct_wsj40"))
        if left is not None and right is not None:
            ours = branching_direction(left, right)
            sentence += (f" Its trees make {left:.0f}% left and {right:.0f}% right splits (WSJ40): "
                         f"{direction_text(ours)}")
            published = table4.get(model)
            if published:
                theirs = branching_direction(published["left"], published["right"])
                sentence += (f"; PaLM Table 4 reports {published['left']:.1f}% left / {published['right']:.1f}% right "
                             f"for {display(model)} ({direction_text(theirs)})")
                if ours == theirs:
                    sentence += ", as ours."
                elif ours is None:
                    sentence += ", which ours is not."
                else:
                    sentence += ": the opposite of the paper's finding."
            elif gold:
                theirs = branching_direction(gold["left_split_pct"], gold["right_split_pct"])
                sentence += (f"; the gold trees make {gold['left_split_pct']:.0f}% / {gold['right_split_pct']:.0f}% "
                             f"({direction_text(theirs)}).")
            else:
                sentence += "."
        out.append(sentence)
    return out


def _outliers(values: dict, min_distance: float) -> list[tuple[str, float, float]]:
    """``(seed, value, distance)`` of the values whose distance to the median of all exceeds
    ``min_distance`` and OUTLIER_RATIO times every other value's distance. Needs >= 3 values."""
    if len(values) < 3:
        return []
    median = statistics.median(values.values())
    found = []
    for seed, value in values.items():
        distance = abs(value - median)
        others = max(abs(v - median) for s, v in values.items() if s != seed)
        if distance > min_distance and distance > OUTLIER_RATIO * max(others, 1e-9):
            found.append((seed, value, distance))
    return found


def seed_outliers(results: dict, subset: str = "wsj40") -> list[str]:
    """Per model, a seed whose F1 on ``subset`` (or whose perplexity) is an outlier against the
    other seeds, with the mean ± std with and without it. Reads ``models[m].seeds[s].scores`` and
    ``.perplexity``."""
    out = []
    label = subset.upper() if subset.startswith("wsj") else subset
    for model in results["models_order"]:
        seeds = results["models"][model].get("seeds") or {}
        f1 = {}
        ppl = {}
        for seed, data in seeds.items():
            try:
                f1[seed] = float(data["scores"][subset]["sentence_f1"])
            except (KeyError, TypeError):
                pass
            value = data.get("perplexity")
            if isinstance(value, (int, float)) and math.isfinite(value):
                ppl[seed] = float(value)
        checks = [(f1, OUTLIER_MIN_F1, f"{label} F1", 1),
                  (ppl, None, "perplexity", 1)]
        for values, min_distance, what, digits in checks:
            if min_distance is None:
                if len(values) < 3:
                    continue
                min_distance = OUTLIER_MIN_PPL_SHARE * statistics.median(values.values())
            for seed, value, _ in _outliers(values, min_distance):
                rest = [v for s, v in values.items() if s != seed]
                everyone = list(values.values())
                out.append(
                    f"**{display(model)}, seed {seed}: {what} {value:.{digits}f} is an outlier** against the other "
                    f"seeds "
                    f"({', '.join(f'{v:.{digits}f}' for v in rest)}): the spread over seeds comes from this one init "
                    f"(mean {statistics.fmean(everyone):.{digits}f} ± {statistics.stdev(everyone):.{digits}f} with it, "
                    f"{statistics.fmean(rest):.{digits}f} ± {statistics.stdev(rest):.{digits}f} without).")
        if len(f1) == 2:
            (s1, v1), (s2, v2) = sorted(f1.items())
            if abs(v1 - v2) > OUTLIER_MIN_F1:
                out.append(f"{display(model)}: its two seeds differ by {abs(v1 - v2):.1f} {label} F1 ({v1:.1f} for "
                           f"seed "
                           f"{s1}, {v2:.1f} for seed {s2}); with two seeds one cannot tell which is the odd one.")
    return out


def _monitor_text(results: dict, model: str) -> str:
    """``the monitor set (its first 200 sentences of 2-40 words)``: the sentences of the runs' ``dev_f1``."""
    count = (((results.get("monitor") or {}).get("models") or {}).get(model) or {}).get("dev_f1_sentences")
    return "the monitor set" + (f" (its first {count:,} dev sentences of 2-40 words)" if count else " (dev)")


def _criterion(results: dict, model: str, run: dict) -> str:
    """What chose the run's checkpoint, in a few words (``train.select_by``, the run's ``validation_loss``)."""
    select_by = (((results.get("monitor") or {}).get("models") or {}).get(model) or {}).get("select_by", "valid_ppl")
    if select_by == "dev_f1":
        return "the highest dev F1"
    return "the lowest " + (run.get("validation_loss") or "validation perplexity")


def _when(record: dict) -> str:
    """``epoch 3``, ``epoch 4 (partial)``, ``step 1,500, inside epoch 3`` for an evaluation inside an epoch."""
    if record.get("mid_epoch") and isinstance(record.get("steps"), int):
        return f"step {record['steps']:,}, inside epoch {record['epoch']}"
    return f"epoch {record['epoch']}" + (" (partial)" if record.get("partial") else "")


def _dev_f1_runs(results: dict):
    """``(who, model, data, history)`` of every run: its name in the findings (with its seed where several ran),
    its results entry and its evaluations with a finite ``dev_f1``, in order."""
    several = len(results.get("seeds") or []) > 1
    for model in results["models_order"]:
        for seed, data in (results["models"][model].get("seeds") or {}).items():
            history = [h for h in data.get("history") or []
                       if isinstance(h.get("dev_f1"), (int, float)) and math.isfinite(h["dev_f1"])]
            yield display(model) + (f" (seed {seed})" if several else ""), model, data, history


def falling_curves(results: dict) -> list[str]:
    """Runs whose dev F1 on the monitor set (``dev_f1`` of ``metrics.jsonl``: every evaluation) peaked before
    the last evaluation and ended at least FALL_MIN points lower, with the checkpoint the figures come from.
    Reads ``models[m].seeds[s].history`` and ``.run``, ``monitor``."""
    out = []
    for who, model, data, history in _dev_f1_runs(results):
        if len(history) < 2:
            continue
        peak = max(history, key=lambda h: h["dev_f1"])
        last = history[-1]
        if peak is last or peak["dev_f1"] - last["dev_f1"] < FALL_MIN:
            continue
        sentence = (f"**{who}: dev F1 on {_monitor_text(results, model)} peaked at {peak['dev_f1']:.1f} in "
                    f"{_when(peak)} and fell to {last['dev_f1']:.1f} by the last evaluation, {_when(last)}** "
                    f"({len(history)} evaluations)")
        best = [h for h in history if h.get("best")]
        if best:
            chosen = best[-1]
            sentence += (f"; the checkpoint evaluated in the tables (chosen by "
                         f"{_criterion(results, model, data.get('run') or {})}) is from {_when(chosen)}, dev F1 "
                         f"{chosen['dev_f1']:.1f}")
        out.append(sentence + ".")
    return out


def selection_gaps(results: dict) -> list[str]:
    """Runs whose selected checkpoint parses the monitor set at least FALL_MIN points below the run's best
    evaluation, while the curve did not fall (:func:`falling_curves` speaks of those): the selection criterion
    (e.g. the validation bound) and parsing disagree, and the tables show the earlier checkpoint.
    Reads ``models[m].seeds[s].history`` and ``.run``, ``monitor``."""
    out = []
    for who, model, data, history in _dev_f1_runs(results):
        best = [h for h in history if h.get("best")]
        if len(history) < 2 or not best:
            continue
        peak, last, chosen = max(history, key=lambda h: h["dev_f1"]), history[-1], best[-1]
        falling = peak is not last and peak["dev_f1"] - last["dev_f1"] >= FALL_MIN
        if falling or chosen is peak or peak["dev_f1"] - chosen["dev_f1"] < FALL_MIN:
            continue
        criterion = _criterion(results, model, data.get("run") or {})
        out.append(f"**{who}: the checkpoint evaluated in the tables, from {_when(chosen)} (chosen by "
                   f"{criterion}), parses {_monitor_text(results, model)} at "
                   f"{chosen['dev_f1']:.1f} dev F1, against {peak['dev_f1']:.1f} at its best evaluation "
                   f"({_when(peak)}) and {last['dev_f1']:.1f} at the last ({_when(last)}).** The selection "
                   "criterion and parsing disagree here.")
    return out


def all_findings(results: dict) -> list[str]:
    """Every finding, in the order the report lists them."""
    return (headline(results) + below_baselines(results) + seed_outliers(results) + falling_curves(results)
            + selection_gaps(results))
