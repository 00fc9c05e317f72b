"""Simple PCFGs (Liu, Yang, Kim & Tu 2023): neural PCFGs whose binary rules choose their children independently.

A binary rule factors as ``p(A -> B C) = p_L(B | A) p_R(C | A)``, so the inside pass costs
``O(N^3 NT + N^2 NT^2)`` per sentence (:func:`induce.kernels.inside_simple`) and thousands of nonterminals
fit: the paper's SN-PCFG has 4,096 (``snpcfg``), its compound variant SC-PCFG 2,048 (``scpcfg``). As in the
released code (sustcsonglin/TN-PCFG ``parser/model/SN_PCFG.py``, ``SC_PCFG.py``; read, not copied):

* one embedding per symbol ``rule_state_emb [S, s_dim]`` (``S = NT + T``, nonterminals first) and a root
  embedding ``root_emb [1, s_dim]``;
* roots ``[NT]``: ``log_softmax(root_emb @ rule_state_emb[:NT]^T)`` (no network, and no ``z`` in SC-PCFG);
* rules: a parent vector ``parent = parent_mlp(rule_state_emb[:NT] (; z)) + rule_state_emb[:NT]`` (Linear,
  ReLU, residual), a child vector per symbol and side ``left_mlp(e) + e`` (Linear, ReLU, residual), and
  ``left[B, A] = log_softmax_B(child_L(B) . parent(A))`` over the children (``right`` likewise): ``[S, NT]``,
  per sentence ``[B, S, NT]`` with ``z``;
* emissions ``[T, V]``: SN-PCFG ``log_softmax((term_mlp(e) + e) @ vocab_emb)`` with ``e`` the preterminals'
  embeddings, ``term_mlp`` a Linear and three residual layers and ``vocab_emb [s_dim, V]`` a parameter;
  SC-PCFG ``log_softmax(term_mlp([e; z]))`` with ``term_mlp`` a Linear, two residual layers and a Linear to
  the vocabulary (the compound PCFG's emission network);
* SC-PCFG's ``z`` and its inference network are the compound PCFG's (:mod:`induce.models.pcfg.model`: a bi-LSTM
  over the words, max-pooled, a Linear to ``[mean; logvar]``); the loss is ``-log p(x | z) + KL``, with one
  reparameterised sample; SN-PCFG's is ``-log p(x)``.

Parsing (parser kind :data:`induce.trees.kinds.GRAMMAR`): ``parse_structure`` returns the span marginals
(channel 0, decoder ``mbr``, the authors' ``decode: 'mbr'``) and, with ``viterbi: true``, the best
derivation's spans (channel 1, decoder ``viterbi``): max-product factors like the sum, through max-plus
products that no matrix unit does (the released code has no Viterbi: ``assert viterbi is not True``).

**Fidelity to the released code** (``bench/results/decisions.md``'s fidelity table):

* ``init: xavier`` (default): ``xavier_uniform_`` on every parameter of two dimensions or more, embeddings
  and the inference LSTM included, as both released classes' ``_initialize``; ``init: torch`` keeps PyTorch's.
* SC-PCFG's inference network reads ``w_dim`` / ``h_dim`` (the released class hard-codes 512 for both, the
  value of every released config).
* SC-PCFG's ``evaluate`` calls ``forward`` without ``evaluating=True``, so the released code parses and
  scores the dev set with a sampled ``z``. ``parse_z: mean`` (default) parses with the mean, as the
  compound PCFG does (a parse does not depend on a draw); ``parse_z: sample`` draws ``z`` as training does,
  from a generator seeded afresh at each call (deterministic). ``valid_z`` as the compound PCFG's:
  ``sample`` (default, a bound, as the released ``evaluate``) or ``mean``.
* The released kernels add ``1e-9`` before each ``log`` of a span's products; the inside op clamps at the
  smallest normal float instead (:mod:`induce.kernels.pcfg.lowrank_torch`).
* One-word sentences have no binary derivation: left out of training and validation
  (:attr:`shortest_sentence`) and parsed as the word.

Generation: :meth:`SimplePCFG.sample_sentences` draws derivations top-down, each rule's two children
independently (SC-PCFG: ``z`` from the prior for each sentence).
"""
from __future__ import annotations

from typing import ClassVar, Literal, Optional, Sequence

import pydantic
import torch
from torch import nn

from induce.kernels import inside_simple
from induce.models.base import SENTENCE_LEVEL, LanguageModel, LMOutput, ModelConfig, StepTensor
from induce.models.common.grammar import (
    InferenceNetwork,
    ResidualLayer,
    draw_sentences,
    gaussian_kl,
    grammar_structure,
    lengths_at_least_two,
    sampling_probabilities,
    symbol_mlp,
    without_words,
    xavier_init_,
)
from induce.models.registry import register
from induce.trees.kinds import GRAMMAR


class SimplePCFGConfig(ModelConfig):
    """Hyper-parameters shared by both (defaults: the released ``simple_npcfg_nt4096_t8192_curriculum0.yaml``)."""

    nt_states: int = pydantic.Field(4096, gt=0, description="nonterminals NT")
    t_states: int = pydantic.Field(8192, gt=0, description="preterminals T")
    state_dim: int = pydantic.Field(512, gt=0, description="symbol embedding and network width (s_dim)")
    init: Literal["xavier", "torch"] = pydantic.Field(
        "xavier", description="xavier: xavier_uniform_ on every matrix (the released _initialize); torch: defaults")
    viterbi: bool = pydantic.Field(
        False, description="parsing also computes the best derivation's tree (decoder viterbi): a max-product "
                           "pass of max-plus products, several times the cost of the marginals")


class SCPCFGConfig(SimplePCFGConfig):
    """SC-PCFG (defaults: the released ``simple_cpcfg_nt2048_t4096_curriculum1.yaml``)."""

    nt_states: int = pydantic.Field(2048, gt=0, description="nonterminals NT")
    t_states: int = pydantic.Field(4096, gt=0, description="preterminals T")
    z_dim: int = pydantic.Field(64, gt=0, description="compound variable size")
    h_dim: int = pydantic.Field(512, gt=0, description="inference bi-LSTM hidden size per direction")
    w_dim: int = pydantic.Field(512, gt=0, description="inference network word embedding size")
    valid_z: Literal["sample", "mean"] = pydantic.Field(
        "sample", description="validation bound: z sampled (a bound, as the released evaluate) or its mean")
    parse_z: Literal["mean", "sample"] = pydantic.Field(
        "mean", description="parsing: z = the mean of q(z | x), or a sample from a generator seeded afresh per "
                            "call (the released evaluate samples)")


def _residual_relu(in_dim: int, dim: int) -> nn.Sequential:
    """Linear, ReLU: the released ``parent_mlp1`` / ``left_mlp`` / ``right_mlp`` (their residual is added outside)."""
    return nn.Sequential(nn.Linear(in_dim, dim), nn.ReLU())


class SimplePCFG(LanguageModel):
    """Shared body of :class:`SNPCFG` and :class:`SCPCFG` (module docstring); not registered itself."""

    parser_kind = GRAMMAR
    objective = SENTENCE_LEVEL
    Config = SimplePCFGConfig
    shortest_sentence: ClassVar[int] = 2
    #: The symbol embeddings, the emission network's output and the rule matrices ``[S, NT]`` set the size.
    size_keys: ClassVar[tuple[str, ...]] = ("nt_states", "t_states", "state_dim")
    z_dim: int = 0

    def __init__(self, vocab_size: int, config: Optional[SimplePCFGConfig] = None):
        super().__init__()
        self.config = cfg = config if config is not None else self.Config()
        self.vocab_size = vocab_size
        self.nt, self.t = cfg.nt_states, cfg.t_states
        dim = cfg.state_dim
        self.root_emb = nn.Parameter(torch.randn(1, dim))
        self.rule_state_emb = nn.Parameter(torch.randn(self.nt + self.t, dim))
        self.parent_mlp = _residual_relu(dim + self.z_dim, dim)
        self.left_mlp = _residual_relu(dim, dim)
        self.right_mlp = _residual_relu(dim, dim)
        self.build_emissions(vocab_size, dim)
        self.encoder = InferenceNetwork(vocab_size, cfg) if self.z_dim else None
        if cfg.init == "xavier":
            xavier_init_(self)

    def build_emissions(self, vocab_size: int, dim: int) -> None:
        raise NotImplementedError

    def emissions(self, z: Optional[torch.Tensor]) -> torch.Tensor:
        """``log p(word | preterminal)``: ``[T, V]``, or ``[B, T, V]`` given ``z [B, z_dim]``."""
        raise NotImplementedError

    def roots(self) -> torch.Tensor:
        """``log p(S -> A)`` ``[NT]`` (no ``z``, as in both released models)."""
        return (self.root_emb @ self.rule_state_emb[: self.nt].t()).log_softmax(-1)[0]

    def factors(self, z: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(left, right)``: ``log p_L(B | A)``, ``log p_R(C | A)``, ``[S, NT]`` (``[B, S, NT]`` given ``z``),
        normalised over the children (dimension -2)."""
        symbols = self.rule_state_emb
        nonterminals = symbols[: self.nt]
        if z is None:
            parent = self.parent_mlp(nonterminals) + nonterminals  # [NT, D]
        else:
            batch = z.shape[0]
            joined = torch.cat([nonterminals.expand(batch, -1, -1), z[:, None].expand(-1, self.nt, -1)], -1)
            parent = self.parent_mlp(joined) + nonterminals  # [B, NT, D]
        out = []
        for mlp in (self.left_mlp, self.right_mlp):
            children = mlp(symbols) + symbols  # [S, D]
            out.append((children @ parent.transpose(-1, -2)).log_softmax(-2))
        return out[0], out[1]

    def grammar(self, tokens: torch.Tensor, z: Optional[torch.Tensor]):
        """``tokens [B, N]`` -> ``(terms [B, N, T], roots [B, NT], left [B, S, NT], right [B, S, NT])``, log space;
        without ``z`` one grammar expanded over the batch (stride 0: the kernel uses it once)."""
        batch, n = tokens.shape
        roots = self.roots().expand(batch, self.nt)
        emissions = self.emissions(z)
        left, right = self.factors(z)
        if z is None:
            terms = emissions[:, tokens].permute(1, 2, 0)  # [B, N, T]
            left, right = (x.unsqueeze(0).expand(batch, -1, -1) for x in (left, right))
        else:
            terms = emissions.gather(2, tokens.unsqueeze(1).expand(batch, self.t, n)).transpose(1, 2)
        return terms, roots, left, right

    def latent(self, tokens: torch.Tensor, lengths: torch.Tensor, mode: str):
        """``(z [B, z_dim] or None, kl [B])``: ``mode`` ``sample`` (global RNG), ``fixed`` (a sample from a
        generator seeded afresh) or ``mean``."""
        if self.encoder is None:
            return None, torch.zeros(tokens.size(0), device=tokens.device)
        mean, logvar = self.encoder(tokens, lengths)
        if mode == "mean":
            return mean, gaussian_kl(mean, logvar)
        generator = torch.Generator(device=mean.device).manual_seed(0) if mode == "fixed" else None
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return mean + (0.5 * logvar).exp() * noise, gaussian_kl(mean, logvar)

    def _mode(self, purpose: str) -> str:
        if self.training:
            return "sample"
        choice = getattr(self.config, "valid_z" if purpose == "loss" else "parse_z", "mean")
        return "fixed" if choice == "sample" else "mean"

    def sentence_loss(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The negative ELBO of each sentence ``[B]`` (nats): ``-log p(x | z) + KL`` (SN-PCFG: ``-log p(x)``)."""
        lengths_at_least_two(self.name, lengths)
        z, kl = self.latent(tokens, lengths, self._mode("loss"))
        return -inside_simple(*self.grammar(tokens, z), lengths) + kl

    def step_tensors(self, batch_size: int, length: int) -> list[StepTensor]:
        """The inside pass keeps two charts ``[B, N, N, NT]`` (each span as a left and as a right child) and the
        products of the spans that are children, ``[B, spans, 2 NT]``, for its outside pass; the emission
        log-probabilities (``[T, V]``, per sentence with ``z``) and, with ``z``, the rule log-probabilities
        ``[B, S, NT]`` (left and right) are kept for ``log_softmax``'s backward pass."""
        nt, symbols = self.nt, self.nt + self.t
        chart_keys = ("data.batch_size", "data.max_length", "model.nt_states")
        chart = (batch_size, length, length, nt)
        spans = max(1, (length - 1) * (length - 2) // 2)
        tensors = [StepTensor("the inside pass's left-child chart", chart, chart_keys),
                   StepTensor("the inside pass's right-child chart", chart, chart_keys),
                   StepTensor("the inside pass's span products", (batch_size, spans, 2 * nt), chart_keys)]
        if self.z_dim:
            rule_keys = ("data.batch_size", "model.nt_states", "model.t_states")
            tensors += [StepTensor("the emission log-probabilities", (batch_size, self.t, self.vocab_size),
                                   ("data.batch_size", "model.t_states")),
                        StepTensor("the left rule log-probabilities", (batch_size, symbols, nt), rule_keys),
                        StepTensor("the right rule log-probabilities", (batch_size, symbols, nt), rule_keys)]
        else:
            tensors.append(StepTensor("the emission log-probabilities", (self.t, self.vocab_size),
                                      ("model.t_states",)))
        return tensors

    @torch.no_grad()
    def parse_structure(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict:
        """``{"span_posteriors": [B, N + 1, N + 1, C]}``: the span marginals, and with ``viterbi: true`` the best
        derivation's spans (``C = 2``). Zeros for a one-word sentence, which has no derivation."""
        z, _ = self.latent(tokens, lengths, self._mode("parse"))
        terms, roots, left, right = (x.detach() for x in self.grammar(tokens, z))
        best = None
        if self.config.viterbi:
            def best(s: torch.Tensor) -> torch.Tensor:
                return inside_simple(terms, roots, left, right, lengths, span_scores=s, semiring="max")
        return {"span_posteriors": grammar_structure(
            lambda s: inside_simple(terms, roots, left, right, lengths, span_scores=s), terms, lengths, best=best)}

    @torch.no_grad()
    def sample_sentences(self, count: int, generator: torch.Generator, temperature: float = 1.0,
                         max_words: int = 100, banned: Sequence[int] = ()) -> list[list[int]]:
        """Sentences drawn from the grammar top-down (:func:`~induce.models.common.grammar.sample_sentence`), a rule's
        two children drawn independently (``B ~ p_L(. | A)``, ``C ~ p_R(. | A)``: the rule is that product); SC-PCFG
        draws ``z`` from the prior ``N(0, I)`` for each sentence. ``temperature`` divides each log-probability. See
        :meth:`LanguageModel.sample_sentences`."""
        roots = sampling_probabilities(self.roots(), temperature)
        parameter = self.rule_state_emb

        def tables(z: Optional[torch.Tensor]):
            left, right = (sampling_probabilities(x.reshape(-1, self.nt).t(), temperature)  # [NT, S]
                           for x in self.factors(z))
            emissions = self.emissions(z).reshape(self.t, -1)
            emissions = without_words(sampling_probabilities(emissions, temperature), banned)

            def children(symbol: int) -> tuple[int, int]:
                return (int(torch.multinomial(left[symbol], 1, generator=generator)),
                        int(torch.multinomial(right[symbol], 1, generator=generator)))

            return roots, children, emissions, self.nt

        if not self.z_dim:
            fixed = tables(None)
            return draw_sentences(count, lambda: fixed, generator, max_words, self.name)

        def compound_tables():
            z = torch.randn(1, self.z_dim, generator=generator, dtype=torch.float64)
            return tables(z.to(parameter.device, parameter.dtype))

        return draw_sentences(count, compound_tables, generator, max_words, self.name)

    def forward(self, tokens, state, gold_spans=None) -> LMOutput:
        raise NotImplementedError(f"{self.name} is trained sentence by sentence (sentence_loss)")


@register
class SNPCFG(SimplePCFG):
    """SN-PCFG: one simple PCFG for every sentence (module docstring)."""

    name: ClassVar[str] = "snpcfg"
    description: ClassVar[str] = ("simple N-PCFG (Liu et al. 2023): a neural PCFG with independent left and right "
                                  "productions, thousands of nonterminals")
    display_name: ClassVar[str] = "SN-PCFG"
    Config = SimplePCFGConfig

    def build_emissions(self, vocab_size: int, dim: int) -> None:
        self.term_mlp = nn.Sequential(nn.Linear(dim, dim), ResidualLayer(dim), ResidualLayer(dim), ResidualLayer(dim))
        self.vocab_emb = nn.Parameter(torch.randn(dim, vocab_size))

    def emissions(self, z: Optional[torch.Tensor]) -> torch.Tensor:
        preterminals = self.rule_state_emb[self.nt:]
        return ((self.term_mlp(preterminals) + preterminals) @ self.vocab_emb).log_softmax(-1)


@register
class SCPCFG(SimplePCFG):
    """SC-PCFG: the simple PCFG with the compound PCFG's sentence-level ``z`` (module docstring)."""

    name: ClassVar[str] = "scpcfg"
    description: ClassVar[str] = ("simple compound PCFG (Liu et al. 2023): independent left and right productions "
                                  "conditioned on a sentence-level z")
    display_name: ClassVar[str] = "SC-PCFG"
    Config = SCPCFGConfig

    def __init__(self, vocab_size: int, config: Optional[SCPCFGConfig] = None):
        self.z_dim = (config if config is not None else self.Config()).z_dim
        super().__init__(vocab_size, config)

    def build_emissions(self, vocab_size: int, dim: int) -> None:
        self.term_mlp = symbol_mlp(dim + self.z_dim, dim, vocab_size)

    def emissions(self, z: Optional[torch.Tensor]) -> torch.Tensor:
        preterminals = self.rule_state_emb[self.nt:]
        joined = torch.cat([preterminals.expand(z.shape[0], -1, -1), z[:, None].expand(-1, self.t, -1)], -1)
        return self.term_mlp(joined).log_softmax(-1)  # [B, T, V]
