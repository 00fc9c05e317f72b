"""Training objectives: how the trainer reads the corpus, what one step minimises, and the validation loss.

A model class declares its objective (:attr:`induce.models.base.LanguageModel.objective`, a
:class:`~induce.models.base.TrainingObjective` naming one of these classes); the trainer builds it and asks
it for the data, each step and the validation loss, and owns everything else: the optimiser and its
schedule, the running sums, checkpoints and exact resume, early stopping, the dev-F1 hook, DDP.

* :class:`StreamLM` — the language-model objective of AWD-LSTM, ON-LSTM, PRPN and PaLM: the corpus as
  ``data.batch_size`` token streams read in variable-length BPTT segments with the recurrent state carried,
  loss = cross-entropy + AR + TAR + the model's extra loss (:class:`~induce.training.lm.LMLoss`), the lr
  rescaled by segment length, CUDA graphs where enabled; validation: cross-entropy over the streams.
* :class:`SentenceLevel` — whole sentences, for models whose loss is per sentence (a PCFG's negative ELBO).
  The model implements ``sentence_loss(tokens [B, T], lengths [B]) -> [B]`` (nats per sentence, words only,
  right-padded with id 0); a step minimises the mean over the batch's sentences (as harvardnlp/compound-pcfg's
  ``train.py`` does). Batches hold ``data.batch_size`` sentences of similar length (sorted by length, then
  cut), their order shuffled each epoch; a length curriculum keeps the sentences of at most
  ``data.curriculum_start + (epoch - 1) * data.curriculum_step`` words (never above ``data.max_length``). No
  state is carried. The running and validation loss are per token, a sentence counting its words plus its
  end (``n + 1``, the stream's count, so that perplexities compare with the language models'; compound-pcfg
  counts its implicit ``</s>`` the same way); validation reads every valid sentence, without the cap.
  Sentences shorter than the model's ``shortest_sentence`` (a PCFG without unary rules: one word) are left
  out of both, as compound-pcfg's ``train.py`` skips them.

**Exact resume (sentences).** The epoch's batches are a function of ``train.seed``, the epoch and the
corpus: the shuffle is drawn from ``numpy.random.default_rng([seed, epoch])``, so restoring the epoch and
the batch position (``LoopState.epoch`` / ``position``) restores the shuffling generator's state by
construction; dropout's generators are in ``last`` as for the streams.

**Curriculum (a decision).** compound-pcfg's ``train.py`` grows the cap with
``max(final_max_length, max_length + len_incr)``, which jumps to the final cap after the first epoch; the
paper's intent, and this module, is ``min``: one more word per epoch up to the final cap.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import nn

from induce.errors import InduceError
from induce.models.base import SENTENCE_LEVEL, STREAM_LM, TrainingObjective
from induce.trees.kinds import resolve

from . import batching, fits
from .lm import LMLoss, evaluate_lm
from .optim import clip_gradients
from .state import detach_state


class Objective:
    """What the trainer asks of an objective; ``t`` is the :class:`~induce.training.trainer.Trainer`, whose
    ``config``, ``corpus``, ``vocab``, ``model``, ``device``, ``ctx``, ``optimizer`` and ``loop`` are set."""

    #: Whether the steps carry a recurrent state (``LoopState.hidden``) from one batch to the next.
    carries_state = False
    #: Whether ``train.cuda_graphs`` can capture its step (:mod:`induce.training.graphs`).
    uses_graphs = False

    def prepare(self, t) -> nn.Module:
        """Build the training and validation data on ``t``; return the loss module (what DDP wraps)."""
        raise NotImplementedError

    def probe_loss(self, t) -> torch.Tensor:
        """The loss of one small batch (eval mode, no RNG draws): DDP's unused-parameter probe."""
        raise NotImplementedError

    def batches_per_epoch(self, t) -> int:
        raise NotImplementedError

    def has_next(self, t) -> bool:
        """Whether the epoch has a batch left at ``t.loop.position``."""
        raise NotImplementedError

    def step(self, t) -> tuple[torch.Tensor, int]:
        """One optimiser step on the next batch (advancing ``t.loop.position``); returns the batch's summed
        loss (a detached ``[]`` tensor on the device: no host sync) and the tokens it counts."""
        raise NotImplementedError

    def validate(self, t) -> float:
        """The validation loss in nats per token (eval mode)."""
        raise NotImplementedError

    def describe(self, t) -> str:
        """The training data in one phrase for the start-up line."""
        raise NotImplementedError

    def tokens_per_epoch(self, t) -> int:
        """Tokens an epoch reads (the run-size advice)."""
        raise NotImplementedError


class StreamLM(Objective):
    """BPTT over token streams (see the module docstring); the data stays on the trainer as ``train_data
    [B/W, L]``, ``valid_data [B', L']`` and ``train_gold`` (PaLM-S)."""

    carries_state = True
    uses_graphs = True

    def prepare(self, t) -> nn.Module:
        cfg, ctx = t.config, t.ctx
        train_stream = batching.stream_ids(t.corpus.lm_sentences("train"), t.vocab)
        t.train_data = batching.shard_rows(
            fits.batch_rows(train_stream, cfg.data.batch_size, "data.batch_size", "train"), ctx.rank, ctx.world_size
        ).to(t.device)
        valid_stream = batching.stream_ids(t.corpus.lm_sentences("valid"), t.vocab)
        t.valid_data = fits.batch_rows(valid_stream, cfg.data.eval_batch_size, "data.eval_batch_size", "valid")
        t.train_gold = None
        if getattr(t.model_cls, "supervised", False):
            t.train_gold = t._gold_spans(train_stream.numel())
        fits.check_step_fits(LMLoss(t.model, cfg.train.alpha, cfg.train.beta), t.model, cfg, t.device,
                             t.train_data.size(0), t.train_data.size(1),
                             None if t.train_gold is None else t.train_gold.size(-1))
        return LMLoss(t.model, cfg.train.alpha, cfg.train.beta)

    def probe_loss(self, t) -> torch.Tensor:
        inputs, targets = batching.segment(t.train_data, 0, min(4, t.train_data.size(1) - 1))
        gold = None if t.train_gold is None else t.train_gold[:, : inputs.size(1)]
        probe = LMLoss(t.model, t.config.train.alpha, t.config.train.beta)
        loss, _, _ = probe(inputs, targets, t.model.init_state(inputs.size(0), t.device), gold)
        return loss

    def batches_per_epoch(self, t) -> int:
        return max(1, (t.train_data.size(1) - 1) // t.config.data.bptt)

    def has_next(self, t) -> bool:
        return t.loop.position < t.train_data.size(1) - 2

    def step(self, t) -> tuple[torch.Tensor, int]:
        cfg, loop = t.config, t.loop
        if loop.hidden is None:
            loop.hidden = t.model.init_state(t.train_data.size(0), t.device)
        seq_len = batching.next_segment_length(
            loop.bptt_rng, cfg.data.bptt, cfg.data.bptt_std, cfg.data.min_bptt, cfg.data.max_bptt_extra,
            bucket=cfg.data.bptt_bucket,
        )
        inputs, targets = batching.segment(t.train_data, loop.position, seq_len)
        steps = inputs.size(1)
        gold = None
        if t.train_gold is not None:
            gold = t.train_gold[:, loop.position : loop.position + steps]
        loop.hidden = detach_state(loop.hidden)
        loop.schedule.step_lr(t.optimizer, steps / cfg.data.bptt)
        params = [p for p in t.model.parameters() if p.requires_grad]
        if t.static_steps is not None and steps == seq_len:
            # train.cuda_graphs: the same step on static buffers, captured per shape on CUDA (graphs.py);
            # not the epoch's last segment, clipped at the end of the rows (a one-off length).
            _, cross_entropy, loop.hidden = t.static_steps.step(t.optimizer, params, inputs, targets, loop.hidden, gold)
        else:
            t.optimizer.zero_grad(set_to_none=True)
            autocast = cfg.train.amp and t.device.type == "cuda"
            with torch.autocast(t.device.type, dtype=torch.bfloat16, enabled=autocast):
                loss, cross_entropy, loop.hidden = t.loss_module(inputs, targets, loop.hidden, gold)
            loss.backward()
            clip_gradients(t.optimizer, params, cfg.optim.clip)  # per part for optim.scorer_optimizer=adam
            t.optimizer.step()
        loop.position += steps
        return cross_entropy.double() * targets.numel(), targets.numel()

    def validate(self, t) -> float:
        return evaluate_lm(t.model, t.valid_data, t.config.data.bptt, t.device)

    def describe(self, t) -> str:
        # The tokens an epoch predicts (metrics.jsonl's train_tokens, the report's "tokens trained"): the
        # first of each row and the tail that does not fill the rows are not.
        sentences = t.corpus.lm_sentences("train")
        tokens = sum(len(sentence) + 1 for sentence in sentences)
        predicted = batching.predicted_per_epoch(tokens, t.config.data.batch_size)
        return f"an epoch predicts up to {predicted:,} of them in {t.config.data.batch_size} streams"

    def tokens_per_epoch(self, t) -> int:
        return t.train_data.size(1) * t.config.data.batch_size


class SentenceLoss(nn.Module):
    """``forward(tokens [B, T], lengths [B], share=None) -> (loss, summed per-sentence loss)``: the sum of the
    model's ``sentence_loss`` over the rows divided by ``share`` (what DDP wraps; default ``B``: the mean),
    and the sum (detached) for the running loss. Under DDP ``share`` is the whole batch's sentence count over
    the number of processes, so that DDP's average of the processes' gradients is the gradient of the whole
    batch's mean, however unevenly the batch splits."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor,
                share: Optional[float] = None) -> tuple[torch.Tensor, torch.Tensor]:
        per_sentence = self.model.sentence_loss(tokens, lengths).float()
        return per_sentence.sum() / (share if share is not None else per_sentence.shape[0]), per_sentence.detach().sum()


class SentenceLevel(Objective):
    """Batches of whole sentences (see the module docstring); ``t.train_sentences`` / ``t.valid_sentences``
    hold the id lists (words only), ``t.epoch_batches`` this epoch's batches (sentence indices)."""

    def prepare(self, t) -> nn.Module:
        shortest = max(1, t.model_cls.shortest_sentence)

        def encode(split: str) -> list[list[int]]:
            return [t.vocab.encode(sentence) for sentence in t.corpus.lm_sentences(split) if len(sentence) >= shortest]

        t.train_sentences, t.valid_sentences = encode("train"), encode("valid")
        if not t.train_sentences or not t.valid_sentences:
            raise InduceError(f"{t.corpus.path}: the train or valid split has no sentence")
        t.epoch_batches, t.epoch_batch_sizes, t.batches_epoch = [], [], None
        return SentenceLoss(t.model)

    def length_cap(self, config, epoch: int) -> Optional[int]:
        """The longest sentence trained on in ``epoch`` (None: no cap)."""
        data = config.data
        caps = [cap for cap in (data.max_length,) if cap is not None]
        if data.curriculum_start is not None:
            caps.append(data.curriculum_start + (epoch - 1) * data.curriculum_step)
        return min(caps) if caps else None

    def batches(self, t, epoch: int) -> list[list[int]]:
        """Epoch ``epoch``'s batches: the sentences under the cap sorted by length (ties by position), cut
        into ``data.batch_size``, in an order drawn from ``default_rng([train.seed, epoch])``; under DDP each
        process takes every ``W``-th sentence of each batch (batches of fewer than ``W`` sentences dropped).
        The whole batches' sizes go to ``t.epoch_batch_sizes`` (each step's loss divides by its share)."""
        cfg, ctx = t.config, t.ctx
        cap = self.length_cap(cfg, epoch)
        lengths = [len(s) for s in t.train_sentences]
        keep = sorted((i for i, n in enumerate(lengths) if cap is None or n <= cap), key=lambda i: (lengths[i], i))
        size = cfg.data.batch_size
        batches = [keep[start : start + size] for start in range(0, len(keep), size)]
        order = np.random.default_rng([cfg.train.seed, epoch]).permutation(len(batches))
        kept = [i for i in order if len(batches[i]) >= ctx.world_size]
        shards = [batches[i][ctx.rank :: ctx.world_size] for i in kept]
        t.epoch_batch_sizes = [len(batches[i]) for i in kept]
        if not shards:
            raise InduceError(f"epoch {epoch}: no training sentence of at most {cap} words "
                              f"(data.max_length / data.curriculum_start)")
        return shards

    def _epoch_batches(self, t) -> list[list[int]]:
        if t.batches_epoch != t.loop.epoch:
            t.epoch_batches, t.batches_epoch = self.batches(t, t.loop.epoch), t.loop.epoch
        return t.epoch_batches

    def _tensors(self, sentences: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = torch.tensor([len(s) for s in sentences])
        tokens = torch.zeros(len(sentences), int(lengths.max()), dtype=torch.long)
        for row, sentence in enumerate(sentences):
            tokens[row, : len(sentence)] = torch.as_tensor(sentence)
        return tokens.to(device), lengths.to(device)

    def probe_loss(self, t) -> torch.Tensor:
        tokens, lengths = self._tensors(t.train_sentences[:2], t.device)
        return SentenceLoss(t.model)(tokens, lengths)[0]

    def batches_per_epoch(self, t) -> int:
        return len(self._epoch_batches(t))

    def has_next(self, t) -> bool:
        return t.loop.position < len(self._epoch_batches(t))

    def step(self, t) -> tuple[torch.Tensor, int]:
        cfg, loop = t.config, t.loop
        sentences = [t.train_sentences[i] for i in self._epoch_batches(t)[loop.position]]
        tokens, lengths = self._tensors(sentences, t.device)
        loop.schedule.step_lr(t.optimizer)
        params = [p for p in t.model.parameters() if p.requires_grad]
        t.optimizer.zero_grad(set_to_none=True)
        autocast = cfg.train.amp and t.device.type == "cuda"
        with torch.autocast(t.device.type, dtype=torch.bfloat16, enabled=autocast):
            loss, summed = t.loss_module(tokens, lengths, t.epoch_batch_sizes[loop.position] / t.ctx.world_size)
        loss.backward()
        clip_gradients(t.optimizer, params, cfg.optim.clip)
        t.optimizer.step()
        loop.position += 1
        return summed.double(), sum(len(s) + 1 for s in sentences)

    def validate(self, t) -> float:
        return self.loss_per_token(t.model, t.valid_sentences, t.config.data.eval_batch_size, t.device)

    @torch.no_grad()
    def loss_per_token(self, model: nn.Module, sentences: list[list[int]], batch_size: int, device) -> float:
        """The mean loss in nats per token (a sentence counts its words and its end) of ``sentences`` (id lists,
        words only; those shorter than the model's ``shortest_sentence`` left out), in eval mode, in batches
        of ``batch_size`` sentences sorted by length: the validation loss, and ``induce eval --lm``'s."""
        shortest = max(1, getattr(model, "shortest_sentence", 1))
        sentences = [s for s in sentences if len(s) >= shortest]
        was_training = model.training
        model.eval()
        total = torch.zeros((), dtype=torch.float64, device=device)
        count = 0
        order = sorted(range(len(sentences)), key=lambda i: (len(sentences[i]), i))
        try:
            for start in range(0, len(order), batch_size):
                chunk = [sentences[i] for i in order[start : start + batch_size]]
                tokens, lengths = self._tensors(chunk, device)
                total += model.sentence_loss(tokens, lengths).double().sum()
                count += sum(len(s) + 1 for s in chunk)
        finally:
            model.train(was_training)
        return total.item() / max(count, 1)

    def describe(self, t) -> str:
        cap = self.length_cap(t.config, t.loop.epoch)
        return (f"an epoch reads them in batches of {t.config.data.batch_size} whole sentences"
                + (f" of at most {cap} words" if cap is not None else ""))

    def tokens_per_epoch(self, t) -> int:
        return sum(len(s) + 1 for s in t.train_sentences)


# induce.models.base declares the built-in objectives and names no module of the trainer: their classes are
# registered here.
STREAM_LM.implement(StreamLM)
SENTENCE_LEVEL.implement(SentenceLevel)


def build(objective: TrainingObjective) -> Objective:
    """A fresh instance of the class that implements ``objective`` (a model class's ``objective``)."""
    if objective.implementation is None:
        raise RuntimeError(f"training objective {objective.name!r} has no implementation (TrainingObjective."
                           f"implement registers one)")
    return resolve(objective.implementation)()
