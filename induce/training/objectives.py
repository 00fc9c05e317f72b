"""Training objectives: what a model family trains on, how an epoch is cut into batches, what one step
minimises, the validation loss, and what the objective keeps in a checkpoint.

**The interface.** A model class declares its objective (:attr:`induce.models.base.LanguageModel.objective`,
a :class:`~induce.models.base.TrainingObjective`); :func:`register_objective` ties that declaration to an
:class:`Objective` subclass (the two built-in ones below; a family with its own objective, e.g. URNNG or
DIORA, registers its subclass in its plugin module). The trainer builds one objective per run from
:class:`RunData` (config, corpus, vocabulary, model, device, process) and, per step, asks it for the next
batch (:meth:`Objective.next_batch`), runs the one optimiser step
(:func:`~induce.training.optim.optimiser_step`) on ``objective.loss_module(*batch.args)`` and hands the
outputs back (:meth:`Objective.after_step`). The objective owns its data, its batching state and its loss;
it never reads or writes the trainer. What the trainer owns: the optimiser and its schedule, the running
sums, checkpoints and exact resume, early stopping, the dev-F1 hook, DDP, CUDA graphs.

The position in the epoch is the loop's (:class:`~induce.training.state.LoopState`: ``epoch``,
``position``, the carried recurrent state ``hidden`` and the BPTT-length generator ``bptt_rng``), which the
objective reads and advances and the trainer checkpoints; state an objective needs beyond it goes in
``last`` through :meth:`Objective.state_dict` / :meth:`Objective.load_state_dict`.

* :class:`StreamLM` — the language-model objective of AWD-LSTM, ON-LSTM, PRPN and PaLM: the corpus as
  ``data.batch_size`` token streams read in variable-length BPTT segments with the recurrent state carried,
  loss = cross-entropy + AR + TAR + the model's extra loss (:class:`~induce.training.lm.LMLoss`), the lr
  rescaled by segment length, CUDA graphs where enabled; validation: cross-entropy over the streams.
* :class:`SentenceLevel` — whole sentences, for models whose loss is per sentence (a PCFG's negative ELBO).
  The model implements ``sentence_loss(tokens [B, T], lengths [B]) -> [B]`` (nats per sentence, words only,
  right-padded with id 0), or, when its gradient follows a surrogate, ``sentence_losses`` (the surrogate and
  the reported bound: the running loss, validation and selection read the bound); a step minimises the mean
  over the batch's sentences (as harvardnlp/compound-pcfg's
  ``train.py`` does). Batches hold ``data.batch_size`` sentences of similar length (sorted by length, then
  cut), their order shuffled each epoch; a length curriculum keeps the sentences of at most
  ``data.curriculum_start + (epoch - 1) * data.curriculum_step`` words (never above ``data.max_length``). No
  state is carried. The running and validation loss are per token, a sentence counting its words plus its
  end (``n + 1``, the stream's count, so that perplexities compare with the language models'; compound-pcfg
  counts its implicit ``</s>`` the same way); validation reads the valid sentences within the cap of the run's
  last epoch (:meth:`SentenceLevel.validate`: selection measures the lengths the model learns from).
  Sentences shorter than the model's ``shortest_sentence`` (a PCFG without unary rules: one word) are left
  out of both, as compound-pcfg's ``train.py`` skips them. A model that declares its largest step tensors
  (:meth:`~induce.models.base.LanguageModel.step_tensors`) is checked against the free memory before the
  first step (:func:`~induce.training.fits.check_declared_step_fits`).

**Exact resume (sentences).** The epoch's batches are a function of ``train.seed``, the epoch and the
corpus: the shuffle is drawn from ``numpy.random.default_rng([seed, epoch])``, so restoring the epoch and
the batch position (``LoopState.epoch`` / ``position``) restores the shuffling generator's state by
construction; dropout's generators are in ``last`` as for the streams.

**Curriculum (a decision).** compound-pcfg's ``train.py`` grows the cap with
``max(final_max_length, max_length + len_incr)``, which jumps to the final cap after the first epoch; the
paper's intent, and this module, is ``min``: one more word per epoch up to the final cap.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Optional

import numpy as np
import torch
from torch import nn

from induce.errors import InduceError
from induce.models.base import SENTENCE_LEVEL, STREAM_LM, TrainingObjective

from . import batching, fits
from .lm import LMLoss, evaluate_lm
from .state import LoopState, detach_state

if TYPE_CHECKING:
    from induce.config import RunConfig
    from induce.data.corpus import PreparedCorpus, Vocab

    from .ddp import DistContext


@dataclass(frozen=True)
class RunData:
    """What an objective is built from: the run's resolved ``config``, its prepared ``corpus`` and
    ``vocab``, the ``model`` (built, on ``device``) and this process's ``ctx`` (rank and world size)."""

    config: RunConfig
    corpus: PreparedCorpus
    vocab: Vocab
    model: nn.Module
    device: torch.device
    ctx: DistContext


@dataclass
class Batch:
    """One training step's input.

    ``args``: the arguments of ``objective.loss_module`` (whose outputs are ``(loss [], ...)``); ``tokens``:
    the tokens its summed loss counts; ``lr_scale``: the step's lr is ``base_lr * lr_scale``; ``static``:
    its tensors have the shapes the graph-captured step is kept for (:mod:`induce.training.graphs`; only
    read when :attr:`Objective.uses_graphs`)."""

    args: tuple
    tokens: int
    lr_scale: float = 1.0
    static: bool = False


class Objective(ABC):
    """How a model family is trained (see the module docstring). A subclass builds its data in
    ``__init__(data: RunData)`` (errors that name the corpus or the config key that does not fit are raised
    there, before the first step), sets :attr:`loss_module` and implements the abstract methods; the trainer
    calls them. :meth:`state_dict` / :meth:`load_state_dict` (state beyond the loop's) and
    :meth:`loss_per_token` (``induce eval --lm``) are optional.

    A batch is produced, stepped and accounted for in this order, with no other draw from the random
    generators in between (exact resume): ``batch = next_batch(loop)``; the trainer sets the lr and runs
    the optimiser step on ``loss_module(*batch.args)``; ``after_step(loop, batch, outputs)``."""

    #: Whether ``train.cuda_graphs`` can capture its steps: its ``loss_module`` is an
    #: :class:`~induce.training.lm.LMLoss` and its batches' ``args`` are ``(inputs, targets, state, gold)``.
    uses_graphs: ClassVar[bool] = False
    #: The config key of the length of what a step reads (``data.bptt``, ``data.max_length``), named by the
    #: out-of-memory message.
    length_key: ClassVar[str] = "data.max_length"

    #: ``forward(*batch.args) -> (loss [], ...)``: what DDP wraps and every step calls.
    loss_module: nn.Module

    @abstractmethod
    def next_batch(self, loop: LoopState) -> Optional[Batch]:
        """The batch at ``loop.position`` of epoch ``loop.epoch``, the position advanced past it; None when
        the epoch has no batch left (nothing is drawn then)."""
        raise NotImplementedError

    def has_batch(self, loop: LoopState) -> bool:
        """Whether :meth:`next_batch` would give a batch (not None) at ``loop``'s position, drawing nothing:
        a budget reached at an epoch's last step then ends the epoch whole. The default, True, says "maybe"
        (the trainer then counts such an epoch as partial)."""
        return True

    def validation_tokens(self) -> int:
        """Tokens :meth:`validate` reads (the clock budget's estimate of an evaluation before the first one is
        timed); 0: unknown."""
        return 0

    @abstractmethod
    def after_step(self, loop: LoopState, batch: Batch, outputs: tuple) -> torch.Tensor:
        """After the optimiser step on ``batch`` (``outputs``: the loss module's): carry what the next
        batch needs (e.g. the recurrent state into ``loop.hidden``); returns the batch's summed loss over
        ``batch.tokens`` (a detached ``[]`` float64 tensor on the device: no host sync)."""
        raise NotImplementedError

    @abstractmethod
    def batches_per_epoch(self, epoch: int) -> int:
        """Optimiser steps in epoch ``epoch`` (the progress bar, the time estimate)."""
        raise NotImplementedError

    @abstractmethod
    def probe_loss(self) -> torch.Tensor:
        """The loss of one small batch (eval mode, no draw from the random generators): DDP's
        unused-parameter probe."""
        raise NotImplementedError

    @abstractmethod
    def validate(self) -> float:
        """The validation loss in nats per token (eval mode)."""
        raise NotImplementedError

    @abstractmethod
    def describe(self, epoch: int) -> str:
        """The training data in one phrase for the start-up line."""
        raise NotImplementedError

    @abstractmethod
    def tokens_per_epoch(self) -> int:
        """Tokens an epoch reads (the run-size advice)."""
        raise NotImplementedError

    def state_dict(self) -> tuple[dict[str, torch.Tensor], dict]:
        """``(tensors, JSON-able dict)`` the objective needs in ``last`` beyond the loop state, to continue
        exactly (``({}, {})``: nothing, as for the built-in objectives, whose batching follows from the
        loop state and the seed). Stored under ``objective.*`` and the sidecar key ``objective``; under DDP
        rank 0's is written and every process gets it back."""
        return {}, {}

    def load_state_dict(self, tensors: dict[str, torch.Tensor], state: dict) -> None:
        """Take back what :meth:`state_dict` gave (tensors with the ``objective.`` prefix removed)."""
        return None

    @staticmethod
    def loss_per_token(model: nn.Module, sentences: list[list[int]], batch_size: int, device) -> float:
        """The model's loss in nats per token (a sentence counts its words and its end) of ``sentences`` (id
        lists, words only), in eval mode: ``induce eval --lm`` and the library's perplexity of a model that
        is not read as token streams (:func:`induce.inference.language_model.sentences_perplexity`)."""
        raise InduceError(f"{getattr(model, 'name', type(model).__name__)}: its training objective gives no "
                          f"loss per token of a text")


_OBJECTIVES: dict[TrainingObjective, type[Objective]] = {}


def register_objective(declared: TrainingObjective) -> Callable[[type[Objective]], type[Objective]]:
    """Class decorator: the :class:`Objective` subclass trains the models whose class declares
    ``objective = declared``. A declaration takes one implementation (registering another is an error)."""

    def add(cls: type[Objective]) -> type[Objective]:
        existing = _OBJECTIVES.get(declared)
        if existing is not None and existing is not cls:
            raise InduceError(f"training objective {declared.name!r}: {existing.__module__}.{existing.__qualname__} "
                              f"is registered for it already (not {cls.__module__}.{cls.__qualname__})")
        _OBJECTIVES[declared] = cls
        return cls

    return add


def objective_class(declared: TrainingObjective) -> type[Objective]:
    """The :class:`Objective` subclass registered for ``declared``."""
    try:
        return _OBJECTIVES[declared]
    except KeyError:
        raise InduceError(
            f"training objective {declared.name!r}: no implementation is registered; a family with its own "
            f"objective registers its Objective subclass with induce.training.objectives.register_objective "
            f"(in the module INDUCE_PLUGINS names)"
        ) from None


# ------------------------------------------------------------------------------------------- streams


def gold_span_rows(data: RunData, n_tokens: int) -> torch.Tensor:
    """PaLM-S's gold-span targets ``[B/W, L, m]``, aligned with the training rows (``n_tokens``: the
    training stream's length, which the trees must match)."""
    from induce.trees.decoders import gold_span_targets

    corpus, config = data.corpus, data.config
    if not corpus.has_trees:
        raise InduceError(f"{corpus.path}: {config.model_name} needs a corpus with trees (gold spans)")
    targets = gold_span_targets(corpus.nopunct_trees("train"), config.model["max_span_length"])
    if targets.size(0) != n_tokens:
        raise InduceError(
            f"{corpus.path}: train trees give {targets.size(0)} gold-span rows but the LM text has "
            f"{n_tokens} tokens"
        )
    rows = batching.batchify(targets, config.data.batch_size)
    return batching.shard_rows(rows, data.ctx.rank, data.ctx.world_size).to(data.device)


@register_objective(STREAM_LM)
class StreamLM(Objective):
    """BPTT over token streams (see the module docstring): ``train_data [B/W, L]`` (this process's rows),
    ``valid_data [B', L']`` and, for a supervised model (PaLM-S), ``train_gold [B/W, L, m]``."""

    uses_graphs = True
    length_key = "data.bptt"

    def __init__(self, data: RunData):
        cfg, ctx = data.config, data.ctx
        self.config, self.model, self.device = cfg, data.model, data.device
        self.train_sentences = data.corpus.lm_sentences("train")
        train_stream = batching.stream_ids(self.train_sentences, data.vocab)
        self.train_data = batching.shard_rows(
            fits.batch_rows(train_stream, cfg.data.batch_size, "data.batch_size", "train"), ctx.rank, ctx.world_size
        ).to(data.device)
        valid_stream = batching.stream_ids(data.corpus.lm_sentences("valid"), data.vocab)
        self.valid_data = fits.batch_rows(valid_stream, cfg.data.eval_batch_size, "data.eval_batch_size", "valid")
        self.train_gold: Optional[torch.Tensor] = None
        if type(data.model).supervised:
            self.train_gold = gold_span_rows(data, train_stream.numel())
        fits.check_step_fits(LMLoss(self.model, cfg.train.alpha, cfg.train.beta), self.model, cfg, data.device,
                             self.train_data.size(0), self.train_data.size(1),
                             None if self.train_gold is None else self.train_gold.size(-1))
        self.loss_module = LMLoss(self.model, cfg.train.alpha, cfg.train.beta)

    def next_batch(self, loop: LoopState) -> Optional[Batch]:
        if loop.position >= self.train_data.size(1) - 2:
            return None
        cfg = self.config.data
        if loop.hidden is None:
            loop.hidden = self.model.init_state(self.train_data.size(0), self.device)
        drawn = batching.next_segment_length(loop.bptt_rng, cfg.bptt, cfg.bptt_std, cfg.min_bptt, cfg.max_bptt_extra,
                                             bucket=cfg.bptt_bucket)
        inputs, targets = batching.segment(self.train_data, loop.position, drawn)
        steps = inputs.size(1)
        gold = None
        if self.train_gold is not None:
            gold = self.train_gold[:, loop.position : loop.position + steps]
        loop.hidden = detach_state(loop.hidden)
        loop.position += steps
        # Each epoch's last segment, clipped at the end of the rows, has a one-off length: not static.
        return Batch((inputs, targets, loop.hidden, gold), targets.numel(), lr_scale=steps / cfg.bptt,
                     static=steps == drawn)

    def has_batch(self, loop: LoopState) -> bool:
        return loop.position < self.train_data.size(1) - 2

    def validation_tokens(self) -> int:
        return self.valid_data.numel()

    def after_step(self, loop: LoopState, batch: Batch, outputs: tuple) -> torch.Tensor:
        _, cross_entropy, loop.hidden = outputs
        return cross_entropy.double() * batch.tokens

    def batches_per_epoch(self, epoch: int) -> int:
        return max(1, (self.train_data.size(1) - 1) // self.config.data.bptt)

    def probe_loss(self) -> torch.Tensor:
        inputs, targets = batching.segment(self.train_data, 0, min(4, self.train_data.size(1) - 1))
        gold = None if self.train_gold is None else self.train_gold[:, : inputs.size(1)]
        probe = LMLoss(self.model, self.config.train.alpha, self.config.train.beta)
        loss, _, _ = probe(inputs, targets, self.model.init_state(inputs.size(0), self.device), gold)
        return loss

    def validate(self) -> float:
        return evaluate_lm(self.model, self.valid_data, self.config.data.bptt, self.device)

    def describe(self, epoch: int) -> str:
        # The tokens an epoch predicts (metrics.jsonl's train_tokens, the report's "tokens trained"): the
        # first of each row and the tail that does not fill the rows are not.
        tokens = sum(len(sentence) + 1 for sentence in self.train_sentences)
        predicted = batching.predicted_per_epoch(tokens, self.config.data.batch_size)
        return f"an epoch predicts up to {predicted:,} of them in {self.config.data.batch_size} streams"

    def tokens_per_epoch(self) -> int:
        return self.train_data.size(1) * self.config.data.batch_size


# ----------------------------------------------------------------------------------------- sentences


class SentenceLoss(nn.Module):
    """``forward(tokens [B, T], lengths [B], share=None) -> (loss, summed per-sentence loss)``: the sum of the
    model's training loss per sentence (:meth:`~induce.models.base.LanguageModel.sentence_losses`' ``train``, which
    may be a surrogate) over the rows divided by ``share`` (what DDP wraps and the gradient follows; default ``B``:
    the mean), and the sum of its reported loss (``reported``, detached) for the running loss. Under DDP ``share``
    is the whole batch's sentence count over the number of processes, so that DDP's average of the processes'
    gradients is the gradient of the whole batch's mean, however unevenly the batch splits."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor,
                share: Optional[float] = None) -> tuple[torch.Tensor, torch.Tensor]:
        train, reported = self.model.sentence_losses(tokens, lengths)
        per_sentence = train.float()
        shown = per_sentence if reported is train else reported.float()
        return per_sentence.sum() / (share if share is not None else per_sentence.shape[0]), shown.detach().sum()


def reported_loss(model: nn.Module) -> Callable:
    """``loss(tokens [B, T], lengths [B]) -> [B]``: ``model``'s reported loss per sentence (the value logged and
    selected by, not the surrogate a step may follow)."""
    return lambda tokens, lengths: model.sentence_losses(tokens, lengths).reported


def sentence_tensors(sentences: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens [B, T], lengths [B])`` of id lists, right-padded with 0."""
    lengths = torch.tensor([len(s) for s in sentences])
    tokens = torch.zeros(len(sentences), int(lengths.max()), dtype=torch.long)
    for row, sentence in enumerate(sentences):
        tokens[row, : len(sentence)] = torch.as_tensor(sentence)
    return tokens.to(device), lengths.to(device)


def length_cap(config, epoch: int) -> Optional[int]:
    """The longest sentence trained on in ``epoch`` (None: no cap): ``data.max_length`` and the curriculum's
    ``data.curriculum_start + (epoch - 1) * data.curriculum_step``, the smaller."""
    data = config.data
    caps = [cap for cap in (data.max_length,) if cap is not None]
    if data.curriculum_start is not None:
        caps.append(data.curriculum_start + (epoch - 1) * data.curriculum_step)
    return min(caps) if caps else None


@register_objective(SENTENCE_LEVEL)
class SentenceLevel(Objective):
    """Batches of whole sentences (see the module docstring): ``train_sentences`` / ``valid_sentences``
    hold the id lists (words only); :meth:`epoch_batches` an epoch's batches (sentence indices)."""

    def __init__(self, data: RunData):
        self.config, self.model, self.device, self.ctx = data.config, data.model, data.device, data.ctx
        shortest = max(1, type(data.model).shortest_sentence)

        def encode(split: str) -> list[list[int]]:
            return [data.vocab.encode(sentence) for sentence in data.corpus.lm_sentences(split)
                    if len(sentence) >= shortest]

        self.train_sentences, self.valid_sentences = encode("train"), encode("valid")
        for split, kept in (("train", self.train_sentences), ("valid", self.valid_sentences)):
            if kept:
                continue
            lengths = [len(sentence) for sentence in data.corpus.lm_sentences(split)]
            if not lengths:
                raise InduceError(f"{data.corpus.path}: the {split} split has no sentence")
            every = "has one word" if max(lengths) == 1 else f"has fewer than {shortest} words"
            raise InduceError(f"{data.corpus.path}: every sentence of its {split} split {every}; "
                              f"{data.config.model_name} learns from sentences of {shortest} words or more (a grammar "
                              "without unary rules derives no one-word sentence): use a corpus of longer sentences")
        self._batches: tuple[int, list[list[int]], list[int]] = (0, [], [])  # (epoch, shards, whole sizes)
        final_cap = length_cap(self.config, self.config.train.epochs)
        longest = max((len(s) for s in self.train_sentences if final_cap is None or len(s) <= final_cap), default=0)
        if longest:
            fits.check_declared_step_fits(self.model, self.config, self.device, longest, self.ctx.world_size)
        self.loss_module = SentenceLoss(self.model)

    def _epoch(self, epoch: int) -> tuple[list[list[int]], list[int]]:
        """Epoch ``epoch``'s batches: the sentences under the cap sorted by length (ties by position), cut
        into ``data.batch_size``, in an order drawn from ``default_rng([train.seed, epoch])``; under DDP each
        process takes every ``W``-th sentence of each batch (batches of fewer than ``W`` sentences dropped).
        Returns this process's shards and the whole batches' sizes (each step's loss divides by its share)."""
        if self._batches[0] == epoch:
            return self._batches[1], self._batches[2]
        cfg, ctx = self.config, self.ctx
        cap = length_cap(cfg, epoch)
        lengths = [len(s) for s in self.train_sentences]
        keep = sorted((i for i, n in enumerate(lengths) if cap is None or n <= cap), key=lambda i: (lengths[i], i))
        size = cfg.data.batch_size
        batches = [keep[start : start + size] for start in range(0, len(keep), size)]
        order = np.random.default_rng([cfg.train.seed, epoch]).permutation(len(batches))
        kept = [i for i in order if len(batches[i]) >= ctx.world_size]
        shards = [batches[i][ctx.rank :: ctx.world_size] for i in kept]
        if not shards:
            raise InduceError(f"epoch {epoch}: no training sentence of at most {cap} words "
                              f"(data.max_length / data.curriculum_start)")
        self._batches = (epoch, shards, [len(batches[i]) for i in kept])
        return shards, self._batches[2]

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """This process's batches of epoch ``epoch``, in order: lists of indices into ``train_sentences``."""
        return self._epoch(epoch)[0]

    def next_batch(self, loop: LoopState) -> Optional[Batch]:
        shards, sizes = self._epoch(loop.epoch)
        if loop.position >= len(shards):
            return None
        sentences = [self.train_sentences[i] for i in shards[loop.position]]
        tokens, lengths = sentence_tensors(sentences, self.device)
        share = sizes[loop.position] / self.ctx.world_size
        loop.position += 1
        return Batch((tokens, lengths, share), sum(len(s) + 1 for s in sentences))

    def has_batch(self, loop: LoopState) -> bool:
        return loop.position < len(self.epoch_batches(loop.epoch))

    def validation_tokens(self) -> int:
        return sum(len(s) + 1 for s in self.valid_sentences)

    def after_step(self, loop: LoopState, batch: Batch, outputs: tuple) -> torch.Tensor:
        return outputs[1].double()

    def batches_per_epoch(self, epoch: int) -> int:
        return len(self.epoch_batches(epoch))

    def probe_loss(self) -> torch.Tensor:
        tokens, lengths = sentence_tensors(self.train_sentences[:2], self.device)
        return SentenceLoss(self.model)(tokens, lengths)[0]

    def validation_sentences(self) -> list[list[int]]:
        """The valid sentences the validation loss reads: those within the length cap of the run's last epoch
        (:func:`length_cap`; all when there is no cap, or no valid sentence within it). A run trained on sentences
        of at most 20 words is selected on sentences of at most 20 words: over every length, the longer sentences
        (most of the tokens) would weigh a distribution it never trains on. (compound-pcfg validates on every
        length, with a cap of 40 words that leaves few out; ``bench/results/decisions.md``'s fidelity table.)"""
        cap = length_cap(self.config, self.config.train.epochs)
        within = [s for s in self.valid_sentences if cap is None or len(s) <= cap]
        return within or self.valid_sentences  # none that short (a tiny corpus): every length, as before

    def validate(self) -> float:
        """The model's reported loss (:meth:`~induce.models.base.LanguageModel.sentence_losses`' ``reported``:
        its ``sentence_loss`` unless it trains on a surrogate) in eval mode, what selects the checkpoint, per
        token of :meth:`validation_sentences`."""
        return self.mean_loss(self.model, reported_loss(self.model), self.validation_sentences(),
                              self.config.data.eval_batch_size, self.device)

    @staticmethod
    def loss_per_token(model: nn.Module, sentences: list[list[int]], batch_size: int, device) -> float:
        """``induce eval --lm``'s loss in nats per token of ``sentences`` (:meth:`mean_loss` of the model's
        ``perplexity_loss``: its ``sentence_loss``, or its bound where validation selects with another loss)."""
        return SentenceLevel.mean_loss(model, model.perplexity_loss, sentences, batch_size, device)

    @staticmethod
    @torch.no_grad()
    def mean_loss(model: nn.Module, loss: Callable, sentences: list[list[int]], batch_size: int, device) -> float:
        """The mean of ``loss(tokens, lengths) -> [B]`` in nats per token (a sentence counts its words and its
        end) of ``sentences`` (id lists, words only; those shorter than the model's ``shortest_sentence`` left
        out), in eval mode, in batches of ``batch_size`` sentences sorted by length."""
        shortest = max(1, type(model).shortest_sentence)
        sentences = [s for s in sentences if len(s) >= shortest]
        was_training = model.training
        model.eval()
        total = torch.zeros((), dtype=torch.float64, device=device)
        count = 0
        order = sorted(range(len(sentences)), key=lambda i: (len(sentences[i]), i))
        try:
            for start in range(0, len(order), batch_size):
                chunk = [sentences[i] for i in order[start : start + batch_size]]
                tokens, lengths = sentence_tensors(chunk, device)
                total += loss(tokens, lengths).double().sum()
                count += sum(len(s) + 1 for s in chunk)
        finally:
            model.train(was_training)
        return total.item() / max(count, 1)

    def describe(self, epoch: int) -> str:
        cap = length_cap(self.config, epoch)
        final = length_cap(self.config, self.config.train.epochs)
        read = len(self.validation_sentences())
        if final is None or not self.valid_sentences:
            selection = ""
        elif read < len(self.valid_sentences) or all(len(s) <= final for s in self.valid_sentences):
            selection = f"; validation on the {read:,} valid sentences of at most {final} words"
        else:
            selection = f"; validation on every valid sentence (none has at most {final} words, the training cap)"
        return (f"an epoch reads them in batches of {self.config.data.batch_size} whole sentences"
                + (f" of at most {cap} words" if cap is not None else "") + selection)

    def tokens_per_epoch(self) -> int:
        """The tokens of the training sentences within the last epoch's length cap (the most an epoch reads)."""
        cap = length_cap(self.config, self.config.train.epochs)
        return sum(len(s) + 1 for s in self.train_sentences if cap is None or len(s) <= cap)

