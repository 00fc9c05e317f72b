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
   (``reproduce.json`` in the run folder records it) and its ``best`` checkpoint verifies (hashes;
   a damaged one is trained again); an interrupted run is continued with
   :func:`induce.training.resume` and the rest of its time budget (from scratch when its ``last``
   checkpoint is damaged); a run that diverged with the same config is a failed step at once.
3. **untrained** — ``random_init_seeds`` untrained models of each kind parse WSJ40 dev sentences
   (PaLM Table 4's first row; :mod:`induce.evaluation.untrained`, as ``induce eval --untrained``);
   ``OUT/eval/init-<model>.<split>.json``.
4. **baselines** — left, right, balanced, random trees; ``OUT/eval/baseline-<kind>.<split>.json``.
5. **evaluate** each run: LM perplexity of the split, and its trees (parsed once) scored on all
   sentences, WSJ10 and WSJ40; ``OUT/eval/<model>-seed<seed>.<split>.json`` (+ ``.trees.txt``),
   skipped while it was made from the run's current ``best`` checkpoint (its sha256, verified).
   The report shows a run's figures only when this file was made from the current checkpoint and
   neither its training nor its evaluation failed in this invocation (:meth:`Reproduction.current_evaluation`);
   a failed run's row is empty and the failure is listed with its reason.
6. **report** — ``OUT/REPORT.md``, ``OUT/results.json`` and ``OUT/figures/*.png``
   (:mod:`induce.report`); always rebuilt (seconds).

Profiles are folders ``configs/<profile>/`` holding ``profile.yaml`` (:class:`Profile`) and, where
the profile changes a model, ``<model>.yaml`` layered over ``configs/<model>.yaml``
(:mod:`induce.reproduce.profiles`).

**Chunks** (``--chunk`` / the profile's ``chunk``): the training of one invocation stops after that
much wall-clock time, each run at a resumable checkpoint; the steps not reached are *pending*, the
report shows what is done, and the same command run again continues (``induce reproduce`` exits with
status 75 until everything is done). The papers' recipes (profile ``paper``) run this way.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

import nltk
from rich.console import Console

from induce.errors import InduceError, InputError
from induce.files import check_output_folder, os_error_reason

from .profiles import Profile, build_run_config, load_profile, resolve_profile_name
from .results import SCORE_SETS, collect_results, convention, now, read_json, run_summary
from .subset import subset_corpus

#: Written into each run folder: the config this pipeline asked for, and training seconds used so far.
RUN_STAMP = "reproduce.json"
STEPS_FILE = "steps.json"
#: Bumped when the content of the evaluation JSON files changes (forces re-evaluation).
EVAL_VERSION = 2
#: Config keys that may differ without making a finished run stale.
VOLATILE_TRAIN_KEYS = ("device", "kernels", "log_interval", "tensorboard")
SPLITS = ("valid", "test")



@dataclass
class ReproduceOptions:
    """What ``induce reproduce`` was asked (CLI options; None = the profile's value)."""

    profile: str = "auto"
    out: Path = Path("results")
    data: Optional[Path] = None
    corpus: Optional[Path] = None
    corpora_dir: Path = Path("corpora")
    seeds: Optional[list[int]] = None
    models: Optional[list[str]] = None
    split: str = "valid"
    time_per_model: Optional[float] = None
    chunk: Optional[float] = None  # seconds of training per invocation (None: the profile's)
    lm_text: Optional[Path] = None  # folder with Mikolov's ptb.valid.txt (None: <data root>/ptb_lm if there)
    device: Optional[str] = None
    threads: Optional[int] = None
    progress: bool = True
    command: str = ""


@dataclass
class StepRecord:
    name: str
    status: str  # ran, resumed, paused, skipped, pending, failed
    seconds: float
    detail: str = ""


def _write_json(path: Path, payload) -> Path:
    from induce.trees.brackets import atomic_write_text

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(payload, indent=1, sort_keys=True, default=str) + "\n")
    return path


def _comparable(config: dict) -> dict:
    out = json.loads(json.dumps(config))
    for key in VOLATILE_TRAIN_KEYS:
        out.get("train", {}).pop(key, None)
    return out



class Reproduction:
    """Runs the pipeline for :class:`ReproduceOptions`; :meth:`run` returns the results dict
    (what ``results.json`` holds)."""

    def __init__(self, options: ReproduceOptions, console: Optional[Console] = None,
                 on_step: Optional[Callable[[StepRecord], None]] = None):
        self.options = options
        self.console = console or Console(stderr=True)
        self.on_step = on_step
        self.profile = load_profile(resolve_profile_name(options.profile))
        if options.seeds:
            self.profile.seeds = list(options.seeds)
        if options.models:
            try:
                models = Profile._known_models(list(options.models))
            except ValueError as err:  # an unknown model, or one that does not parse
                raise InduceError(f"--models {','.join(options.models)}: {err}") from None
            self.profile = self.profile.model_copy(update={"models": models})
        if options.split not in SPLITS:
            raise InduceError(f"--split {options.split!r}: use valid (dev) or test")
        self.out = Path(options.out)
        check_output_folder(self.out, "--out")  # before hours of training, not when the report is written
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(f"--out: cannot create the output folder: {os_error_reason(err)}", self.out) from None
        self.steps: list[StepRecord] = []
        #: Training seconds per model and seed (None: the config's epochs decide).
        self.budgets = {model: options.time_per_model if options.time_per_model is not None
                        else self.profile.time_budget(model) for model in self.profile.models}
        self.chunk = options.chunk if options.chunk is not None else self.profile.chunk_seconds()
        self.started = time.monotonic()
        #: (model, seed) of the runs whose training the chunk's end left unfinished.
        self.unfinished: set = set()
        #: (model, seed) -> why its training or evaluation failed in this invocation (no figures reported).
        self.failed_runs: dict = {}
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
        elif status in ("pending", "paused"):
            self._log(f"[yellow]{status}:[/] {detail}")
        self.steps.append(record)
        self._record_step(record)
        if self.on_step is not None:
            self.on_step(record)
        return record

    def _record_step(self, record: StepRecord) -> None:
        path = self.out / STEPS_FILE
        log = read_json(path)
        entry = log.get(record.name, {})
        entry.update(status=record.status, checked_at=now(), detail=record.detail)
        if record.status != "skipped":
            entry.update(seconds=record.seconds, ran_at=now())
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
            # Another --out keeps its corpora in OUT/corpora; a PTB corpus prepared in ./corpora before
            # (where the other commands look) still counts when no data root is named.
            eval_dir = default_corpus(self.options.data, corpora_dir=self.options.corpora_dir, console=self.console,
                                      also_prepared_in=(Path("corpora"),))
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
        self.mikolov = self._find_mikolov(corpus)
        if self.mikolov is not None:
            detail += f"; Mikolov text {self.mikolov['path']}"
        self.configs = {
            model: {seed: build_run_config(self.profile, model, self._train_overrides(train_dir, model, seed))
                    for seed in self.profile.seeds}
            for model in self.profile.models
        }
        return status, detail

    def _find_mikolov(self, corpus) -> Optional[dict]:
        """Mikolov's text of the evaluation split (``ptb.valid.txt`` / ``ptb.test.txt``) from
        ``--lm-text``, else, for a corpus made from the WSJ files, ``ptb_lm/`` under the data root;
        with how much of it our vocabulary covers (its tokens outside ours count as ``<unk>``)."""
        from induce.data.locate import resolve_data_root
        from induce.data.mikolov import read_lm_text

        folder = self.options.lm_text
        if folder is None and (corpus.meta.get("source") or {}).get("kind") in ("ldc", "wsj-files"):
            try:
                root = resolve_data_root(self.options.data, self.options.corpora_dir)
            except InduceError:
                root = None
            folder = root / "ptb_lm" if root is not None else None
        if folder is None:
            return None
        path = Path(folder) / f"ptb.{self.options.split}.txt"
        if not path.is_file():
            if self.options.lm_text is not None:
                raise InduceError(f"--lm-text {folder}: no {path.name} there (Mikolov's ptb.train/valid/test.txt)")
            return None
        sentences = read_lm_text(path)
        vocab = corpus.vocab
        tokens = [token for sentence in sentences for token in sentence]
        theirs_unk = sum(token == "<unk>" for token in tokens)
        ours_unk = sum(token not in vocab.stoi or token == "<unk>" for token in tokens)
        stat = path.stat()
        return {"path": str(path), "sentences": sentences, "key": [str(path), stat.st_size, stat.st_mtime_ns],
                "tokens": len(tokens), "their_unk": theirs_unk, "our_unk": ours_unk}

    def _train_overrides(self, train_dir: Path, model: str, seed: int) -> list[str]:
        overrides = [f"data.corpus={train_dir}", f"train.seed={seed}", f"train.device={self.device}"]
        if self.budgets[model] is not None:
            overrides.append(f"train.time_budget={self.budgets[model]}")
        return overrides

    # --------------------------------------------------------------------------------------- train

    def run_dir(self, model: str, seed: int) -> Path:
        return self.out / "runs" / f"{model}-seed{seed}"

    def chunk_left(self) -> Optional[float]:
        """Seconds left in this invocation's chunk (None: no chunk)."""
        return None if self.chunk is None else self.chunk - (time.monotonic() - self.started)

    def train(self, model: str, seed: int) -> tuple[str, str]:
        """Train (or continue, or skip) one run. A run that the chunk's end stopped is *paused*:
        ``reproduce.json`` says so, the trainer's checkpoint ``last.*`` continues it next time."""
        from induce.training import resume, train
        from induce.training.trainer import read_status

        config = self.configs[model][seed]
        requested = _comparable(config.to_dict())
        run_dir = self.run_dir(model, seed)
        stamp = read_json(run_dir / RUN_STAMP)
        same = stamp.get("config") == requested
        status = read_status(run_dir)
        if same and status.get("state") == "diverged":
            raise InduceError(f"{run_dir} diverged ({status.get('error', 'non-finite loss')}); with the same config it "
                              "would diverge again: lower its learning rate in the profile's config")
        if same and not stamp.get("paused") and status.get("state") == "finished":
            problem = _checkpoint_problem(run_dir / "best")
            if problem is None:
                return "skipped", (f"{run_dir} finished ({status.get('stop_reason')}, "
                                   f"{status.get('epochs_done')} epochs)")
            self._log(f"{run_dir}: its best checkpoint is not usable ({problem}); training it again")
            same = False  # its weights are gone: nothing of it is reused
        if same and (run_dir / "last.json").is_file():
            problem = _checkpoint_problem(run_dir / "last")
            if problem is not None:
                self._log(f"{run_dir}: its last checkpoint is not usable ({problem}); training it again from the start")
                same = False
        used = float(stamp.get("train_seconds", 0.0)) if same else 0.0
        own = self.budgets[model]
        left = None if own is None else max(own - used, 1.0)
        chunk_left = self.chunk_left()
        if chunk_left is not None and chunk_left <= 0:
            self.unfinished.add((model, seed))
            return "pending", "this invocation's chunk of training time is used up; run the same command again"
        # This invocation's budget: the rest of the run's own, cut at the chunk's end.
        budget = left if chunk_left is None else (chunk_left if left is None else min(left, chunk_left))
        cut_by_chunk = chunk_left is not None and (left is None or chunk_left < left)
        tracker = _BudgetTracker(run_dir / RUN_STAMP, requested, used)
        kwargs = dict(console=self.console, progress=self.options.progress and self.console.is_terminal,
                      on_batch=tracker.on_batch)
        try:
            if same and (run_dir / "last.json").is_file():
                self._log(f"continuing the {'paused' if stamp.get('paused') else 'interrupted'} run {run_dir} "
                          f"({used:.0f} s of training done)")
                result = resume(run_dir, {"device": self.device, "time_budget": budget}, **kwargs)
                state = "resumed"
            else:
                if run_dir.exists():
                    old = run_dir.with_name(run_dir.name + ".replaced")
                    shutil.rmtree(old, ignore_errors=True)
                    run_dir.rename(old)
                    why = ("another config or a damaged checkpoint" if not same
                           else "no checkpoint to continue from")
                    self._log(f"{run_dir}: {why}; the old folder is now {old}, training afresh")
                run_dir.mkdir(parents=True)
                tracker.write()
                if budget != config.train.time_budget:
                    config = config.model_copy(update={"train": config.train.model_copy(update={"time_budget": budget})})
                result = train(config, run_dir, **kwargs)
                state = "ran"
            tracker.paused = cut_by_chunk and result.stop_reason == "time_budget"
        finally:
            tracker.write()
        detail = f"{result.epochs_done} epochs ({result.stop_reason}), best monitored valid ppl {result.best_valid_ppl:.2f}"
        if tracker.paused:
            self.unfinished.add((model, seed))
            return "paused", detail + "; paused at the chunk's end (run the same command again to continue)"
        return state, detail

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
        """Every score set of :data:`SCORE_SETS` (our convention and each paper's)."""
        from induce.evaluation import evaluate

        return {name: evaluate(predictions, gold, convention(name)).to_dict() for name in SCORE_SETS}

    def _corpus_key(self) -> dict:
        return {"version": EVAL_VERSION, "split": self.options.split, "corpus": str(self.eval_corpus.path),
                "fingerprint": self.eval_corpus.meta.get("fingerprint")}

    def eval_path(self, stem: str) -> Path:
        return self.out / "eval" / f"{stem}.{self.options.split}.json"

    def _eval_key(self, model: str, seed: int, weights_sha256: Optional[str]) -> dict:
        """What an evaluation file must have been made from: this corpus split and the checkpoint whose
        weights have ``weights_sha256`` (at this path, size and time)."""
        checkpoint = self.run_dir(model, seed) / "best.safetensors"
        stat = checkpoint.stat()
        return {**self._corpus_key(), "checkpoint": str(checkpoint), "checkpoint_mtime_ns": stat.st_mtime_ns,
                "checkpoint_bytes": stat.st_size, "weights_sha256": weights_sha256,
                "mikolov": (self.mikolov or {}).get("key")}

    def current_evaluation(self, model: str, seed: int) -> dict:
        """The evaluation file of a run when the current files support it: made from the run's current
        ``best`` checkpoint (its key; the checkpoint's hashes were verified by this invocation's
        evaluate step, which would have failed otherwise), and neither the run's training nor its
        evaluation failed in this invocation. ``{}`` otherwise: no figures are reported for it."""
        from induce.training.checkpoint import read_sidecar

        if (model, seed) in self.failed_runs:
            return {}
        data = read_json(self.eval_path(f"{model}-seed{seed}"))
        try:
            sha = read_sidecar(self.run_dir(model, seed) / "best").get("weights_sha256")
            current = data.get("key") == self._eval_key(model, seed, sha)
        except (InduceError, OSError):
            current = False
        return data if current else {}

    def evaluate_run(self, model: str, seed: int) -> tuple[str, str]:
        from induce.inference.predict import format_tree, predict_trees
        from induce.inference.language_model import lm_perplexity
        from induce.inference.loading import load_run
        from induce.training.checkpoint import verify_checkpoint
        from induce.training.trainer import read_status

        run_dir = self.run_dir(model, seed)
        checkpoint = run_dir / "best.safetensors"
        if (model, seed) in self.unfinished or read_json(run_dir / RUN_STAMP).get("paused"):
            return "pending", f"{run_dir} is paused at a chunk's end; evaluated once its training is done"
        if (model, seed) in self.failed_runs:
            raise InduceError(f"{run_dir}: its training failed in this run ({self.failed_runs[(model, seed)]})")
        if read_status(run_dir).get("state") != "finished" or not checkpoint.is_file():
            raise InduceError(f"{run_dir}: no finished run to evaluate (its training failed or was interrupted)")
        meta = verify_checkpoint(run_dir / "best")  # a damaged checkpoint is a failed step, not old figures
        path = self.eval_path(f"{model}-seed{seed}")
        stat = checkpoint.stat()
        key = self._eval_key(model, seed, meta.get("weights_sha256"))
        if read_json(path).get("key") == key and path.stat().st_mtime_ns >= stat.st_mtime_ns:
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
        for i, words in enumerate(kept):
            if len(words) == 1:  # scored only where one-word sentences count (ON-LSTM's convention)
                predictions[i] = nltk.Tree("S", list(words))
        scores = self._score(predictions, gold)
        parse_seconds = time.monotonic() - started
        ppl = lm_perplexity(loaded, self.eval_corpus.path, self.options.split, device=self.eval_device)
        mikolov_ppl = None
        if self.mikolov is not None:
            mikolov_ppl = sentences_perplexity(loaded, self.mikolov["sentences"], self.eval_device)
        trees_path = path.with_suffix(".trees.txt")
        from induce.trees.brackets import atomic_write_text

        atomic_write_text(trees_path, "".join(
            (format_tree(tree) if tree is not None else "(S " + " ".join(words) + ")") + "\n"
            for tree, words in zip(predictions, kept)))
        payload = {"key": key, "model": model, "seed": seed, "perplexity": ppl, "mikolov_perplexity": mikolov_ppl,
                   "scores": scores,
                   "run": run_summary(run_dir, loaded.model), "trees": str(trees_path),
                   "parse_seconds": round(parse_seconds, 2), "seconds": round(time.monotonic() - started, 2)}
        _write_json(path, payload)
        mikolov = f" (Mikolov text {mikolov_ppl:.1f})" if mikolov_ppl else ""
        return "ran", (f"ppl {ppl:.1f}{mikolov}, F1 all {scores['all']['sentence_f1']:.1f} / WSJ10 "
                       f"{scores['wsj10']['sentence_f1']:.1f} / WSJ40 {scores['wsj40']['sentence_f1']:.1f}")

    def baseline(self, kind: str) -> tuple[str, str]:
        from induce.evaluation import EvalConvention, baseline_predictions

        path = self.eval_path(f"baseline-{kind}")
        key = {**self._corpus_key(), "baseline": kind, "seed": 0}
        if read_json(path).get("key") == key:
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

    def random_init(self, model: str) -> tuple[str, str]:
        """The profile's ``random_init_seeds`` untrained ``model``s (the run config's model section, inits
        seeded 1..N, the training corpus's vocabulary) parse the first ``random_init_sentences`` WSJ40
        sentences of the split: :func:`induce.evaluation.untrained.evaluate_untrained`, as ``induce eval
        --untrained``. Writes ``OUT/eval/init-<model>.<split>.json``."""
        from induce.evaluation import EvalConvention, prepare_gold
        from induce.evaluation.untrained import evaluate_untrained

        config = self.configs[model][self.profile.seeds[0]]
        vocab = self.train_corpus.vocab
        inits, limit = self.profile.random_init_seeds, self.profile.random_init_sentences
        path = self.eval_path(f"init-{model}")
        key = {**self._corpus_key(), "model": model, "model_config": config.model, "inits": inits, "first_seed": 1,
               "sentences": limit, "vocab_size": len(vocab)}
        if read_json(path).get("key") == key:
            return "skipped", str(path)
        gold, kept = self._gold()
        chosen = [i for i, words in enumerate(kept) if 2 <= len(words) <= 40][:limit]
        convention = EvalConvention(max_length=40)
        result = evaluate_untrained(model, config.model, [prepare_gold(gold[i], convention) for i in chosen], vocab,
                                    convention, inits=inits, seed=0, batch_size=self.profile.eval_batch_size,
                                    device=self.eval_device)
        _write_json(path, {"key": key, **result})
        s = result["summary"]
        return "ran", (f"{inits} inits, {result['n_sentences']} sentences: left {s['left_split_pct']['mean']:.1f}%, "
                       f"right {s['right_split_pct']['mean']:.1f}%, F1 {s['sentence_f1']['mean']:.1f}")

    # -------------------------------------------------------------------------------------- run all

    def plan(self) -> list[tuple[str, Callable[[], tuple[str, str]]]]:
        from induce.evaluation import BASELINES

        steps: list = []
        for model in self.profile.models:
            for seed in self.profile.seeds:
                steps.append((f"train {model} seed {seed}", lambda m=model, s=seed: self._run_step(self.train, m, s)))
        if self.profile.random_init_seeds:
            for model in self.init_models():
                steps.append((f"untrained {model} ({self.profile.random_init_seeds} inits)",
                              lambda m=model: self.random_init(m)))
        for kind in BASELINES:
            steps.append((f"baseline {kind}", lambda b=kind: self.baseline(b)))
        for model in self.profile.models:
            for seed in self.profile.seeds:
                steps.append((f"evaluate {model} seed {seed}",
                              lambda m=model, s=seed: self._run_step(self.evaluate_run, m, s)))
        return steps

    def _run_step(self, action: Callable[[str, int], tuple[str, str]], model: str, seed: int) -> tuple[str, str]:
        """``action(model, seed)``; a failure is remembered (:attr:`failed_runs`: no figures reported)."""
        try:
            return action(model, seed)
        except Exception as err:
            self.failed_runs.setdefault((model, seed), f"{type(err).__name__}: {err}")
            raise

    def run(self) -> dict:
        import torch

        from induce.report.drawing import make_figures
        from induce.report.markdown import write_results

        started_wall, started = now(), time.monotonic()
        self.started = started
        threads = self.options.threads or self.profile.threads
        old_threads = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            self._log(f"profile [bold]{self.profile.name}[/]: {self.profile.description}"
                      + (f"; training stops after {self.chunk / 60:.0f} min (chunk), run again to continue"
                         if self.chunk is not None else ""))
            steps = self.plan()
            total = len(steps) + 2
            self._step("prepare corpus", 1, total, self.prepare, fatal=True)
            for index, (name, action) in enumerate(steps, start=2):
                self._step(name, index, total, action)
            self.console.rule(f"[bold][{total}/{total}] report", align="left")
            report_started = time.monotonic()
            results = collect_results(self, started_wall, time.monotonic() - started)
            results["incomplete"] = sorted(f"{m} seed {s}" for m, s in self.unfinished)
            results["chunk_s"] = self.chunk
            if self.mikolov is not None:
                results["mikolov"] = {k: v for k, v in self.mikolov.items() if k not in ("sentences", "key")}
            figures = make_figures(results, self.out, self)
            results["figures"] = figures
            results["wall_seconds"] = round(time.monotonic() - started, 1)
            record = StepRecord("report", "ran", round(time.monotonic() - report_started, 2), str(self.out))
            self.steps.append(record)
            self._record_step(record)
            results["steps"] = [asdict(step) for step in self.steps]
            results["step_log"] = read_json(self.out / STEPS_FILE)
            write_results(results, self.out)
            return results
        finally:
            torch.set_num_threads(old_threads)

def _checkpoint_problem(stem: Path) -> Optional[str]:
    """Why the checkpoint ``stem`` cannot be used (missing, damaged, foreign), or None when it verifies."""
    from induce.training.checkpoint import verify_checkpoint

    try:
        verify_checkpoint(stem)
    except InduceError as err:
        return str(err)
    return None


class _BudgetTracker:
    """Keeps ``reproduce.json`` of a run folder up to date with the training seconds used (an
    interrupted run continues with the rest of its budget)."""

    def __init__(self, path: Path, config: dict, used: float):
        self.path, self.config, self.used = path, config, used
        self.paused = False
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
                                    "paused": self.paused, "updated_at": now()})
        self.last_write = time.monotonic()



def check_out_folder(out: Path, corpus: Optional[Path] = None, data: Optional[Path] = None,
                     lm_text: Optional[Path] = None, corpora_dir: Optional[Path] = None) -> None:
    """Refuse an output folder that would replace an input: the same folder as ``--corpus``, ``--data`` or
    ``--lm-text``, or one inside a prepared corpus (``--corpus`` or any under ``corpora_dir``), which a
    rebuild replaces as a whole, results and all (:func:`induce.files.check_not_input`)."""
    from induce.files import check_not_input

    check_not_input(out, {"--corpus": corpus, "the data root --data": data, "--lm-text": lm_text}, "--out")
    prepared = [corpus] if corpus is not None else []
    if corpora_dir is not None and Path(corpora_dir).is_dir():
        prepared += sorted(folder for folder in Path(corpora_dir).iterdir() if (folder / "meta.json").is_file())
    check_not_input(out, {"the prepared corpus": prepared}, "--out", within=True)


def sentences_perplexity(loaded, sentences: list, device: str) -> float:
    """Perplexity of a loaded run's LM on ``sentences`` (token lists; words outside its vocabulary
    count as ``<unk>``), read as one stream with the run's eval batching (as ``induce eval --lm``)."""
    import math

    import torch

    from induce.training.batching import batchify, stream_ids
    from induce.training.trainer import evaluate_lm

    stream = stream_ids(sentences, loaded.vocab)
    data_cfg = loaded.config["data"]
    batch = max(1, min(data_cfg["eval_batch_size"], stream.numel() // 2))
    return math.exp(evaluate_lm(loaded.model, batchify(stream, batch), data_cfg["bptt"], torch.device(device)))


def reproduce(options: ReproduceOptions, console: Optional[Console] = None, **kwargs) -> dict:
    """Run the pipeline (see the module docstring); returns the results dict."""
    return Reproduction(options, console=console, **kwargs).run()
