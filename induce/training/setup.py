"""Building a run before its first step, in one pass (:func:`build_run`): the values the config leaves to the
run filled in (:func:`fill_in_runtime`: threads, the default corpus, the BPTT bucket), the corpus and vocabulary, the
model, the model's training objective (:mod:`induce.training.objectives`: its data, e.g. training rows
sharded per process and PaLM-S's gold spans, and its loss module, DDP-wrapped under torchrun), dev sentences
for the per-epoch F1, the graph-captured steps, the optimiser and the loop state (restored from ``last``
when resuming). What it builds is a :class:`~induce.training.parts.RunParts`; the loop that uses them is
:mod:`induce.training.trainer`.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import torch
from rich.console import Console
from torch import nn

from induce.config import RunConfig, use_threads
from induce.errors import InduceError
from induce.models.configs import model_config

from . import batching, ddp, fits
from .checkpoint import CheckpointError
from .ddp import DistContext
from .lm import DEV_LENGTHS, resolve_corpus
from .objectives import Objective, RunData, objective_class
from .optim import Optimisation
from .parts import DevSet, RunParts, restore_last
from .state import LoopState, seed_everything

if TYPE_CHECKING:
    from induce.data.corpus import PreparedCorpus, Vocab


def build_run(config: RunConfig, ctx: DistContext, *, corpora_dir: Path, console: Console, log: Callable[[str], None],
              run_dir: Path, resume: Optional[tuple[dict, dict]] = None) -> RunParts:
    """Every component of a run of ``config`` in this process (``ctx``); ``resume``: the tensors and sidecar
    of ``last`` to continue from. The random generators are seeded here (``train.seed``) before the model
    is built, which draws its initial weights from them; the rest of the build draws nothing (a resumed
    run then restores every generator from ``last``)."""
    from induce.kernels import set_backend
    from induce.models.registry import get_model_class

    set_backend(config.train.kernels)
    if config.data.batch_size % ctx.world_size:
        raise InduceError(f"data.batch_size={config.data.batch_size} is not divisible by {ctx.world_size} processes")
    model_cls = get_model_class(config.model_name)
    config, corpus, graphs = fill_in_runtime(config, ctx, model_cls, corpora_dir=corpora_dir, console=console,
                                             announce=log if resume is None else None)
    if resume is not None and resume[1].get("vocab", {}).get("itos") != corpus.vocab.itos:
        raise CheckpointError(f"{run_dir}: the corpus vocabulary changed since the checkpoint was written")
    vocab = corpus.vocab
    if "valid" not in corpus.splits:
        raise InduceError(f"{corpus.path}: the corpus has no valid split (needed for model selection)")

    seed_everything(config.train.seed)
    fits.check_parameters_fit(model_cls, len(vocab), config, ctx.device)  # before any memory is taken
    model = model_cls(len(vocab), model_config(config)).to(ctx.device)
    if ctx.distributed:
        # Same initial weights everywhere (seeded above); different dropout masks per process.
        torch.manual_seed(config.train.seed + 1_000_003 * ctx.rank)
    objective_type = objective_class(model_cls.objective)
    objective = objective_type(RunData(config, corpus, vocab, model, ctx.device, ctx))
    dev = dev_set(config, corpus, vocab, model_cls, log)
    check_selection(config, model_cls, dev)
    loss_module = objective.loss_module
    if ctx.distributed:
        from torch.nn.parallel import DistributedDataParallel

        loss_module = DistributedDataParallel(
            loss_module, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
            find_unused_parameters=bool(unused_parameters(model, objective)),
        )
    optimisation = Optimisation(model, config.optim, ctx.device, config.train.amp)
    static_steps = None
    if graphs:
        from .graphs import StaticSteps

        static_steps = StaticSteps(loss_module, model, config.optim.clip, ctx.device,
                                   autocast=optimisation.bf16,
                                   distributed=ctx.distributed, note=lambda message: log(f"[yellow]note:[/] {message}"))
    parts = RunParts(config, ctx, corpus, vocab, model, objective, loss_module, dev, static_steps, optimisation,
                     LoopState.fresh(config, ctx.device))
    if resume is not None:
        note = restore_last(parts, *resume, run_dir)
        if note is not None:
            log(f"[yellow]note:[/] {note}")
    return parts


def fill_in_runtime(config: RunConfig, ctx: DistContext, model_cls: type, *, corpora_dir: Path, console: Console,
                    announce: Optional[Callable[[str], None]] = None) -> tuple[RunConfig, PreparedCorpus, bool]:
    """``(config, corpus, graphs)``: the run's config with every value it leaves to the run filled in from this
    machine and the data, the corpus opened, and whether the training step is graph-captured. Called once, before
    the model is built; the config it returns is what the run's ``config.yaml`` records (and a resumed run keeps):

    * ``train.threads`` (null: :data:`~induce.config.DEFAULT_THREADS`): the count now in force
      (:func:`~induce.config.use_threads`, which sets it);
    * ``data.corpus`` (null: the default corpus, prepared on first use): its folder (:func:`open_corpus`);
    * ``data.bptt_bucket`` (null: automatic), for an objective with graph-captured steps: from
      ``train.cuda_graphs`` on this device (:func:`~induce.training.graphs.graphs_enabled`, which needs only the
      model's class) and the segment lengths (:func:`with_bptt_bucket`; ``announce`` says once which).

    ``train.device``, ``train.kernels`` and ``train.cuda_graphs`` stay as given (``auto`` is decided again where
    the run continues, on that machine)."""
    threads = use_threads(config.train.threads)
    if config.train.threads != threads:
        config = config.model_copy(update={"train": config.train.model_copy(update={"threads": threads})})
    config, corpus = open_corpus(config, ctx, corpora_dir, console)
    graphs = False
    if objective_class(model_cls.objective).uses_graphs:
        from .graphs import graphs_enabled

        graphs = graphs_enabled(config.train.cuda_graphs, model_cls, ctx.device, ctx.distributed)
        config = with_bptt_bucket(config, graphs, announce=announce)
    return config, corpus, graphs


def open_corpus(config: RunConfig, ctx: DistContext, corpora_dir: Path,
                console: Console) -> tuple[RunConfig, PreparedCorpus]:
    """The prepared corpus of ``data.corpus`` (rank 0 prepares the default corpus first, a cache on disk; the
    other processes then just read it), and the config with its path when ``data.corpus`` was unset."""
    from induce.data.corpus import PreparedCorpus

    if ctx.is_main:
        corpus_path = resolve_corpus(config.data.corpus, corpora_dir, console)
    ddp.barrier(ctx)
    if not ctx.is_main:
        corpus_path = resolve_corpus(config.data.corpus, corpora_dir, Console(quiet=True))
    if config.data.corpus is None:
        config = config.model_copy(update={"data": config.data.model_copy(update={"corpus": str(corpus_path)})})
    return config, PreparedCorpus(corpus_path)


def with_bptt_bucket(config: RunConfig, graphs: bool, announce: Optional[Callable[[str], None]]) -> RunConfig:
    """``config`` with an unset ``data.bptt_bucket`` resolved: with the graph-captured steps on (``graphs``)
    and random segment lengths, :func:`~induce.training.batching.auto_bucket`; else 0. Stored in the run's
    config (a resumed run keeps it); ``announce`` (a new run) says once which lengths it gives."""
    data = config.data
    if data.bptt_bucket is not None:
        return config
    bucket = batching.auto_bucket(data.bptt, data.bptt_std) if graphs and data.variable_bptt else 0
    if bucket and announce is not None:
        lengths = batching.segment_length_distribution(data.bptt, data.bptt_std, data.min_bptt, data.max_bptt_extra,
                                                       bucket)
        common = ", ".join(str(length) for length, p in lengths.items() if p >= 0.005)
        announce(f"[yellow]note:[/] train.cuda_graphs: one captured step per segment length; "
                 f"data.bptt_bucket={bucket} (automatic) rounds the random lengths to {common} "
                 f"(and rarely other multiples of {bucket}); the lr follows each length")
    return config.model_copy(update={"data": data.model_copy(update={"bptt_bucket": bucket})})


def unused_parameters(model: nn.Module, objective: Objective) -> list[str]:
    """Parameters the training loss does not reach (e.g. PaLM-RB's span scorer), found with one probe step
    in eval mode (no dropout RNG draws, no batch-norm updates); DDP must be told."""
    was_training = model.training
    model.eval()
    try:
        objective.probe_loss().backward()
        unused = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return unused


def dev_set(config: RunConfig, corpus: PreparedCorpus, vocab: Vocab, model_cls,
            log: Callable[[str], None]) -> Optional[DevSet]:
    """Dev sentences for the per-epoch F1 (valid trees without punctuation, 2..40 words); None without
    ``train.dev_f1``, trees, or a model that parses (``parser_kind = NO_PARSER``: said once)."""
    train = config.train
    if not (train.dev_f1 and corpus.has_trees):
        return None
    if not model_cls.parser_kind.parses:
        log(f"note: {config.model_name} has no syntactic structure (parser_kind 'none'): no dev F1")
        return None
    # Line i of every file of a split is the same sentence: the no-punctuation tree gives the
    # original words, the LM text their ids, the gold tree (with POS tags) the reference.
    words, ids, gold = [], [], []
    for tree, gold_tree, tokens in zip(corpus.nopunct_trees("valid"), corpus.gold_trees("valid"),
                                       corpus.lm_sentences("valid")):
        if 2 <= len(tokens) <= max(DEV_LENGTHS.values()) and len(tree.leaves()) == len(tokens):
            words.append(tree.leaves())
            ids.append(vocab.encode(tokens))
            gold.append(gold_tree)
        if len(ids) >= train.dev_f1_max_sentences:
            break
    return DevSet(words, ids, gold)


def check_selection(config: RunConfig, model_cls, dev: Optional[DevSet]) -> None:
    """``train.select_by=dev_f1`` needs a model that parses and dev trees."""
    if config.train.select_by != "dev_f1":
        return
    if not model_cls.parser_kind.parses:
        raise InduceError(
            f"train.select_by=dev_f1: model {config.model_name!r} has no syntactic structure (parser_kind 'none'), "
            f"so there is no dev F1; use train.select_by=valid_ppl"
        )
    if dev is None:
        raise InduceError("train.select_by=dev_f1 needs dev trees (a corpus with trees and train.dev_f1=true)")
