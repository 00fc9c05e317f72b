"""The reproduction's results: what ``results.json`` holds, gathered from the files the pipeline's
steps wrote (:func:`collect_results`), and the summaries over seeds (:func:`summarise`).

Score sets (:data:`SCORE_SETS`): every tree set is scored in our default convention (Kim et al. 2019:
``all``, ``wsj10``, ``wsj40``) and in each paper's (``palm_wsj40``: the whole-sentence span counted,
as the PaLM authors' evaluation does; ``onlstm_wsj10`` / ``onlstm_all``: one-word sentences kept,
scoring F1 = 1, as ON-LSTM's evaluation does), so that every table compares like with like.
"""
from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path

from induce.config import config_source, read_yaml
from induce.evaluation.metrics import mean_std
from induce.files import now

#: name -> EvalConvention keyword arguments; the first three are our default convention.
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
    """The :class:`~induce.evaluation.EvalConvention` of a score set."""
    from induce.evaluation import EvalConvention

    return EvalConvention(**SCORE_SETS[name])


def machine_info(device: str) -> dict:
    import torch

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
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def collect_results(repro, started_at: str, seconds: float) -> dict:
    """Everything the report needs, from the files the steps wrote (so that a run whose steps
    were all skipped reports the same)."""
    from induce.evaluation import BASELINES

    models: dict = {}
    for model in repro.profile.models:
        per_seed = {}
        for seed in repro.profile.seeds:
            data = repro.current_evaluation(model, seed)  # {} unless the current files support its figures
            if data:
                data.pop("key", None)
                evaluations = read_history(repro.run_dir(model, seed))
                # history: the epochs' lines; evaluations: every line, the mid-epoch ones (train.eval_every) too,
                # each with its steps, tokens and train_cpu_seconds (the learning curves)
                data["history"] = epoch_lines(evaluations)
                data["evaluations"] = evaluations
                data["run_dir"] = str(repro.run_dir(model, seed))
                per_seed[str(seed)] = data
        diverged = [seed for seed, data in per_seed.items() if not _finite(data.get("perplexity"))
                    or any(not _finite(h.get("train_ppl")) or not _finite(h.get("valid_ppl"))
                           for h in data["history"])]
        failed = {str(s): reason for (m, s), reason in repro.failed_runs.items() if m == model}
        models[model] = {"seeds": per_seed, "summary": summarise(list(per_seed.values())),
                         "diverged_seeds": diverged, "failed_seeds": failed}
        if len(per_seed) >= 2:  # self-F1 and the seeds' ensemble (induce.evaluation.seeds)
            from induce.evaluation.seeds import seed_summary

            models[model]["seed_ensemble"] = seed_summary([d["trees"] for d in per_seed.values()], repro._gold()[0])
    baselines = {}
    for kind in BASELINES:
        data = read_json(repro.eval_path(f"baseline-{kind}"))
        if data:
            baselines[kind] = {"scores": data["scores"]}
    init: dict = {}
    for model in repro.init_models():
        data = read_json(repro.eval_path(f"init-{model}"))  # induce.assess.untrained.evaluate_untrained
        if data.get("summary"):
            init[model] = {"n_models": data["inits"], "n_sentences": data["n_sentences"],
                           "max_one_direction_pct": data["max_one_direction_pct"], **data["summary"]}
    gold = {}
    any_scores = next((b["scores"] for b in baselines.values()), None)
    if any_scores:
        gold = {name: {k: any_scores[name][f"gold_{k}"] for k in
                       ("left_split_pct", "right_split_pct", "other_binary_split_pct", "nary_split_pct")}
                for name, _ in LENGTHS}
    profile = repro.profile.model_dump(mode="json", exclude={"folder"})
    profile_files = {}
    for model in repro.profile.models:
        path = repro.profile.folder / f"{model}.yaml" if repro.profile.folder else None
        if path is not None and path.is_file():
            profile_files[model] = _flatten(read_yaml(path))
    configs = {m: repro.configs[m][repro.profile.seeds[0]].to_dict() for m in repro.profile.models}
    return {
        "generated_at": now(), "started_at": started_at, "command": repro.options.command,
        "profile": profile, "profile_folder": config_source(repro.profile.folder),
        "time_per_model_s": _same_or_none(list(repro.budgets.values())), "time_budgets_s": repro.budgets,
        "step_budgets": repro.step_budgets, "threads": repro.threads, "jobs": repro.jobs,
        "clock_stopped": clock_stopped_runs(models),
        "seeds": repro.profile.seeds, "models_order": repro.profile.models,
        "machine": machine_info(repro.eval_device),
        "split": repro.options.split,
        "corpus": {"eval": corpus_summary(repro.eval_corpus), "train": corpus_summary(repro.train_corpus)},
        "convention": _convention_text(),
        "models": models, "baselines": baselines, "random_init": init, "gold": gold,
        "configs": configs, "profile_model_changes": profile_files, "pipeline_seconds_so_far": round(seconds, 1),
    }


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
    from induce.training.trainer import read_status

    evaluations = read_history(run_dir)
    history = epoch_lines(evaluations)
    status = read_status(run_dir)
    best = max((h for h in evaluations if h.get("best")), key=lambda h: (h["epoch"], h.get("steps", 0)), default=None)
    last = evaluations[-1] if evaluations else {}
    summary = {
        "params": sum(p.numel() for p in model.parameters()),
        "epochs": len(history),
        "complete_epochs": sum(1 for h in history if not h.get("partial")),
        "stop_reason": status.get("stop_reason"),
        "steps": last.get("steps"),
        "train_tokens": sum(int(h.get("train_tokens", 0)) for h in history),
        "train_seconds": round(sum(float(h.get("epoch_seconds", 0.0)) for h in history), 1),
        "train_cpu_seconds": last.get("train_cpu_seconds"),
        "best_epoch": best["epoch"] if best else None,
        "best_steps": best.get("steps") if best else None,
        "best_mid_epoch": bool(best and best.get("mid_epoch")),
        "monitor_valid_ppl": best.get("valid_ppl") if best else None,
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
    for name in SCORE_SETS:
        out[f"sentence_f1_{name}"] = pick(lambda d, n=name: d["scores"][n]["sentence_f1"])
        out[f"corpus_f1_{name}"] = pick(lambda d, n=name: d["scores"][n]["corpus_f1"])
        out[f"left_split_pct_{name}"] = pick(lambda d, n=name: d["scores"][n]["left_split_pct"])
        out[f"right_split_pct_{name}"] = pick(lambda d, n=name: d["scores"][n]["right_split_pct"])
        out[f"other_binary_split_pct_{name}"] = pick(lambda d, n=name: d["scores"][n]["other_binary_split_pct"])
    for label in REPORTED_LABELS:
        out[f"recall_{label}"] = pick(lambda d, name=label: d["scores"]["all"]["label_recall"][name])
    return out


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


def _convention_text() -> dict:
    return {name: convention(name).describe() for name in SCORE_SETS}
