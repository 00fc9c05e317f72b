"""The steps of ``induce reproduce`` (see :mod:`induce.reproduce.pipeline` for the list and their
order): preparing the corpus, training a run, evaluating it, the baselines and the untrained models,
each deciding whether its outputs are up to date (then it is skipped) and returning
``(status, detail)``.

:class:`PipelineSteps` holds them as methods of :class:`~induce.reproduce.pipeline.Reproduction`
(which sets ``options``, ``profile``, ``out``, ``budgets``, ``step_budgets``, ``threads``, ``chunk``,
``unfinished``, ``failed_runs``, ``model_sections``, ``device`` and ``eval_device`` before any step runs).
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Optional

from induce.errors import InduceError
from induce.files import now

from .profiles import build_run_config
from .results import SCORE_SETS, convention, read_json, run_summary
from .subset import subset_corpus

RUN_STAMP = "reproduce.json"
#: Bumped when the content of the evaluation JSON files or of the trees files changes (forces re-evaluation).
EVAL_VERSION = 5
#: Config keys that may differ without making a finished run stale (``checkpoint_every``: where the resumable
#: checkpoints are written changes nothing the run computes; tests/test_pcfg_models.py checks it).
VOLATILE_TRAIN_KEYS = ("device", "kernels", "threads", "log_interval", "tensorboard", "checkpoint_every")


def write_json(path: Path, payload, outputs=None) -> Path:
    """``payload`` as indented JSON at ``path`` (folders made; :func:`induce.files.write_output`, or into the
    :class:`induce.files.OutputSet` ``outputs`` it is one file of); returns ``path``."""
    from induce.files import write_output

    text = json.dumps(payload, indent=1, sort_keys=True, default=str) + "\n"
    return write_output(path, text) if outputs is None else outputs.write(path, text)


def _comparable(config: dict) -> dict:
    out = json.loads(json.dumps(config))
    for key in VOLATILE_TRAIN_KEYS:
        out.get("train", {}).pop(key, None)
    return out


def evaluation_splits(asked: str, available, corpus: Path) -> tuple[str, list[str]]:
    """``(final split, evaluated splits)`` for ``--split asked`` on a corpus with splits ``available``.

    ``auto``: the final figures on ``test`` when the corpus has it, else on ``valid`` (dev); ``valid`` / ``test``:
    that split (``test`` must exist). Dev is always evaluated: the models are selected on it (the monitor
    sentences of the training corpus's ``valid``) and its figures sit beside the test figures; the test split is
    read by the evaluation only, never by training or selection."""
    available = list(available)
    if "valid" not in available:
        raise InduceError(f"{corpus}: no valid (dev) split (splits: {', '.join(available)}); the models are selected "
                          "on it")
    if asked == "test" and "test" not in available:
        raise InduceError(f"{corpus}: no test split (splits: {', '.join(available)}); evaluate on valid (dev) or "
                          "use --split auto")
    final = "test" if asked == "test" or (asked == "auto" and "test" in available) else "valid"
    return final, (["valid", "test"] if final == "test" else ["valid"])


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
    interrupted run continues with the rest of its clock budget, ``time_per_model``; a step budget is the
    run's own ``train.max_steps``)."""

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
            write_json(self.path, {"config": self.config, "train_seconds": round(self.seconds(), 1),
                                    "paused": self.paused, "updated_at": now()})
        self.last_write = time.monotonic()


class PipelineSteps:
    """The steps of the pipeline (mixed into :class:`~induce.reproduce.pipeline.Reproduction`)."""

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
        self.final_split, self.eval_splits = evaluation_splits(self.options.split, corpus.splits, eval_dir)
        self.eval_corpus = corpus
        train_dir = eval_dir
        if self.profile.train_sentences or self.profile.monitor_sentences:
            train_dir = subset_corpus(eval_dir, self.options.corpora_dir, self.profile.train_sentences,
                                      self.profile.monitor_sentences)
            detail += f"; training corpus {train_dir}"
        self.train_corpus = PreparedCorpus(train_dir)
        # The models of `all_train_sentences` train on every training sentence, monitored on the same dev subset.
        self.train_dirs = {model: train_dir for model in self.profile.models}
        full = [model for model in self.profile.models if model in self.profile.all_train_sentences]
        if full and self.profile.train_sentences:
            full_dir = (subset_corpus(eval_dir, self.options.corpora_dir, None, self.profile.monitor_sentences)
                        if self.profile.monitor_sentences else eval_dir)
            self.train_dirs.update(dict.fromkeys(full, full_dir))
            detail += f"; {', '.join(full)}: every training sentence, {full_dir}"
        #: split -> Mikolov's text of that split (None: not found)
        self.mikolov_texts = {split: self._find_mikolov(corpus, split) for split in self.eval_splits}
        self.mikolov = self.mikolov_texts[self.final_split]
        found = [text["path"] for text in self.mikolov_texts.values() if text is not None]
        if found:
            detail += f"; Mikolov text {', '.join(found)}"
        detail += f"; final figures on {self.final_split}" + (
            f" (also evaluated: {', '.join(s for s in self.eval_splits if s != self.final_split)})"
            if len(self.eval_splits) > 1 else "")
        self.configs = {
            model: {seed: build_run_config(self.profile, model, [],
                                           self._train_values(self.train_dirs[model], model, seed))
                    for seed in self.profile.seeds}
            for model in self.profile.models
        }
        return status, detail

    def _find_mikolov(self, corpus, split: str) -> Optional[dict]:
        """Mikolov's text of ``split`` (``ptb.valid.txt`` / ``ptb.test.txt``) from ``--lm-text``, else, for a
        corpus made from the WSJ files, ``ptb_lm/`` under the data root; with how much of it our vocabulary
        covers (its tokens outside ours count as ``<unk>``). ``--lm-text`` without the final split's file is
        an error; without another evaluated split's, that split has no Mikolov figure."""
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
        path = Path(folder) / f"ptb.{split}.txt"
        if not path.is_file():
            if self.options.lm_text is not None and split == self.final_split:
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

    def _train_values(self, train_dir: Path, model: str, seed: int) -> dict:
        """The keys the reproduction sets on a run's config, as typed values (a path is not re-read as YAML)."""
        values = {"data.corpus": str(train_dir), "train.seed": seed, "train.device": self.device,
                  "train.threads": self.threads}
        if self.step_budgets[model] is not None:
            values["train.max_steps"] = self.step_budgets[model]
        if self.budgets[model] is not None:
            values["train.time_budget"] = self.budgets[model]
        return values

    def train(self, model: str, seed: int) -> tuple[str, str]:
        """Train (or continue, or skip) one run. A run that the chunk's end stopped is *paused* (the trainer's
        ``pause_after``: stopped as by an interrupt, nothing evaluated, so that the chunks change nothing of what
        it computes): ``reproduce.json`` says so, the trainer's checkpoint ``last.*`` continues it next time."""
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
                steps = f"{status['steps']:,} steps, " if isinstance(status.get("steps"), int) else ""
                return "skipped", (f"{run_dir} finished ({status.get('stop_reason')}, {steps}"
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
        tracker = _BudgetTracker(run_dir / RUN_STAMP, requested, used)
        kwargs = dict(console=self.console, progress=self.options.progress and self.console.is_terminal,
                      on_batch=tracker.on_batch, pause_after=chunk_left)
        try:
            if same and (run_dir / "last.json").is_file():
                self._log(f"continuing the {'paused' if stamp.get('paused') else 'interrupted'} run {run_dir} "
                          f"({used:.0f} s of training done)")
                result = resume(run_dir, {"device": self.device, "time_budget": left, "threads": self.threads},
                                **kwargs)
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
                if left != config.train.time_budget:
                    timed = config.train.model_copy(update={"time_budget": left})
                    config = config.model_copy(update={"train": timed})
                result = train(config, run_dir, **kwargs)
                state = "ran"
            tracker.paused = result.stop_reason == "paused"
        finally:
            tracker.write()
        detail = (f"{result.steps:,} steps, {result.epochs_done} epoch{'' if result.epochs_done == 1 else 's'} "
                  f"(stopped by: {result.stop_reason}), on the monitor: {result.best_valid_text()}")
        if result.stop_reason == "time_budget":
            from induce.training.trainer import clock_note

            detail += f"; {clock_note(result.steps)}"
        if tracker.paused:
            self.unfinished.add((model, seed))
            return "paused", detail + "; paused at the chunk's end (run the same command again to continue)"
        return state, detail

    def _gold(self, split: Optional[str] = None):
        """The gold trees of ``split`` (default: the final split), and the same prepared under the default
        convention (computed once per split)."""
        split = split or self.final_split
        cache = self.__dict__.setdefault("_gold_cache", {})
        if split not in cache:
            from induce.evaluation import prepare_gold

            gold = self.eval_corpus.gold_trees(split)
            cache[split] = (gold, [prepare_gold(tree) for tree in gold])
        return cache[split]

    def _score(self, predictions: list, gold: list) -> dict:
        """Every score set of :data:`SCORE_SETS` (our convention and each paper's); ``gold``: the
        :class:`~induce.evaluation.Gold` of each sentence."""
        from induce.evaluation import score

        return {name: score(gold, predictions, convention(name)).to_dict() for name in SCORE_SETS}

    def _corpus_key(self, split: Optional[str] = None) -> dict:
        corpus = self.eval_corpus
        return {"version": EVAL_VERSION, "split": split or self.final_split, "corpus": self._key_path(corpus.path),
                "fingerprint": corpus.meta.get("fingerprint")}

    def _key_path(self, path: Path) -> str:
        """A path as an evaluation key holds it: relative to ``OUT`` when inside it, so that a results folder
        moved or copied elsewhere keeps its evaluations current; absolute otherwise."""
        path, out = Path(path).absolute(), self.out.absolute()
        return path.relative_to(out).as_posix() if path.is_relative_to(out) else str(path)

    def eval_path(self, stem: str, split: Optional[str] = None) -> Path:
        """``OUT/eval/<stem>.<split>.json`` (default: the final split)."""
        return self.out / "eval" / f"{stem}.{split or self.final_split}.json"

    def _eval_key(self, model: str, seed: int, weights_sha256: Optional[str], split: Optional[str] = None) -> dict:
        """What an evaluation file must have been made from: this corpus split and the checkpoint whose
        weights have ``weights_sha256`` (at this path within ``OUT``, of this size); on the final split, also
        the untrained models' sentences (``random_init_sentences``) it scores apart. No absolute path of ``OUT``
        and no file time enters it: a results folder moved, or copied without its times, stays current."""
        split = split or self.final_split
        checkpoint = self.run_dir(model, seed) / "best.safetensors"
        key = {**self._corpus_key(split), "checkpoint": self._key_path(checkpoint),
               "checkpoint_bytes": checkpoint.stat().st_size, "weights_sha256": weights_sha256,
               "mikolov": (self.mikolov_texts.get(split) or {}).get("key")}
        if split == self.final_split and self.profile.random_init_seeds:
            key["init_sentences"] = self.profile.random_init_sentences
        return key

    def current_evaluation(self, model: str, seed: int, split: Optional[str] = None) -> dict:
        """The evaluation file of a run on ``split`` (default: the final split) when the current files support
        it: made from the run's current ``best`` checkpoint (its key; the checkpoint's hashes were verified by
        this invocation's evaluate step, which would have failed otherwise, or, for a run of an earlier
        invocation, by that one's), and neither the run's training nor its evaluation failed in this
        invocation. ``{}`` otherwise: no figures are reported for it."""
        from induce.training.checkpoint import read_sidecar

        if (model, seed) in self.failed_runs:
            return {}
        data = read_json(self.eval_path(f"{model}-seed{seed}", split))
        try:
            sha = read_sidecar(self.run_dir(model, seed) / "best").get("weights_sha256")
            current = data.get("key") == self._eval_key(model, seed, sha, split)
        except (InduceError, OSError):
            current = False
        return data if current else {}

    def evaluate_run(self, model: str, seed: int) -> tuple[str, str]:
        """Evaluate the run's ``best`` checkpoint (selected on dev while it trained) on every evaluated split
        (:attr:`eval_splits`: dev, and test when the final figures are on test); each split's file is skipped
        while it was made from that checkpoint."""
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
        loaded = None
        ran, details = False, []
        for split in sorted(self.eval_splits, key=lambda s: s != self.final_split):  # the final split first
            path = self.eval_path(f"{model}-seed{seed}", split)
            key = self._eval_key(model, seed, meta.get("weights_sha256"), split)
            if read_json(path).get("key") == key:  # made from these weights (their hash, verified above)
                details.append(f"{split}: {path} was made from {checkpoint} as it is")
                continue
            if loaded is None:
                from induce.inference.loading import load_run

                loaded = load_run(run_dir, self.eval_device)
            details.append(f"{split}: " + self._evaluate_split(loaded, model, seed, split, key, path))
            ran = True
        return ("ran" if ran else "skipped"), "; ".join(details)

    def _evaluate_split(self, loaded, model: str, seed: int, split: str, key: dict, path: Path) -> str:
        """One split's evaluation of a loaded run into ``path``; returns the step's detail."""
        from induce.evaluation import DEFAULT, score
        from induce.inference.language_model import lm_perplexity, sentences_perplexity
        from induce.inference.predict import format_tree, with_punctuation
        from induce.inference.scoring import parse_gold

        started = time.monotonic()
        _, prepared = self._gold(split)
        # The default convention's sentences (two words or more: the word-tag-filtered words the LM was
        # trained on); one-word sentences are scored only where they count (ON-LSTM's convention).
        predictions = parse_gold(loaded, prepared, DEFAULT, batch_size=self.profile.eval_batch_size,
                                 device=self.eval_device, one_word_trees=True)
        scores = self._score(predictions, prepared)
        parse_seconds = time.monotonic() - started
        ppl = lm_perplexity(loaded, self.eval_corpus.path, split, device=self.eval_device)
        mikolov_ppl = None
        mikolov = self.mikolov_texts.get(split)
        if mikolov is not None:
            mikolov_ppl = sentences_perplexity(loaded, mikolov["sentences"], self.eval_device)
        trees_path = path.with_suffix(".trees.txt")
        from induce.files import output_set

        # Over every token (punctuation attached as `induce parse` attaches it), so that each convention of
        # `induce eval --convention` finds its own tokens there; the default one projects them away again.
        trees_text = "".join(format_tree(with_punctuation(sentence.words, sentence.keep(DEFAULT), tree)) + "\n"
                             for tree, sentence in zip(predictions, prepared))
        payload = {"key": key, "model": model, "seed": seed, "split": split, "perplexity": ppl,
                   "mikolov_perplexity": mikolov_ppl, "scores": scores,
                   "run": run_summary(self.run_dir(model, seed), loaded.model), "trees": str(trees_path),
                   "parse_seconds": round(parse_seconds, 2), "seconds": round(time.monotonic() - started, 2)}
        if split == self.final_split and self.profile.random_init_seeds:
            # The untrained models' sentences: their figures and these compare like with like.
            chosen = self.init_sentence_indices(split)
            payload["init_sentences"] = {"n_sentences": len(chosen), **score(
                [prepared[i] for i in chosen], [predictions[i] for i in chosen], convention("wsj40")).to_dict()}
        with output_set() as outputs:  # the trees and the JSON that names them: both or neither
            outputs.write(trees_path, trees_text)
            write_json(path, payload, outputs)
        bound = "≤ " if payload["run"]["perplexity_bound"] else ""  # an upper bound, marked as table 1 marks it
        mikolov_text = f" (Mikolov text {bound}{mikolov_ppl:.1f})" if mikolov_ppl else ""
        return (f"ppl {bound}{ppl:.1f}{mikolov_text}, F1 all {scores['all']['sentence_f1']:.1f} / WSJ10 "
                f"{scores['wsj10']['sentence_f1']:.1f} / WSJ40 {scores['wsj40']['sentence_f1']:.1f}")

    def baseline(self, kind: str) -> tuple[str, str]:
        """The trivial baseline ``kind`` on every evaluated split."""
        from induce.evaluation import DEFAULT, baseline_predictions

        ran, details = False, []
        for split in sorted(self.eval_splits, key=lambda s: s != self.final_split):
            path = self.eval_path(f"baseline-{kind}", split)
            key = {**self._corpus_key(split), "baseline": kind, "seed": 0}
            if read_json(path).get("key") == key:
                details.append(f"{split}: {path}")
                continue
            _, prepared = self._gold(split)
            predictions = baseline_predictions(prepared, kind, DEFAULT, seed=0)
            scores = self._score(predictions, prepared)
            write_json(path, {"key": key, "baseline": kind, "split": split, "scores": scores})
            details.append(f"{split}: F1 all {scores['all']['sentence_f1']:.1f} / WSJ40 "
                           f"{scores['wsj40']['sentence_f1']:.1f}")
            ran = True
        return ("ran" if ran else "skipped"), "; ".join(details)

    def init_models(self) -> list[str]:
        """Models whose untrained parses are measured: PaLM-RB's trees do not depend on its weights
        (always right-branching), and a supervised PaLM is, untrained, the same model as PaLM."""
        from induce.models.registry import get_model_class

        chosen = []
        models = self.profile.models
        for name in models:
            cls = get_model_class(name)
            if cls.fixed_right_branching:
                continue
            if cls.supervised:
                twins = [other for other in models if other != name
                         and not get_model_class(other).supervised
                         and not get_model_class(other).fixed_right_branching
                         and get_model_class(other).parser_kind == cls.parser_kind
                         and self.model_sections[other] == self.model_sections[name]]
                if twins:
                    continue
            chosen.append(name)
        return chosen

    def init_sentence_indices(self, split: str) -> list[int]:
        """The sentences the untrained models parse: the first ``random_init_sentences`` (all when null)
        sentences of 2-40 words (after punctuation removal) of ``split``, as indices into its gold trees."""
        from induce.evaluation import DEFAULT

        _, prepared = self._gold(split)
        chosen = [i for i, sentence in enumerate(prepared) if 2 <= sum(sentence.keep(DEFAULT)) <= 40]
        return chosen[: self.profile.random_init_sentences]

    def random_init(self, model: str) -> tuple[str, str]:
        """The profile's ``random_init_seeds`` untrained ``model``s (the run config's model section, inits
        seeded 1..N, the training corpus's vocabulary) parse the first ``random_init_sentences`` WSJ40
        sentences of the split: :func:`induce.assess.untrained.evaluate_untrained`, as ``induce eval
        --untrained``. Writes ``OUT/eval/init-<model>.<split>.json``."""
        from induce.assess.untrained import evaluate_untrained
        from induce.evaluation import induce_convention

        config = self.configs[model][self.profile.seeds[0]]
        vocab = self.train_corpus.vocab
        inits, limit = self.profile.random_init_seeds, self.profile.random_init_sentences
        path = self.eval_path(f"init-{model}")
        key = {**self._corpus_key(), "model": model, "model_config": config.model, "inits": inits, "first_seed": 1,
               "sentences": limit, "vocab_size": len(vocab)}
        if read_json(path).get("key") == key:
            return "skipped", str(path)
        _, prepared = self._gold()
        chosen = self.init_sentence_indices(self.final_split)
        convention = induce_convention(max_length=40)
        result = evaluate_untrained(model, config.model, [prepared[i] for i in chosen], vocab,
                                    convention, inits=inits, seed=0, batch_size=self.profile.eval_batch_size,
                                    device=self.eval_device)
        write_json(path, {"key": key, "split": self.final_split, **result})
        s = result["summary"]
        return "ran", (f"{inits} inits, {result['n_sentences']} sentences: left {s['left_split_pct']['mean']:.1f}%, "
                       f"right {s['right_split_pct']['mean']:.1f}%, F1 {s['sentence_f1']['mean']:.1f}")
