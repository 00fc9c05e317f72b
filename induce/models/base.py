"""The contract between models, the trainer and the parsers.

A model is an ``nn.Module`` that maps token ids to hidden states (and, for the parsers,
to syntactic distances or span scores). It owns no loop, optimiser or checkpoint: the
trainer (``induce.training``) does. Tensors are batch-first: ``[B, T]`` token ids,
``[B, T, E]`` hidden states.

The model class declares what the rest asks of it: its parser kind (:mod:`induce.trees.kinds`: what
``parse_structure`` returns and which decoders read it) and its training objective
(:class:`TrainingObjective`: BPTT streams, or whole sentences with a loss per sentence).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, Optional, Sequence

import pydantic
import torch
from torch import nn

from induce.trees.kinds import NO_PARSER, ParserKind


class ModelConfig(pydantic.BaseModel):
    """Base of every model's hyper-parameter block (the ``model:`` section of a config).

    Subclasses add their own fields with defaults; unknown keys are errors that name the key.

    ``stored_defaults``: fields added after checkpoints were first written, each with the value the
    runs behind those checkpoints used (which may differ from today's default). A config read back
    from a checkpoint sidecar that lacks such a field gets this value (:func:`induce.models.configs.stored_config`),
    so an old checkpoint builds the model it was trained as: it loads, and resumes exactly.
    """

    model_config = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False)  # floats are finite numbers
    stored_defaults: ClassVar[dict[str, Any]] = {}


@dataclass
class LMOutput:
    """What ``LanguageModel.forward`` returns.

    hidden:          ``[B, T, E]`` states fed to the (tied) output layer.
    state:           recurrent state to carry to the next BPTT segment (the trainer detaches it).
    raw_outputs:     per-layer outputs before dropout, each ``[B, T, H_l]`` (for TAR).
    dropped_outputs: per-layer outputs after dropout, each ``[B, T, H_l]`` (for AR).
    extra_loss:      an already-weighted auxiliary loss (PaLM-S supervision) or ``None``.
    structure:       what the parser reads: ``{"distances": [B, T]}`` or ``{"span_scores": [B, T, m]}``.
    """

    hidden: torch.Tensor
    state: Any
    raw_outputs: list = field(default_factory=list)
    dropped_outputs: list = field(default_factory=list)
    extra_loss: Optional[torch.Tensor] = None
    structure: dict = field(default_factory=dict)


@dataclass(eq=False)
class TrainingObjective:
    """How the trainer trains a model class, as the class declares it (``objective = ...``); ``name``
    identifies it and is shown in messages. The trainer finds the implementation, an
    ``induce.training.objectives.Objective`` subclass, by this declaration: the training package registers
    one for each (``register_objective``; the built-in ones there, a family's own in its plugin module), so
    that models never import the trainer."""

    name: str


#: Token streams in BPTT segments, cross-entropy + AR/TAR (ON-LSTM, PRPN, PaLM, the relevancy LMs).
STREAM_LM = TrainingObjective("language model over BPTT streams")
#: Whole sentences, a loss per sentence from :meth:`LanguageModel.sentence_loss` (e.g. a PCFG's negative ELBO).
SENTENCE_LEVEL = TrainingObjective("loss per sentence")


@dataclass(frozen=True)
class StepTensor:
    """One of the largest tensors a training step holds at once (:meth:`LanguageModel.step_tensors`), for
    the memory check before the first step: ``name`` (said in the message), ``shape``, ``keys`` (the config
    keys that set its size, named in the message as what to shrink: ``data.batch_size``, ``model.nt_states``,
    ...) and the bytes of an entry (float32: 4)."""

    name: str
    shape: tuple[int, ...]
    keys: tuple[str, ...]
    entry_bytes: int = 4

    @property
    def bytes(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count * self.entry_bytes


@dataclass(frozen=True)
class ParamGroup:
    """A part of a model's parameters with its own optimiser settings (:meth:`LanguageModel.param_groups`).

    ``params``: the parameters, in the model's order. ``adam_lr``: ``None`` trains them with the run's optimiser
    (``optim.optimizer``, its lr following the schedule: per BPTT segment, plateaus); a number gives them an
    Adam of their own at that fixed lr (``optim.wdecay``, torch's betas and eps). After the switch to averaged
    SGD one ASGD trains every parameter of the model (in the model's order), whatever its group. ``clip``: the
    group's own gradient-norm clipping before that switch, ``asgd_clip`` after it (``None``: not clipped)."""

    params: tuple
    adam_lr: Optional[float] = None
    clip: Optional[float] = None
    asgd_clip: Optional[float] = None


class SentenceLosses(NamedTuple):
    """What :meth:`LanguageModel.sentence_losses` returns, each ``[B]`` nats per sentence: ``train``, what the
    gradient follows (it may be a surrogate, e.g. a score-function estimator whose value means nothing), and
    ``reported``, the value logged, summed into the running loss and used for validation and selection (a
    negative log-likelihood or its bound). Both are the same tensor unless the model says otherwise."""

    train: torch.Tensor
    reported: torch.Tensor


class LanguageModel(nn.Module):
    """Base class. Subclasses set ``name``, ``description``, ``parser_kind``, ``objective`` and ``Config``.

    **Traits.** What the rest of induce asks of a family beyond its methods is declared here as class
    attributes with their defaults (a family overrides the ones that differ; a property where a trait
    depends on the config), and read as plain attributes: the trainer, the parsers, the reproduction and
    the report never probe a model for an attribute it may lack."""

    name: ClassVar[str]
    description: ClassVar[str]
    #: How reports and tables name the model (``PaLM-U``, ``C-PCFG``); ``None``: its :attr:`name`.
    display_name: ClassVar[Optional[str]] = None
    #: The published figures the report quotes beside the model's, with their sources, by the report's table:
    #: ``"table3"`` (PaLM's Table 3, WSJ-40 F1: ``{"value", "source"}``, optional ``"note"``), ``"table4"``
    #: (PaLM's Table 4, % left / right splits: ``{"left", "right", "source"}``), ``"table4_untrained"`` (the
    #: same of untrained models: ``{"left", "left_std", "right", "right_std", "n_models", "source"}``), ``"lm"``
    #: (test perplexity on Mikolov's PTB text: ``{"value", "source"}``), ``"all_lengths"`` (WSJ-test sentence F1,
    #: all lengths, Kim et al.'s convention: ``{"value", "source"}``, optional ``"std"`` and ``"note"``). Empty: none
    #: is quoted.
    published: ClassVar[dict[str, dict]] = {}
    #: What ``parse_structure`` returns and which decoders read it (:mod:`induce.trees.kinds`):
    #: ``DISTANCE`` (ON-LSTM, PRPN), ``SPAN`` (PaLM), ``NO_PARSER`` (a language model only) or a family's own.
    parser_kind: ClassVar[ParserKind] = NO_PARSER
    #: What the trainer minimises and how it batches the corpus: :data:`STREAM_LM` (``forward`` / ``logits``)
    #: or :data:`SENTENCE_LEVEL` (:meth:`sentence_loss`), or a family's own :class:`TrainingObjective`.
    objective: ClassVar[TrainingObjective] = STREAM_LM
    Config: ClassVar[type[ModelConfig]] = ModelConfig
    #: A control (e.g. PaLM-RB, whose trees are right-branching whatever it learns): trained and reported
    #: beside the real models, never chosen as the default run of ``induce parse``, ``eval``, ``show``.
    control: ClassVar[bool] = False
    #: :data:`SENTENCE_LEVEL` models: sentences of fewer words are left out of training and validation (a
    #: grammar in Chomsky normal form without unary rules derives no one-word sentence).
    shortest_sentence: ClassVar[int] = 1
    #: :meth:`perplexity_loss` is an upper bound on ``-log p(x)`` (a variational bound, e.g. a latent variable's
    #: negative ELBO), so the perplexity it gives is one too; an instance may say so per config.
    perplexity_is_bound: ClassVar[bool] = False
    #: What the validation loss that selects the checkpoint is, in the words of the reproduction report.
    validation_loss_text: ClassVar[str] = "validation perplexity"
    #: The keys of :attr:`Config` that set the number of parameters, named (with the largest values that fit)
    #: when the parameters alone do not fit the memory.
    size_keys: ClassVar[tuple[str, ...]] = ("emb_size", "hidden_size")
    #: Whether ``forward`` adds a loss on gold spans (``gold_spans``, e.g. PaLM-S): its stream objective reads
    #: the training trees, and the reproduction trains it only beside an unsupervised model it can be read with.
    supervised: ClassVar[bool] = False
    #: Whether its trees are right-branching whatever it learns (PaLM-RB): not evaluated untrained, and a
    #: :attr:`control`.
    fixed_right_branching: ClassVar[bool] = False
    #: Whether it has a span scorer whose parameters can take an Adam of their own
    #: (``optim.scorer_optimizer: adam``, read by its :meth:`param_groups`); the config check refuses that key
    #: for the others.
    has_span_scorer: ClassVar[bool] = False
    #: Whether its parser reads a corpus as one stream, carrying the recurrent state from one sentence to the
    #: next (PaLM as released); False: every sentence from a fresh state.
    parse_state_carry: ClassVar[bool] = False
    #: Whether ``train.cuda_graphs`` may capture its training step (False: the step syncs with the host).
    graph_capturable: ClassVar[bool] = True

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> Any:
        """A fresh recurrent state for ``batch_size`` sequences."""
        raise NotImplementedError

    def forward(self, tokens: torch.Tensor, state: Any, gold_spans: Any = None) -> LMOutput:
        """``tokens [B, T]`` -> :class:`LMOutput`. ``gold_spans`` is used by supervised variants only."""
        raise NotImplementedError

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[B, T, E]`` -> ``[B, T, V]`` through the output layer (tied to the embedding)."""
        raise NotImplementedError

    @torch.no_grad()
    def parse_structure(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict:
        """Structure scores for whole sentences, each from a fresh state (eval mode).

        tokens ``[B, T]`` (right-padded), lengths ``[B]`` -> ``{"distances": [B, T]}`` or
        ``{"span_scores": [B, T, m]}`` (entry ``[b, t, k]`` scores the span of length k+1 ending at t).
        """
        raise NotImplementedError

    def sentence_loss(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """:data:`SENTENCE_LEVEL` models: ``tokens [B, T]`` (the words of each sentence, right-padded with 0),
        ``lengths [B]`` -> ``[B]`` the loss of each sentence in nats (a negative log-likelihood or its bound)."""
        raise NotImplementedError

    def sentence_losses(self, tokens: torch.Tensor, lengths: torch.Tensor) -> SentenceLosses:
        """:data:`SENTENCE_LEVEL` models: ``tokens [B, T]``, ``lengths [B]`` -> :class:`SentenceLosses`, the training
        loss ``[B]`` (what the gradient follows) and the reported loss ``[B]`` (what is logged and selects the
        checkpoint). By default both are :meth:`sentence_loss`; a model trained on a surrogate (a score-function
        estimator, a relaxed objective) overrides this to return its surrogate and its bound."""
        loss = self.sentence_loss(tokens, lengths)
        return SentenceLosses(loss, loss)

    def perplexity_loss(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The loss of each sentence ``[B]`` that a reported perplexity reads (``induce eval --lm``): by default
        the reported loss of :meth:`sentence_losses` (:meth:`sentence_loss` unless the model says otherwise); a
        model whose validation loss is chosen for model selection (e.g. a latent variable at its mean) returns
        its bound here, whatever that choice."""
        return self.sentence_losses(tokens, lengths).reported

    def param_groups(self, optim_config) -> list[ParamGroup]:
        """The model's parameters as the optimiser trains them (``optim_config``: the run's
        :class:`induce.config.OptimConfig`): a list of :class:`ParamGroup`. The default, one group of every
        parameter under the run's optimiser and its clipping, is the plain optimiser; a family whose parameters
        take different optimisers (PaLM's span scorer under ``optim.scorer_optimizer: adam``) overrides this."""
        return [ParamGroup(tuple(self.parameters()), clip=optim_config.clip, asgd_clip=optim_config.clip)]

    def step_tensors(self, batch_size: int, length: int) -> list[StepTensor]:
        """The largest tensors a training step on ``batch_size`` sentences of up to ``length`` words holds at
        once (those that decide whether a step fits the memory; their sum is a lower bound of its need), for
        the check before the first step. Empty (the default): not declared, nothing is checked this way
        (the BPTT streams' steps are measured instead)."""
        return []

    def sample_sentences(self, count: int, generator: torch.Generator, temperature: float = 1.0,
                         max_words: int = 100, banned: Sequence[int] = ()) -> list[list[int]]:
        """Generative models of whole sentences (e.g. a grammar): ``count`` sentences drawn from the model, each a
        list of word ids (no end mark) of at most ``max_words`` words (a longer draw is drawn again, so the
        sentences follow the model's distribution given that length). ``temperature`` divides the
        log-probability of every choice the sampler makes; ``banned`` ids (e.g. the end mark) are never drawn;
        ``generator`` (CPU) decides every draw. Models that do not sample sentences leave this out
        (:func:`samples_sentences` tells); stream language models generate through ``forward``."""
        raise NotImplementedError


def samples_sentences(model: LanguageModel) -> bool:
    """Whether ``model`` draws whole sentences (:meth:`LanguageModel.sample_sentences` is its own)."""
    return type(model).sample_sentences is not LanguageModel.sample_sentences
