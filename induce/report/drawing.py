"""The report's figures, drawn from the results and the trained runs (:func:`make_figures`); the
plotting itself is :mod:`induce.report.figures`."""
from __future__ import annotations

from pathlib import Path

from induce.report.names import display
from induce.report.text import split_name
from induce.trees.kinds import resolve


def choose_examples(kept: list, count: int, shortest: int = 8, longest: int = 15) -> list[int]:
    """``count`` sentence indices spread over the split, among sentences of ``shortest``..``longest``
    words after punctuation removal (deterministic)."""
    candidates = [i for i, words in enumerate(kept) if shortest <= len(words) <= longest]
    if not candidates or count <= 0:
        return []
    count = min(count, len(candidates))
    return [candidates[(k * len(candidates)) // count] for k in range(count)]


def make_figures(results: dict, out: Path, repro, outputs=None) -> dict:
    """Draw every figure into ``out/figures``; returns ``{name: relative path}`` and adds the
    example sentences (text trees, per-model F1) to ``results["examples"]``. ``outputs``: the
    :class:`induce.files.OutputSet` the figures belong to (the report's: written with it, all or none);
    without one each figure is written on its own."""
    out = Path(out)
    folder = out / "figures"
    place = outputs.path if outputs is not None else Path
    made: dict = {}
    made.update(_training_curves(results, folder, out, place))
    made.update(_learning_curves(results, folder, out, place))
    made.update(_branching(results, folder, out, place))
    made.update(_examples(results, folder, out, repro, place))
    return made


def _training_curves(results: dict, folder: Path, out: Path, place=Path) -> dict:
    """Validation / training perplexity and dev F1 per epoch of every run, on an axis of tokens trained."""
    from induce.report import figures
    from induce.training.batching import predicted_per_epoch

    histories, epoch_tokens = {}, {}
    counts = (results["corpus"]["train"].get("splits") or {}).get("train") or {}
    text_tokens = (counts["lm_tokens"] + counts["lm_sentences"]) if {"lm_tokens", "lm_sentences"} <= counts.keys() \
        else None
    for model in results["models_order"]:
        batch = ((results.get("configs") or {}).get(model, {}).get("data") or {}).get("batch_size")
        for seed, data in results["models"][model]["seeds"].items():
            label = display(model) + (f" (seed {seed})" if len(results["seeds"]) > 1 else "")
            histories[label] = data.get("history", [])
            if text_tokens is not None and isinstance(batch, int):
                # what an epoch predicts (train_tokens counts that), not the words of the text
                epoch_tokens[label] = predicted_per_epoch(text_tokens, batch)
    if not any(histories.values()):
        return {}
    path = folder / "training-curves.png"
    figures.plot_training_curves(histories, place(path), epoch_tokens=epoch_tokens)
    return {"training_curves": _rel(path, out)}


def _learning_curves(results: dict, folder: Path, out: Path, place=Path) -> dict:
    """Dev F1 against steps and CPU-minutes of every run of the report's grammars (the PCFG section's models)."""
    from induce.report import figures
    from induce.report.markdown import grammar_models

    chosen = grammar_models(results["models"], results["models_order"])
    histories = {}
    for model in chosen:
        for seed, data in results["models"][model]["seeds"].items():
            label = display(model) + (f" (seed {seed})" if len(results["seeds"]) > 1 else "")
            histories[label] = data.get("history", [])
    if not any(figures.learning_curve_points(h)["f1"] for h in histories.values()):
        return {}
    path = folder / "learning-curves.png"
    figures.plot_learning_curves(histories, place(path), title="Dev F1 (monitor set) during training")
    return {"learning_curves": _rel(path, out)}


def _branching(results: dict, folder: Path, out: Path, place=Path) -> dict:
    """Shares of left / right / other splits of the untrained models, the trained ones and the gold trees."""
    from induce.report import figures

    rows = []
    for model, info in results["random_init"].items():
        rows.append((f"{display(model)} untrained ({info['n_models']} inits)", info["left_split_pct"]["mean"],
                     info["right_split_pct"]["mean"],
                     100 - info["left_split_pct"]["mean"] - info["right_split_pct"]["mean"], 0.0))
    for model in results["models_order"]:
        summary = results["models"][model]["summary"]
        if summary["left_split_pct_wsj40"]["mean"] is not None:
            rows.append((display(model), summary["left_split_pct_wsj40"]["mean"],
                         summary["right_split_pct_wsj40"]["mean"], summary["other_binary_split_pct_wsj40"]["mean"],
                         0.0))
    gold = results.get("gold", {}).get("wsj40")
    if gold:
        rows.append(("gold", gold["left_split_pct"], gold["right_split_pct"], gold["other_binary_split_pct"],
                     gold["nary_split_pct"]))
    if not rows:
        return {}
    path = folder / "branching.png"
    figures.plot_branching(rows, place(path), title=f"Splits of spans > 2 words, WSJ40 {split_name(results)}")
    return {"branching": _rel(path, out)}


def _examples(results: dict, folder: Path, out: Path, repro, place=Path) -> dict:
    """The example sentences: each model's tree next to the gold tree (``results["examples"]`` gets the
    text trees and F1), and per model its span attention or distances over all the examples."""
    from induce.evaluation import DEFAULT
    from induce.inference.loading import load_run
    from induce.inference.predict import format_tree
    from induce.inference.show import display_gold, sentence_structure, tree_f1
    from induce.report import figures

    gold_trees, prepared_gold = repro._gold()
    indices = choose_examples([sentence.kept_words(DEFAULT) for sentence in prepared_gold],
                              repro.profile.example_sentences)
    loaded = {}
    for model in results["models_order"]:
        seed = next(iter(results["models"][model]["seeds"]), None)
        if seed is not None:
            try:
                loaded[model] = load_run(results["models"][model]["seeds"][seed]["run_dir"], repro.eval_device)
            except Exception:  # noqa: BLE001 - a figure must not stop the report
                continue
    made, examples = {}, []
    structures: dict = {model: [] for model in loaded}
    for number, index in enumerate(indices, start=1):
        words = prepared_gold[index].kept_words(DEFAULT)
        gold_tree = display_gold(gold_trees[index])
        entry = {"index": index, "words": words, "gold": format_tree(gold_tree), "trees": {}, "f1": {}}
        panels = []
        for model, run in loaded.items():
            structure = sentence_structure(run, words, device=repro.eval_device, keep_punct=True)
            _all_layers(run, structure, repro.eval_device)
            structures[model].append((f"sentence {index}", structure))
            f1 = tree_f1(structure.tree, gold_trees[index])
            entry["trees"][model] = format_tree(structure.tree)
            entry["f1"][model] = f1
            panels.append((f"{display(model)} (F1 {f1:.0f})" if f1 is not None else display(model), structure.tree))
        if panels:
            path = folder / f"example-{number}.png"
            figures.plot_trees(panels, place(path), gold=gold_tree, title=f"{split_name(results)} sentence {index}")
            entry["figure"] = _rel(path, out)
        examples.append(entry)
    results["examples"] = examples
    for model, items in structures.items():
        if not items:
            continue
        kind = items[0][1].kind
        if kind.plot is None:  # a family without a drawing of its numbers: its trees are in the examples
            continue
        path = folder / f"{kind.figure_name}-{model}.png"
        resolve(kind.plot)(items, place(path), title=f"{display(model)}: {kind.figure_title}")
        made[f"{kind.figure_name}_{model}"] = _rel(path, out)
    return made


def _all_layers(run, structure, device: str) -> None:
    """Fill ``structure.layer_distances`` with every layer's distances ``[L, n]``: the parser runs
    only the layers up to the one it reads (ON-LSTM), the figure shows all of them (full forward)."""
    import torch

    from induce.inference.predict import normalize

    if structure.layer_distances is None:
        return
    model, vocab = run.model, run.vocab
    ids = [vocab.eos_id, *vocab.encode(normalize(structure.words)), vocab.eos_id]
    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(torch.tensor([ids], device=dev), model.init_state(1, dev))
    finally:
        model.train(was_training)
    layers = (out.structure or {}).get("layer_distances")
    if layers is not None and layers.size(0) > len(structure.layer_distances):
        structure.layer_distances = layers[:, 0, 1 : 1 + len(structure.words)].float().cpu().numpy()


def _rel(path: Path, out: Path) -> str:
    return Path(path).relative_to(out).as_posix()

