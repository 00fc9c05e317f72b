"""The reproduction report: ``results.json``, ``REPORT.md`` and the figures it embeds.

The published figures quoted here are the ones in the paper texts under ``shared/papers/``
(:data:`PUBLISHED`, each with its table); ``tests/test_reproduce.py`` checks them against those
texts when they are present. Nothing else is quoted: where a paper's table is not in the texts
(PaLM's Table 1 perplexities, ON-LSTM's and Kim et al.'s F1 and label recall) the report says so.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

PAPER_FILE = "palm-peng-schwartz-smith-2019.txt"
PALM = "Peng, Schwartz and Smith (2019), PaLM"

#: Published figures, from ``shared/papers/palm-peng-schwartz-smith-2019.txt``.
PUBLISHED = {
    "table3": {
        "source": f"{PALM}, Table 3: unlabeled unsupervised parsing F1 on WSJ-40 (test, punctuation removed)",
        "rows": {"right": 40.7, "prpn": 52.4, "palm": 42.0, "DIORA": 60.6},
        "notes": {"prpn": "taken by PaLM from Drozdov et al. (2019)", "DIORA": "trained on AllNLI; not part of this toolkit"},
    },
    "table4": {
        "source": f"{PALM}, Table 4: % left / right splits on the WSJ-40 test set",
        "random": {"left": 39.3, "left_std": 10.5, "right": 41.2, "right_std": 8.8, "n_models": 25, "model": "palm"},
        "palm": {"left": 1.1, "right": 85.6},
        "gold": {"left": 6.5, "right": 52.7},
    },
    "table1": {
        "source": f"{PALM}, Table 1: PTB language-model perplexity",
        "rows": {},
        "missing": "the values of PaLM's Table 1 are not in the paper texts available here "
                   f"(shared/papers/{PAPER_FILE} and its second extraction hold Tables 3, 4 and 5 only); none is quoted",
    },
    "kim_onlstm": {
        "missing": "ON-LSTM's (Shen et al. 2019) and Kim et al.'s (2019) WSJ10 / full-test F1 and per-label recall are "
                   "not in the paper texts available here; none is quoted",
    },
}

NAMES = {"prpn": "PRPN", "onlstm": "ON-LSTM", "palm": "PaLM-U", "palm-s": "PaLM-S", "palm-rb": "PaLM-RB",
         "right": "right-branching", "left": "left-branching", "balanced": "balanced", "random": "random trees"}
LABELS = ("NP", "VP", "PP", "SBAR", "ADJP", "ADVP")


def display(name: str) -> str:
    return NAMES.get(name, name)


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


def _pub(value) -> str:
    return "—" if value is None else f"{value:.1f}"


# ------------------------------------------------------------------------------------------ figures


def choose_examples(kept: list, count: int, shortest: int = 8, longest: int = 15) -> list[int]:
    """``count`` sentence indices spread over the split, among sentences of ``shortest``..``longest``
    words after punctuation removal (deterministic)."""
    candidates = [i for i, words in enumerate(kept) if shortest <= len(words) <= longest]
    if not candidates or count <= 0:
        return []
    count = min(count, len(candidates))
    return [candidates[(k * len(candidates)) // count] for k in range(count)]


def make_figures(results: dict, out: Path, repro) -> dict:
    """Draw every figure into ``out/figures``; returns ``{name: relative path}`` and adds the
    example sentences (text trees, per-model F1) to ``results["examples"]``."""
    from induce import figures
    from induce.evaluation import EvalConvention, prepare_gold
    from induce.inference import format_tree, load_run
    from induce.show import display_gold, sentence_structure, tree_f1

    out = Path(out)
    folder = out / "figures"
    made: dict = {}
    models = results["models_order"]
    first_seed = {m: next(iter(results["models"][m]["seeds"]), None) for m in models}

    histories = {}
    for model in models:
        for seed, data in results["models"][model]["seeds"].items():
            label = display(model) + (f" (seed {seed})" if len(results["seeds"]) > 1 else "")
            histories[label] = data.get("history", [])
    if any(histories.values()):
        epoch_tokens = ((results["corpus"]["train"].get("splits") or {}).get("train") or {}).get("lm_tokens")
        made["training_curves"] = _rel(figures.plot_training_curves(
            histories, folder / "training-curves.png", epoch_tokens=epoch_tokens), out)

    rows = []
    for model, info in results["random_init"].items():
        rows.append((f"{display(model)} untrained ({info['n_models']} inits)", info["left_split_pct"]["mean"],
                     info["right_split_pct"]["mean"],
                     100 - info["left_split_pct"]["mean"] - info["right_split_pct"]["mean"], 0.0))
    for model in models:
        summary = results["models"][model]["summary"]
        if summary["left_split_pct_wsj40"]["mean"] is not None:
            rows.append((display(model), summary["left_split_pct_wsj40"]["mean"],
                         summary["right_split_pct_wsj40"]["mean"], summary["other_binary_split_pct_wsj40"]["mean"], 0.0))
    gold = results.get("gold", {}).get("wsj40")
    if gold:
        rows.append(("gold", gold["left_split_pct"], gold["right_split_pct"], gold["other_binary_split_pct"],
                     gold["nary_split_pct"]))
    if rows:
        made["branching"] = _rel(figures.plot_branching(
            rows, folder / "branching.png", title=f"Splits of spans > 2 words, WSJ40 {_split_name(results)}"), out)

    gold_trees, kept = repro._gold()
    indices = choose_examples(kept, repro.profile.example_sentences)
    loaded = {}
    for model in models:
        seed = first_seed[model]
        if seed is not None:
            try:
                loaded[model] = load_run(results["models"][model]["seeds"][seed]["run_dir"], repro.eval_device)
            except Exception:  # noqa: BLE001 - a figure must not stop the report
                continue
    examples = []
    structures: dict = {model: [] for model in loaded}
    for number, index in enumerate(indices, start=1):
        prepared = prepare_gold(gold_trees[index], EvalConvention())
        gold_tree = display_gold(gold_trees[index])
        entry = {"index": index, "words": prepared.words, "gold": format_tree(gold_tree), "trees": {}, "f1": {}}
        panels = []
        for model, run in loaded.items():
            structure = sentence_structure(run, prepared.words, device=repro.eval_device, keep_punct=True)
            structures[model].append((f"sentence {index}", structure))
            f1 = tree_f1(structure.tree, gold_trees[index])
            entry["trees"][model] = format_tree(structure.tree)
            entry["f1"][model] = f1
            panels.append((f"{display(model)} (F1 {f1:.0f})" if f1 is not None else display(model), structure.tree))
        if panels:
            path = figures.plot_trees(panels, folder / f"example-{number}.png", gold=gold_tree,
                                      title=f"{_split_name(results)} sentence {index}")
            entry["figure"] = _rel(path, out)
        examples.append(entry)
    results["examples"] = examples
    for model, items in structures.items():
        if not items:
            continue
        kind = items[0][1].kind
        if kind == "span":
            path = figures.plot_span_attention(items, folder / f"attention-{model}.png",
                                               title=f"{display(model)}: span attention (row: span end, column: span start)")
        else:
            path = figures.plot_distances(items, folder / f"distances-{model}.png",
                                          title=f"{display(model)}: syntactic distance before each word")
        made[f"{'attention' if kind == 'span' else 'distances'}_{model}"] = _rel(path, out)
    return made


def _rel(path: Path, out: Path) -> str:
    return Path(path).relative_to(out).as_posix()


def split_label(split: str, source_kind: Optional[str]) -> str:
    """``dev (WSJ 22)``, ``test (WSJ 23)``, ``dev (NLTK sample)``, ``dev (synthetic treebank)``..."""
    name = "dev" if split == "valid" else "test"
    where = {"ldc": "WSJ 22" if split == "valid" else "WSJ 23", "wsj-files": "WSJ 22" if split == "valid" else "WSJ 23",
             "nltk-sample": "NLTK sample", "synthetic": "synthetic treebank"}.get(source_kind or "", "")
    return f"{name} ({where})" if where else f"{split} split"


def _split_name(results: dict) -> str:
    source = results["corpus"]["eval"]
    return split_label(results["split"], source.get("source_kind") or source.get("kind"))


# ------------------------------------------------------------------------------------------- report


def write_results(results: dict, out: Path) -> tuple[Path, Path]:
    """``out/results.json`` and ``out/REPORT.md``."""
    from induce.treeio import atomic_write_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = dict(results, published=PUBLISHED)
    json_path = out / "results.json"
    # strict JSON: NaN / infinity (a diverged run) become null; "diverged_seeds" says which
    atomic_write_text(json_path, json.dumps(_strict(results), indent=1, sort_keys=True, default=str,
                                            allow_nan=False) + "\n")
    md_path = out / "REPORT.md"
    atomic_write_text(md_path, render_markdown(results))
    return json_path, md_path


def _strict(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _strict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(item) for item in value]
    return value


def _table(header: list[str], rows: list[list[str]], align: Optional[list[str]] = None) -> list[str]:
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _minutes(seconds) -> str:
    if seconds is None:
        return "—"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def render_markdown(results: dict) -> str:
    profile = results["profile"]
    split = results["split"]
    split_name = _split_name(results)
    models = results["models_order"]
    per_model = results["models"]
    baselines = results.get("baselines", {})
    eval_corpus, train_corpus = results["corpus"]["eval"], results["corpus"]["train"]
    budget = results.get("time_per_model_s")
    seeds = results["seeds"]
    eval_counts = (eval_corpus.get("splits") or {}).get(split, {})
    synthetic = eval_corpus.get("kind") == "synthetic" or eval_corpus.get("source_kind") == "synthetic"
    lines: list[str] = []
    add = lines.append

    add(f"# Reproduction report (profile `{profile['name']}`)")
    add("")
    add(f"Generated {results['generated_at']} by `{results.get('command') or 'induce reproduce'}`.")
    add("")
    small = bool(budget) or bool(profile.get("train_sentences"))
    scope = []
    if budget:
        scope.append(f"trained for {_minutes(budget)} per model and seed")
    if profile.get("train_sentences"):
        scope.append(f"on the first {profile['train_sentences']:,} training sentences")
    wsj = eval_corpus.get("source_kind") in ("ldc", "wsj-files")
    held_out = wsj and "test" not in (eval_corpus.get("splits") or {})
    warning = (f"**Read this first.** Every figure of ours below is on **{split_name}**"
               + (" (section 23 is held out here)" if held_out else "")
               + f", with the models of profile `{profile['name']}`"
               + (f" ({profile.get('description')})" if profile.get("description") else "")
               + (", " + " and ".join(scope) if scope else "") + ". "
               "The published figures are on the WSJ test set (section 23) with the papers' full-size models trained "
               "to convergence on GPUs. They are **not comparable 1:1**")
    warning += (": the published columns show what the papers report, not a target these small, briefly trained "
                "models are expected to reach." if small else
                ": different split, and seeds, budgets and implementation details may differ.")
    if synthetic:
        warning += (" **The data is the SYNTHETIC treebank (no Penn Treebank was found), not English: the figures "
                    "say nothing about the papers' results.**")
    add("> " + warning)
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

    # ---------------------------------------------------------------- setup
    add("## Setup")
    add("")
    machine = results.get("machine", {})
    train_splits = train_corpus.get("splits") or {}
    subset = train_corpus.get("subset") or {}
    train_text = (f"`{train_corpus['path']}`: {train_splits.get('train', {}).get('lm_sentences', '?'):,} sentences, "
                  f"{train_splits.get('train', {}).get('lm_tokens', 0):,} LM tokens")
    if subset.get("train_sentences"):
        train_text += f" (the first {subset['train_sentences']:,} training sentences of `{subset.get('of')}`, its vocabulary)"
    monitor = train_splits.get("valid", {})
    setup_rows = [
        ["profile", f"`{profile['name']}` ({results.get('profile_folder')}): {profile.get('description', '')}"],
        ["models", ", ".join(display(m) for m in models)],
        ["seeds", ", ".join(str(s) for s in seeds)],
        ["training budget", (f"{_minutes(budget)} per model and seed (`train.time_budget`, per-epoch validation included; "
                             "how much a model trains in that time depends on the machine's speed and load)"
                             if budget else "the configs' epochs / early stopping (no time budget)")],
        ["training data", train_text],
        ["vocabulary", f"{eval_corpus.get('vocab_size', '?'):,} types (including `<unk>`, `<eos>`)"
         if isinstance(eval_corpus.get("vocab_size"), int) else "?"],
        ["model selection", f"best validation perplexity on `{train_corpus['path']}` valid "
                            f"({monitor.get('lm_sentences', '?'):,} sentences, {monitor.get('lm_tokens', 0):,} tokens), "
                            "checked each epoch"],
        ["evaluation", f"{split_name}: `{eval_corpus['path']}` {split}, {eval_counts.get('trees', '?'):,} trees, "
                       f"{eval_counts.get('lm_tokens', 0):,} LM tokens"],
        ["configs", "`configs/<model>.yaml`" + (f" < `{results.get('profile_folder')}/<model>.yaml`" if profile else "")
         + " < profile overrides: " + (", ".join(f"`{o}`" for o in profile.get("overrides", [])) or "none")],
        ["profile's model changes", "; ".join(
            f"{display(m)}: " + ", ".join(f"`{k}={v}`" for k, v in changes.items())
            for m, changes in results.get("profile_model_changes", {}).items()) or "none"],
        ["machine", f"{machine.get('cpu', '?')}, {machine.get('cpu_count', '?')} cores, torch {machine.get('torch', '?')} "
                    f"(torch threads: {machine.get('torch_threads', '?')}), device {machine.get('device', '?')}"
                    + (f" ({machine['gpu']})" if machine.get("gpu") else "") + f"; {machine.get('platform', '')}"],
        ["wall time", _wall_text(results)],
    ]
    lines += _table(["", ""], setup_rows, ["---", "---"])
    add("")
    params = {m: per_model[m]["summary"]["params"]["mean"] for m in models}
    sizes = []
    for m in models:
        cfg = results["configs"].get(m, {}).get("model", {})
        bits = [f"{k} {cfg[k]}" for k in ("emb_size", "hidden_size", "n_layers", "chunk_size", "rrnn_size",
                                          "attention_size", "max_span_length") if k in cfg]
        sizes.append([display(m), f"{params[m]:,.0f}" if params[m] else "—", ", ".join(bits)])
    lines += _table(["model", "parameters", "size"], sizes, ["---", "---:", "---"])
    add("")

    # ---------------------------------------------------------------- convention
    add("## Evaluation convention")
    add("")
    conv = results.get("convention", {})
    add(f"* **Unlabeled F1** (Kim et al. 2019, the default of `induce eval`): {conv.get('all', '')}. "
        "The tables show **sentence-level F1** (mean of per-sentence F1, 0-100); corpus-level F1 is in `results.json`. "
        "Every model parses each sentence once (words after punctuation removal, `<eos> words <eos>` from a fresh "
        "state); the WSJ10 / WSJ40 figures score those trees on the sentences of at most 10 / 40 words.")
    add("* **Perplexity**: the language model on the LM text of the evaluation split (Mikolov-style: lower-cased, "
        "numbers as `N`, punctuation removed, `<unk>` outside the vocabulary), read as one stream in batches with the "
        "state carried over (`induce eval --lm`), the best checkpoint (ASGD averages when in the ASGD phase).")
    add("* **Branching** (PaLM Table 4): among the splits of spans longer than 2 words, % left splits "
        "`[i, j] -> [i, j-1] + (j)` and % right splits `[i, j] -> (i) + [i+1, j]`; gold nodes with more than two "
        "children count as neither (n-ary). On WSJ40 sentences.")
    add("* **Untrained models** (Table 4's first row): freshly initialised models (one per init seed) parse "
        + (f"the first {profile['random_init_sentences']:,} " if profile.get("random_init_sentences") else "all ")
        + f"WSJ40 sentences of the split; mean ± std over the inits.")
    add("* **Seeds**: where several seeds ran, figures are mean ± sample standard deviation over them.")
    add("")

    # ---------------------------------------------------------------- table 1
    add(f"## 1. Language modelling (PaLM Table 1 style), {split_name}")
    add("")
    rows = []
    for m in models:
        s = per_model[m]["summary"]
        rows.append([display(m), fmt(s["epochs"], 0), f"{s['train_tokens']['mean']:,.0f}" if s["train_tokens"]["mean"] else "—",
                     _minutes(s["train_seconds"]["mean"]), fmt(s["perplexity"]), "—"])
    lines += _table(["model", "epochs", "tokens trained", "training time (with validation)", "perplexity (ours)",
                     "published (PaLM Table 1, PTB test)"], rows)
    add("")
    add(f"Published column: {PUBLISHED['table1']['missing']}.")
    add("")

    # ---------------------------------------------------------------- table 3
    add(f"## 2. Unsupervised parsing, WSJ40 (PaLM Table 3), {split_name}")
    add("")
    pub3 = PUBLISHED["table3"]["rows"]
    rows = []
    for kind in ("right", "left", "balanced", "random"):
        if kind in baselines:
            sc = baselines[kind]["scores"]["wsj40"]
            rows.append([f"{display(kind)} (baseline)", fmt(sc["sentence_f1"]), fmt(sc["corpus_f1"]), _pub(pub3.get(kind))])
    for m in models:
        s = per_model[m]["summary"]
        note = PUBLISHED["table3"]["notes"].get(m)
        rows.append([display(m), fmt(s["sentence_f1_wsj40"]), fmt(s["corpus_f1_wsj40"]),
                     _pub(pub3.get(m)) + (f" ({note})" if note and m in pub3 else "")])
    rows.append(["DIORA", "not run", "not run", f"{pub3['DIORA']:.1f} ({PUBLISHED['table3']['notes']['DIORA']})"])
    lines += _table(["model", "sentence F1 (ours)", "corpus F1 (ours)", "published F1"], rows)
    add("")
    add(f"Published: {PUBLISHED['table3']['source']}.")
    add("")

    # ---------------------------------------------------------------- table 4
    add(f"## 3. Branching, WSJ40 (PaLM Table 4), {split_name}")
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
                     _pub(pub["left"]) if pub else "—", _pub(pub["right"]) if pub else "—"])
    gold = results.get("gold", {}).get("wsj40")
    if gold:
        rows.append(["gold", fmt(gold["left_split_pct"]), fmt(gold["right_split_pct"]),
                     _pub(pub4["gold"]["left"]), _pub(pub4["gold"]["right"])])
    lines += _table(["", "% left (ours)", "% right (ours)", "% left (published)", "% right (published)"], rows)
    add("")
    add(f"Published: {pub4['source']}; its first row averages {pub4['random']['n_models']} randomly initialised PaLM "
        "models. PaLM-RB is not listed untrained (its trees do not depend on its weights: always right-branching), "
        "nor PaLM-S when PaLM is (untrained, they are the same model)."
        + (f" Gold: {gold['nary_split_pct']:.1f}% of the gold splits are n-ary." if gold else ""))
    add("")

    # ---------------------------------------------------------------- Kim / ON-LSTM table
    add(f"## 4. WSJ10, all lengths and per-label recall (ON-LSTM / Kim et al. style), {split_name}")
    add("")
    rows = []
    for kind in ("right", "left", "balanced", "random"):
        if kind in baselines:
            sc = baselines[kind]["scores"]
            rows.append([f"{display(kind)} (baseline)", fmt(sc["wsj10"]["sentence_f1"]), fmt(sc["all"]["sentence_f1"])]
                        + [fmt(sc["all"]["label_recall"].get(label)) for label in LABELS])
    for m in models:
        s = per_model[m]["summary"]
        rows.append([display(m), fmt(s["sentence_f1_wsj10"]), fmt(s["sentence_f1_all"])]
                    + [fmt(s[f"recall_{label}"]) for label in LABELS])
    counts = None
    if baselines:
        counts = next(iter(baselines.values()))["scores"]["all"]["label_counts"]
    header = ["model", "WSJ10 F1", "all-length F1"] + [f"{label} recall" + (f" ({counts[label]:,})" if counts else "")
                                                       for label in LABELS]
    lines += _table(header, rows)
    add("")
    add(f"Per-label recall: share of the gold constituents with that label (all lengths; their number in brackets) "
        f"that the induced tree has. Published: {PUBLISHED['kim_onlstm']['missing']}.")
    add("")

    # ---------------------------------------------------------------- figures
    figs = results.get("figures", {})
    add("## 5. Figures")
    add("")
    if "training_curves" in figs:
        add("### Training curves")
        add("")
        add(f"![training curves]({figs['training_curves']})")
        add("")
        add("Per epoch, from each run's `metrics.jsonl`: validation perplexity (monitoring set, solid), training "
            "perplexity (dashed, x), dev F1 of the monitored sentences; a hollow marker is a partial epoch cut by the "
            "time budget, placed at the share of the epoch it trained.")
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
        add("Gold tree (its constituent labels; punctuation and POS tags removed) and each model's tree (first seed). Induced constituents "
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

    # ---------------------------------------------------------------- steps
    add("## 6. Steps")
    add("")
    rows = []
    log = results.get("step_log", {})
    for step in results.get("steps", []):
        previous = log.get(step["name"], {})
        seconds = step["seconds"] if step["status"] != "skipped" else previous.get("seconds")
        rows.append([step["name"], step["status"], _minutes(seconds) if seconds is not None else "—",
                     step.get("detail", "").replace("|", "/")[:160]])
    lines += _table(["step", "this run", "time (last run)", "detail"], rows, ["---", "---", "---:", "---"])
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
    return "\n".join(lines)


def _wall_text(results: dict) -> str:
    log = results.get("step_log", {})
    total = sum(float(entry.get("seconds", 0.0)) for entry in log.values())
    return (f"this invocation {_minutes(results.get('wall_seconds'))}; all steps' last runs together "
            f"{_minutes(total)} (steps skipped here ran in an earlier invocation)")
