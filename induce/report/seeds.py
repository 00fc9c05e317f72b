"""The report's section on several seeds of a model: their trees' agreement (self-F1) and the ensemble of
their trees against the seeds' mean and best (``results["models"][m]["seed_ensemble"]``,
:func:`induce.evaluation.seeds.seed_summary`)."""
from __future__ import annotations

from induce.report.text import markdown_table


def seeds_section(*, where, models, per_model, **_) -> list[str]:
    """Nothing unless a model has two seeds or more with trees."""
    rows = []
    for model in models:
        summary = per_model.get(model, {}).get("seed_ensemble")
        if not summary:
            continue
        figures = [f"{summary[k]['sentence_f1']:.1f} / {summary[k]['corpus_f1']:.1f}"
                   for k in ("mean", "best", "ensemble")]
        rows.append([model, str(len(summary["seeds"])), f"{summary['self_f1']:.1f}", *figures])
    if not rows:
        return []
    lines = ["## Seeds: agreement and ensemble", "",
             f"Self-F1: the mean F1 between the trees of two seeds of the model ({where}, our convention). "
             "The ensemble takes, per sentence, the binary tree with the most span votes of the seeds "
             "(CKY, `induce ensemble`). Figures: sentence F1 / corpus F1, all lengths.", ""]
    lines += markdown_table(["model", "seeds", "self-F1", "seeds' mean", "best seed", "ensemble"], rows)
    return lines + [""]
