"""The reproduction report: ``results.json`` and ``REPORT.md`` (:func:`write_results`).

``REPORT.md`` is :data:`SECTIONS`, one function per section, each taking the fields of :class:`ReportContext`
it reads; the published figures it quotes are :mod:`induce.report.published`, its small text pieces
:mod:`induce.report.text`, its generated sentences :mod:`induce.report.findings`.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Optional

from induce.evaluation.baselines import BASELINES
from induce.evaluation.engine import REPORTED_LABELS
from induce.report.findings import all_findings, join_words, stat_mean
from induce.report.names import WSJ_SOURCES, display, split_label
from induce.report.published import PUBLISHED
from induce.report.seeds import seeds_section
from induce.report.text import (
    budget_text,
    count_text,
    fmt,
    markdown_table,
    minutes,
    published_value,
    split_name,
    text_size,
    tokens_trained_note,
    wall_text,
)

# ------------------------------------------------------------------------------------------- report


def write_results(results: dict, out: Path, outputs=None) -> tuple[Path, Path]:
    """``out/results.json`` and ``out/REPORT.md``, as one result: into ``outputs`` (the report's
    :class:`induce.files.OutputSet`, with its figures), else both or, on an error, neither
    (:func:`induce.files.output_set`)."""
    import contextlib

    from induce.files import output_set, strict_json

    out = Path(out)
    results = dict(results, published=PUBLISHED)
    json_path, md_path = out / "results.json", out / "REPORT.md"
    markdown = render_markdown(results)  # (before anything is written: an error here leaves the old report)
    with contextlib.nullcontext(outputs) if outputs is not None else output_set() as chosen:
        # strict JSON: NaN / infinity (a diverged run) become null; "diverged_seeds" says which
        chosen.write(json_path, strict_json(results, indent=1, sort_keys=True, default=str) + "\n")
        chosen.write(md_path, markdown)
    return json_path, md_path


@dataclass(frozen=True)
class ReportContext:
    """What the sections of the report read: the results and the values derived from them once
    (:func:`report_context`)."""

    results: dict
    profile: dict
    split: str  # valid or test
    where: str  # the split as the report names it, e.g. "dev (WSJ 22)"
    models: list  # model names in report order
    per_model: dict  # results["models"]
    baselines: dict
    eval_corpus: dict
    train_corpus: dict
    budget: Optional[float]  # seconds per model and seed, when one budget applies to all
    budgets: dict  # model -> seconds, the models that have their own budget
    seeds: list
    eval_counts: dict  # the evaluation split's counts (meta.json)
    synthetic: bool  # evaluated on the synthetic treebank
    dev_where: str  # dev as the report names it, e.g. "dev (WSJ 22)"
    monitor: dict  # results["monitor"]: the monitor sets that selected each model's checkpoint


def report_context(results: dict) -> ReportContext:
    profile = results["profile"]
    split = results["split"]
    where = split_name(results)
    models = results["models_order"]
    per_model = results["models"]
    baselines = results.get("baselines", {})
    eval_corpus, train_corpus = results["corpus"]["eval"], results["corpus"]["train"]
    budget = results.get("time_per_model_s")
    budgets = {m: b for m, b in (results.get("time_budgets_s") or {}).items() if b is not None}
    seeds = results["seeds"]
    eval_counts = (eval_corpus.get("splits") or {}).get(split, {})
    synthetic = eval_corpus.get("kind") == "synthetic" or eval_corpus.get("source_kind") == "synthetic"
    dev_where = split_label("valid", eval_corpus.get("source_kind") or eval_corpus.get("kind"))
    return ReportContext(results=results, profile=profile, split=split, where=where, models=models,
                         per_model=per_model, baselines=baselines, eval_corpus=eval_corpus, train_corpus=train_corpus,
                         budget=budget, budgets=budgets, seeds=seeds, eval_counts=eval_counts, synthetic=synthetic,
                         dev_where=dev_where, monitor=results.get("monitor") or {})


def render_markdown(results: dict) -> str:
    """``REPORT.md``: the sections of :data:`SECTIONS` (one function each, taking the fields of
    :class:`ReportContext` it reads as keyword arguments), one after the other."""
    context = report_context(results)
    values = {field.name: getattr(context, field.name) for field in fields(context)}
    return "\n".join(line for section in SECTIONS for line in section(**values))


def splits_sentence(results: dict, where: str) -> str:
    """Which split the figures are on and where the models were selected: the first words of the report."""
    eval_corpus = results["corpus"]["eval"]
    available = (results.get("splits") or {}).get("test_available", "test" in (eval_corpus.get("splits") or {}))
    wsj = (eval_corpus.get("source_kind") or eval_corpus.get("kind")) in WSJ_SOURCES
    if results["split"] == "test":
        return (f"The figures of ours below are on **{where}**, unless marked dev"
                + ("" if wsj else " (this data's own test split, **not WSJ section 23**, the published figures' test "
                                  "set)")
                + ". Each model was selected on dev only: its checkpoint was chosen while it trained, on the monitor "
                "sentences of dev, never on the test split (*Model selection*).")
    why = ("this data holds no WSJ section 23, the test split" if wsj and not available
           else "the corpus has no test split" if not available else "`--split valid` was asked")
    return (f"**There are no test figures here** ({why}): every figure of ours below is on **{where}**, a dev "
            "figure, not a test figure, and the models were selected on dev too (on its monitor sentences: *Model "
            "selection*).")


def _not_finished(results: dict) -> str:
    """The report's note on the runs not done yet: their cluster jobs still queued or running, the chunk's end, or
    a stop."""
    waiting = results.get("waiting_jobs") or {}
    done = ", ".join(results["incomplete"])
    if waiting:
        what = (f"These are not done yet, their SLURM jobs queued or running "
                f"({', '.join(f'{unit}: {job}' for unit, job in waiting.items())}): {done}.")
    elif results.get("chunk_s"):
        what = (f"This invocation's chunk of training time ({minutes(results.get('chunk_s'))}) ended before these runs "
                f"were done: {done}.")
    else:
        what = f"These were stopped before they were done: {done}."
    return (f"**Not finished yet.** {what} Their figures are missing (`—`); run "
            f"`{results.get('command') or 'induce reproduce'}` again to "
            f"{'collect them' if waiting else 'continue them from their checkpoints'}.")


def _preamble(*, results, profile, where, models, per_model, eval_corpus, budget, budgets, synthetic,
              **_) -> list[str]:
    """Title, the read-this-first warning, the findings, unfinished / diverged runs, failed steps."""
    lines: list[str] = []
    add = lines.append
    add(f"# Reproduction report (profile `{profile['name']}`)")
    add("")
    add(f"Generated {results['generated_at']} by `{results.get('command') or 'induce reproduce'}`.")
    add("")
    step_budgets = {m: n for m, n in (results.get("step_budgets") or {}).items() if n is not None}
    small = bool(budget) or bool(budgets) or bool(step_budgets) or bool(profile.get("train_sentences"))
    scope = []
    if step_budgets:
        values = set(step_budgets.values())
        scope.append(f"trained for {values.pop():,} optimiser steps per model and seed" if len(values) == 1 else
                     "trained for " + ", ".join(f"{n:,} steps ({display(m)})" for m, n in step_budgets.items())
                     + " per seed")
    elif budget:
        scope.append(f"trained for {minutes(budget)} per model and seed")
    elif budgets:
        scope.append("trained for " + ", ".join(f"{minutes(b)} ({display(m)})" for m, b in budgets.items())
                     + " per seed")
    if profile.get("train_sentences"):
        everything = [m for m in models if m in (profile.get("all_train_sentences") or [])]
        scope.append(f"on the first {profile['train_sentences']:,} training sentences"
                     + (f" ({', '.join(display(m) for m in everything)}: on every training sentence)"
                        if everything else ""))
    warning = ("**Read this first.** " + splits_sentence(results, where)
               + f" The models are those of profile `{profile['name']}`"
               + (f" ({profile.get('description')})" if profile.get("description") else "")
               + (", " + " and ".join(scope) if scope else "") + ". "
               "The published figures are on the WSJ test set (section 23) with the papers' full-size models trained "
               "to convergence on GPUs. They are **not comparable 1:1**")
    warning += (": the published columns show what the papers report after their full training, and these runs had "
                "a fraction of it (the profile says at which sizes): a published figure is a reference to read the "
                "gap against, not a level every model here is expected to reach." if small else
                ": different split, and seeds, budgets and implementation details may differ.")
    if synthetic:
        warning += (" **The data is the SYNTHETIC treebank (no Penn Treebank was found), not English: the figures "
                    "say nothing about the papers' results.**")
    add("> " + warning)
    add("")

    if results.get("incomplete"):
        add(_not_finished(results))
        add("")
    clock = results.get("clock_stopped") or {}
    if clock:
        add("**Stopped by the clock.** These runs were stopped by a time budget (`train.time_budget`), so what they "
            "learned depends on the speed and load of the machine: " + "; ".join(f"{run}: {note}"
                                                                              for run, note in clock.items()) + ".")
        add("")
    findings = all_findings(results)
    if findings:
        add("## What the results show")
        add("")
        add("Generated from the figures below (`induce.report.findings`): the best learned parser against the "
            "trivial baselines, models below a baseline or their untrained initialisation, seeds far from the others, "
            "dev F1 curves that fall and checkpoints the selection took far from the best dev F1.")
        add("")
        lines.extend(f"* {sentence}" for sentence in findings)
        add("")

    diverged = {m: per_model[m].get("diverged_seeds") for m in models if per_model[m].get("diverged_seeds")}
    if diverged:
        add("**Diverged runs.** Their training or validation perplexity became NaN / infinite (the figures of "
            "these runs come from a broken model and mean nothing): "
            + "; ".join(f"{display(m)} seed(s) {', '.join(seeds)}" for m, seeds in diverged.items()) + ".")
        add("")
    failed = [s for s in results.get("steps", []) if s["status"] == "failed"]
    if failed:
        add("**Failed steps.** Their figures are missing below (`—`): "
            + "; ".join(f"{s['name']}: {s['detail']}" for s in failed))
        add("")
    return lines


def precision_text(per_model: dict, models) -> str:
    """What the runs trained in, from each run's recorded precision (``""`` where no run recorded one): one
    phrase when every run agrees (``float32 for every run``), else per model."""
    found: dict[str, set] = {}
    for m in models:
        for data in per_model.get(m, {}).get("seeds", {}).values():
            precision = (data.get("run") or {}).get("precision") or {}
            if precision.get("dtype"):
                unit = f" on {precision['unit']}" if precision.get("unit") else ""
                found.setdefault(m, set()).add(f"{precision['dtype']}{unit}")
    if not found:
        return ""
    kinds = set().union(*found.values())
    if len(kinds) == 1 and len(found) == len(list(models)):
        return f"{next(iter(kinds))} for every run (`train.amp`; each run's `status.json` and `config.yaml`)"
    return "; ".join(f"{display(m)}: {', '.join(sorted(v))}" for m, v in found.items())


def _setup(*, results, profile, split, where, models, per_model, eval_corpus, train_corpus, budget, budgets, seeds,
           eval_counts, **_) -> list[str]:
    """``## Setup``: profile, data, budget, machine; the models' sizes."""
    lines: list[str] = []
    add = lines.append
    add("## Setup")
    add("")
    machine = results.get("machine", {})
    train_splits = train_corpus.get("splits") or {}
    subset = train_corpus.get("subset") or {}
    train_text = f"`{train_corpus['path']}`: {text_size(train_splits.get('train', {}))}"
    if subset.get("train_sentences"):
        train_text += (f" (the first {subset['train_sentences']:,} training sentences of `{subset.get('of')}`, "
                       "its vocabulary)")
    monitor = train_splits.get("valid", {})
    precision = precision_text(per_model, models)
    setup_rows = [
        ["profile", f"`{profile['name']}` ({results.get('profile_folder')}): {profile.get('description', '')}"],
        ["models", ", ".join(display(m) for m in models)],
        *([["runs of earlier invocations", "reported beside this invocation's, each with the config in its run folder "
            "(`runs/MODEL-seedN/config.yaml`): " + ", ".join(results["earlier_runs"])]]
          if results.get("earlier_runs") else []),
        *([["runs not reported", "in `runs/` but without an evaluation of their current checkpoint on this split: "
            + ", ".join(results["runs_left_out"])]] if results.get("runs_left_out") else []),
        ["seeds", ", ".join(str(s) for s in seeds)],
        ["training budget", budget_text(budget, budgets, models, results.get("chunk_s"), results.get("step_budgets"))],
        ["training data", train_text],
        *([[f"training data of {', '.join(display(m) for m in other['models'])}",
            f"`{other['path']}`: {text_size((other.get('splits') or {}).get('train', {}))} (every training sentence; "
            "the length cap of their configs applies)"]
           for other in (results["corpus"].get("train_other") or {}).values()]),
        ["vocabulary", f"{eval_corpus.get('vocab_size', '?'):,} types (including `<unk>`, `<eos>`)"
         if isinstance(eval_corpus.get("vocab_size"), int) else "?"],
        ["model selection", "each run's `best` checkpoint, which all its figures come from, chosen while it trained "
                            f"on the monitor sentences: `{train_corpus['path']}` valid ({text_size(monitor)}"
                            + (f"; the first {subset['valid_sentences']:,} dev sentences"
                               if subset.get("valid_sentences") else "") + "), never on test; per model: *Model "
                            "selection*"],
        ["evaluation", f"{where}: `{eval_corpus['path']}` {split}, {count_text(eval_counts.get('trees'))} trees; "
                       f"LM text {text_size(eval_counts)}"],
        ["configs", "`induce/models/<family>/<model>.yaml`"
         + (f" < `{results.get('profile_folder')}/<model>.yaml`" if profile else "")
         + " < profile overrides: " + (", ".join(f"`{o}`" for o in profile.get("overrides", [])) or "none")],
        ["profile's model changes", "; ".join(
            f"{display(m)}: " + ", ".join(f"`{k}={v}`" for k, v in changes.items())
            for m, changes in results.get("profile_model_changes", {}).items()) or "none"],
        ["machine", f"{machine.get('cpu', '?')}"
                    + (f" ({machine['cpu_capability']})" if machine.get("cpu_capability") else "")
                    + f", {machine.get('cpu_count', '?')} cores, torch "
                    f"{machine.get('torch', '?')} "
                    f"(torch threads: {machine.get('torch_threads', '?')}), device {machine.get('device', '?')}"
                    + (f" ({machine['gpu']})" if machine.get("gpu") else "")
                    + (f"; bf16 matrix unit: {machine['bf16_unit'] or 'none'}" if "bf16_unit" in machine else "")
                    + f"; {machine.get('platform', '')}"],
        *([["precision", precision]] if precision else []),
        ["wall time", wall_text(results)],
    ]
    lines += markdown_table(["", ""], setup_rows, ["---", "---"])
    add("")
    params = {m: per_model[m]["summary"]["params"]["mean"] for m in models}
    sizes = []
    for m in models:
        cfg = results["configs"].get(m, {}).get("model", {})
        bits = [f"{k} {cfg[k]}" for k in ("emb_size", "hidden_size", "n_layers", "chunk_size", "rrnn_size",
                                          "attention_size", "max_span_length", "nt_states", "t_states", "rank",
                                          "state_dim", "z_dim") if k in cfg]
        sizes.append([display(m), f"{params[m]:,.0f}" if params[m] else "—", ", ".join(bits)])
    lines += markdown_table(["model", "parameters", "size"], sizes, ["---", "---:", "---"])
    add("")
    return lines


def selection_criterion(model: str, monitor: dict, run: dict) -> str:
    """Why a run's ``best`` checkpoint is the one it is: its config's ``train.select_by`` on the monitor set
    (``results["monitor"]``), named with the sentences it reads and what its validation loss is (``run``: the
    run's summary, ``validation_loss``)."""
    entry = (monitor.get("models") or {}).get(model) or {}
    select_by = entry.get("select_by", "valid_ppl")
    if select_by == "dev_f1":
        count = entry.get("dev_f1_sentences")
        return ("highest dev F1 on the monitor's " + (f"first {count:,} " if count else "")
                + "sentences of 2-40 words (their gold trees)")
    what = run.get("validation_loss") or "validation perplexity"
    if "bound_sentences" in entry:
        longest = entry.get("bound_max_length")
        lengths = (f"{entry.get('bound_min_length', 1)}-{longest} words" if longest
                   else f"{entry.get('bound_min_length', 1)} words or more")
        return f"lowest {what} on the monitor's {entry['bound_sentences']:,} sentences of {lengths}"
    total = monitor.get("valid_sentences")
    return f"lowest {what} on the monitor's text" + (f" ({total:,} sentences)" if total else "")


def checkpoint_text(run: dict) -> str:
    """``epoch 3 of 8 (step 960 of 2,560)``: where a run's ``best`` checkpoint sits in its training."""
    if not run or run.get("best_epoch") is None:
        return "—"
    steps, total = run.get("best_steps"), run.get("steps")
    of_total = f" of {total:,}" if total is not None else ""
    if run.get("best_mid_epoch") and steps is not None:
        return f"step {steps:,}{of_total} (inside epoch {run['best_epoch']} of {run.get('epochs', '?')})"
    where = f"epoch {run['best_epoch']}" + (" (partial)" if run.get("best_partial") else "")
    where += f" of {run.get('epochs', '?')}"
    if steps is not None:
        where += f" (step {steps:,}{of_total})"
    elif total is not None:
        where += f" ({total:,} steps in all)"
    return where


def _f1_text(value) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) else "—"


def _selection(*, results, split, where, dev_where, models, per_model, monitor, **_) -> list[str]:
    """``## Model selection``: per run, the checkpoint every figure comes from, what chose it, its dev F1 on the
    monitor set against the best and the last evaluation's; with a test split, its dev and test F1 side by side."""
    several = len(results.get("seeds") or []) > 1
    test = split != "valid"
    rows = []
    for m in models:
        for seed, data in (per_model[m].get("seeds") or {}).items():
            run = data.get("run") or {}
            row = [display(m) + (f" (seed {seed})" if several else "")
                   + (" (earlier invocation)" if data.get("earlier_invocation") else ""),
                   checkpoint_text(run), selection_criterion(m, monitor, run),
                   _f1_text(run.get("best_dev_f1")), _f1_text(run.get("peak_dev_f1")), _f1_text(run.get("last_dev_f1"))]
            if test:
                dev = ((per_model[m].get("dev") or {}).get("seeds") or {}).get(seed) or {}
                for scores in ((dev.get("scores") or {}), (data.get("scores") or {})):
                    row += [_f1_text((scores.get("wsj40") or {}).get("sentence_f1")),
                            _f1_text((scores.get("all") or {}).get("sentence_f1"))]
            rows.append(row)
    if not rows:
        return []
    counts = sorted({entry["dev_f1_sentences"] for entry in (monitor.get("models") or {}).values()
                     if "dev_f1_sentences" in entry})
    header = ["run", "checkpoint evaluated (`best`)", "chosen by", "its dev F1 (monitor)", "best dev F1 (monitor)",
              "last dev F1 (monitor)"]
    if test:
        header += [f"WSJ40 F1, {dev_where}", f"all-length F1, {dev_where}", f"WSJ40 F1, {where}",
                   f"all-length F1, {where}"]
    lines = ["## Model selection: which checkpoint each figure comes from", "",
             "Every figure of a run below comes from its `best` checkpoint: the last evaluation during training that "
             "improved the run's selection value (`train.select_by`) on the monitor set, the valid split of "
             f"`{monitor.get('corpus', '?')}` (a dev set; the test split is never read in training or selection). "
             "The dev F1 columns parse the monitor's first "
             + ("/".join(f"{c:,}" for c in counts) if counts else "N") + " sentences of 2-40 words at each "
             "evaluation (`metrics.jsonl`'s `dev_f1`): a dev figure on those few sentences, shown to say what the "
             "selection chose, not a result" + (f"; the {dev_where} and {where} columns score the whole splits." if test
                                                 else "."), ""]
    lines += markdown_table(header, rows, ["---", "---", "---"] + ["---:"] * (len(header) - 3))
    return lines + [""]


def sentence_reading(models: list) -> str:
    """How the report's models read a sentence when they parse it, from their parser kinds
    (:mod:`induce.trees.kinds`): ``<eos> words <eos>`` (the language models' context), or the words alone for
    a ``words_only`` kind (a grammar generates the words, not the end marks). A model not registered in this
    process is left out of the sentence."""
    from induce.models.registry import get_model_class

    eos, alone = "`<eos> words <eos>`", "the words alone, without end marks"
    readers: dict[str, list[str]] = {}
    for model in models:
        try:
            kind = get_model_class(model).parser_kind
        except KeyError:
            continue
        readers.setdefault(alone if kind.words_only else eos, []).append(display(model))
    if len(readers) > 1:
        return ("Every model parses each sentence once from a fresh state, its words after punctuation removal ("
                + "; ".join(f"{join_words(names)} as {form}" for form, names in readers.items()) + ")")
    form = {eos: f"{eos} ", alone: "without end marks, "}.get(next(iter(readers), ""), "")
    return f"Every model parses each sentence once (words after punctuation removal, {form}from a fresh state)"


def _convention(*, results, profile, models, **_) -> list[str]:
    """``## Evaluation convention``."""
    lines: list[str] = []
    add = lines.append
    add("## Evaluation convention")
    add("")
    conv = results.get("convention", {})
    add(f"* **Unlabeled F1** (Kim et al. 2019, the default of `induce eval`): {conv.get('all', '')}. "
        "The tables show **sentence-level F1** (mean of per-sentence F1, 0-100); corpus-level F1 is in `results.json`. "
        f"{sentence_reading(models)}; the WSJ10 / WSJ40 figures score those trees on the sentences of at most "
        "10 / 40 words.")
    add(f"* **The papers' conventions**, so that each published figure is compared with ours computed its way: "
        f"PaLM's evaluation counts the whole-sentence span (WSJ40: {conv.get('palm_wsj40', '')}); ON-LSTM's scores "
        f"one-word sentences, each with F1 = 1 (WSJ10: {conv.get('onlstm_wsj10', '')}). Both are computed on the "
        "same trees as our default figures (`induce eval --count-root`; one-word sentences: "
        "`induce_convention(min_length=1)`, which `induce eval` has no flag for).")
    add("* **Perplexity**: the language model on the LM text of the evaluation split (Mikolov-style: lower-cased, "
        "numbers as `N`, punctuation removed, `<unk>` outside the vocabulary), read as one stream in batches with the "
        "state carried over (`induce eval --lm`), the best checkpoint (ASGD averages when in the ASGD phase). "
        "The published perplexities are on Mikolov's PTB text (`ptb.test.txt`), not on this text: where Mikolov's "
        "text of the split was found, table 1 shows the perplexity on it too.")
    add("* **Branching** (PaLM Table 4): among the splits of spans longer than 2 words, % left splits "
        "`[i, j] -> [i, j-1] + (j)` and % right splits `[i, j] -> (i) + [i+1, j]`; gold nodes with more than two "
        "children count as neither (n-ary). On WSJ40 sentences.")
    add("* **Untrained models** (Table 4's first row): freshly initialised models (one per init seed) parse "
        + (f"the first {profile['random_init_sentences']:,} " if profile.get("random_init_sentences") else "all ")
        + "WSJ40 sentences of the split; mean ± std over the inits.")
    add("* **Seeds**: where several seeds ran, figures are mean ± sample standard deviation over them.")
    add("")
    return lines


def _language_modelling(*, results, where, models, per_model, **_) -> list[str]:
    """``## 1. Language modelling`` (PaLM Table 1 style)."""
    lines: list[str] = []
    add = lines.append
    add(f"## 1. Language modelling (PaLM Table 1 style), {where}")
    add("")
    mikolov = results.get("mikolov")
    pub_lm = PUBLISHED["lm"]
    rows = []
    bounds = perplexity_bounds(per_model, models)
    for m in models:
        s = per_model[m]["summary"]
        pub = pub_lm["rows"].get(m)
        mark = "≤ " if m in bounds else ""
        rows.append([display(m), fmt(s["epochs"], 0),
                     f"{s['train_tokens']['mean']:,.0f}" if s["train_tokens"]["mean"] else "—",
                     minutes(s["train_seconds"]["mean"]), mark + fmt(s["perplexity"]),
                     (mark + fmt(s.get("mikolov_perplexity"))) if mikolov else "not found",
                     f"{pub['value']:.2f} ({pub['source']})" if pub else "—"])
    lines += markdown_table(["model", "epochs", "tokens trained", "training time (with validation)",
                     f"perplexity, our {results['split']} text", f"perplexity, Mikolov's {results['split']} text",
                     "published (Mikolov's PTB test text)"], rows)
    add("")
    note = sentence_level_note(per_model, models)
    if note:
        add(note)
        add("")
    add(tokens_trained_note(results, models))
    add("")
    if mikolov:
        add(f"Mikolov's text: `{mikolov['path']}`, {mikolov['tokens']:,} words. **The vocabularies differ**: ours is "
            f"built from the training trees (WSJ 02-21), Mikolov's from sections 00-20; {mikolov['our_unk']:,} of its "
            f"words ({100 * mikolov['our_unk'] / max(mikolov['tokens'], 1):.1f}%) are `<unk>` for our models, against "
            f"{mikolov['their_unk']:,} ({100 * mikolov['their_unk'] / max(mikolov['tokens'], 1):.1f}%) in the file "
            "itself. More `<unk>` makes the text easier to predict, so this column is not strictly comparable with the "
            "published one either, which is also on the test text.")
    else:
        add(f"Mikolov's text of this split was not found (`--lm-text FOLDER` with `ptb.{results['split']}.txt`, "
            "or `ptb_lm/` under the data root): no perplexity here is on the text the published figures use, and "
            "none is comparable with them.")
    add("")
    add(f"Published column: {pub_lm['note']} PaLM: {PUBLISHED['table1']['missing']}.")
    add("")
    for sentence in supervision_sentences(per_model, models):
        add(sentence)
        add("")
    return lines


def supervision_sentences(per_model: dict, models: list) -> list[str]:
    """For each supervised model (PaLM-S) beside its family's unsupervised model (PaLM-U): the two perplexities
    on this report's text and the relative change, beside the paper's finding that supervision lowers it."""
    from induce.models.registry import family_of, model_classes

    classes = model_classes()

    def family(m):
        return family_of(classes[m]) if m in classes else None

    out = []
    for sup in models:
        if not (per_model[sup].get("traits") or {}).get("supervised") or family(sup) is None:
            continue
        twins = [m for m in models if m != sup and family(m) == family(sup)
                 and not (per_model[m].get("traits") or {}).get("supervised")
                 and not (per_model[m].get("traits") or {}).get("control")]
        ppl_sup = stat_mean(per_model[sup]["summary"].get("perplexity"))
        for twin in twins:
            ppl = stat_mean(per_model[twin]["summary"].get("perplexity"))
            if ppl is None or ppl_sup is None or ppl <= 0:
                continue
            change = 100 * (ppl_sup - ppl) / ppl
            verdict = "lower" if change < 0 else "higher" if change > 0 else "equal"
            paper = PUBLISHED["table1"]
            out.append(f"**Supervision and perplexity**: {display(sup)} {ppl_sup:.1f} against {display(twin)} "
                       f"{ppl:.1f} on this text ({change:+.2f}% relative: {verdict}); the paper: "
                       f"\"{paper['supervision']}\" ({paper['supervision_source']}).")
    return out


def perplexity_bounds(per_model: dict, models: list) -> list:
    """The models whose perplexity is an upper bound (a seed's run says so: ``run.perplexity_bound``)."""
    return [m for m in models if any((data.get("run") or {}).get("perplexity_bound")
                                     for data in (per_model[m].get("seeds") or {}).values())]


def sentence_level_note(per_model: dict, models: list) -> str:
    """What the perplexity of the models that learn from whole sentences (``traits.sentence_level``: the
    PCFGs) is, beside the language models' exact perplexity of the running text: each sentence alone, one-word
    sentences left out, an upper bound where the loss is a bound, and the length cap of their training."""
    sentence = [m for m in models if (per_model[m].get("traits") or {}).get("sentence_level")]
    if not sentence:
        return ""
    bounds = [m for m in perplexity_bounds(per_model, models) if m in sentence]
    exact = [m for m in sentence if m not in bounds]
    caps = {}
    for m in sentence:
        caps.setdefault((per_model[m].get("traits") or {}).get("train_max_length"), []).append(display(m))
    text = (f"**{join_words([display(m) for m in sentence])}** learn from whole sentences: their perplexity reads "
            "each sentence alone (no context from the sentences before it, unlike the LSTMs' running text) and leaves "
            "one-word sentences out.")
    if bounds:
        text += (f" {join_words([display(m) for m in bounds])}: **an upper bound** (`≤`: the negative ELBO, with a "
                 "latent variable), not the model's perplexity" + (f"; {join_words([display(m) for m in exact])}: "
                                                                    "exact (the inside algorithm)" if exact else "")
                 + ".")
    trained = [f"{cap} words ({join_words(names)})" for cap, names in caps.items() if cap]
    if trained:
        text += (f" They were trained on sentences of at most {', '.join(trained)}: `data.max_length`, and are "
                 "evaluated here on every length of the split.")
    text += " Not comparable with the exact perplexities of the other models beside them."
    return text


def _parsing_wsj40(*, where, models, per_model, baselines, **_) -> list[str]:
    """``## 2. Unsupervised parsing, WSJ40`` (PaLM Table 3)."""
    lines: list[str] = []
    add = lines.append
    add(f"## 2. Unsupervised parsing, WSJ40 (PaLM Table 3), {where}")
    add("")
    pub3 = PUBLISHED["table3"]["rows"]
    rows = []
    for kind in BASELINES:
        if kind in baselines:
            sc = baselines[kind]["scores"]
            rows.append([f"{display(kind)} (baseline)", fmt(sc["wsj40"]["sentence_f1"]), fmt(sc["wsj40"]["corpus_f1"]),
                         fmt((sc.get("palm_wsj40") or {}).get("sentence_f1")), published_value(pub3.get(kind))])
    for m in models:
        s = per_model[m]["summary"]
        note = PUBLISHED["table3"]["notes"].get(m)
        rows.append([display(m), fmt(s["sentence_f1_wsj40"]), fmt(s["corpus_f1_wsj40"]),
                     fmt(s.get("sentence_f1_palm_wsj40")),
                     published_value(pub3.get(m)) + (f" ({note})" if note and m in pub3 else "")])
    rows.append(["DIORA", "not run", "not run", "not run",
                 f"{pub3['DIORA']:.1f} ({PUBLISHED['table3']['notes']['DIORA']})"])
    lines += markdown_table(["model", "sentence F1 (ours)", "corpus F1 (ours)", "sentence F1, PaLM's convention",
                     "published F1 (PaLM's convention)"], rows)
    add("")
    add(f"Published: {PUBLISHED['table3']['source']}. Compare the last two columns: both count the whole-sentence "
        "span (which every tree gets right, so they are higher than ours on short sentences).")
    add("")
    return lines


def _branching(*, results, where, models, per_model, **_) -> list[str]:
    """``## 3. Branching, WSJ40`` (PaLM Table 4)."""
    lines: list[str] = []
    add = lines.append
    add(f"## 3. Branching, WSJ40 (PaLM Table 4), {where}")
    add("")
    pub4 = PUBLISHED["table4"]
    rows = []
    for m, info in results.get("random_init", {}).items():
        pub = pub4["random"] if m == pub4["random"]["model"] else None
        rows.append([f"{display(m)}, untrained ({info['n_models']} inits, {info['n_sentences']} sentences)",
                     fmt(info["left_split_pct"]), fmt(info["right_split_pct"]),
                     f"{pub['left']:.1f} ± {pub['left_std']:.1f}" if pub else "—",
                     f"{pub['right']:.1f} ± {pub['right_std']:.1f}" if pub else "—"])
    for m in models:
        s = per_model[m]["summary"]
        pub = pub4.get(m)
        rows.append([display(m), fmt(s["left_split_pct_wsj40"]), fmt(s["right_split_pct_wsj40"]),
                     published_value(pub["left"]) if pub else "—", published_value(pub["right"]) if pub else "—"])
    gold = results.get("gold", {}).get("wsj40")
    if gold:
        rows.append(["gold", fmt(gold["left_split_pct"]), fmt(gold["right_split_pct"]),
                     published_value(pub4["gold"]["left"]), published_value(pub4["gold"]["right"])])
    lines += markdown_table(["", "% left (ours)", "% right (ours)", "% left (published)", "% right (published)"], rows)
    add("")
    add(f"Published: {pub4['source']}; its first row averages {pub4['random']['n_models']} randomly initialised PaLM "
        "models. PaLM-RB is not listed untrained (its trees do not depend on its weights: always right-branching), "
        "nor PaLM-S when PaLM is (untrained, they are the same model)."
        + (f" Gold: {gold['nary_split_pct']:.1f}% of the gold splits are n-ary." if gold else ""))
    add("")
    lines += _like_with_like(results, where, models, per_model)
    return lines


def _like_with_like(results: dict, where: str, models: list, per_model: dict) -> list[str]:
    """The trained models scored on the untrained models' sentences (the first ``random_init_sentences`` WSJ40
    sentences of the split), beside the untrained models: one set of sentences for both."""
    init = results.get("random_init") or {}
    if not init:
        return []
    counts = {info["n_sentences"] for info in init.values()}
    rows = []
    for m, info in init.items():
        rows.append([f"{display(m)}, untrained ({info['n_models']} inits)", fmt(info.get("sentence_f1")),
                     fmt(info["left_split_pct"]), fmt(info["right_split_pct"])])
    for m in models:
        s = per_model[m]["summary"]
        if (s.get("init_sentences_sentence_f1") or {}).get("mean") is None:
            continue
        rows.append([display(m), fmt(s["init_sentences_sentence_f1"]), fmt(s["init_sentences_left_split_pct"]),
                     fmt(s["init_sentences_right_split_pct"])])
    if len(rows) == len(init) or len(counts) != 1:
        return []
    (count,) = counts
    lines = [f"**Like with like**: the untrained models parse the first {count:,} WSJ40 sentences of {where}; the "
             "trained models on those same sentences:", ""]
    lines += markdown_table(["", f"WSJ40 F1 ({count:,} sentences)", "% left", "% right"], rows)
    return lines + [""]


def _wsj10_and_labels(*, where, models, per_model, baselines, **_) -> list[str]:
    """``## 4. WSJ10, all lengths and per-label recall`` (ON-LSTM / Kim et al. style)."""
    lines: list[str] = []
    add = lines.append
    add(f"## 4. WSJ10, all lengths and per-label recall (ON-LSTM / Kim et al. style), {where}")
    add("")
    rows = []
    for kind in BASELINES:
        if kind in baselines:
            sc = baselines[kind]["scores"]
            rows.append([f"{display(kind)} (baseline)", fmt(sc["wsj10"]["sentence_f1"]), fmt(sc["all"]["sentence_f1"]),
                         fmt((sc.get("onlstm_wsj10") or {}).get("sentence_f1")),
                         fmt((sc.get("onlstm_all") or {}).get("sentence_f1"))]
                        + [fmt(sc["all"]["label_recall"].get(label)) for label in REPORTED_LABELS])
    for m in models:
        s = per_model[m]["summary"]
        rows.append([display(m), fmt(s["sentence_f1_wsj10"]), fmt(s["sentence_f1_all"]),
                     fmt(s.get("sentence_f1_onlstm_wsj10")), fmt(s.get("sentence_f1_onlstm_all"))]
                    + [fmt(s[f"recall_{label}"]) for label in REPORTED_LABELS])
    counts = None
    if baselines:
        counts = next(iter(baselines.values()))["scores"]["all"]["label_counts"]
    header = ["model", "WSJ10 F1", "all-length F1", "WSJ10 F1, ON-LSTM's convention",
              "all-length F1, ON-LSTM's convention"] + [f"{label} recall" + (f" ({counts[label]:,})" if counts else "")
                                                       for label in REPORTED_LABELS]
    lines += markdown_table(header, rows)
    add("")
    add(f"Per-label recall: share of the gold constituents with that label (all lengths; their number in brackets) "
        f"that the induced tree has. ON-LSTM's convention keeps one-word sentences, each scoring F1 = 1 (ours skips "
        f"them). Published: {PUBLISHED['kim_onlstm']['missing']}.")
    add("")
    return lines


def grammar_models(per_model: dict, models: list) -> list:
    """The report's grammars (parser kind ``grammar``): the models of the learning-curves figure."""
    return [m for m in models if (per_model[m].get("traits") or {}).get("parser_kind") == "grammar"]


def all_lengths_models(per_model: dict, models: list) -> list:
    """The models set beside a published all-length sentence F1: the grammars and every model that declares one."""
    grammars = grammar_models(per_model, models)
    return [m for m in models if m in grammars or m in PUBLISHED["all_lengths"]["rows"]]


def _published_text(pub: Optional[dict]) -> str:
    return (f"{pub['value']:.1f}" + (f" ± {pub['std']:.1f}" if "std" in pub else "")) if pub else "—"


def _all_lengths_rows(per_model: dict, chosen: list, baselines: dict, several: bool) -> list:
    """Rows of the all-lengths table: right-branching first (ours beside the published one), then each run."""
    rows = []
    right, right_pub = baselines.get("right"), PUBLISHED["all_lengths"]["baselines"]["right"]
    if right:
        rows.append(["right-branching (baseline)", _f1_text(right["scores"]["all"]["sentence_f1"]),
                     _published_text(right_pub), right_pub["source"], "—", "—"])
    for m in chosen:
        pub = PUBLISHED["all_lengths"]["rows"].get(m)
        cap = (per_model[m].get("traits") or {}).get("train_max_length")
        for seed, data in (per_model[m].get("seeds") or {}).items() or [(None, {})]:
            run = data.get("run") or {}
            cpu = run.get("train_cpu_seconds")
            trained = [f"{run['steps']:,} steps" if isinstance(run.get("steps"), int) else None,
                       f"{cpu / 60:.1f} CPU-min" if isinstance(cpu, (int, float)) else None,
                       f"sentences of at most {cap} words" if cap else None]
            source = (pub["source"] + (f" ({pub['note']})" if pub.get("note") else "")) if pub else "—"
            rows.append([display(m) + (f" (seed {seed})" if several and seed else ""),
                         _f1_text(((data.get("scores") or {}).get("all") or {}).get("sentence_f1")
                                  if data.get("scores") or several
                                  else stat_mean(per_model[m]["summary"].get("sentence_f1_all"))),
                         _published_text(pub), source, checkpoint_text(run), ", ".join(t for t in trained if t) or "—"])
    return rows


def against_right_branching(per_model: dict, chosen: list, baselines: dict) -> list[str]:
    """One sentence per model with a published figure: its F1 against right-branching here and in its paper
    (the seed papers' finding is a margin over right-branching, which ours can be read against)."""
    right = stat_mean(((baselines.get("right") or {}).get("scores") or {}).get("all", {}).get("sentence_f1"))
    right_pub = PUBLISHED["all_lengths"]["baselines"]["right"]["value"]
    out = []
    for m in chosen:
        pub = PUBLISHED["all_lengths"]["rows"].get(m)
        ours = stat_mean((per_model[m].get("summary") or {}).get("sentence_f1_all"))
        if pub is None or ours is None or right is None:
            continue
        out.append(f"* {display(m)}: {ours:.1f} against right-branching's {right:.1f} here "
                   f"({ours - right:+.1f}); published {pub['value']:.1f} against {right_pub:.1f} "
                   f"({pub['value'] - right_pub:+.1f}, {pub['source']}).")
    return out


def _all_lengths(*, results, split, where, models, per_model, monitor, baselines, **_) -> list[str]:
    """``## Sentence F1 over all lengths against the published figures``: right-branching and each model with a
    published all-length figure (ON-LSTM, PRPN, the grammars) beside it (source, convention, split), the
    checkpoint it comes from, each model's margin over right-branching beside its paper's, and the grammars'
    learning curve."""
    chosen = all_lengths_models(per_model, models)
    if not chosen:
        return []
    rows = _all_lengths_rows(per_model, chosen, baselines, len(results.get("seeds") or []) > 1)
    lines = ["## Sentence F1 over all lengths against the published figures", ""]
    lines += markdown_table(["model", f"sentence F1, all lengths (ours, {where})",
                             "published (WSJ test, all lengths)", "source", "checkpoint evaluated", "training"],
                            rows, ["---", "---:", "---:", "---", "---", "---"])
    lines.append("")
    margins = against_right_branching(per_model, chosen, baselines)
    if margins:
        lines += ["**Against right-branching**, here and in each paper (the seed papers' finding is the margin; "
                  "the mean of seeds where there are several):", "", *margins, ""]
    convention = (f"Convention: {PUBLISHED['all_lengths']['note']}, which is this report's default (sentence-level "
                  "F1 over all lengths, punctuation removed, one-word sentences skipped, trivial spans not counted).")
    source = results["corpus"]["eval"]
    if split == "test" and (source.get("source_kind") or source.get("kind")) in WSJ_SOURCES:
        lines.append(f"{convention} Ours are test figures, on the same split as the published ones; the model sizes "
                     "and training budgets are this profile's (Setup), not the papers'.")
    elif split == "test":
        lines.append(f"{convention} **Ours are test figures of other data ({where}), not of WSJ section 23**, the "
                     "published ones' split; the model sizes and training budgets are this profile's (Setup), not "
                     "the papers'.")
    else:
        lines.append(f"{convention} **Ours are dev figures ({where}), not test figures**: the published ones are on "
                     "WSJ section 23, which this data does not hold.")
    lines.append("")
    return lines + _learning_curves_text(results, monitor, grammar_models(per_model, models))


def _learning_curves_text(results: dict, monitor: dict, grammars: list) -> list[str]:
    figure = (results.get("figures") or {}).get("learning_curves")
    if not figure or not grammars:
        return []
    counts = sorted({(monitor.get("models") or {}).get(m, {}).get("dev_f1_sentences") for m in grammars} - {None})
    return [f"![learning curves]({figure})", "",
            "Learning curves of the grammars: dev F1 at each evaluation during training (`metrics.jsonl`: every "
            "epoch's end and, with `train.eval_every`, between them) against optimiser steps and against training "
            "CPU-minutes (`train_cpu_seconds`; a run that did not record CPU time is drawn against its wall-clock "
            "training minutes, and its legend says so). Dev F1 here is on the monitor sentences ("
            + (f"the first {'/'.join(f'{c:,}' for c in counts)} of 2-40 words" if counts else "2-40 words")
            + f" of `{monitor.get('corpus', '?')}` valid), a dev set: not the test figure, and not the whole "
            "dev split the table scores.", ""]


def _figures(*, results, monitor, **_) -> list[str]:
    """``## 5. Figures``."""
    lines: list[str] = []
    add = lines.append
    figs = results.get("figures", {})
    add("## 5. Figures")
    add("")
    if "training_curves" in figs:
        add("### Training curves")
        add("")
        add(f"![training curves]({figs['training_curves']})")
        add("")
        entries = (monitor.get("models") or {}).values()
        counts = sorted({entry["dev_f1_sentences"] for entry in entries if "dev_f1_sentences" in entry})
        capped = any("bound_sentences" in entry for entry in entries)
        add("Per evaluation, from each run's `metrics.jsonl`: validation perplexity on the monitor sentences "
            f"(`{monitor.get('corpus', '?')}` valid"
            + ("; a model that learns from whole sentences reads only those within its training length cap, and its "
               "figure is a bound where table 1 marks it `≤`" if capped else "")
            + "), training perplexity, and dev F1 on the monitor's "
            + (f"first {'/'.join(f'{c:,}' for c in counts)} sentences of 2-40 words" if counts
               else "sentences of 2-40 words")
            + " (a dev set); a hollow marker is a partial epoch cut by the budget, placed at the share of the epoch "
              "it trained, and an evaluation inside an epoch sits at the share of the epoch's steps done.")
        add("")
    if "branching" in figs:
        add("### Branching")
        add("")
        add(f"![branching]({figs['branching']})")
        add("")
    examples = results.get("examples", [])
    if examples:
        add("### Example sentences")
        add("")
        add("Gold tree (its constituent labels; punctuation and POS tags removed) and each model's tree (first seed). "
            "Induced constituents "
            "that count for F1 are green when the gold tree has them, red otherwise.")
        add("")
        for k, example in enumerate(examples, start=1):
            add(f"**Sentence {example['index']}** — {' '.join(example['words'])}")
            add("")
            if example.get("figure"):
                add(f"![example {k}]({example['figure']})")
                add("")
            add("```")
            add(f"{'gold':<9} {example['gold']}")
            for m, tree in example["trees"].items():
                f1 = example["f1"].get(m)
                add(f"{display(m):<9} {tree}" + (f"   F1 {f1:.1f}" if f1 is not None else ""))
            add("```")
            add("")
    attention = [k for k in figs if k.startswith("attention_")]
    if attention:
        add("### PaLM span attention")
        add("")
        add("For each word j (row), the softmax over the spans [i, j] inside the sentence of their scores (column: the "
            "span start i). The parser splits [i, j] before the start of the highest-scoring right part.")
        add("")
        for key in attention:
            add(f"![{key}]({figs[key]})")
            add("")
    distances = [k for k in figs if k.startswith("distances_")]
    if distances:
        add("### ON-LSTM / PRPN syntactic distances")
        add("")
        add("Distance before each word (bars: what the parser reads; it splits a span at its largest distance). "
            "ON-LSTM: the other layers' distances as lines.")
        add("")
        for key in distances:
            add(f"![{key}]({figs[key]})")
            add("")
    return lines


def _steps_and_files(*, results, **_) -> list[str]:
    """``## 6. Steps`` and ``## 7. Files and commands``."""
    lines: list[str] = []
    add = lines.append
    add("## 6. Steps")
    add("")
    rows = []
    log = results.get("step_log", {})
    for step in results.get("steps", []):
        previous = log.get(step["name"], {})
        seconds = step["seconds"] if step["status"] != "skipped" else previous.get("seconds")
        rows.append([step["name"], step["status"], minutes(seconds) if seconds is not None else "—",
                     step.get("detail", "").replace("|", "/")[:160]])
    lines += markdown_table(["step", "this run", "time (last run)", "detail"], rows, ["---", "---", "---:", "---"])
    add("")
    add("## 7. Files and commands")
    add("")
    add("* `results.json`: every figure above, per seed, with each run's per-epoch history; `eval/*.json`: the "
        "evaluation of each run, baseline and untrained model; `eval/*.trees.txt`: each run's trees (one per line, "
        "`induce eval FILE --gold ...` scores them again); `runs/`: the training runs (`induce show tree --checkpoint "
        "runs/RUN ...`).")
    add(f"* Re-run: `{results.get('command') or 'induce reproduce'}` (finished steps are skipped; an interrupted "
        "training run continues from its last checkpoint with the rest of its budget).")
    add("")
    return lines


#: The sections of ``REPORT.md``, in order.
SECTIONS = (
    _preamble,
    _setup,
    _selection,
    _convention,
    _language_modelling,
    _parsing_wsj40,
    _branching,
    _wsj10_and_labels,
    _all_lengths,
    seeds_section,
    _figures,
    _steps_and_files,
)


