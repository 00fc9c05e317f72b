"""Tables of the evaluation hub's outcomes (``induce eval --convention / --agreement / --compare``,
``induce ensemble``): what :mod:`induce.assess.hub` computed, printed with rich."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from induce.evaluation.words import describe


def _value(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_conventions(summary: dict, console: Console) -> None:
    """One row per figure of each (convention, gold variant): the figures its script prints, to its digits."""
    table = Table(title=f"{summary['predicted']}  vs  {summary['gold']}")
    for name, justify in (("convention", "left"), ("gold", "left"), ("figure", "left"), ("value", "right"),
                          ("scored / skipped / errors", "right")):
        table.add_column(name, justify=justify)
    for row in summary["results"]:
        counts = f"{row['n_sentences']} / {row['n_skipped']} / {row['n_errors']}"
        for k, (key, label, digits) in enumerate(row["reported"]):
            first = k == 0
            table.add_row(row["convention"] if first else "", row["gold_variant"] if first else "", label,
                          _value(row["figures"][key], digits), counts if first else "",
                          end_section=k == len(row["reported"]) - 1)
    console.print(table)
    if summary.get("treebank", "ptb") != "ptb":
        from induce.trees.treebanks import get_profile

        profile = get_profile(summary["treebank"])
        console.print(f"gold treebank: {profile.title}, prepared as {profile.reference}; its punctuation: "
                      f"{' '.join(sorted(profile.li_punct))}", highlight=False, soft_wrap=True)
    for row in summary["results"]:
        if row["gold_variant"] == summary["results"][0]["gold_variant"]:
            console.print(f"{row['convention']}: {row['description']}", highlight=False, soft_wrap=True)
    summaries = [row.get("words") for row in summary["results"]]
    if all(words == summaries[0] for words in summaries):  # the conventions compared the same words
        _print_words([summaries[0]], [""], console)
    else:
        _print_words(summaries, [f"{row['convention']} ({row['gold_variant']})" for row in summary["results"]],
                     console)


def _print_words(summaries: list, labels: list, console: Console) -> None:
    """How each source's words matched the gold's (:func:`induce.evaluation.words.describe`), one line per
    source that has words (a run or a baseline has none), prefixed with its label."""
    for label, summary in zip(labels, summaries):
        if summary:
            console.print(f"{label}: {describe(summary)}" if label else describe(summary), highlight=False,
                          soft_wrap=True)


def print_agreement(summary: dict, console: Console) -> None:
    """The pairwise F1 matrix and its off-diagonal mean."""
    labels = summary["sources"]
    table = Table(title=f"pairwise F1 ({summary['n_sentences']} sentences of {summary['gold']})")
    table.add_column("")
    for k in range(len(labels)):
        table.add_column(str(k + 1), justify="right")
    for k, row in enumerate(summary["matrix"]):
        table.add_row(f"{k + 1} {labels[k]}", *(_value(v) for v in row))
    console.print(table)
    console.print(f"mean pairwise F1 (self-F1): {_value(summary['mean_pairwise_f1'])}; {summary['description']}; "
                  f"tokens and sentences of the {summary['convention']} convention{_limit_text(summary)}",
                  highlight=False, soft_wrap=True)
    _print_words(summary.get("words") or [], labels, console)


def _p_text(summary: dict) -> str:
    """The p-value and the direction it tests (:func:`induce.evaluation.bootstrap.paired_bootstrap`)."""
    if summary["alternative"] is None:
        return "p = 1 (A and B score the same: no difference to test)"
    return (f"p = {summary['p_value']:.4f} (one-sided, tests {summary['alternative']}: the share of resamples "
            "where A - B is at least twice the observed difference)")


def _limit_text(summary: dict) -> str:
    return "" if summary.get("max_length") is None else f", sentences of at most {summary['max_length']} words"


def print_compare(summary: dict, console: Console) -> None:
    label = summary["figure_label"]
    console.print(f"A = {summary['first']}: {label} {_value(summary['a'])}\nB = {summary['second']}: {label} "
                  f"{_value(summary['b'])}\nA - B = {summary['delta']:+.2f}, 95% interval [{summary['low']:+.2f}, "
                  f"{summary['high']:+.2f}], {_p_text(summary)}\n{summary['resamples']} resamples of "
                  f"{summary['n_sentences']} sentences, seed {summary['seed']}; convention {summary['convention']}, "
                  f"gold variant {summary['gold_variant']}{_limit_text(summary)}", highlight=False, soft_wrap=True)
    console.print(summary["method"], highlight=False, soft_wrap=True)
    _print_words(summary.get("words") or [], ["A", "B"], console)


def print_ensemble(report: dict, console: Console) -> None:
    """Each member's F1, their mean and best, and the ensemble's."""
    table = Table(title=f"ensemble of {len(report['members'])} ({report['convention']}, {report['figure_label']}, "
                        f"{report['n_sentences']} sentences)")
    table.add_column("trees")
    table.add_column(report["figure_label"], justify="right")
    weights = report["weights"] or [1] * len(report["members"])
    for label, value, weight in zip(report["members"], report["member_f1"], weights):
        table.add_row(f"{label} (weight {weight:g})", _value(value))
    table.add_row("mean of the members", _value(report["mean"]))
    table.add_row("best member", _value(report["best"]))
    table.add_row("ensemble", _value(report["ensemble"]))
    console.print(table)
    _print_words(report.get("words") or [], report["members"], console)


def print_hub(outcome, console: Console) -> None:
    {"conventions": print_conventions, "agreement": print_agreement, "compare": print_compare}[outcome.kind](
        outcome.summary, console)
