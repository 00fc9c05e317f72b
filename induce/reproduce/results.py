"""The reproduction's results: what ``results.json`` holds, gathered from the files the pipeline's
steps wrote (:func:`collect_results`), and the summaries over seeds (:func:`summarise`).

Score sets (:data:`SCORE_SETS`): every tree set is scored in our default convention (Kim et al. 2019:
``all``, ``wsj10``, ``wsj40``) and in each paper's (``palm_wsj40``: the whole-sentence span counted,
as the PaLM authors' evaluation does; ``onlstm_wsj10`` / ``onlstm_all``: one-word sentences kept,
scoring F1 = 1, as ON-LSTM's evaluation does), so that every table compares like with like.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import platform
import re
from pathlib import Path

from induce.config import config_source, deep_merge, read_yaml
from induce.evaluation.engine import mean_std
from induce.files import now

#: name -> :func:`~induce.evaluation.conventions.induce_convention` keyword arguments; the first three are our
#: default convention.
SCORE_SETS = {
    "all": {},
    "wsj10": {"max_length": 10},
    "wsj40": {"max_length": 40},
    "palm_wsj40": {"max_length": 40, "count_root": True},
    "onlstm_wsj10": {"max_length": 10, "min_length": 1},
    "onlstm_all": {"min_length": 1},
}
#: Length subsets of the default convention (words after punctuation removal).
LENGTHS = (("all", None), ("wsj10", 10), ("wsj40", 40))


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}


def convention(name: str):
    """The :class:`~induce.evaluation.Convention` of a score set."""
    from induce.evaluation import induce_convention

    return induce_convention(**SCORE_SETS[name])


def machine_info(device: str) -> dict:
    import torch

    from induce.training.precision import cpu_bf16_unit

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
        "cpu": cpu, "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "device": device,
        # the vector instructions torch's CPU kernels use (AVX2, AVX512, ...): another set rounds some sums
        # differently, so bit-for-bit equal figures need the same one
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        # the bf16 matrix unit (AMX, AVX512-BF16, ...) that train.amp=true uses on this CPU; None without one
        "bf16_unit": cpu_bf16_unit(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


#: A run folder of ``OUT/runs``: ``<model>-seed<seed>``.
RUN_FOLDER = re.compile(r"^(?P<model>.+)-seed(?P<seed>\d+)$")


def run_folders(runs: Path) -> list[tuple[str, int]]:
    """``(model, seed)`` of the run folders in ``runs`` (``OUT/runs``) whose model is registered, by name."""
    from induce.models.registry import get_model_class

    found = []
    for folder in sorted(Path(runs).iterdir()) if Path(runs).is_dir() else []:
        match = RUN_FOLDER.match(folder.name)
        if not (match and folder.is_dir()):
            continue
        try:
            get_model_class(match["model"])
        except KeyError:
            continue
        found.append((match["model"], int(match["seed"])))
    return found


def reported_runs(repro) -> tuple[dict, list[str]]:
    """The runs the report covers: every run this invocation asked for (its figures or the reason it has none),
    and every other run of ``OUT/runs`` whose evaluation on the final split is current (an earlier invocation's,
    e.g. before ``--models X`` added X). Returns ``({model: [seeds]}`` in report order, and the runs of the
    folder left out (no current evaluation) as ``"model seed N"``)."""
    asked = {(m, s) for m in repro.profile.models for s in repro.profile.seeds}
    earlier, left_out = [], []
    for model, seed in run_folders(repro.out / "runs"):
        if (model, seed) in asked:
            continue
        if repro.current_evaluation(model, seed):
            earlier.append((model, seed))
        else:
            left_out.append(f"{model} seed {seed}")
    # The order of the folder's previous report, then this invocation's models, then the rest by name.
    previous = read_json(repro.out / "results.json").get("models_order") or []
    models = [m for m in previous if m in repro.profile.models or any(m == e for e, _ in earlier)]
    models += [m for m in repro.profile.models if m not in models]
    models += sorted({m for m, _ in earlier} - set(models))
    seeds = {m: sorted({s for a, s in asked if a == m} | {s for e, s in earlier if e == m}) for m in models}
    return seeds, left_out


def collect_results(repro, started_at: str, seconds: float) -> dict:
    """Everything the report needs, from the files the steps wrote (so that a run whose steps
    were all skipped reports the same): the final split's figures, and dev's beside them when the final
    split is test."""
    seeds_of, left_out = reported_runs(repro)
    asked = set(repro.profile.models)
    models, run_configs = _model_entries(repro, seeds_of)
    configs = {m: config.to_dict() if config is not None else {} for m, config in run_configs.items()}
    baselines, dev_baselines = _baseline_entries(repro)
    gold = {}
    any_scores = next((b["scores"] for b in baselines.values()), None)
    if any_scores:
        gold = {name: {k: any_scores[name][f"gold_{k}"] for k in
                       ("left_split_pct", "right_split_pct", "other_binary_split_pct", "nary_split_pct")}
                for name, _ in LENGTHS}
    profile = repro.profile.model_dump(mode="json", exclude={"folder", "base_folders"})
    profile_files = {}
    for model in repro.profile.models:
        layers = [read_yaml(path) for path in repro.profile.model_files(model)]
        if layers:
            profile_files[model] = _flatten(functools.reduce(deep_merge, layers))
    budgets = dict(repro.budgets)
    for model in seeds_of:
        if model not in budgets:  # an earlier invocation's run: its own config's budget
            budgets[model] = (configs.get(model, {}).get("train") or {}).get("time_budget")
    step_budgets = dict(repro.step_budgets)
    for model in seeds_of:
        if model not in step_budgets:
            step_budgets[model] = (configs.get(model, {}).get("train") or {}).get("max_steps")
    results = {
        "generated_at": now(), "started_at": started_at, "command": repro.options.command,
        "profile": profile, "profile_folder": config_source(repro.profile.folder),
        "time_per_model_s": _same_or_none(list(budgets.values())), "time_budgets_s": budgets,
        "step_budgets": step_budgets, "threads": repro.threads, "jobs": repro.jobs,
        "clock_stopped": clock_stopped_runs(models),
        "seeds": sorted({s for model_seeds in seeds_of.values() for s in model_seeds}),
        "models_order": list(seeds_of),
        "machine": machine_info(repro.eval_device),
        "split": repro.final_split,
        "splits": splits_summary(repro),
        "corpus": {"eval": corpus_summary(repro.eval_corpus), "train": corpus_summary(repro.train_corpus),
                   **_other_training_corpora(repro)},
        "monitor": monitor_summary(repro, run_configs),
        "convention": _convention_text(repro.eval_corpus.treebank),
        "models": models, "baselines": baselines, "random_init": _init_entries(repro, seeds_of), "gold": gold,
        "configs": configs, "profile_model_changes": profile_files, "pipeline_seconds_so_far": round(seconds, 1),
        "earlier_runs": [f"{m} seed {s}" for m, model_seeds in seeds_of.items() for s in model_seeds
                         if m not in asked or s not in repro.profile.seeds],
        "runs_left_out": left_out,
    }
    if dev_baselines:
        results["dev_baselines"] = dev_baselines
    return results


def _model_entries(repro, seeds_of: dict) -> tuple[dict, dict]:
    """``results["models"]`` (per model: its seeds' evaluations on the final split with their histories, the
    summary, dev's when the final split is test, traits) and each model's run config (None when unreadable)."""
    final, asked = repro.final_split, set(repro.profile.models)
    models, run_configs = {}, {}
    for model, model_seeds in seeds_of.items():
        per_seed, dev_seeds = {}, {}
        for seed in model_seeds:
            data = repro.current_evaluation(model, seed)  # {} unless the current files support its figures
            if data:
                data.pop("key", None)
                # every line of metrics.jsonl: the epochs' ends and the mid-epoch evaluations (train.eval_every),
                # each with its steps, tokens and train_cpu_seconds (the learning curves)
                data["history"] = read_history(repro.run_dir(model, seed))
                data["run_dir"] = str(repro.run_dir(model, seed))
                data["earlier_invocation"] = model not in asked or seed not in repro.profile.seeds
                per_seed[str(seed)] = data
            dev = repro.current_evaluation(model, seed, "valid") if final != "valid" else {}
            if dev:
                dev_seeds[str(seed)] = {k: dev.get(k) for k in ("split", "perplexity", "mikolov_perplexity", "scores")}
        diverged = [seed for seed, data in per_seed.items() if not _finite(data.get("perplexity"))
                    or any(not _finite(h.get("train_ppl", 0.0)) or not _finite(h.get("valid_ppl"))
                           for h in data["history"])]
        failed = {str(s): reason for (m, s), reason in repro.failed_runs.items() if m == model}
        config = run_configs[model] = _run_config(repro, model, model_seeds)
        models[model] = {"seeds": per_seed, "summary": summarise(list(per_seed.values())),
                         "diverged_seeds": diverged, "failed_seeds": failed, "traits": model_traits(model, config),
                         "earlier_invocation": model not in asked}
        if dev_seeds:
            models[model]["dev"] = {"split": "valid", "seeds": dev_seeds,
                                    "summary": summarise(list(dev_seeds.values()))}
        if len(per_seed) >= 2:  # self-F1 and the seeds' ensemble (induce.evaluation.seeds)
            from induce.evaluation.seeds import seed_summary

            models[model]["seed_ensemble"] = seed_summary([d["trees"] for d in per_seed.values()], repro._gold()[0])
    return models, run_configs


def _baseline_entries(repro) -> tuple[dict, dict]:
    """The trivial baselines' scores on the final split, and on dev when the final split is test."""
    from induce.evaluation import BASELINES

    final = repro.final_split
    baselines, dev_baselines = {}, {}
    for kind in BASELINES:
        data = read_json(repro.eval_path(f"baseline-{kind}"))
        if data:
            baselines[kind] = {"split": final, "scores": data["scores"]}
        data = read_json(repro.eval_path(f"baseline-{kind}", "valid")) if final != "valid" else {}
        if data:
            dev_baselines[kind] = {"split": "valid", "scores": data["scores"]}
    return baselines, dev_baselines


def _init_entries(repro, seeds_of: dict) -> dict:
    """The untrained models' figures on the final split (:func:`induce.assess.untrained.evaluate_untrained`), of
    the reported models whose file was made on this corpus split."""
    init: dict = {}
    for model in seeds_of:
        data = read_json(repro.eval_path(f"init-{model}"))
        key = data.get("key") or {}
        if data.get("summary") and {k: key.get(k) for k in ("version", "split", "corpus", "fingerprint")} == \
                repro._corpus_key():
            init[model] = {"split": repro.final_split, "n_models": data["inits"], "n_sentences": data["n_sentences"],
                           "max_one_direction_pct": data["max_one_direction_pct"], **data["summary"]}
    return init


def _run_config(repro, model: str, seeds: list[int]):
    """The run config of ``model``'s first seed: this invocation's, or for an earlier invocation's run the one
    in its folder (None when unreadable)."""
    from induce.config import load_config_file

    configs = getattr(repro, "configs", {}).get(model) or {}
    for seed in seeds:
        if seed in configs:
            return configs[seed]
    for seed in seeds:
        try:
            return load_config_file(repro.run_dir(model, seed) / "config.yaml")
        except Exception:  # noqa: BLE001 - a damaged config of an old run: its sizes are not shown
            continue
    return None


def model_traits(model: str, config=None) -> dict:
    """What the report must know of a model to say what its figures are: a control (its trees do not depend on
    what it learns), trained with gold trees (supervised), its parser kind, whether it learns from whole
    sentences (then its perplexity reads each sentence alone) and the longest sentence it trains on
    (``train_max_length``, the config's length cap at its last epoch; None: no cap or not sentence-level)."""
    from induce.models.base import STREAM_LM
    from induce.models.registry import get_model_class
    from induce.training.objectives import length_cap

    cls = get_model_class(model)
    sentence_level = cls.objective is not STREAM_LM
    cap = length_cap(config, config.train.epochs) if sentence_level and config is not None else None
    return {"control": bool(cls.control), "supervised": bool(cls.supervised),
            "parser_kind": cls.parser_kind.name, "sentence_level": sentence_level, "train_max_length": cap}


def splits_summary(repro) -> dict:
    """Which split each figure comes from: the final one, the evaluated ones, where selection happened."""
    return {"final": repro.final_split, "evaluated": list(repro.eval_splits),
            "test_available": "test" in repro.eval_corpus.splits, "asked": repro.options.split,
            "selection": "valid", "monitor_corpus": str(repro.train_corpus.path)}


def monitor_summary(repro, configs: dict) -> dict:
    """The monitor sets that select each model's checkpoint and give its dev F1 curve: the training corpus's
    ``valid`` split (a prefix of dev in the small profiles). ``configs``: model -> its run config (or None).
    Per model: ``select_by``; ``dev_f1_sentences`` (the first ``train.dev_f1_max_sentences`` of 2-40 words, as
    the trainer picks them: :func:`induce.training.setup.dev_set`); for a sentence-level model the validation
    sentences, ``bound_sentences`` of ``bound_min_length`` to ``bound_max_length`` words (its training length
    cap: :meth:`induce.training.objectives.SentenceLevel.validate`)."""
    from induce.models.base import STREAM_LM
    from induce.models.registry import get_model_class
    from induce.training.objectives import length_cap
    from induce.training.setup import dev_set

    corpus = repro.train_corpus
    lengths = [len(sentence) for sentence in corpus.lm_sentences("valid")]
    out = {"corpus": str(corpus.path), "valid_sentences": len(lengths), "models": {}}
    for model, config in configs.items():
        if config is None:
            continue
        cls = get_model_class(model)
        entry = {"select_by": config.train.select_by}
        dev = dev_set(config, corpus, corpus.vocab, cls, lambda message: None)
        if dev is not None:
            entry["dev_f1_sentences"] = len(dev.words)
        if cls.objective is not STREAM_LM:
            cap = length_cap(config, config.train.epochs)
            shortest = max(1, cls.shortest_sentence)
            entry.update(bound_sentences=sum(1 for n in lengths if n >= shortest and (cap is None or n <= cap)),
                         bound_min_length=shortest, bound_max_length=cap)
        out["models"][model] = entry
    return out


def _same_or_none(values: list):
    return values[0] if values and all(v == values[0] for v in values) else None


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def epoch_lines(history: list[dict]) -> list[dict]:
    """The lines of ``metrics.jsonl`` written at the epochs' ends (not the ``mid_epoch`` evaluations)."""
    return [line for line in history if not line.get("mid_epoch")]


def clock_stopped_runs(models: dict) -> dict:
    """``{"MODEL seed S": note}`` of the runs whose training the clock stopped (``train.time_budget``): their
    figures depend on the machine's speed."""
    return {f"{model} seed {seed}": data["run"]["note"] for model, entry in models.items()
            for seed, data in entry["seeds"].items() if (data.get("run") or {}).get("clock_stopped")}


def read_history(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        return []


def run_summary(run_dir: Path, model) -> dict:
    """What the report says of a run: its size, how long it trained, and which checkpoint is ``best`` (the
    one every figure of the run comes from) and why: the last evaluation that improved the selection value
    (``train.select_by`` on the monitor set), with its step, its dev F1 on the monitor set and the last
    evaluation's. ``perplexity_bound``: the model's loss is an upper bound on ``-log p(x)`` (a variational
    bound, :attr:`induce.models.base.LanguageModel.perplexity_is_bound`), so its perplexity is one too.
    ``metrics.jsonl`` lines marked ``mid_epoch`` (evaluations between epoch ends) are evaluations, not epochs."""
    from induce.training.trainer import read_status

    evaluations = read_history(run_dir)
    status = read_status(run_dir)
    epochs = epoch_lines(evaluations)
    best = [h for h in evaluations if h.get("best")]
    chosen = best[-1] if best else None
    last = evaluations[-1] if evaluations else None
    cumulative = [h["tokens"] for h in evaluations if isinstance(h.get("tokens"), (int, float))]
    cpu = [h["train_cpu_seconds"] for h in evaluations if isinstance(h.get("train_cpu_seconds"), (int, float))]
    summary = {
        "params": sum(p.numel() for p in model.parameters()),
        "epochs": len(epochs),
        "complete_epochs": sum(1 for h in epochs if not h.get("partial")),
        "evaluations": len(evaluations),
        "stop_reason": status.get("stop_reason"),
        "train_tokens": int(cumulative[-1]) if cumulative else sum(int(h.get("train_tokens", 0)) for h in epochs),
        "train_seconds": round(sum(float(h.get("epoch_seconds", 0.0)) for h in epochs), 1),
        "train_cpu_seconds": cpu[-1] if cpu else None,
        "steps": last.get("steps") if last else None,
        "best_epoch": chosen["epoch"] if chosen else None,
        "best_steps": chosen.get("steps") if chosen else None,
        "best_mid_epoch": bool(chosen.get("mid_epoch")) if chosen else False,
        "best_partial": bool(chosen.get("partial")) if chosen else False,
        "best_dev_f1": chosen.get("dev_f1") if chosen else None,
        "last_dev_f1": last.get("dev_f1") if last else None,
        "peak_dev_f1": max((h["dev_f1"] for h in evaluations if _finite(h.get("dev_f1"))), default=None),
        "monitor_valid_ppl": chosen.get("valid_ppl") if chosen else None,
        "perplexity_bound": bool(model.perplexity_is_bound),
        "validation_loss": model.validation_loss_text,
        # what the run trained in (train.amp resolved on its machine: dtype, matrix unit, reason)
        "precision": status.get("precision"),
    }
    if status.get("clock_stopped"):
        summary.update(clock_stopped=True, note=status.get("note"))
    return summary


def summarise(per_seed: list[dict]) -> dict:
    """Mean / std over seeds of the figures the report shows."""
    from induce.evaluation import REPORTED_LABELS

    def pick(getter):
        values = []
        for data in per_seed:
            try:
                values.append(getter(data))
            except (KeyError, TypeError):
                values.append(None)
        return mean_std(values)

    out = {
        "perplexity": pick(lambda d: d["perplexity"]),
        "epochs": pick(lambda d: d["run"]["epochs"]),
        "train_seconds": pick(lambda d: d["run"]["train_seconds"]),
        "train_tokens": pick(lambda d: d["run"]["train_tokens"]),
        "params": pick(lambda d: d["run"]["params"]),
    }
    out["mikolov_perplexity"] = pick(lambda d: d["mikolov_perplexity"])
    # on the untrained models' sentences (the first N WSJ40 sentences of the final split)
    out["init_sentences_sentence_f1"] = pick(lambda d: d["init_sentences"]["sentence_f1"])
    out["init_sentences_left_split_pct"] = pick(lambda d: d["init_sentences"]["left_split_pct"])
    out["init_sentences_right_split_pct"] = pick(lambda d: d["init_sentences"]["right_split_pct"])
    for name in SCORE_SETS:
        out[f"sentence_f1_{name}"] = pick(lambda d, n=name: d["scores"][n]["sentence_f1"])
        out[f"corpus_f1_{name}"] = pick(lambda d, n=name: d["scores"][n]["corpus_f1"])
        out[f"left_split_pct_{name}"] = pick(lambda d, n=name: d["scores"][n]["left_split_pct"])
        out[f"right_split_pct_{name}"] = pick(lambda d, n=name: d["scores"][n]["right_split_pct"])
        out[f"other_binary_split_pct_{name}"] = pick(lambda d, n=name: d["scores"][n]["other_binary_split_pct"])
    for label in REPORTED_LABELS:
        out[f"recall_{label}"] = pick(lambda d, name=label: d["scores"]["all"]["label_recall"][name])
    return out


def _other_training_corpora(repro) -> dict:
    """``{"train_other": {path: {"models": [...], **corpus_summary}}}`` of the training corpora that some models
    use instead of ``train`` (the profile's ``all_train_sentences``); empty when every model uses ``train``."""
    from induce.data.corpus import PreparedCorpus

    other: dict = {}
    for model, folder in (getattr(repro, "train_dirs", None) or {}).items():
        if Path(folder) == Path(repro.train_corpus.path):
            continue
        entry = other.setdefault(str(folder), {**corpus_summary(PreparedCorpus(folder)), "models": []})
        entry["models"].append(model)
    return {"train_other": other} if other else {}


def corpus_summary(corpus) -> dict:
    meta = corpus.meta
    return {
        "path": str(corpus.path), "name": corpus.name, "kind": meta.get("kind"),
        "source_kind": (meta.get("source") or {}).get("kind"), "splits": meta.get("splits", {}),
        "vocab_size": meta.get("vocab_size"), "subset": meta.get("subset"),
    }


def _flatten(mapping: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _convention_text(treebank: str = "ptb") -> dict:
    """Each score set's convention in words, for the gold trees of ``treebank`` (whose punctuation they lose)."""
    return {name: dataclasses.replace(convention(name), treebank=treebank).describe() for name in SCORE_SETS}
