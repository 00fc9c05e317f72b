"""The report's small text pieces: figures as ``mean ± std`` (:func:`fmt`), split names, Markdown tables,
durations, and the sentences about sizes, budgets and wall time that several sections of ``REPORT.md`` use.
"""
from __future__ import annotations

import math
from typing import Optional

from induce.report.names import display


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

def split_label(split: str, source_kind: Optional[str]) -> str:
    """``dev (WSJ 22)``, ``test (WSJ 23)``, ``dev (NLTK sample)``, ``dev (synthetic treebank)``..."""
    name = "dev" if split == "valid" else "test"
    where = {"ldc": "WSJ 22" if split == "valid" else "WSJ 23", "wsj-files": "WSJ 22" if split == "valid" else "WSJ 23",
             "nltk-sample": "NLTK sample", "synthetic": "synthetic treebank"}.get(source_kind or "", "")
    return f"{name} ({where})" if where else f"{split} split"

def split_name(results: dict) -> str:
    source = results["corpus"]["eval"]
    return split_label(results["split"], source.get("source_kind") or source.get("kind"))

def markdown_table(header: list[str], rows: list[list[str]], align: Optional[list[str]] = None) -> list[str]:
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
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
    """What the "tokens trained" column counts, with the tokens one epoch predicts per batch size."""
    from induce.training.batching import predicted_per_epoch

    counts = ((results["corpus"]["train"].get("splits") or {}).get("train") or {})
    text = ("*Tokens trained*: the tokens the model predicted in training, all epochs together (`train_tokens` of "
            "`metrics.jsonl`). An epoch predicts the tokens of the training text (setup: words + sentence ends) but "
            "the first of each of the `data.batch_size` parallel streams and the tail that does not fill them")
    if not (isinstance(counts.get("lm_sentences"), int) and isinstance(counts.get("lm_tokens"), int)):
        return text + "."
    tokens = counts["lm_sentences"] + counts["lm_tokens"]
    sizes = {}
    for m in models:
        batch = ((results.get("configs") or {}).get(m, {}).get("data") or {}).get("batch_size")
        if isinstance(batch, int):
            sizes.setdefault(batch, []).append(display(m))
    parts = [f"{predicted_per_epoch(tokens, batch):,} with {batch} streams"
             + (f" ({', '.join(names)})" if len(sizes) > 1 else "") for batch, names in sizes.items()]
    return text + (": up to " + "; ".join(parts) + " per epoch here." if parts else ".")

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
    return (f"this invocation {minutes(results.get('wall_seconds'))}; all steps' last runs together "
            f"{minutes(total)} (steps skipped here ran in an earlier invocation)")
