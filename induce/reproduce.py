"""``induce reproduce``: the whole pipeline from treebank to report, resumable step by step.

Steps (each is skipped when its outputs are up to date, so a re-run after an interruption goes on
where it stopped):

1. **prepare** — the default prepared corpus (:func:`induce.data.locate.default_corpus`, a cache
   keyed by the sources' sha256) or ``--corpus``; profiles with ``train_sentences`` /
   ``monitor_sentences`` train on a *subset corpus* (the first N training sentences, the first M
   dev sentences for per-epoch monitoring, the full vocabulary) derived from it
   (:func:`subset_corpus`). The final evaluation always uses the full evaluation split.
2. **train** each model of the profile for each seed into ``OUT/runs/<model>-seed<seed>/`` with
   :func:`induce.training.train`; skipped when the run finished with the same resolved config
   (``reproduce.json`` in the run folder records it); an interrupted run is continued with
   :func:`induce.training.resume` and the rest of its time budget.
3. **random init** — untrained models of each kind parse WSJ40 dev sentences (PaLM Table 4's first
   row); ``OUT/eval/init-<model>-init<k>.<split>.json``.
4. **baselines** — left, right, balanced, random trees; ``OUT/eval/baseline-<kind>.<split>.json``.
5. **evaluate** each run: LM perplexity of the split, and its trees (parsed once) scored on all
   sentences, WSJ10 and WSJ40; ``OUT/eval/<model>-seed<seed>.<split>.json`` (+ ``.trees.txt``),
   skipped while newer than the run's ``best`` checkpoint.
6. **report** — ``OUT/REPORT.md``, ``OUT/results.json`` and ``OUT/figures/*.png``
   (:mod:`induce.report`); always rebuilt (seconds).

Profiles are folders ``configs/<profile>/`` holding ``profile.yaml`` (:class:`Profile`) and, where
the profile changes a model, ``<model>.yaml`` layered over ``configs/<model>.yaml``.
"""
from __future__ import annotations

import json
import math
import os
import platform
import shutil
import statistics
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional, Union

import pydantic
from rich.console import Console

from induce.config import (
    CONFIG_DIR,
    DEFAULT_CONFIG,
    ConfigError,
    RunConfig,
    apply_overrides,
    deep_merge,
    parse_duration,
    read_yaml,
    validate_config,
)
from induce.errors import InduceError

PROFILE_FILE = "profile.yaml"
#: Written into each run folder: the config this pipeline asked for, and training seconds used so far.
RUN_STAMP = "reproduce.json"
STEPS_FILE = "steps.json"
#: Bumped when the content of the evaluation JSON files changes (forces re-evaluation).
EVAL_VERSION = 1
#: Length subsets scored for every tree set (words after punctuation removal).
LENGTHS = (("all", None), ("wsj10", 10), ("wsj40", 40))
#: Config keys that may differ without making a finished run stale.
VOLATILE_TRAIN_KEYS = ("device", "kernels", "log_interval")
SPLITS = ("valid", "test")


class Profile(pydantic.BaseModel):
    """``configs/<profile>/profile.yaml``: what ``induce reproduce --profile NAME`` runs."""

    model_config = pydantic.ConfigDict(extra="forbid")

    description: str = ""
    models: list[str] = pydantic.Field(default_factory=lambda: ["prpn", "onlstm", "palm", "palm-s", "palm-rb"])
    seeds: list[int] = pydantic.Field(default_factory=lambda: [1])
    time_per_model: Optional[str] = pydantic.Field(
        None, description="training time budget per model and seed (train.time_budget), e.g. 6m; null: the config's epochs"
    )
    train_sentences: Optional[int] = pydantic.Field(None, ge=1, description="train on the first N training sentences")
    monitor_sentences: Optional[int] = pydantic.Field(
        None, ge=1, description="per-epoch validation on the first N dev sentences (the final evaluation uses all)"
    )
    threads: Optional[int] = pydantic.Field(None, ge=1, description="torch CPU threads (null: torch's default)")
    device: str = pydantic.Field("auto", description="auto, cpu, cuda, cuda:N (training and evaluation)")
    random_init_seeds: int = pydantic.Field(5, ge=0, description="untrained models per kind (PaLM Table 4: 25)")
    random_init_sentences: Optional[int] = pydantic.Field(
        None, ge=1, description="WSJ40 dev sentences each untrained model parses (null: all)"
    )
    example_sentences: int = pydantic.Field(3, ge=0, description="dev sentences drawn in the report")
    eval_batch_size: int = pydantic.Field(64, ge=1, description="sentences per forward pass when parsing")
    overrides: list[str] = pydantic.Field(default_factory=list, description="key=value for every model's config")

    # Filled in by load_profile (not YAML keys).
    name: str = ""
    folder: Optional[Path] = None

    @pydantic.field_validator("models")
    @classmethod
    def _known_models(cls, models):
        from induce.models.registry import get_model_class

        for name in models:
            try:
                cls = get_model_class(name)
            except KeyError as err:
                raise ValueError(err.args[0]) from None
            if getattr(cls, "parser_kind", None) not in ("distance", "span"):
                raise ValueError(f"{name!r} has no syntactic structure to evaluate (it does not parse)")
        if not models:
            raise ValueError("at least one model")
        return models

    @pydantic.field_validator("time_per_model")
    @classmethod
    def _duration(cls, value):
        if value is not None:
            parse_duration(value)
        return value

    def time_budget(self) -> Optional[float]:
        return None if self.time_per_model is None else parse_duration(self.time_per_model)


def list_profiles(config_dir: Path = CONFIG_DIR) -> list[str]:
    """Names of the shipped profiles (folders of ``configs/`` with a ``profile.yaml``)."""
    return sorted(p.parent.name for p in Path(config_dir).glob(f"*/{PROFILE_FILE}"))


def load_profile(name_or_path: Union[str, Path], config_dir: Path = CONFIG_DIR) -> Profile:
    """A profile by name (``configs/<name>/``) or by folder path."""
    path = Path(name_or_path)
    folder = path if (path / PROFILE_FILE).is_file() else Path(config_dir) / str(name_or_path)
    if not (folder / PROFILE_FILE).is_file():
        known = ", ".join(list_profiles(config_dir)) or "(none)"
        raise InduceError(f"unknown profile {str(name_or_path)!r}: no {PROFILE_FILE} in {folder}; profiles: {known}")
    raw = read_yaml(folder / PROFILE_FILE)
    try:
        profile = Profile(**raw)
    except pydantic.ValidationError as err:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(profile)'}: "
                             f"{'unknown key' if e['type'] == 'extra_forbidden' else e['msg']}" for e in err.errors())
        raise InduceError(f"{folder / PROFILE_FILE}: {problems}") from None
    profile.name = folder.name
    profile.folder = folder
    return profile


def build_run_config(profile: Profile, model: str, overrides: list[str]) -> RunConfig:
    """``configs/default.yaml`` < ``configs/<model>.yaml`` < ``<profile folder>/<model>.yaml`` <
    ``profile.overrides`` < ``overrides``."""
    raw: dict = {}
    sources = []
    layers = [CONFIG_DIR / DEFAULT_CONFIG, CONFIG_DIR / f"{model}.yaml"]
    if profile.folder is not None:
        layers.append(profile.folder / f"{model}.yaml")
    for layer in layers:
        if layer.is_file():
            raw = deep_merge(raw, read_yaml(layer))
            sources.append(str(layer))
    if raw.get("model_name", model) != model:
        raise ConfigError(f"{sources[-1]}: model_name is {raw['model_name']!r}, expected {model!r}")
    raw["model_name"] = model
    raw = apply_overrides(raw, list(profile.overrides) + list(overrides))
    return validate_config(raw, source=" + ".join(sources + ["profile overrides"]))


# ----------------------------------------------------------------------------------- subset corpus


def _read_lines(path: Path, limit: Optional[int]) -> list[str]:
    lines = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if limit is not None and len(lines) >= limit:
                break
            lines.append(line.rstrip("\n"))
    return lines


def subset_corpus(
    source: Union[str, Path], corpora_dir: Union[str, Path], train_sentences: Optional[int],
    monitor_sentences: Optional[int],
) -> Path:
    """A prepared corpus with the first ``train_sentences`` training sentences and the first
    ``monitor_sentences`` validation sentences of ``source`` (all of a split when None), the same
    vocabulary, and no test split. Reused while ``source`` and the sizes are unchanged."""
    import hashlib

    from induce.data.corpus import META_FILE, VOCAB_FILE, PreparedCorpus

    corpus = PreparedCorpus(source)
    parts = [corpus.name]
    if train_sentences is not None:
        parts.append(f"train{train_sentences}")
    if monitor_sentences is not None:
        parts.append(f"valid{monitor_sentences}")
    name = "-".join(parts)
    target = Path(corpora_dir) / name
    fingerprint = hashlib.sha256(json.dumps(
        [corpus.meta.get("fingerprint"), train_sentences, monitor_sentences, 1], sort_keys=True
    ).encode()).hexdigest()
    if (target / META_FILE).is_file():
        try:
            if json.loads((target / META_FILE).read_text(encoding="utf-8")).get("fingerprint") == fingerprint:
                return target
        except (OSError, json.JSONDecodeError):
            pass
    if "valid" not in corpus.splits:
        raise InduceError(f"{source}: the corpus has no valid split")
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    meta = json.loads(json.dumps(corpus.meta))
    meta["splits"] = {}
    for split, limit in (("train", train_sentences), ("valid", monitor_sentences)):
        lm_lines = None
        for suffix in (".txt", ".orig.txt", ".gold.txt", ".nopunct.txt"):
            path = corpus.path / f"{split}{suffix}"
            if path.is_file():
                lines = _read_lines(path, limit)
                (tmp / path.name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
                if suffix == ".txt":
                    lm_lines = lines
        tokens = [token for line in lm_lines or [] for token in line.split()]
        meta["splits"][split] = {
            "lm_sentences": len(lm_lines or []), "lm_tokens": len(tokens), "lm_unk_tokens": tokens.count("<unk>"),
            "trees": len(lm_lines or []) if corpus.has_trees else None,
        }
    shutil.copyfile(corpus.path / VOCAB_FILE, tmp / VOCAB_FILE)
    meta.update(name=name, fingerprint=fingerprint, subset={
        "of": str(corpus.path), "of_fingerprint": corpus.meta.get("fingerprint"),
        "train_sentences": train_sentences, "valid_sentences": monitor_sentences,
        "note": "first N sentences of each split, the source's vocabulary; no test split",
    })
    (tmp / META_FILE).write_text(json.dumps(meta, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


# -------------------------------------------------------------------------------------- the pipeline


@dataclass
class ReproduceOptions:
    """What ``induce reproduce`` was asked (CLI options; None = the profile's value)."""

    profile: str = "cpu"
    out: Path = Path("results")
    data: Optional[Path] = None
    corpus: Optional[Path] = None
    corpora_dir: Path = Path("corpora")
    seeds: Optional[list[int]] = None
    models: Optional[list[str]] = None
    split: str = "valid"
    time_per_model: Optional[float] = None
    device: Optional[str] = None
    threads: Optional[int] = None
    progress: bool = True
    command: str = ""


@dataclass
class StepRecord:
    name: str
    status: str  # ran, resumed, skipped, failed
    seconds: float
    detail: str = ""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}


def _write_json(path: Path, payload) -> Path:
    from induce.treeio import atomic_write_text

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(payload, indent=1, sort_keys=True, default=str) + "\n")
    return path


def _comparable(config: dict) -> dict:
    out = json.loads(json.dumps(config))
    for key in VOLATILE_TRAIN_KEYS:
        out.get("train", {}).pop(key, None)
    return out


def mean_std(values) -> dict:
    """``{"mean", "std", "n"}`` of the finite values (sample std, None for fewer than 2)."""
    finite = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not finite:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": statistics.fmean(finite), "std": statistics.stdev(finite) if len(finite) > 1 else None,
            "n": len(finite)}


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


class Reproduction:
    """Runs the pipeline for :class:`ReproduceOptions`; :meth:`run` returns the results dict
    (what ``results.json`` holds)."""

    def __init__(self, options: ReproduceOptions, console: Optional[Console] = None,
                 on_step: Optional[Callable[[StepRecord], None]] = None):
        self.options = options
        self.console = console or Console(stderr=True)
        self.on_step = on_step
        self.profile = load_profile(options.profile)
        if options.seeds:
            self.profile.seeds = list(options.seeds)
        if options.models:
            self.profile = self.profile.model_copy(update={"models": Profile._known_models(list(options.models))})
        if options.split not in SPLITS:
            raise InduceError(f"--split {options.split!r}: use valid (dev) or test")
        self.out = Path(options.out)
        self.steps: list[StepRecord] = []
        self.budget = options.time_per_model if options.time_per_model is not None else self.profile.time_budget()
        # Config errors show up now, before any work; the full configs are built once the corpus is known.
        self.model_sections = {model: build_run_config(self.profile, model, []).model for model in self.profile.models}
        self.device = options.device or self.profile.device
        self.eval_device = self._eval_device(self.device)

    # ---------------------------------------------------------------------------------------- utils

    @staticmethod
    def _eval_device(device: str) -> str:
        import torch

        if device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return device

    def _log(self, message: str) -> None:
        self.console.print(message, highlight=False, soft_wrap=True)

    def _step(self, name: str, index: int, total: int, action: Callable[[], tuple[str, str]],
              fatal: bool = False) -> StepRecord:
        """Run ``action`` (returns ``(status, detail)``), time it, log it, record it; exceptions other
        than interruptions are recorded as failed and the pipeline goes on (unless ``fatal``)."""
        self.console.rule(f"[bold][{index}/{total}] {name}", align="left")
        started = time.monotonic()
        try:
            status, detail = action()
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as err:  # noqa: BLE001 - one failed model must not lose the others
            if fatal:
                raise
            status, detail = "failed", f"{type(err).__name__}: {err}"
            self._log(f"[bold red]failed:[/] {detail}")
        record = StepRecord(name, status, round(time.monotonic() - started, 2), detail)
        if status == "skipped":
            self._log(f"[dim]up to date, skipped ({detail})[/]")
        self.steps.append(record)
        self._record_step(record)
        if self.on_step is not None:
            self.on_step(record)
        return record

    def _record_step(self, record: StepRecord) -> None:
        path = self.out / STEPS_FILE
        log = _read_json(path)
        entry = log.get(record.name, {})
        entry.update(status=record.status, checked_at=_now(), detail=record.detail)
        if record.status != "skipped":
            entry.update(seconds=record.seconds, ran_at=_now())
        log[record.name] = entry
        _write_json(path, log)

    # ------------------------------------------------------------------------------------- prepare

    def prepare(self) -> tuple[str, str]:
        from induce.data.corpus import PreparedCorpus
        from induce.data.locate import default_corpus

        started = time.time()
        if self.options.corpus is not None:
            eval_dir = Path(self.options.corpus)
            PreparedCorpus(eval_dir)  # a clear error when it is not a prepared corpus
            status = "skipped"
            detail = f"given corpus {eval_dir}"
        else:
            eval_dir = default_corpus(self.options.data, corpora_dir=self.options.corpora_dir, console=self.console)
            fresh = (eval_dir / "meta.json").stat().st_mtime >= started
            status = "ran" if fresh else "skipped"
            detail = f"{'prepared' if fresh else 'cached'} {eval_dir}"
        corpus = PreparedCorpus(eval_dir)
        if not corpus.has_trees:
            raise InduceError(f"{eval_dir}: reproduce needs a treebank (this corpus is LM text only)")
        if self.options.split not in corpus.splits:
            raise InduceError(f"{eval_dir}: no {self.options.split} split (splits: {', '.join(corpus.splits)}); "
                              "WSJ section 23 is held out here: evaluate on valid (section 22)")
        self.eval_corpus = corpus
        train_dir = eval_dir
        if self.profile.train_sentences or self.profile.monitor_sentences:
            train_dir = subset_corpus(eval_dir, self.options.corpora_dir, self.profile.train_sentences,
                                      self.profile.monitor_sentences)
            detail += f"; training corpus {train_dir}"
        self.train_corpus = PreparedCorpus(train_dir)
        self.configs = {
            model: {seed: build_run_config(self.profile, model, self._train_overrides(train_dir, seed))
                    for seed in self.profile.seeds}
            for model in self.profile.models
        }
        return status, detail

    def _train_overrides(self, train_dir: Path, seed: int) -> list[str]:
        overrides = [f"data.corpus={train_dir}", f"train.seed={seed}", f"train.device={self.device}"]
        if self.budget is not None:
            overrides.append(f"train.time_budget={self.budget}")
        return overrides

    # --------------------------------------------------------------------------------------- train

    def run_dir(self, model: str, seed: int) -> Path:
        return self.out / "runs" / f"{model}-seed{seed}"

    def train(self, model: str, seed: int) -> tuple[str, str]:
        from induce.training import resume, train
        from induce.training.trainer import read_status

        config = self.configs[model][seed]
        requested = _comparable(config.to_dict())
        run_dir = self.run_dir(model, seed)
        stamp = _read_json(run_dir / RUN_STAMP)
        same = stamp.get("config") == requested
        status = read_status(run_dir)
        if same and status.get("state") == "finished" and (run_dir / "best.json").is_file():
            return "skipped", f"{run_dir} finished ({status.get('stop_reason')}, {status.get('epochs_done')} epochs)"
        used = float(stamp.get("train_seconds", 0.0)) if same else 0.0
        tracker = _BudgetTracker(run_dir / RUN_STAMP, requested, used)
        kwargs = dict(console=self.console, progress=self.options.progress and self.console.is_terminal,
                      on_batch=tracker.on_batch)
        try:
            if same and (run_dir / "last.json").is_file():
                updates = {"device": self.device}
                if self.budget is not None:
                    updates["time_budget"] = max(self.budget - used, 1.0)
                self._log(f"continuing the interrupted run {run_dir} ({used:.0f} s of training done)")
                result = resume(run_dir, updates, **kwargs)
                state = "resumed"
            else:
                if run_dir.exists():
                    old = run_dir.with_name(run_dir.name + ".replaced")
                    shutil.rmtree(old, ignore_errors=True)
                    run_dir.rename(old)
                    why = "another config" if not same else "no checkpoint to continue from"
                    self._log(f"{run_dir}: {why}; the old folder is now {old}, training afresh")
                run_dir.mkdir(parents=True)
                tracker.write()
                result = train(config, run_dir, **kwargs)
                state = "ran"
        finally:
            tracker.write()
        return state, f"{result.epochs_done} epochs ({result.stop_reason}), best monitored valid ppl {result.best_valid_ppl:.2f}"

    # ------------------------------------------------------------------------------------ evaluate

    def _gold(self):
        """Evaluation split: gold trees and the words the convention keeps (computed once)."""
        if not hasattr(self, "_gold_cache"):
            from induce.evaluation import EvalConvention, prepare_gold

            gold = self.eval_corpus.gold_trees(self.options.split)
            kept = [prepare_gold(tree, EvalConvention()).words for tree in gold]
            self._gold_cache = (gold, kept)
        return self._gold_cache

    def _score(self, predictions: list, gold: list) -> dict:
        from induce.evaluation import EvalConvention, evaluate

        return {name: evaluate(predictions, gold, EvalConvention(max_length=limit)).to_dict()
                for name, limit in LENGTHS}

    def _corpus_key(self) -> dict:
        return {"version": EVAL_VERSION, "split": self.options.split, "corpus": str(self.eval_corpus.path),
                "fingerprint": self.eval_corpus.meta.get("fingerprint")}

    def eval_path(self, stem: str) -> Path:
        return self.out / "eval" / f"{stem}.{self.options.split}.json"

    def evaluate_run(self, model: str, seed: int) -> tuple[str, str]:
        from induce.inference import format_tree, lm_perplexity, load_run, predict_trees
        from induce.training.trainer import read_status

        run_dir = self.run_dir(model, seed)
        checkpoint = run_dir / "best.safetensors"
        if read_status(run_dir).get("state") != "finished" or not checkpoint.is_file():
            raise InduceError(f"{run_dir}: no finished run to evaluate (its training failed or was interrupted)")
        path = self.eval_path(f"{model}-seed{seed}")
        stat = checkpoint.stat()
        key = {**self._corpus_key(), "checkpoint": str(checkpoint), "checkpoint_mtime_ns": stat.st_mtime_ns,
               "checkpoint_bytes": stat.st_size}
        if _read_json(path).get("key") == key and path.stat().st_mtime_ns >= stat.st_mtime_ns:
            return "skipped", f"{path} is newer than {checkpoint}"
        started = time.monotonic()
        gold, kept = self._gold()
        loaded = load_run(run_dir, self.eval_device)
        wanted = [i for i, words in enumerate(kept) if len(words) >= 2]
        # keep_punct: the kept words are already the word-tag-filtered words the LM was trained on; the
        # shape heuristic that leaves punctuation out of raw text must not drop any of them.
        parsed = predict_trees(loaded, [kept[i] for i in wanted], batch_size=self.profile.eval_batch_size,
                               device=self.eval_device, keep_punct=True)
        predictions: list = [None] * len(gold)
        for i, tree in zip(wanted, parsed):
            predictions[i] = tree
        scores = self._score(predictions, gold)
        parse_seconds = time.monotonic() - started
        ppl = lm_perplexity(loaded, self.eval_corpus.path, self.options.split, device=self.eval_device)
        trees_path = path.with_suffix(".trees.txt")
        from induce.treeio import atomic_write_text

        atomic_write_text(trees_path, "".join(
            (format_tree(tree) if tree is not None else "(S " + " ".join(words) + ")") + "\n"
            for tree, words in zip(predictions, kept)))
        payload = {"key": key, "model": model, "seed": seed, "perplexity": ppl, "scores": scores,
                   "run": run_summary(run_dir, loaded.model), "trees": str(trees_path),
                   "parse_seconds": round(parse_seconds, 2), "seconds": round(time.monotonic() - started, 2)}
        _write_json(path, payload)
        return "ran", (f"ppl {ppl:.1f}, F1 all {scores['all']['sentence_f1']:.1f} / WSJ10 "
                       f"{scores['wsj10']['sentence_f1']:.1f} / WSJ40 {scores['wsj40']['sentence_f1']:.1f}")

    def baseline(self, kind: str) -> tuple[str, str]:
        from induce.evaluation import EvalConvention, baseline_predictions

        path = self.eval_path(f"baseline-{kind}")
        key = {**self._corpus_key(), "baseline": kind, "seed": 0}
        if _read_json(path).get("key") == key:
            return "skipped", str(path)
        gold, _ = self._gold()
        predictions = baseline_predictions(gold, kind, EvalConvention(), seed=0)
        scores = self._score(predictions, gold)
        _write_json(path, {"key": key, "baseline": kind, "scores": scores})
        return "ran", f"F1 all {scores['all']['sentence_f1']:.1f} / WSJ40 {scores['wsj40']['sentence_f1']:.1f}"

    def init_models(self) -> list[str]:
        """Models whose untrained parses are measured: PaLM-RB's trees do not depend on its weights
        (always right-branching), and a supervised PaLM is, untrained, the same model as PaLM."""
        from induce.models.registry import get_model_class

        chosen = []
        models = self.profile.models
        for name in models:
            cls = get_model_class(name)
            if getattr(cls, "fixed_right_branching", False):
                continue
            if getattr(cls, "supervised", False):
                twins = [other for other in models if other != name
                         and not getattr(get_model_class(other), "supervised", False)
                         and not getattr(get_model_class(other), "fixed_right_branching", False)
                         and get_model_class(other).parser_kind == cls.parser_kind
                         and self.model_sections[other] == self.model_sections[name]]
                if twins:
                    continue
            chosen.append(name)
        return chosen

    def random_init(self, model: str, init_seed: int) -> tuple[str, str]:
        import torch

        from induce.evaluation import EvalConvention, evaluate
        from induce.inference import LoadedRun, predict_trees
        from induce.models.registry import get_model_class

        config = self.configs[model][self.profile.seeds[0]]
        vocab = self.train_corpus.vocab
        limit = self.profile.random_init_sentences
        path = self.eval_path(f"init-{model}-init{init_seed}")
        key = {**self._corpus_key(), "model": model, "model_config": config.model, "init_seed": init_seed,
               "sentences": limit, "vocab_size": len(vocab)}
        if _read_json(path).get("key") == key:
            return "skipped", str(path)
        gold, kept = self._gold()
        chosen = [i for i, words in enumerate(kept) if 2 <= len(words) <= 40][:limit]
        devices = torch.cuda.device_count() if self.eval_device.startswith("cuda") else 0
        with torch.random.fork_rng(devices=list(range(devices))):
            torch.manual_seed(init_seed)
            net = get_model_class(model)(len(vocab), config.model_config_object())
        net.to(self.eval_device).eval()
        loaded = LoadedRun(net, vocab, {"config": config.to_dict(), "model_name": model}, Path(f"untrained-{model}"))
        trees = predict_trees(loaded, [kept[i] for i in chosen], batch_size=self.profile.eval_batch_size,
                              device=self.eval_device, keep_punct=True)
        summary = evaluate(trees, [gold[i] for i in chosen], EvalConvention(max_length=40)).to_dict()
        _write_json(path, {"key": key, "model": model, "init_seed": init_seed, "n_sentences": len(chosen),
                           "wsj40": summary})
        return "ran", (f"{len(chosen)} sentences: left {summary['left_split_pct']:.1f}%, "
                       f"right {summary['right_split_pct']:.1f}%, F1 {summary['sentence_f1']:.1f}")

    # -------------------------------------------------------------------------------------- run all

    def plan(self) -> list[tuple[str, Callable[[], tuple[str, str]]]]:
        from induce.evaluation import BASELINES

        steps: list = []
        for model in self.profile.models:
            for seed in self.profile.seeds:
                steps.append((f"train {model} seed {seed}", lambda m=model, s=seed: self.train(m, s)))
        for model in self.init_models():
            for k in range(1, self.profile.random_init_seeds + 1):
                steps.append((f"untrained {model} init {k}", lambda m=model, k=k: self.random_init(m, k)))
        for kind in BASELINES:
            steps.append((f"baseline {kind}", lambda b=kind: self.baseline(b)))
        for model in self.profile.models:
            for seed in self.profile.seeds:
                steps.append((f"evaluate {model} seed {seed}", lambda m=model, s=seed: self.evaluate_run(m, s)))
        return steps

    def run(self) -> dict:
        import torch

        from induce import report

        started_wall, started = _now(), time.monotonic()
        threads = self.options.threads or self.profile.threads
        old_threads = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            self._log(f"profile [bold]{self.profile.name}[/]: {self.profile.description}")
            steps = self.plan()
            total = len(steps) + 2
            self._step("prepare corpus", 1, total, self.prepare, fatal=True)
            for index, (name, action) in enumerate(steps, start=2):
                self._step(name, index, total, action)
            self.console.rule(f"[bold][{total}/{total}] report", align="left")
            report_started = time.monotonic()
            results = self.collect(started_wall, time.monotonic() - started)
            figures = report.make_figures(results, self.out, self)
            results["figures"] = figures
            results["wall_seconds"] = round(time.monotonic() - started, 1)
            record = StepRecord("report", "ran", round(time.monotonic() - report_started, 2), str(self.out))
            self.steps.append(record)
            self._record_step(record)
            results["steps"] = [asdict(step) for step in self.steps]
            results["step_log"] = _read_json(self.out / STEPS_FILE)
            report.write_results(results, self.out)
            return results
        finally:
            torch.set_num_threads(old_threads)

    # ------------------------------------------------------------------------------------- results

    def collect(self, started_at: str, seconds: float) -> dict:
        """Everything the report needs, from the files the steps wrote (so that a run whose steps
        were all skipped reports the same)."""
        from induce.evaluation import BASELINES

        models: dict = {}
        for model in self.profile.models:
            per_seed = {}
            for seed in self.profile.seeds:
                data = _read_json(self.eval_path(f"{model}-seed{seed}"))
                if data:
                    data.pop("key", None)
                    data["history"] = read_history(self.run_dir(model, seed))
                    data["run_dir"] = str(self.run_dir(model, seed))
                    per_seed[str(seed)] = data
            diverged = [seed for seed, data in per_seed.items() if not _finite(data.get("perplexity"))
                        or any(not _finite(h.get("train_ppl")) or not _finite(h.get("valid_ppl"))
                               for h in data["history"])]
            models[model] = {"seeds": per_seed, "summary": summarise(list(per_seed.values())),
                             "diverged_seeds": diverged}
        baselines = {}
        for kind in BASELINES:
            data = _read_json(self.eval_path(f"baseline-{kind}"))
            if data:
                baselines[kind] = {"scores": data["scores"]}
        init: dict = {}
        for model in self.init_models():
            runs = [_read_json(self.eval_path(f"init-{model}-init{k}")) for k in range(1, self.profile.random_init_seeds + 1)]
            runs = [r for r in runs if r]
            if runs:
                init[model] = {
                    "n_models": len(runs), "n_sentences": runs[0]["n_sentences"],
                    "left_split_pct": mean_std([r["wsj40"]["left_split_pct"] for r in runs]),
                    "right_split_pct": mean_std([r["wsj40"]["right_split_pct"] for r in runs]),
                    "sentence_f1": mean_std([r["wsj40"]["sentence_f1"] for r in runs]),
                }
        gold = {}
        any_scores = next((b["scores"] for b in baselines.values()), None)
        if any_scores:
            gold = {name: {k: any_scores[name][f"gold_{k}"] for k in
                           ("left_split_pct", "right_split_pct", "other_binary_split_pct", "nary_split_pct")}
                    for name, _ in LENGTHS}
        profile = self.profile.model_dump(mode="json", exclude={"folder"})
        profile_files = {}
        for model in self.profile.models:
            path = self.profile.folder / f"{model}.yaml" if self.profile.folder else None
            if path is not None and path.is_file():
                profile_files[model] = _flatten(read_yaml(path))
        configs = {m: self.configs[m][self.profile.seeds[0]].to_dict() for m in self.profile.models}
        return {
            "generated_at": _now(), "started_at": started_at, "command": self.options.command,
            "profile": profile, "profile_folder": str(self.profile.folder),
            "time_per_model_s": self.budget, "seeds": self.profile.seeds, "models_order": self.profile.models,
            "machine": machine_info(self.eval_device),
            "split": self.options.split,
            "corpus": {"eval": corpus_summary(self.eval_corpus), "train": corpus_summary(self.train_corpus)},
            "convention": _convention_text(),
            "models": models, "baselines": baselines, "random_init": init, "gold": gold,
            "configs": configs, "profile_model_changes": profile_files, "pipeline_seconds_so_far": round(seconds, 1),
        }


class _BudgetTracker:
    """Keeps ``reproduce.json`` of a run folder up to date with the training seconds used (an
    interrupted run continues with the rest of its budget)."""

    def __init__(self, path: Path, config: dict, used: float):
        self.path, self.config, self.used = path, config, used
        self.started = time.monotonic()
        self.last_write = 0.0

    def seconds(self) -> float:
        return self.used + time.monotonic() - self.started

    def on_batch(self, trainer, epoch, batch) -> None:
        if time.monotonic() - self.last_write > 10.0:
            self.write()

    def write(self) -> None:
        if self.path.parent.is_dir():
            _write_json(self.path, {"config": self.config, "train_seconds": round(self.seconds(), 1),
                                    "updated_at": _now()})
        self.last_write = time.monotonic()


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def read_history(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        return []


def run_summary(run_dir: Path, model) -> dict:
    from induce.training.trainer import read_status

    history = read_history(run_dir)
    status = read_status(run_dir)
    best = next((h for h in history if h.get("best")), None)
    best = max((h for h in history if h.get("best")), key=lambda h: h["epoch"], default=best)
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "epochs": len(history),
        "complete_epochs": sum(1 for h in history if not h.get("partial")),
        "stop_reason": status.get("stop_reason"),
        "train_tokens": sum(int(h.get("train_tokens", 0)) for h in history),
        "train_seconds": round(sum(float(h.get("epoch_seconds", 0.0)) for h in history), 1),
        "best_epoch": best["epoch"] if best else None,
        "monitor_valid_ppl": best.get("valid_ppl") if best else None,
    }


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
    for name, _ in LENGTHS:
        out[f"sentence_f1_{name}"] = pick(lambda d, n=name: d["scores"][n]["sentence_f1"])
        out[f"corpus_f1_{name}"] = pick(lambda d, n=name: d["scores"][n]["corpus_f1"])
        out[f"left_split_pct_{name}"] = pick(lambda d, n=name: d["scores"][n]["left_split_pct"])
        out[f"right_split_pct_{name}"] = pick(lambda d, n=name: d["scores"][n]["right_split_pct"])
        out[f"other_binary_split_pct_{name}"] = pick(lambda d, n=name: d["scores"][n]["other_binary_split_pct"])
    for label in REPORTED_LABELS:
        out[f"recall_{label}"] = pick(lambda d, l=label: d["scores"]["all"]["label_recall"][l])
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
    from induce.evaluation import EvalConvention

    return {name: EvalConvention(max_length=limit).describe() for name, limit in LENGTHS}


def reproduce(options: ReproduceOptions, console: Optional[Console] = None, **kwargs) -> dict:
    """Run the pipeline (see the module docstring); returns the results dict."""
    return Reproduction(options, console=console, **kwargs).run()
