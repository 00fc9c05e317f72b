"""TN-PCFG (Yang, Zhao & Tu 2021): a neural PCFG whose binary rules are a low-rank tensor decomposition.

The rule tensor ``p(A -> B C) = sum_r U[A, r] V[B, r] W[C, r]`` is never built: the inside algorithm runs
through the factors (:func:`induce.kernels.inside_lowrank`), which makes hundreds of symbols affordable
(the authors' ``r500`` config: 250 nonterminals, 500 preterminals, rank 500). As in sustcsonglin/TN-PCFG
``parser/model/TN_PCFG.py``:

* one embedding per symbol ``rule_state_emb [S, s_dim]`` (``S = NT + T``, nonterminals first) feeds three
  networks (Linear, ReLU, Linear ``-> r``): ``head [NT, r]`` from the nonterminals' rows, ``log_softmax`` over
  ``r``; ``left``, ``right [S, r]`` from every row, ``log_softmax`` over the symbols, so each ``A``'s rules
  sum to one;
* roots ``[NT]`` and emissions ``[T, V]`` as the N-PCFG's (:mod:`induce.models.pcfg.model`: Linear, two residual
  layers, Linear, ``log_softmax``), from ``root_emb`` and ``term_emb``;
* one grammar for every sentence (no compound variable): the loss of a sentence is ``-log p(x)``.

Parsing (parser kind :data:`induce.trees.kinds.GRAMMAR`): ``parse_structure`` returns the span marginals
only (channel 0): decoder ``mbr``, the authors' ``decode: 'mbr'``. Max-product does not factor through
the rank, so there is no ``viterbi`` here (TN-PCFG's ``evaluate`` has none either).

**Fidelity to the released code** (``bench/results/decisions.md``'s fidelity table):

* ``init: torch`` (default): PyTorch's defaults, as the released ``TNPCFG`` class (``parser/model/TN_PCFG.py``)
  has them: it never calls an initialiser, and neither do ``parser/helper/util.py``'s ``get_model`` nor
  ``parser/cmds/train.py``. So the ``nn.Linear`` layers keep PyTorch's uniform init and the symbol embeddings
  (``root_emb``, ``term_emb``, ``rule_state_emb``) stay ``torch.randn``, i.e. N(0, 1). ``init: xavier``
  applies ``xavier_uniform_`` to every parameter of two dimensions or more, as compound-pcfg's ``train.py``
  and that repository's other dense-grammar models (``N_PCFG.py``, ``C_PCFG.py``) do; the repository's
  ``FastTNPCFG`` (another parameterisation, not this one) uses ``xavier_normal_``.
* TN-PCFG's ``word_emb_size`` is unused by the model (no inference network): it has no field here.
* One-word sentences have no binary derivation: left out of training and validation
  (:attr:`shortest_sentence`) and parsed as the word.

Generation: :meth:`TNPCFG.sample_sentences` draws derivations top-down, each binary rule through the rank.
"""
from __future__ import annotations

from typing import ClassVar, Literal, Optional, Sequence

import pydantic
import torch
from torch import nn

from induce.kernels import inside_lowrank
from induce.kernels.pcfg.emissions import emission_scores
from induce.models.base import SENTENCE_LEVEL, LanguageModel, LMOutput, ModelConfig, StepTensor
from induce.models.common.grammar import (
    draw_sentences,
    grammar_structure,
    lengths_at_least_two,
    sampling_probabilities,
    symbol_mlp,
    without_words,
    xavier_init_,
)
from induce.models.registry import register
from induce.trees.kinds import GRAMMAR


class TNPCFGConfig(ModelConfig):
    """Hyper-parameters (defaults: TN-PCFG's ``config/tnpcfg_r500_nt250_t500_curriculum0.yaml``)."""

    nt_states: int = pydantic.Field(250, gt=0, description="nonterminals NT")
    t_states: int = pydantic.Field(500, gt=0, description="preterminals T")
    rank: int = pydantic.Field(500, gt=0, description="rank r of the rule tensor's decomposition")
    state_dim: int = pydantic.Field(256, gt=0, description="symbol embedding and network width (s_dim)")
    init: Literal["torch", "xavier"] = pydantic.Field(
        "torch", description="torch: PyTorch's defaults, embeddings N(0, 1) (the released TNPCFG never "
                             "initialises); xavier: xavier_uniform_ on every matrix (compound-pcfg's train.py)")


def factor_mlp(dim: int, rank: int) -> nn.Sequential:
    """Linear, ReLU, Linear ``dim -> rank``: TN-PCFG's ``parent_mlp`` / ``left_mlp`` / ``right_mlp``."""
    return nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, rank))


@register
class TNPCFG(LanguageModel):
    """The low-rank neural PCFG (module docstring)."""

    name: ClassVar[str] = "tnpcfg"
    description: ClassVar[str] = "TN-PCFG (Yang, Zhao & Tu 2021): a neural PCFG with low-rank binary rules"
    display_name: ClassVar[str] = "TN-PCFG"
    published: ClassVar[dict] = {"all_lengths": {"value": 57.7, "std": 4.2, "source": "Yang, Zhao & Tu 2021"}}
    parser_kind = GRAMMAR
    objective = SENTENCE_LEVEL
    Config = TNPCFGConfig
    shortest_sentence: ClassVar[int] = 2
    #: The emission network's last layer (``state_dim`` x vocabulary) and the rank factors dominate the count.
    size_keys: ClassVar[tuple[str, ...]] = ("state_dim", "rank", "t_states")

    def __init__(self, vocab_size: int, config: Optional[TNPCFGConfig] = None):
        super().__init__()
        self.config = cfg = config if config is not None else self.Config()
        self.vocab_size = vocab_size
        self.nt, self.t = cfg.nt_states, cfg.t_states
        dim = cfg.state_dim
        self.root_emb = nn.Parameter(torch.randn(1, dim))
        self.root_mlp = symbol_mlp(dim, dim, self.nt)
        self.term_emb = nn.Parameter(torch.randn(self.t, dim))
        self.term_mlp = symbol_mlp(dim, dim, vocab_size)
        self.rule_state_emb = nn.Parameter(torch.randn(self.nt + self.t, dim))
        self.parent_mlp = factor_mlp(dim, cfg.rank)
        self.left_mlp = factor_mlp(dim, cfg.rank)
        self.right_mlp = factor_mlp(dim, cfg.rank)
        if cfg.init == "xavier":
            xavier_init_(self)

    def grammar(self, tokens: torch.Tensor):
        """``tokens [B, N]`` -> ``(terms [B, N, T], roots [B, NT], head [B, NT, r], left [B, S, r], right [B, S, r])``,
        log space; one grammar expanded over the batch (stride 0: the kernel uses it once)."""
        batch, n = tokens.shape
        roots = self.root_mlp(self.root_emb).log_softmax(-1).expand(batch, self.nt)
        last = self.term_mlp[-1]  # the emissions normalised over the vocabulary and read at the words in one function
        terms = emission_scores(self.term_mlp[:-1](self.term_emb)[None], last.weight, last.bias, tokens)  # [B, N, T]
        head = self.parent_mlp(self.rule_state_emb[: self.nt]).log_softmax(-1)
        left = self.left_mlp(self.rule_state_emb).log_softmax(-2)
        right = self.right_mlp(self.rule_state_emb).log_softmax(-2)
        return (terms, roots, head.unsqueeze(0).expand(batch, -1, -1), left.unsqueeze(0).expand(batch, -1, -1),
                right.unsqueeze(0).expand(batch, -1, -1))

    def sentence_loss(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``-log p(x)`` of each sentence ``[B]`` (nats)."""
        lengths_at_least_two(self.name, lengths)
        return -inside_lowrank(*self.grammar(tokens), lengths)

    def step_tensors(self, batch_size: int, length: int) -> list[StepTensor]:
        """The rank-space inside pass keeps its two charts ``[B, N, N, r]`` (left and right children) for the
        outside pass (:mod:`induce.kernels.inside_lowrank_torch`), and the emission logits ``[T, V]`` are kept
        for their normaliser's backward pass; no ``[NT, S, S]`` tensor exists."""
        chart = (batch_size, length, length, self.config.rank)
        keys = ("data.batch_size", "data.max_length", "model.rank")
        return [StepTensor("the inside pass's left-child chart", chart, keys),
                StepTensor("the inside pass's right-child chart", chart, keys),
                StepTensor("the emission logits", (self.t, self.vocab_size), ("model.t_states",))]

    @torch.no_grad()
    def parse_structure(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict:
        """``{"span_posteriors": [B, N + 1, N + 1, 1]}``: the span marginals (zeros for a one-word sentence,
        which has no derivation)."""
        terms, roots, head, left, right = (x.detach() for x in self.grammar(tokens))
        structure = grammar_structure(
            lambda s: inside_lowrank(terms, roots, head, left, right, lengths, span_scores=s), terms, lengths)
        return {"span_posteriors": structure}

    @torch.no_grad()
    def sample_sentences(self, count: int, generator: torch.Generator, temperature: float = 1.0,
                         max_words: int = 100, banned: Sequence[int] = ()) -> list[list[int]]:
        """Sentences drawn from the grammar top-down (:func:`~induce.models.common.grammar.sample_sentence`), a binary
        rule through its rank: ``r ~ head[A]``, then ``B ~ left[:, r]`` and ``C ~ right[:, r]`` (the decomposition
        is that mixture), so the rule tensor is never built; ``temperature`` divides each of these
        log-probabilities. See :meth:`LanguageModel.sample_sentences`."""
        roots = sampling_probabilities(self.root_mlp(self.root_emb).log_softmax(-1)[0], temperature)
        emissions = without_words(sampling_probabilities(self.term_mlp(self.term_emb).log_softmax(-1), temperature),
                                  banned)
        head = sampling_probabilities(self.parent_mlp(self.rule_state_emb[: self.nt]).log_softmax(-1), temperature)
        left = sampling_probabilities(self.left_mlp(self.rule_state_emb).log_softmax(-2).t(), temperature)  # [r, S]
        right = sampling_probabilities(self.right_mlp(self.rule_state_emb).log_softmax(-2).t(), temperature)

        def draw(probabilities: torch.Tensor) -> int:
            return int(torch.multinomial(probabilities, 1, generator=generator))

        def children(symbol: int) -> tuple[int, int]:
            rank = draw(head[symbol])
            return draw(left[rank]), draw(right[rank])

        tables = (roots, children, emissions, self.nt)
        return draw_sentences(count, lambda: tables, generator, max_words, self.name)

    def forward(self, tokens, state, gold_spans=None) -> LMOutput:
        raise NotImplementedError(f"{self.name} is trained sentence by sentence (sentence_loss)")
