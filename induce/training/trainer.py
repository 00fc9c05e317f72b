"""The training loop: variable-length BPTT, AR/TAR, clipping, SGD/Adam -> ASGD, evaluation, selection,
early stopping, time budget, checkpoints, exact resume and DistributedDataParallel.

A run folder ``runs/RUN/`` holds::

    config.yaml        the resolved config (every field)
    metrics.jsonl      one JSON line per epoch (train/valid loss and perplexity, lr, dev F1, timing)
    best.safetensors   weights of the selected model (ASGD averages when in the ASGD phase)
    best.json          its sidecar: model name, config, vocabulary, metrics
    last.safetensors   everything to continue: weights, optimiser tensors, RNG states, carried state
    last.json          its sidecar: optimiser / schedule / trainer state, RNG states, history
    status.json        {"state": "running" | "finished", "stop_reason", ...}

**Exact resume.** ``last`` is written at every epoch end (and every ``train.checkpoint_every``
batches); it stores the optimiser state (incl. ASGD's averages), the schedule, the validation
history, the best metric, the batch position inside the epoch, the recurrent state carried to the
next segment, the epoch's running loss sums and every RNG state (python ``random``, numpy's global
generator, the BPTT-length generator, torch CPU and CUDA per process). Resuming from it replays
the rest of the run bit for bit on CPU.

**Speed.** The step does no host synchronisation: the running loss is summed on the device and
read (``.item()``) only every ``log_interval`` batches and at the end of the epoch.
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from torch import nn

from induce.config import RunConfig, load_config_file, save_config, validate_config
from induce.errors import InduceError

from . import batching, ddp
from .checkpoint import (
    CheckpointError,
    flatten_state,
    join_optimizer_state,
    load_checkpoint,
    prefixed,
    save_checkpoint,
    split_optimizer_state,
    unflatten_state,
)
from .optim import Schedule, averaged_parameters, build_optimizer, clip_gradients

STATUS_FILE = "status.json"
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.yaml"
BEST = "best"
LAST = "last"
#: Dev-F1 subsets reported each epoch (sentence length limits, words without punctuation).
DEV_LENGTHS = {"wsj10": 10, "wsj40": 40}


# ------------------------------------------------------------------------------------------ helpers


def detach_state(state: Any) -> Any:
    """The recurrent state with every tensor detached (truncated BPTT)."""
    if isinstance(state, torch.Tensor):
        return state.detach()
    if isinstance(state, tuple):
        return tuple(detach_state(x) for x in state)
    if isinstance(state, list):
        return [detach_state(x) for x in state]
    if isinstance(state, dict):
        return {k: detach_state(v) for k, v in state.items()}
    return state


def map_state(state: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply ``fn`` to every tensor of a nested recurrent state."""
    if isinstance(state, torch.Tensor):
        return fn(state)
    if isinstance(state, tuple):
        return tuple(map_state(x, fn) for x in state)
    if isinstance(state, list):
        return [map_state(x, fn) for x in state]
    if isinstance(state, dict):
        return {k: map_state(v, fn) for k, v in state.items()}
    return state


class LMLoss(nn.Module):
    """The language model plus its training loss, in one ``forward`` (what DDP wraps).

    forward: ``tokens [B, T]``, ``targets [B, T]``, state, ``gold [B, T, m]`` or None ->
    ``(loss, cross_entropy, new_state)``, where ``loss = CE + alpha * AR + beta * TAR + extra_loss``:
    AR = mean squared last-layer output after dropout, TAR = mean squared difference of consecutive
    last-layer outputs before dropout (Merity et al., 2018).
    """

    def __init__(self, model: nn.Module, alpha: float, beta: float):
        super().__init__()
        self.model, self.alpha, self.beta = model, alpha, beta

    def forward(self, tokens, targets, state, gold=None):
        out = self.model(tokens, state, gold)
        logits = self.model.logits(out.hidden)
        cross_entropy = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))
        loss = cross_entropy
        if self.alpha and out.dropped_outputs:
            loss = loss + self.alpha * out.dropped_outputs[-1].float().pow(2).mean()
        if self.beta and out.raw_outputs and out.raw_outputs[-1].size(1) > 1:
            raw = out.raw_outputs[-1].float()
            loss = loss + self.beta * (raw[:, 1:] - raw[:, :-1]).pow(2).mean()
        if out.extra_loss is not None:
            loss = loss + out.extra_loss
        return loss, cross_entropy.detach(), out.state


@torch.no_grad()
def evaluate_lm(model: nn.Module, data: torch.Tensor, bptt: int, device: torch.device) -> float:
    """Mean cross-entropy (nats per token) of ``model`` on ``data [B, L]`` read in ``bptt`` segments.

    Eval mode, the state carried across segments (as in training); one host sync at the end.
    """
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = 0
    state = model.init_state(data.size(0), device)
    try:
        for start in range(0, data.size(1) - 1, bptt):
            inputs, targets = batching.segment(data, start, bptt)
            inputs, targets = inputs.to(device), targets.to(device)
            out = model(inputs, state)
            state = out.state
            logits = model.logits(out.hidden)
            total += F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), reduction="sum")
            count += targets.numel()
    finally:
        model.train(was_training)
    return total.item() / max(count, 1)


def resolve_corpus(spec: Optional[str], corpora_dir: Path = Path("corpora"), console: Optional[Console] = None) -> Path:
    """The prepared corpus folder of ``data.corpus`` (a folder, a name under ``corpora/``, or None = default)."""
    from induce.data.locate import default_corpus

    if spec is None:
        return default_corpus(corpora_dir=corpora_dir, console=console)
    path = Path(spec)
    if (path / "meta.json").is_file():
        return path
    named = Path(corpora_dir) / spec
    if (named / "meta.json").is_file():
        return named
    raise InduceError(
        f"data.corpus={spec}: no prepared corpus at {path} or {named}; run `induce preprocess` first"
    )


def _rng_json_state(bptt_rng: Optional[np.random.Generator]) -> dict:
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "bptt": None if bptt_rng is None else bptt_rng.bit_generator.state,
    }


def _restore_rng_json(state: dict, bptt_rng: Optional[np.random.Generator]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if bptt_rng is not None and state.get("bptt") is not None:
        bptt_rng.bit_generator.state = state["bptt"]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_status(run_dir: Path) -> dict:
    path = Path(run_dir) / STATUS_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


# --------------------------------------------------------------------------------------------- dev F1


def dev_parse_metrics(model, words: list[list[str]], ids: list[list[int]], gold_trees: list, eos_id: int) -> dict:
    """Parse the dev sentences and score them with :func:`induce.evaluation.evaluate` (Kim et al.'s
    convention: no punctuation, trivial spans not counted, sentence-level F1 in 0-100).

    ``words`` (original words without punctuation), ``ids`` (their LM ids) and ``gold_trees``
    (treebank trees with POS tags) are aligned lists. Returns ``dev_f1`` (all parsed sentences),
    ``dev_f1_wsj10``, ``dev_f1_wsj40``, ``dev_corpus_f1`` and the predicted trees' left/right split
    percentages (``dev_left_split_pct``, ``dev_right_split_pct``); ``{}`` without the evaluator.
    """
    try:
        from induce.evaluation import EvalConvention, evaluate
    except ImportError:
        return {}
    from induce.parsing import parse_batch

    if not ids:
        return {}
    predicted = parse_batch(model, ids, words=words, eos_id=eos_id, batch_size=64)
    metrics: dict = {}
    for name, limit in (("", None), *DEV_LENGTHS.items()):
        summary = evaluate(predicted, gold_trees, EvalConvention(max_length=limit)).to_dict()
        if not summary["n_sentences"]:
            continue
        metrics[f"dev_f1_{name}" if name else "dev_f1"] = summary["sentence_f1"]
        if not name:
            metrics["dev_corpus_f1"] = summary["corpus_f1"]
            metrics["dev_left_split_pct"] = summary["left_split_pct"]
            metrics["dev_right_split_pct"] = summary["right_split_pct"]
    return metrics


# ---------------------------------------------------------------------------------------------- trainer


@dataclass
class TrainResult:
    """What a finished :meth:`Trainer.run` returns (rank 0's view)."""

    run_dir: Path
    epochs_done: int
    stop_reason: str
    best_valid_ppl: float
    best_metric: float
    history: list = field(default_factory=list)


class Trainer:
    """Trains ``config`` into ``run_dir``.

    ``resume=True`` continues from ``run_dir/last.*`` (the config stored there wins over
    ``config`` except ``train.epochs``, ``train.time_budget``, ``train.device``, ``train.kernels``,
    ``train.log_interval``). ``on_batch(trainer, epoch, batch)`` is called after every optimiser
    step (tests use it to kill a run). ``progress=False`` hides the progress bars.
    """

    def __init__(
        self,
        config: RunConfig,
        run_dir: Path,
        *,
        resume: bool = False,
        console: Optional[Console] = None,
        progress: bool = True,
        on_batch: Optional[Callable[["Trainer", int, int], None]] = None,
        corpora_dir: Path = Path("corpora"),
    ):
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.console = console or Console(stderr=True)
        self.show_progress = progress
        self.on_batch = on_batch
        self.corpora_dir = Path(corpora_dir)
        self.resume_meta: Optional[dict] = None
        self.resume_tensors: Optional[dict] = None
        if resume:
            self.resume_tensors, self.resume_meta = load_checkpoint(self.run_dir / LAST)
            stored = validate_config(self.resume_meta["config"], source=str(self.run_dir / (LAST + ".json")))
            keep = {"epochs", "time_budget", "device", "kernels", "log_interval"}
            updates = {k: getattr(config.train, k) for k in keep}
            config = stored.model_copy(update={"train": stored.train.model_copy(update=updates)})
        self.config = config

    # ---------------------------------------------------------------------------------------- setup

    def _log(self, message: str) -> None:
        if self.ctx.is_main:
            self.console.print(message, highlight=False, soft_wrap=True)

    def _setup(self) -> None:
        from induce.data.corpus import PreparedCorpus
        from induce.kernels import set_backend
        from induce.models.registry import get_model_class

        cfg = self.config
        self.ctx = ddp.init_distributed(cfg.train.device)
        ctx = self.ctx
        set_backend(cfg.train.kernels)
        if cfg.data.batch_size % ctx.world_size:
            raise InduceError(
                f"data.batch_size={cfg.data.batch_size} is not divisible by {ctx.world_size} processes"
            )
        # Rank 0 prepares the default corpus first (a cache on disk); the others then just read it.
        if ctx.is_main:
            corpus_path = resolve_corpus(cfg.data.corpus, self.corpora_dir, self.console)
        ddp.barrier(ctx)
        if not ctx.is_main:
            corpus_path = resolve_corpus(cfg.data.corpus, self.corpora_dir, Console(quiet=True))
        if cfg.data.corpus is None:
            cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"corpus": str(corpus_path)})})
            self.config = cfg
        self.corpus = PreparedCorpus(corpus_path)
        vocab = self.corpus.vocab
        if self.resume_meta is not None and self.resume_meta.get("vocab", {}).get("itos") != vocab.itos:
            raise CheckpointError(f"{self.run_dir}: the corpus vocabulary changed since the checkpoint was written")
        self.vocab = vocab
        self.model_cls = get_model_class(cfg.model_name)
        if "valid" not in self.corpus.splits:
            raise InduceError(f"{corpus_path}: the corpus has no valid split (needed for model selection)")

        seed_everything(cfg.train.seed)
        self.device = ctx.device
        self.model = self.model_cls(len(vocab), cfg.model_config_object()).to(self.device)
        if ctx.distributed:
            # Same initial weights everywhere (seeded above); different dropout masks per process.
            torch.manual_seed(cfg.train.seed + 1_000_003 * ctx.rank)

        train_stream = batching.stream_ids(self.corpus.lm_sentences("train"), vocab)
        self.train_data = batching.shard_rows(
            batching.batchify(train_stream, cfg.data.batch_size), ctx.rank, ctx.world_size
        ).to(self.device)
        valid_stream = batching.stream_ids(self.corpus.lm_sentences("valid"), vocab)
        self.valid_data = batching.batchify(valid_stream, cfg.data.eval_batch_size)
        self.train_gold = None
        if getattr(self.model_cls, "supervised", False):
            self.train_gold = self._gold_spans(train_stream.numel())
        self._prepare_dev()
        if cfg.train.select_by == "dev_f1" and not self._model_parses():
            raise InduceError(
                f"train.select_by=dev_f1: model {cfg.model_name!r} has no syntactic structure (parser_kind 'none'), "
                f"so there is no dev F1; use train.select_by=valid_ppl"
            )
        if cfg.train.select_by == "dev_f1" and self.dev is None:
            raise InduceError(
                "train.select_by=dev_f1 needs dev trees (a corpus with trees, train.dev_f1=true and induce.evaluation)"
            )

        self.loss_module: nn.Module = LMLoss(self.model, cfg.train.alpha, cfg.train.beta)
        if ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel

            self.loss_module = DistributedDataParallel(
                self.loss_module, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
                find_unused_parameters=bool(self._unused_parameters()),
            )
        self.schedule = Schedule(cfg.optim)
        self.optimizer = build_optimizer(self.model.parameters(), cfg.optim)
        self.bptt_rng = np.random.default_rng(cfg.train.seed) if cfg.data.variable_bptt else None
        # Trainer state (all JSON-serialisable except the carried recurrent state).
        self.epoch = 1  # the epoch in progress
        self.batch = 0  # optimiser steps done in this epoch
        self.position = 0  # next segment start in the epoch
        self.hidden = None
        self.epoch_loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.epoch_tokens = 0
        self.steps_total = 0
        self.best_metric: Optional[float] = None
        self.best_valid_ppl = math.inf
        self.bad_epochs = 0
        self.history: list[dict] = []
        if self.resume_meta is not None:
            self._restore()

    def _unused_parameters(self) -> list[str]:
        """Parameters the training loss does not reach (e.g. PaLM-RB's span scorer), found with one
        probe step in eval mode (no dropout RNG draws, no batch-norm updates); DDP must be told."""
        model = self.model
        was_training = model.training
        model.eval()
        try:
            inputs, targets = batching.segment(self.train_data, 0, min(4, self.train_data.size(1) - 1))
            gold = None if self.train_gold is None else self.train_gold[:, : inputs.size(1)]
            probe = LMLoss(model, self.config.train.alpha, self.config.train.beta)
            loss, _, _ = probe(inputs, targets, model.init_state(inputs.size(0), self.device), gold)
            loss.backward()
            unused = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
        finally:
            model.zero_grad(set_to_none=True)
            model.train(was_training)
        return unused

    def _gold_spans(self, n_tokens: int) -> torch.Tensor:
        """PaLM-S targets ``[B/W, L, m]`` aligned with the training rows."""
        from induce.parsing import gold_span_targets

        if not self.corpus.has_trees:
            raise InduceError(f"{self.corpus.path}: {self.config.model_name} needs a corpus with trees (gold spans)")
        targets = gold_span_targets(self.corpus.nopunct_trees("train"), self.config.model["max_span_length"])
        if targets.size(0) != n_tokens:
            raise InduceError(
                f"{self.corpus.path}: train trees give {targets.size(0)} gold-span rows but the LM text has {n_tokens} tokens"
            )
        rows = batching.batchify(targets, self.config.data.batch_size)
        return batching.shard_rows(rows, self.ctx.rank, self.ctx.world_size).to(self.device)

    def _model_parses(self) -> bool:
        """Whether the model has a parser (``parser_kind`` other than ``"none"``, e.g. not rellstm)."""
        return getattr(self.model_cls, "parser_kind", "none") != "none"

    def _prepare_dev(self) -> None:
        """Dev sentences for the per-epoch F1 (valid trees without punctuation, 2..40 words); none for a
        model that does not parse (``parser_kind = "none"``)."""
        self.dev = None
        cfg = self.config.train
        if not (cfg.dev_f1 and self.corpus.has_trees):
            return
        if not self._model_parses():
            self._log(f"note: {self.config.model_name} has no syntactic structure (parser_kind 'none'): no dev F1")
            return
        try:
            import induce.evaluation  # noqa: F401
        except ImportError:
            return
        # Line i of every file of a split is the same sentence: the no-punctuation tree gives the
        # original words, the LM text their ids, the gold tree (with POS tags) the reference.
        nopunct = self.corpus.nopunct_trees("valid")
        gold_trees = self.corpus.gold_trees("valid")
        sentences = self.corpus.lm_sentences("valid")
        words, ids, gold = [], [], []
        for tree, gold_tree, tokens in zip(nopunct, gold_trees, sentences):
            if 2 <= len(tokens) <= max(DEV_LENGTHS.values()) and len(tree.leaves()) == len(tokens):
                words.append(tree.leaves())
                ids.append(self.vocab.encode(tokens))
                gold.append(gold_tree)
            if len(ids) >= cfg.dev_f1_max_sentences:
                break
        self.dev = (words, ids, gold)

    # ----------------------------------------------------------------------------------- checkpoints

    def _trainer_state(self) -> dict:
        return {
            "epoch": self.epoch,
            "batch": self.batch,
            "position": self.position,
            "epoch_loss_sum": float(ddp.all_reduce_sum(self.ctx, self.epoch_loss_sum).item()),
            "epoch_tokens": int(ddp.all_reduce_sum(self.ctx, torch.tensor(float(self.epoch_tokens))).item()),
            "steps_total": self.steps_total,
            "best_metric": self.best_metric,
            "best_valid_ppl": self.best_valid_ppl,
            "bad_epochs": self.bad_epochs,
            "world_size": self.ctx.world_size,
        }

    def _save_last(self) -> None:
        """The resumable checkpoint (a collective under DDP: every rank must call it)."""
        ctx = self.ctx
        tensors = {f"model.{k}": v for k, v in self.model.state_dict().items()}
        optim_tensors, optim_json = split_optimizer_state(self.optimizer.state_dict())
        tensors.update(optim_tensors)
        for rank, state in enumerate(ddp.gather_bytes(ctx, torch.get_rng_state())):
            tensors[f"rng.torch_cpu.{rank}"] = state
        if self.device.type == "cuda":
            for rank, state in enumerate(ddp.gather_bytes(ctx, torch.cuda.get_rng_state(self.device))):
                tensors[f"rng.cuda.{rank}"] = state
        hidden_skeleton = None
        if self.hidden is not None:
            # Stored as the global batch (rows of all ranks concatenated), like a 1-process run.
            full = map_state(self.hidden, lambda t: ddp.gather_rows(ctx, t))
            hidden_tensors, hidden_skeleton = flatten_state(full, "hidden")
            tensors.update(hidden_tensors)
        trainer_state = self._trainer_state()
        if not ctx.is_main:
            return
        meta = self._meta("last")
        meta.update(
            optimizer=optim_json,
            optimizer_kind=type(self.optimizer).__name__,
            schedule=self.schedule.state_dict(),
            trainer=trainer_state,
            rng=_rng_json_state(self.bptt_rng),
            hidden=hidden_skeleton,
            history=self.history,
        )
        save_checkpoint(self.run_dir / LAST, tensors, meta)

    def _save_best(self, metrics: dict) -> None:
        if not self.ctx.is_main:
            return
        with averaged_parameters(self.model, self.optimizer):
            tensors = {f"model.{k}": v.detach().clone() for k, v in self.model.state_dict().items()}
        meta = self._meta("best")
        meta["metrics"] = metrics
        save_checkpoint(self.run_dir / BEST, tensors, meta)

    def _meta(self, kind: str) -> dict:
        return {
            "kind": kind,
            "model_name": self.config.model_name,
            "config": self.config.to_dict(),
            "vocab": self.vocab.to_json(),
            "epoch": self.epoch,
            "written_at": _now(),
        }

    def _restore(self) -> None:
        tensors, meta = self.resume_tensors, self.resume_meta
        ctx = self.ctx
        self.model.load_state_dict(prefixed(tensors, "model"))
        self.schedule.load_state_dict(meta["schedule"])
        if self.schedule.asgd_active:
            self.optimizer = build_optimizer(self.model.parameters(), self.config.optim, asgd=True)
        if meta.get("optimizer_kind") != type(self.optimizer).__name__:
            raise CheckpointError(
                f"{self.run_dir}: checkpoint optimiser {meta.get('optimizer_kind')} does not match {type(self.optimizer).__name__}"
            )
        optim_state = join_optimizer_state(tensors, meta["optimizer"])
        optim_state["state"] = {
            i: {k: v.to(self.device) if isinstance(v, torch.Tensor) and v.dim() > 0 else v for k, v in s.items()}
            for i, s in optim_state["state"].items()
        }
        self.optimizer.load_state_dict(optim_state)
        state = meta["trainer"]
        self.epoch, self.batch, self.position = state["epoch"], state["batch"], state["position"]
        self.steps_total = state["steps_total"]
        self.best_metric = state["best_metric"]
        self.best_valid_ppl = state["best_valid_ppl"]
        self.bad_epochs = state["bad_epochs"]
        # The running sums are global; rank 0 carries them so that the all-reduce gives them back.
        self.epoch_loss_sum.fill_(state["epoch_loss_sum"] if ctx.is_main else 0.0)
        self.epoch_tokens = state["epoch_tokens"] if ctx.is_main else 0
        self.history = list(meta.get("history", []))
        if meta.get("hidden") is not None:
            full = unflatten_state(tensors, meta["hidden"])
            self.hidden = map_state(full, lambda t: batching.shard_rows(t, ctx.rank, ctx.world_size).to(self.device))
        _restore_rng_json(meta["rng"], self.bptt_rng)
        if state.get("world_size", 1) != ctx.world_size:
            self._log(
                f"[yellow]note:[/] checkpoint written by {state.get('world_size')} processes, resuming with "
                f"{ctx.world_size}: dropout masks will differ from an uninterrupted run"
            )
        cpu_key = f"rng.torch_cpu.{ctx.rank}"
        if cpu_key in tensors:
            torch.set_rng_state(tensors[cpu_key].cpu())
        cuda_key = f"rng.cuda.{ctx.rank}"
        if self.device.type == "cuda" and cuda_key in tensors:
            torch.cuda.set_rng_state(tensors[cuda_key].cpu(), self.device)

    def _write_status(self, state: str, **extra) -> None:
        if not self.ctx.is_main:
            return
        status = read_status(self.run_dir)
        status.update(state=state, model_name=self.config.model_name, updated_at=_now(), **extra)
        path = self.run_dir / STATUS_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(status, indent=1), encoding="utf-8")
        tmp.replace(path)

    def _write_metrics_file(self) -> None:
        if not self.ctx.is_main:
            return
        text = "".join(json.dumps(line) + "\n" for line in self.history)
        path = self.run_dir / METRICS_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)

    # ------------------------------------------------------------------------------------------ loop

    def _time_up(self) -> bool:
        budget = self.config.train.time_budget
        over = budget is not None and time.monotonic() - self.started > budget
        # Rank 0's clock decides, so that all processes stop after the same step.
        return bool(ddp.broadcast_floats(self.ctx, [float(over)])[0]) if self.ctx.distributed else over

    def _train_epoch(self, progress: Optional[Progress]) -> bool:
        """Run (the rest of) the current epoch; returns False when the time budget stopped it."""
        cfg = self.config
        model, data = self.model, self.train_data
        model.train()
        if self.hidden is None:
            self.hidden = model.init_state(data.size(0), self.device)
        params = [p for p in model.parameters() if p.requires_grad]
        length = data.size(1)
        task = None
        if progress is not None:
            task = progress.add_task(f"epoch {self.epoch}", total=max(1, (length - 1) // cfg.data.bptt), loss="")
            progress.update(task, completed=self.batch)
        autocast = cfg.train.amp and self.device.type == "cuda"
        interval_start, interval_tokens = time.monotonic(), 0
        while self.position < length - 2:
            seq_len = batching.next_segment_length(
                self.bptt_rng, cfg.data.bptt, cfg.data.bptt_std, cfg.data.min_bptt, cfg.data.max_bptt_extra,
                bucket=cfg.data.bptt_bucket,
            )
            inputs, targets = batching.segment(data, self.position, seq_len)
            steps = inputs.size(1)
            gold = None
            if self.train_gold is not None:
                gold = self.train_gold[:, self.position : self.position + steps]
            self.hidden = detach_state(self.hidden)
            self.schedule.step_lr(self.optimizer, steps / cfg.data.bptt)
            self.optimizer.zero_grad(set_to_none=True)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=autocast):
                loss, cross_entropy, self.hidden = self.loss_module(inputs, targets, self.hidden, gold)
            loss.backward()
            clip_gradients(self.optimizer, params, cfg.optim.clip)  # per part for optim.scorer_optimizer=adam
            self.optimizer.step()
            self.epoch_loss_sum += cross_entropy.double() * targets.numel()
            self.epoch_tokens += targets.numel()
            interval_tokens += targets.numel()
            self.position += steps
            self.batch += 1
            self.steps_total += 1
            if task is not None:
                progress.update(task, advance=1)
            if self.batch % cfg.train.log_interval == 0:
                # The only host sync of the loop: the running loss, every log_interval batches.
                mean = self.epoch_loss_sum.item() / max(self.epoch_tokens, 1)
                speed = interval_tokens * self.ctx.world_size / max(time.monotonic() - interval_start, 1e-9)
                interval_start, interval_tokens = time.monotonic(), 0
                if task is not None:
                    progress.update(task, loss=f"loss {mean:.3f} ppl {math.exp(min(mean, 50)):.1f} {speed:,.0f} tok/s")
                if self._time_up():
                    return False
            if cfg.train.checkpoint_every and self.batch % cfg.train.checkpoint_every == 0:
                self._save_last()
            if self.on_batch is not None:
                self.on_batch(self, self.epoch, self.batch)
        return not self._time_up()

    def _evaluate(self) -> dict:
        """Validation loss/perplexity (and dev F1) on rank 0, shared with the other ranks."""
        cfg = self.config
        metrics: dict = {}
        values = [math.nan, math.nan]
        if self.ctx.is_main:
            with averaged_parameters(self.model, self.optimizer):
                valid_loss = evaluate_lm(self.model, self.valid_data, cfg.data.bptt, self.device)
                if self.dev is not None:
                    try:
                        metrics.update(dev_parse_metrics(self.model, *self.dev, eos_id=self.vocab.eos_id))
                    except (TypeError, ValueError, KeyError, AttributeError) as err:
                        # An evaluator API mismatch must not kill a long training run: report, go on.
                        self._log(f"[yellow]warning:[/] dev F1 skipped ({type(err).__name__}: {err})")
                        if self.config.train.select_by != "dev_f1":
                            self.dev = None
            values = [valid_loss, metrics.get("dev_f1", math.nan)]
        valid_loss, dev_f1 = ddp.broadcast_floats(self.ctx, values)
        metrics["valid_loss"] = valid_loss
        metrics["valid_ppl"] = math.exp(min(valid_loss, 50.0))
        if not math.isnan(dev_f1):
            metrics["dev_f1"] = dev_f1
        return metrics

    def _selection_value(self, metrics: dict) -> Optional[float]:
        """Higher is better: ``-valid_ppl`` or ``dev_f1``."""
        if self.config.train.select_by == "dev_f1":
            return metrics.get("dev_f1")
        return -metrics["valid_ppl"]

    def _end_of_epoch(self, complete: bool, epoch_started: float) -> dict:
        cfg = self.config
        loss_sum = ddp.all_reduce_sum(self.ctx, self.epoch_loss_sum).item()  # (waits for the device)
        tokens = ddp.all_reduce_sum(self.ctx, torch.tensor(float(self.epoch_tokens))).item()
        # Tokens of this invocation only (a resumed epoch counts from the resume point).
        new_tokens = tokens - self.epoch_tokens_at_start
        train_seconds = time.monotonic() - epoch_started
        train_loss = loss_sum / max(tokens, 1)
        metrics = {"epoch": self.epoch}
        if not complete:
            metrics["partial"] = True
        metrics.update(train_loss=train_loss, train_ppl=math.exp(min(train_loss, 50.0)), train_tokens=int(tokens))
        metrics.update(self._evaluate())
        metrics.update(
            lr=self.schedule.base_lr,
            optimizer=type(self.optimizer).__name__,
            steps=self.steps_total,
            train_seconds=round(train_seconds, 3),
            epoch_seconds=round(time.monotonic() - epoch_started, 3),
            tokens_per_s=round(new_tokens / max(train_seconds, 1e-9), 1),
        )
        value = self._selection_value(metrics)
        improved = value is not None and (self.best_metric is None or value > self.best_metric)
        if improved:
            self.best_metric = value
            self.bad_epochs = 0
            self._save_best(metrics)
        elif complete:
            self.bad_epochs += 1
        self.best_valid_ppl = min(self.best_valid_ppl, metrics["valid_ppl"])
        metrics["best"] = improved
        if complete and self.schedule.after_evaluation(self.epoch, metrics["valid_loss"]):
            self._log(f"epoch {self.epoch}: switching to ASGD")
            self.optimizer = build_optimizer(self.model.parameters(), cfg.optim, asgd=True)
        self.history.append(metrics)
        return metrics

    def run(self) -> TrainResult:
        try:
            self._setup()
            ctx, cfg = self.ctx, self.config
            if ctx.is_main:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                save_config(cfg, self.run_dir / CONFIG_FILE)
                self._write_metrics_file()
                status = {"started_at": _now()} if not self.resume else {"resumed_at": _now()}
                self._write_status("running", world_size=ctx.world_size, **status)
            n_params = sum(p.numel() for p in self.model.parameters())
            self._log(
                f"{cfg.model_name}: {n_params:,} parameters, {self.corpus.name} ({len(self.vocab)} types, "
                f"{self.train_data.size(1) * cfg.data.batch_size:,} train tokens), device {self.device}"
                + (f", {ctx.world_size} processes" if ctx.distributed else "")
                + (f", resuming epoch {self.epoch} at batch {self.batch}" if self.resume else "")
            )
            self.started = time.monotonic()
            stop_reason = "epochs"
            progress = None
            if self.show_progress and ctx.is_main:
                progress = Progress(
                    TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[loss]}"), console=self.console, transient=True,
                )
                progress.start()
            try:
                while self.epoch <= cfg.train.epochs:
                    epoch_started = time.monotonic()
                    self.epoch_tokens_at_start = int(
                        ddp.all_reduce_sum(ctx, torch.tensor(float(self.epoch_tokens))).item()
                    )
                    complete = self._train_epoch(progress)
                    metrics = self._end_of_epoch(complete, epoch_started)
                    self._log(
                        f"epoch {metrics['epoch']:3d} | train ppl {metrics['train_ppl']:8.2f} | valid ppl "
                        f"{metrics['valid_ppl']:8.2f}"
                        + (f" | dev F1 {metrics['dev_f1']:.3f}" if "dev_f1" in metrics else "")
                        + f" | {metrics['tokens_per_s']:,.0f} tok/s" + (" *" if metrics["best"] else "")
                    )
                    if complete:
                        self.epoch += 1
                        self.batch = self.position = 0
                        self.hidden = None
                        self.epoch_loss_sum.zero_()
                        self.epoch_tokens = 0
                    self._save_last()
                    self._write_metrics_file()
                    if not complete:
                        stop_reason = "time_budget"
                        break
                    if cfg.train.patience is not None and self.bad_epochs >= cfg.train.patience:
                        stop_reason = "early_stopping"
                        break
                    if self.epoch <= cfg.train.epochs and self._time_up():
                        stop_reason = "time_budget"
                        break
            finally:
                if progress is not None:
                    progress.stop()
            self._write_status(
                "finished", finished_at=_now(), stop_reason=stop_reason, epochs_done=len(self.history),
                best_valid_ppl=self.best_valid_ppl,
            )
            return TrainResult(self.run_dir, len(self.history), stop_reason, self.best_valid_ppl,
                               self.best_metric if self.best_metric is not None else math.nan, list(self.history))
        finally:
            if hasattr(self, "ctx"):
                ddp.shutdown(self.ctx)


def train(config: RunConfig, run_dir: Path, **kwargs) -> TrainResult:
    """Train ``config`` into ``run_dir`` (see :class:`Trainer` for the keyword arguments)."""
    return Trainer(config, run_dir, **kwargs).run()


def resume(run_dir: Path, updates: Optional[dict] = None, **kwargs) -> TrainResult:
    """Continue the run in ``run_dir`` from ``last.*``; ``updates`` may change ``train.epochs``,
    ``train.time_budget``, ``train.device``, ``train.kernels``, ``train.log_interval``."""
    run_dir = Path(run_dir)
    config = load_config_file(run_dir / CONFIG_FILE)
    if updates:
        config = config.model_copy(update={"train": config.train.model_copy(update=updates)})
    return Trainer(config, run_dir, resume=True, **kwargs).run()
