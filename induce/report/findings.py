"""Sentences the report says about its results, generated from the results dict (never written by
hand): the questions a reader asks of such tables.

* :func:`headline` — which model parses best, against the best trivial baseline;
* :func:`below_baselines` — a model whose F1 is below a trivial baseline (or below its own untrained
  initialisation), with its branching next to the paper's finding (PaLM Table 4) or the gold trees';
* :func:`seed_outliers` — a seed whose F1 or perplexity is far from the other seeds' (the variance
  then comes from one odd init), with the mean without it;
* :func:`falling_curves` — a run whose dev F1 per epoch peaked early and then fell (peak epoch and
  value against the last).

Every function takes the results dict of :func:`induce.reproduce.collect_results` (the fields it
reads are named in its docstring) and returns a list of Markdown sentences (empty: nothing to say).
"""
from __future__ import annotations

import math
import statistics
from typing import Optional

from induce.report.names import display

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


def _mean(stat) -> Optional[float]:
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


def headline(results: dict, subset: str = "wsj40") -> list[str]:
    """Best model by mean sentence F1 on ``subset`` against the best trivial baseline.
    Reads ``models_order``, ``models[m].summary.sentence_f1_<subset>``, ``baselines``."""
    scored = [(m, _mean(results["models"][m]["summary"].get(f"sentence_f1_{subset}"))) for m in results["models_order"]]
    scored = [(m, f1) for m, f1 in scored if f1 is not None]
    base = [(k, _baseline_f1(results, k, subset)) for k in BASELINE_ORDER]
    base = [(k, f1) for k, f1 in base if f1 is not None]
    if not scored or not base:
        return []
    best, best_f1 = max(scored, key=lambda item: item[1])
    kind, kind_f1 = max(base, key=lambda item: item[1])
    label = subset.upper() if subset.startswith("wsj") else subset
    relation = ("above" if best_f1 > kind_f1 + BELOW_MARGIN else "below" if best_f1 < kind_f1 - BELOW_MARGIN
                else "level with")
    return [f"The best parser here is {display(best)} at {best_f1:.1f} {label} F1, {relation} the best trivial "
            f"baseline, {display(kind)} trees ({kind_f1:.1f})."]


def below_baselines(results: dict, subset: str = "wsj40") -> list[str]:
    """Models whose mean sentence F1 on ``subset`` is below a trivial baseline's, or below their
    untrained initialisation's (``random_init[m].sentence_f1``, WSJ40); each with its % left / right
    splits on WSJ40 and what PaLM Table 4 (``published.table4``) or the gold trees show.
    Reads ``models[m].summary``, ``baselines``, ``random_init``, ``gold.wsj40``, ``published``."""
    out = []
    table4 = (results.get("published") or {}).get("table4") or {}
    gold = (results.get("gold") or {}).get("wsj40")
    for model in results["models_order"]:
        summary = results["models"][model]["summary"]
        f1 = _mean(summary.get(f"sentence_f1_{subset}"))
        if f1 is None:
            continue
        below = []
        for kind in BASELINE_ORDER:
            base = _baseline_f1(results, kind, subset)
            if base is not None and f1 < base - BELOW_MARGIN:
                below.append(f"{display(kind)} ({base:.1f})")
        init = (results.get("random_init") or {}).get(model)
        init_f1 = _mean(init.get("sentence_f1")) if init and subset == "wsj40" else None
        below_init = init_f1 is not None and f1 < init_f1 - BELOW_MARGIN
        if not below and not below_init:
            continue
        label = subset.upper() if subset.startswith("wsj") else subset
        parts = []
        if below:
            parts.append(f"below {join_words(below)}")
        if below_init:
            parts.append(f"below its own untrained initialisation ({init_f1:.1f}, mean of {init['n_models']} inits)")
        sentence = f"**{display(model)} at {f1:.1f} {label} F1 is {' and '.join(parts)}.**"
        left, right = _mean(summary.get("left_split_pct_wsj40")), _mean(summary.get("right_split_pct_wsj40"))
        if left is not None and right is not None:
            sentence += f" Its trees make {left:.0f}% left and {right:.0f}% right splits (WSJ40)"
            published = table4.get(model)
            if published:
                ours_dir = "left" if left > right else "right"
                theirs_dir = "left" if published["left"] > published["right"] else "right"
                sentence += (f"; PaLM Table 4 reports {published['left']:.1f}% left / {published['right']:.1f}% right "
                             f"for {display(model)}")
                sentence += (f": {ours_dir}-branching, the opposite of the paper's finding." if ours_dir != theirs_dir
                             else ".")
            elif gold:
                sentence += f"; the gold trees make {gold['left_split_pct']:.0f}% / {gold['right_split_pct']:.0f}%."
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


def falling_curves(results: dict) -> list[str]:
    """Runs whose dev F1 (``dev_f1`` of the per-epoch history) peaked before the last epoch and
    ended at least FALL_MIN points lower. Reads ``models[m].seeds[s].history``."""
    out = []
    several = len(results.get("seeds") or []) > 1
    for model in results["models_order"]:
        for seed, data in (results["models"][model].get("seeds") or {}).items():
            history = [h for h in data.get("history") or []
                       if isinstance(h.get("dev_f1"), (int, float)) and math.isfinite(h["dev_f1"])]
            if len(history) < 2:
                continue
            peak = max(history, key=lambda h: h["dev_f1"])
            last = history[-1]
            if peak is last or peak["dev_f1"] - last["dev_f1"] < FALL_MIN:
                continue
            who = display(model) + (f" (seed {seed})" if several else "")

            def when(record):
                return f"epoch {record['epoch']}" + (" (partial)" if record.get("partial") else "")

            sentence = (f"**{who}: dev F1 peaked at {peak['dev_f1']:.1f} in {when(peak)} and fell to "
                        f"{last['dev_f1']:.1f} by the last, {when(last)}** ({len(history)} evaluations)")
            best = [h for h in history if h.get("best")]
            if best:
                chosen = best[-1]
                sentence += (f"; the checkpoint evaluated above (best validation perplexity) is from "
                             f"{when(chosen)}, dev F1 {chosen['dev_f1']:.1f}")
            out.append(sentence + ".")
    return out


def all_findings(results: dict) -> list[str]:
    """Every finding, in the order the report lists them."""
    return headline(results) + below_baselines(results) + seed_outliers(results) + falling_curves(results)
