"""The report's small text pieces: figures as ``mean ± std`` (:func:`fmt`), split names, Markdown tables,
durations, and the sentences about sizes, budgets and wall time that several sections of ``REPORT.md`` use.
"""
from __future__ import annotations

import math
from typing import Optional

from induce.report.findings import join_words
from induce.report.names import display, results_split_label


def fmt(stat, digits: int = 1) -> str:
    """``mean ± std`` (std only over several seeds), ``—`` when missing."""
    if stat is None:
        return "—"
    if isinstance(stat, dict):
        mean, std = stat.get("mean"), stat.get("std")
        if mean is None or (isinstance(mean, float) and math.isnan(mean)):
            return "—"
        text = f"{mean:,.{digits}f}"
        return text + (f" ± {std:.{digits}f}" if std is not None else "")
    if isinstance(stat, float) and math.isnan(stat):
        return "—"
    return f"{stat:,.{digits}f}" if isinstance(stat, float) else str(stat)

def published_value(value) -> str:
    return "—" if value is None else f"{value:.1f}"

def split_name(results: dict) -> str:
    """The final split as the report names it (:func:`induce.report.names.split_label`)."""
    return results_split_label(results)

def markdown_table(header: list[str], rows: list[list[str]], align: Optional[list[str]] = None) -> list[str]:
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines

def minutes(seconds) -> str:
    if seconds is None:
        return "—"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"

def count_text(value) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"

def text_size(counts: dict) -> str:
    """A split's LM text from its ``meta.json`` counts, saying what each number counts: ``N sentences:
    W words + N sentence ends = T tokens`` (the model reads and predicts the sentence ends too)."""
    sentences, words = counts.get("lm_sentences"), counts.get("lm_tokens")
    if isinstance(sentences, int) and isinstance(words, int):
        return f"{sentences:,} sentences: {words:,} words + {sentences:,} sentence ends = {words + sentences:,} tokens"
    return f"{count_text(sentences)} sentences, {count_text(words)} words"

def tokens_trained_note(results: dict, models: list) -> str:
    """What the "tokens trained" column counts: for the models that read the training text as parallel streams,
    the tokens one epoch predicts per batch size; for those that learn from whole sentences (``traits``'
    ``sentence_level``), the sentences they read (within their training length cap)."""
    from induce.training.batching import predicted_per_epoch

    traits = {m: ((results.get("models") or {}).get(m) or {}).get("traits") or {} for m in models}
    whole = [m for m in models if traits[m].get("sentence_level")]
    streams = [m for m in models if m not in whole]
    text = "*Tokens trained*: the tokens the model predicted in training, all epochs together (`train_tokens` of " \
           "`metrics.jsonl`)."
    if streams:
        text += (" An epoch" + (f" of {join_words([display(m) for m in streams])}" if whole else "")
                 + " predicts the tokens of the training text (setup: words + sentence ends) but the first of each of "
                 "the `data.batch_size` parallel streams and the tail that does not fill them")
        counts = ((results["corpus"]["train"].get("splits") or {}).get("train") or {})
        sizes = {}
        for m in streams:
            batch = ((results.get("configs") or {}).get(m, {}).get("data") or {}).get("batch_size")
            if isinstance(batch, int):
                sizes.setdefault(batch, []).append(display(m))
        if sizes and isinstance(counts.get("lm_sentences"), int) and isinstance(counts.get("lm_tokens"), int):
            tokens = counts["lm_sentences"] + counts["lm_tokens"]
            parts = [f"{predicted_per_epoch(tokens, batch):,} with {batch} streams"
                     + (f" ({', '.join(names)})" if len(sizes) > 1 else "") for batch, names in sizes.items()]
            text += ": up to " + "; ".join(parts) + " per epoch here"
        text += "."
    if whole:
        caps = {}
        for m in whole:
            caps.setdefault(traits[m].get("train_max_length"), []).append(display(m))
        within = "; ".join(f"{join_words(names)}: " + (f"those of at most {cap} words" if cap else "every one")
                           for cap, names in caps.items())
        text += (f" {join_words([display(m) for m in whole])} learn from whole sentences: an epoch predicts the words "
                 f"and sentence ends of the training sentences within the training length cap ({within}; "
                 "`data.max_length`).")
    return text


def budget_text(budget, budgets: dict, models: list, chunk, step_budgets: Optional[dict] = None) -> str:
    steps = {m: n for m, n in (step_budgets or {}).items() if n is not None}
    if steps:
        values = set(steps.values())
        text = (f"{values.pop():,} optimiser steps per model and seed" if len(values) == 1 and len(steps) == len(models)
                else "optimiser steps per seed: " + ", ".join(f"{display(m)} {steps[m]:,}" if m in steps
                                                             else f"{display(m)}: the config's epochs" for m in models))
        text += " (`train.max_steps`: the same training on every machine, whatever its speed or load)"
        if budget or budgets:
            text += "; and " + budget_text(budget, budgets, models, None)
        return text + (f"; trained in chunks of {minutes(chunk)} per invocation" if chunk else "")
    if budget:
        text = f"{minutes(budget)} per model and seed"
    elif budgets:
        text = "per seed: " + ", ".join(f"{display(m)} {minutes(budgets[m])}" if m in budgets
                                        else f"{display(m)}: the config's epochs" for m in models)
    else:
        return "the configs' epochs / early stopping (no time budget)" + (
            f"; trained in chunks of {minutes(chunk)} per invocation" if chunk else "")
    text += (" (`train.time_budget`, per-epoch validation included; how much a model trains in that time depends "
             "on the machine's speed and load)")
    return text + (f"; trained in chunks of {minutes(chunk)} per invocation" if chunk else "")

def wall_text(results: dict) -> str:
    log = results.get("step_log", {})
    total = sum(float(entry.get("seconds", 0.0)) for entry in log.values())
    jobs = results.get("jobs") or 1
    at_once = f", up to {jobs} at once" if jobs > 1 else ""
    return (f"this invocation {minutes(results.get('wall_seconds'))}; the steps' own times add up to "
            f"{minutes(total)} (each step's last run{at_once}; steps skipped here ran in an earlier invocation)")
