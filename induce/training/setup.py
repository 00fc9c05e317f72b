"""Building a run before its first step: process group, corpus and vocabulary, model, the model's training
objective (:mod:`induce.training.objectives`: its data, e.g. training rows sharded per process and PaLM-S's
gold spans, and its loss module, DDP-wrapped under torchrun), dev sentences for the per-epoch F1, schedule,
optimiser, BPTT-length generator, and the trainer state (restored from ``last`` when resuming).

:class:`TrainerSetup` is the :class:`~induce.training.trainer.Trainer`'s setup half (a mixin that
fills the trainer's attributes); the loop is in :mod:`induce.training.trainer`.
"""
from __future__ import annotations

import torch
from rich.console import Console
from torch import nn

from induce.errors import InduceError

from . import batching, ddp, fits, objectives
from .checkpoint import CheckpointError
from .lm import DEV_LENGTHS, resolve_corpus
from .optim import build_optimizer
from .state import LoopState, seed_everything


class TrainerSetup:
    """Mixin of :class:`~induce.training.trainer.Trainer`: everything :meth:`_setup` builds."""

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
        fits.check_parameters_fit(self.model_cls, len(vocab), cfg, self.device)  # before any memory is taken
        self.model = self.model_cls(len(vocab), self.model_cls.Config(**cfg.model)).to(self.device)
        if ctx.distributed:
            # Same initial weights everywhere (seeded above); different dropout masks per process.
            torch.manual_seed(cfg.train.seed + 1_000_003 * ctx.rank)

        # The model's objective builds the data and the loss (induce.training.objectives).
        self.objective = objectives.build(self.model_cls.objective)
        self.loss_module: nn.Module = self.objective.prepare(self)
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

        if ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel

            self.loss_module = DistributedDataParallel(
                self.loss_module, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
                find_unused_parameters=bool(self._unused_parameters()),
            )
        self.static_steps = None
        if self.objective.uses_graphs:
            self._set_up_graphs()
        cfg = self.config
        self.optimizer = build_optimizer(self.model.parameters(), cfg.optim)
        self.loop = LoopState.fresh(cfg, self.device)
        if self.resume_meta is not None:
            self._restore()

    def _set_up_graphs(self) -> None:
        """``train.cuda_graphs`` (:func:`~induce.training.graphs.graphs_enabled`) and, with graphs on, the
        segment-length bucket of an unset ``data.bptt_bucket`` (:func:`~induce.training.batching.auto_bucket`),
        stored in the config (a resumed run keeps it) and stated once with the lengths it gives."""
        from .graphs import StaticSteps, graphs_enabled

        cfg, ctx = self.config, self.ctx
        enabled = graphs_enabled(cfg.train.cuda_graphs, self.model, self.device, ctx.distributed)
        if cfg.data.bptt_bucket is None:
            bucket = batching.auto_bucket(cfg.data.bptt, cfg.data.bptt_std) if enabled and cfg.data.variable_bptt else 0
            self.config = cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"bptt_bucket": bucket})})
            if bucket and self.resume_meta is None:
                lengths = batching.segment_length_distribution(cfg.data.bptt, cfg.data.bptt_std, cfg.data.min_bptt,
                                                               cfg.data.max_bptt_extra, bucket)
                common = ", ".join(str(length) for length, p in lengths.items() if p >= 0.005)
                self._log(f"[yellow]note:[/] train.cuda_graphs: one captured step per segment length; "
                          f"data.bptt_bucket={bucket} (automatic) rounds the random lengths to {common} "
                          f"(and rarely other multiples of {bucket}); the lr follows each length")
        self.static_steps = None
        if enabled:
            self.static_steps = StaticSteps(
                self.loss_module, self.model, cfg.optim.clip, self.device,
                autocast=cfg.train.amp and self.device.type == "cuda", distributed=ctx.distributed,
                note=lambda message: self._log(f"[yellow]note:[/] {message}"),
            )

    def _unused_parameters(self) -> list[str]:
        """Parameters the training loss does not reach (e.g. PaLM-RB's span scorer), found with one
        probe step in eval mode (no dropout RNG draws, no batch-norm updates); DDP must be told."""
        model = self.model
        was_training = model.training
        model.eval()
        try:
            self.objective.probe_loss(self).backward()
            unused = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
        finally:
            model.zero_grad(set_to_none=True)
            model.train(was_training)
        return unused

    def _gold_spans(self, n_tokens: int) -> torch.Tensor:
        """PaLM-S targets ``[B/W, L, m]`` aligned with the training rows."""
        from induce.trees.decoders import gold_span_targets

        if not self.corpus.has_trees:
            raise InduceError(f"{self.corpus.path}: {self.config.model_name} needs a corpus with trees (gold spans)")
        targets = gold_span_targets(self.corpus.nopunct_trees("train"), self.config.model["max_span_length"])
        if targets.size(0) != n_tokens:
            raise InduceError(
                f"{self.corpus.path}: train trees give {targets.size(0)} gold-span rows but the LM text has "
                f"{n_tokens} tokens"
            )
        rows = batching.batchify(targets, self.config.data.batch_size)
        return batching.shard_rows(rows, self.ctx.rank, self.ctx.world_size).to(self.device)

    def _model_parses(self) -> bool:
        """Whether the model has a parser (its ``parser_kind`` parses: not rellstm's ``NO_PARSER``)."""
        return self.model_cls.parser_kind.parses

    def _prepare_dev(self) -> None:
        """Dev sentences for the per-epoch F1 (valid trees without punctuation, 2..40 words); none for a
        model that does not parse (``parser_kind = NO_PARSER``)."""
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

